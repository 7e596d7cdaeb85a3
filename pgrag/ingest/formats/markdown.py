"""Markdown: read as it is, and chunked at its headings (the section path, "Billing > Refunds"),
then paragraphs, list items, code blocks and table rows, then sentences. Its title is its
first ``# heading``. A file too large to read whole is chunked a line at a time."""

from __future__ import annotations

import re

from pgrag.ingest.formats._base import Sample

NAME = "markdown"
LABEL = "Markdown"
SUFFIXES = (".md", ".markdown")
ORDER = 400
MARKDOWN = True
STREAMS = True

_HINTS = re.compile(r"^(?:#{1,6}\s+\S|```|~~~|\s*[-*+]\s+\S.*\n\s*[-*+]\s+\S)", re.M)
_ATX_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def detect(sample: Sample) -> bool:
    """Named .md or .markdown, or of no known kind with Markdown headings, fences or lists."""
    return sample.known == NAME or (sample.known is None and bool(_HINTS.search(sample.text)))


def convert(text: str) -> tuple[str, str | None]:
    match = _ATX_H1.search(text)
    return text, match.group(1).strip() if match else None
