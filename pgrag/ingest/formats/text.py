"""Plain text: read as it is, and chunked at paragraphs, then sentences. It takes any file
that is text and that no other format claimed, so it is asked last. A file too large to read
whole is chunked a line at a time."""

from __future__ import annotations

from pgrag.ingest.formats._base import Sample

NAME = "text"
LABEL = "plain text"
SUFFIXES = (".txt", ".text")
ORDER = 900  # last: the fallback
STREAMS = True


def detect(sample: Sample) -> bool:
    return True


def convert(text: str) -> tuple[str, str | None]:
    return text, None
