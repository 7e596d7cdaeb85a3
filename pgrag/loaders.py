"""Reading files into text: which files, in what format, and refusing what cannot be used.

Each refusal is an :class:`InputError` whose message is one line naming the file's problem;
the caller adds the file name and moves on to the next file.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import InputError

FORMATS = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text"}
MAX_BYTES = 50 * 1024 * 1024  # whole-file reads are fine below this; streaming is future work


@dataclass(frozen=True)
class LoadedFile:
    """A document ready to chunk: from a file, or from text an application hands over."""

    label: str  # what messages call it: the path as given, or the source
    source: str  # the document's identity within a collection (a file's absolute path)
    format: str  # markdown | text
    text: str
    title: str
    content_hash: str
    metadata: dict[str, Any]  # stored in pgrag.documents.metadata


def from_text(
    source: str,
    text: str,
    *,
    title: str | None = None,
    metadata: dict[str, Any] | None = None,
    format: str = "text",
) -> LoadedFile:
    """A document given as text rather than read from a file (records, datasets, an app)."""
    if format not in ("text", "markdown"):
        raise InputError(f"unknown format {format!r}; use 'text' or 'markdown'")
    if not source:
        raise InputError("a document needs a non-empty source (its identity in the collection)")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise InputError("has no text to index")
    if "\x00" in text:
        raise InputError("contains NUL characters; PostgreSQL text cannot store them")
    title = title if title is not None else source
    digest = hashlib.sha256(f"{title}\n{format}\n{text}".encode()).hexdigest()
    return LoadedFile(
        label=source,
        source=source,
        format=format,
        text=text,
        title=title,
        content_hash=digest,
        metadata={**(metadata or {}), "format": format},
    )


def find_files(paths: list[Path]) -> Iterator[tuple[Path, InputError | None]]:
    """Yield each file to ingest, in a stable order. Directories are walked recursively
    (hidden entries and files of other types skipped); a path given explicitly that cannot be
    ingested, an unreadable subdirectory, or a directory with nothing to ingest is yielded with
    the reason."""
    for path in paths:
        if path.is_dir():
            yield from _walk(path)
        elif path.is_file():
            if path.suffix.lower() in FORMATS:
                yield path, None
            else:
                suffix = path.suffix or "(none)"
                yield path, InputError(f"unsupported file type {suffix!r}; pgrag reads {_KINDS}")
        elif path.exists():
            yield path, InputError("not a regular file or directory")
        else:
            yield path, InputError("no such file or directory")


_KINDS = ", ".join(sorted(FORMATS))


def _walk(root: Path) -> Iterator[tuple[Path, InputError | None]]:
    found = skipped = 0
    problems: list[tuple[Path, InputError]] = []

    def unreadable(err: OSError) -> None:
        where = Path(err.filename) if err.filename else root
        problems.append((where, InputError(f"cannot read this directory ({err.strerror})")))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            child = Path(dirpath) / name
            if child.suffix.lower() in FORMATS and child.is_file():
                found += 1
                yield child, None
            else:
                skipped += 1
    yield from problems
    if not found and not problems:
        others = ""
        if skipped:
            others = f" ({skipped} {'file' if skipped == 1 else 'files'} of other types skipped)"
        yield root, InputError(f"no {_KINDS} files in this directory{others}")


def load(path: Path) -> LoadedFile:
    try:
        st = path.stat()
        size = st.st_size
        if size > MAX_BYTES:
            raise InputError(f"file is {size} bytes, over the {MAX_BYTES}-byte limit; split it")
        data = path.read_bytes()
    except PermissionError as err:
        raise InputError("permission denied; make it readable for this user") from err
    except OSError as err:
        raise InputError(f"cannot read it ({err.strerror})") from err
    if not data:
        raise InputError("file is empty; nothing to ingest")
    if not data.strip():
        raise InputError("file holds only whitespace; nothing to ingest")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError("is UTF-16 text; convert it to UTF-8, e.g. `iconv -f utf-16 -t utf-8`")
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"contains NUL bytes (offset {nul}); looks like a binary file, not text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(
            f"is not valid UTF-8 (byte {err.start}); convert it, e.g. `iconv -f latin1 -t utf-8`"
        ) from err
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    fmt = FORMATS[path.suffix.lower()]
    return LoadedFile(
        label=str(path),
        source=str(path.resolve()),
        format=fmt,
        text=text,
        title=_title(text, fmt, path),
        content_hash=hashlib.sha256(data).hexdigest(),
        metadata={
            "path": str(path),
            "format": fmt,
            "bytes": size,
            "modified": datetime.fromtimestamp(st.st_mtime, tz=UTC).date().isoformat(),
        },
    )


_ATX_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _title(text: str, fmt: str, path: Path) -> str:
    if fmt == "markdown":
        match = _ATX_H1.search(text)
        if match:
            return match.group(1).strip()
    stem = re.sub(r"[-_]+", " ", path.stem).strip()
    return stem[:1].upper() + stem[1:] if stem else path.name
