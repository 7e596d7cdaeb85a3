"""A document ready to chunk (:class:`LoadedFile`): what a format makes of a file, or
:func:`from_text` of text an application hands over."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest.vectors import MAX_TEXT_CHARS, check_vector, vector_digest


def source_of(path: Path) -> str:
    """A file's source, what the document is stored under: its absolute path with every
    directory's symbolic links resolved. A symbolic link to a file keeps its own name, where
    it is: it is its own document there (so removing the link lets ``--prune`` remove it),
    not its target's, which may lie outside what was ingested. A loop of links is kept as
    named."""
    try:
        if path.is_symlink() and not path.is_dir():
            return str(path.absolute().parent.resolve() / path.name)
        return str(path.resolve())
    except (OSError, RuntimeError):  # (RuntimeError: a loop of symbolic links)
        return str(path.absolute())


@dataclass(frozen=True)
class LoadedFile:
    """A document ready to chunk: from a file, or from text an application hands over."""

    label: str  # what messages call it: the path as given, or the source
    source: str  # the document's identity within a collection (a file's absolute path)
    format: str  # the NAME of its format module (pgrag.ingest.formats): markdown, pdf, ...
    text: str  # for HTML, its Markdown-shaped text; for PDF, the pages joined
    title: str
    content_hash: str
    metadata: dict[str, Any]  # stored in pgrag.documents.metadata
    pages: tuple[str, ...] | None = None  # PDF: the text of each page, page 1 first
    stream: Path | None = None  # a large file: chunked from here a line at a time (text "")
    # Whether the text is chunked as Markdown: headings (Markdown, and HTML converted to it)
    # and table rows (HTML and PDF) kept as units. Its format's MARKDOWN says so.
    markdown: bool = False
    # A vector the application brings (pgrag.ingest.vectors): the document is then one chunk,
    # its whole text, stored with this vector for the collection's model, never embedded.
    vector: tuple[float, ...] | None = None
    # What reading it left out or guessed, said as a warning line when it is ingested (an
    # EPUB chapter the book lacks, a body in a charset Python does not know, columns past
    # the limit): the document is read all the same.
    notes: tuple[str, ...] = ()


def from_text(
    source: str,
    text: str,
    *,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    format: str = "text",
    vector: Any = None,
) -> LoadedFile:
    """A document given as text rather than read from a file (records, datasets, an app).

    ``vector``: its embedding, made already (a list of numbers or a 1-d numpy array, of the
    collection's model: docs/ingest.md#bring-your-own-vectors). The document is then stored
    as one chunk, its whole text (at most 100,000 characters), with that vector; the encoder
    is not asked. Checked here (finite numbers, not all zero) and against the collection's
    model when it is ingested (its dimension); a change of the vector alone is a change."""
    if format not in ("text", "markdown"):
        raise InputError(f"unknown format {format!r}; use 'text' or 'markdown'")
    if not source:
        raise InputError("a document needs a non-empty source (its identity in the collection)")
    if "\x00" in source:
        raise InputError("has a NUL character in its source; PostgreSQL text cannot store it")
    for what, value in (("source", source), ("title", title), ("text", text)):
        if value is not None and not _encodable(value):
            raise InputError(
                f"has a {what} that is not valid Unicode (a lone surrogate); decode it with"
                " errors='replace' or fix its source"
            )
    if metadata and not all(isinstance(k, str) for k in metadata):
        raise InputError("has metadata whose field names are not all strings; name them in text")
    if metadata and not all(_encodable(k) for k in metadata):
        raise InputError("has a metadata field name that is not valid Unicode (a lone surrogate)")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise InputError("has no text to index")
    if "\x00" in text:
        raise InputError("contains NUL characters; PostgreSQL text cannot store them")
    if vector is not None:
        vector = check_vector(vector)
        if len(text) > MAX_TEXT_CHARS:
            raise InputError(
                f"has {len(text):,} characters of text with its vector; a text given a vector"
                f" is one chunk, at most {MAX_TEXT_CHARS:,} characters: split it and give each"
                " part its own vector"
            )
    title = title if title is not None else source
    # The metadata is part of what is compared, so that a change of it alone is stored (it
    # re-embeds nothing: every chunk keeps its row and vector).
    identity = f"{title}\n{format}\n{text}"
    if metadata:
        _check_json(metadata)
    described = json.dumps(metadata, sort_keys=True, default=str) if metadata else ""
    if described:
        identity += "\n" + described
    if vector is not None:
        # (Only then: the content hashes of documents without one stay what they were.)
        identity += "\nvector " + vector_digest(vector)
    if "\x00" in title or "\\u0000" in described:
        raise InputError(
            "has a NUL character in its title or metadata; PostgreSQL text cannot store it"
        )
    digest = hashlib.sha256(identity.encode()).hexdigest()
    return LoadedFile(
        label=source,
        source=source,
        format=format,
        text=text,
        title=title,
        content_hash=digest,
        metadata={**(metadata or {}), "format": format},
        markdown=format == "markdown",
        vector=vector,
    )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_json(metadata: dict[str, Any]) -> None:
    """Metadata PostgreSQL's jsonb stores as it is, or a one-line InputError naming the field:
    no NaN or infinity (JSON has neither), no value JSON has no type for."""
    for key, value in metadata.items():
        try:
            # (sort_keys as the content hash sorts them; encoded, as a lone surrogate cannot be)
            json.dumps(value, allow_nan=False, sort_keys=True, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise InputError(
                f"has text that is not valid Unicode (a lone surrogate) in metadata field {key!r}"
            ) from None
        except ValueError:
            raise InputError(
                f"has NaN or infinity in metadata field {key!r}; JSON (and PostgreSQL's jsonb)"
                " has neither: use null or a string"
            ) from None
        except (TypeError, RecursionError) as err:
            raise InputError(
                f"has a value JSON cannot hold in metadata field {key!r} ({err});"
                " convert it to a string, number, list or object"
            ) from None


def file_metadata(path: Path, fmt: str, size: int, mtime: float) -> dict[str, Any]:
    """What every document read from a file records about the file."""
    return {
        "path": str(path),
        "format": fmt,
        "bytes": size,
        "modified": datetime.fromtimestamp(mtime, tz=UTC).date().isoformat(),
    }


def name_title(path: Path) -> str:
    """A title made of a file's name, for a document that has none of its own."""
    stem = re.sub(r"[-_]+", " ", path.stem).strip()
    return stem[:1].upper() + stem[1:] if stem else path.name
