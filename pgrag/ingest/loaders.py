"""Reading files into text: which files, in what format, and refusing what cannot be used.

Each refusal is an :class:`InputError` whose message is one line naming the file's problem;
the caller adds the file name and moves on to the next file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest.formats import SNIFF_BYTES, SUFFIXES, JsonlFields, Record, sniff

MAX_BYTES = 50 * 1024 * 1024  # Markdown and text are read whole below this and streamed above
# it (a line at a time, chunked section by section); HTML must be read whole, so this is its
# limit. JSON Lines is read a line at a time and PDF an object at a time, whatever their size.
MAX_PDF_BYTES = 2 * 1024 * 1024 * 1024
MAX_HTML_BYTES = MAX_BYTES


@dataclass(frozen=True)
class LoadedFile:
    """A document ready to chunk: from a file, or from text an application hands over."""

    label: str  # what messages call it: the path as given, or the source
    source: str  # the document's identity within a collection (a file's absolute path)
    format: str  # markdown | text | html | pdf | jsonl
    text: str  # for HTML, its Markdown-shaped text; for PDF, the pages joined
    title: str
    content_hash: str
    metadata: dict[str, Any]  # stored in pgrag.documents.metadata
    pages: tuple[str, ...] | None = None  # PDF: the text of each page, page 1 first
    stream: Path | None = None  # a large file: chunked from here a line at a time (text "")

    @property
    def markdown(self) -> bool:
        """Whether the text is chunked as Markdown: headings (Markdown, and HTML converted to
        it) and table rows (HTML and PDF) kept as units."""
        return self.format in ("markdown", "html", "pdf")


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
    # The metadata is part of what is compared, so that a change of it alone is stored (it
    # re-embeds nothing: every chunk keeps its row and vector).
    identity = f"{title}\n{format}\n{text}"
    described = json.dumps(metadata, sort_keys=True, default=str) if metadata else ""
    if described:
        identity += "\n" + described
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
            yield path, None  # named explicitly: its content decides what it is
        elif path.exists():
            yield path, InputError("not a regular file or directory")
        else:
            yield path, InputError("no such file or directory")


_KINDS = ", ".join(sorted(SUFFIXES))
_READS = "Markdown, plain text, HTML, PDF and JSON Lines"


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
            if child.suffix.lower() in SUFFIXES and child.is_file():
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


def load_path(
    path: Path, jsonl: JsonlFields | None = None
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """The documents in a file, each with the label messages use for it: one for most files,
    one per record for JSON Lines (a bad record is yielded as its problem, the others go on)."""
    label = str(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
            fmt = _format(head, path)
            if fmt == "pdf":
                yield label, _load_pdf(path, fh)
                return
            if fmt == "jsonl":
                fh.seek(0)
                yield from _load_jsonl(path, fh, jsonl or JsonlFields())
                return
    except InputError as err:
        yield label, err
        return
    except PermissionError:
        yield label, InputError("permission denied; make it readable for this user")
        return
    except OSError as err:
        yield label, InputError(f"cannot read it ({err.strerror})")
        return
    try:
        yield label, load(path)
    except InputError as err:
        yield label, err


def _format(head: bytes, path: Path) -> str:
    if not head:
        raise InputError("file is empty; nothing to ingest")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError("is UTF-16 text; convert it to UTF-8, e.g. `iconv -f utf-16 -t utf-8`")
    fmt = sniff(head, path.suffix.lower())
    nul = head.find(b"\0")
    if fmt != "pdf" and nul >= 0:
        suffix = path.suffix or "(none)"
        raise InputError(
            f"contains NUL bytes (offset {nul}): a binary file (type {suffix!r}), not one"
            f" pgrag reads ({_READS})"
        )
    return fmt


def load(path: Path) -> LoadedFile:
    """A Markdown, text or HTML file, read whole (PDF and JSON Lines: :func:`load_path`)."""
    try:
        st = path.stat()
        size = st.st_size
        if size > MAX_BYTES:
            return _load_streamed(path, st)
        data = path.read_bytes()
    except PermissionError as err:
        raise InputError("permission denied; make it readable for this user") from err
    except OSError as err:
        raise InputError(f"cannot read it ({err.strerror})") from err
    fmt = _format(data[:SNIFF_BYTES], path)
    if fmt in ("pdf", "jsonl"):
        raise InputError(f"is {fmt}; read it with pgrag.loaders.load_path")
    if not data.strip():
        raise InputError("file holds only whitespace; nothing to ingest")
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
    title = None
    if fmt == "html":
        from pgrag.ingest.formats import html_to_markdown

        text, title = html_to_markdown(text)
        if not text.strip():
            raise InputError("has no text once navigation and markup are removed")
    return LoadedFile(
        label=str(path),
        source=str(path.resolve()),
        format=fmt,
        text=text,
        title=title or _title(text, fmt, path),
        content_hash=hashlib.sha256(data).hexdigest(),
        metadata=_file_metadata(path, fmt, size, st.st_mtime),
    )


def _load_streamed(path: Path, st: os.stat_result) -> LoadedFile:
    """A Markdown or text file too large to read whole: checked (UTF-8, no NUL) and hashed in
    blocks now, chunked a line at a time when it is written."""
    import codecs

    with path.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
        fmt = _format(head, path)
        if fmt not in ("markdown", "text"):
            raise InputError(
                f"file is {st.st_size} bytes, over the {MAX_HTML_BYTES}-byte limit for {fmt}"
                " (read whole to parse); split it"
            )
        fh.seek(0)
        digest = hashlib.sha256()
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        offset = 0
        title = None
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            nul = block.find(b"\0")
            if nul >= 0:
                raise InputError(
                    f"contains NUL bytes (offset {offset + nul}); looks like a binary file"
                )
            try:
                text = decoder.decode(block)
            except UnicodeDecodeError as err:
                raise InputError(
                    f"is not valid UTF-8 (byte {offset + err.start}); convert it, e.g."
                    " `iconv -f latin1 -t utf-8`"
                ) from err
            if title is None and fmt == "markdown":
                match = _ATX_H1.search(text)
                title = match.group(1).strip() if match else None
            offset += len(block)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as err:
            raise InputError("is not valid UTF-8 (it ends inside a character)") from err
    return LoadedFile(
        label=str(path),
        source=str(path.resolve()),
        format=fmt,
        text="",
        title=title or _title("", fmt, path),
        content_hash=digest.hexdigest(),
        metadata={**_file_metadata(path, fmt, st.st_size, st.st_mtime), "streamed": True},
        stream=path,
    )


def _file_metadata(path: Path, fmt: str, size: int, mtime: float) -> dict[str, Any]:
    return {
        "path": str(path),
        "format": fmt,
        "bytes": size,
        "modified": datetime.fromtimestamp(mtime, tz=UTC).date().isoformat(),
    }


def _load_pdf(path: Path, fh: Any) -> LoadedFile:
    from pgrag.ingest.formats import pdf_pages

    st = path.stat()
    if st.st_size > MAX_PDF_BYTES:
        raise InputError(f"file is {st.st_size} bytes, over the {MAX_PDF_BYTES}-byte PDF limit")
    digest = hashlib.sha256()
    fh.seek(0)
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    fh.seek(0)
    pages, title = pdf_pages(fh)
    pages = [p.replace("\r\n", "\n").replace("\r", "\n") for p in pages]
    return LoadedFile(
        label=str(path),
        source=str(path.resolve()),
        format="pdf",
        text="\n\n".join(pages),
        title=title or _title("", "pdf", path),
        content_hash=digest.hexdigest(),
        metadata={**_file_metadata(path, "pdf", st.st_size, st.st_mtime), "pages": len(pages)},
        pages=tuple(pages),
    )


def _load_jsonl(
    path: Path, fh: Any, fields: JsonlFields
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    """One document per record: its source is the file's path and the record's id."""
    source = str(path.resolve())
    for item in _records(fh, fields):
        if isinstance(item, tuple):
            number, err = item
            yield f"{path}:{number}", err
            continue
        meta = {**item.metadata, "path": str(path), "record": item.key}
        try:
            doc = from_text(
                f"{source}#{item.key}",
                item.text,
                title=item.title or f"{path.stem} {item.key}",
                metadata=meta,
            )
        except InputError as err:
            yield f"{path}:{item.line}", err
            continue
        label = f"{path}:{item.line}"
        yield label, replace(doc, label=label, format="jsonl", metadata={**meta, "format": "jsonl"})


def _records(fh: Any, fields: JsonlFields) -> Iterator[Record | tuple[int, InputError]]:
    from pgrag.ingest.formats import jsonl_records

    yield from jsonl_records(fh, fields)


_ATX_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _title(text: str, fmt: str, path: Path) -> str:
    if fmt == "markdown":
        match = _ATX_H1.search(text)
        if match:
            return match.group(1).strip()
    stem = re.sub(r"[-_]+", " ", path.stem).strip()
    return stem[:1].upper() + stem[1:] if stem else path.name
