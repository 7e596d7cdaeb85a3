"""What the office formats share (DOCX, XLSX, PPTX: ZIP archives of XML, read by their
libraries, the ``office`` extra): the archive's guards, Markdown tables, and the document."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from pgrag.errors import InputError
from pgrag.ingest.document import LoadedFile, file_metadata, name_title

# An office file is decompressed into memory to be read: at most this much in all, and no
# member inflating more than MAX_RATIO times (a "ZIP bomb" is refused before it is opened).
MAX_UNCOMPRESSED = 512 * 1024 * 1024
MAX_RATIO = 200
_SPACE = re.compile(r"\s+")
_DASHES = re.compile(r":?-+:?")


def check_archive(path: Path, label: str) -> None:
    """Refuse an archive that is not a readable ZIP, or that would inflate beyond the limits."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, EOFError, ValueError) as err:
        raise InputError(f"is a damaged {label} file (not a readable ZIP archive: {err})") from err
    total = sum(i.file_size for i in infos)
    if total > MAX_UNCOMPRESSED:
        raise InputError(
            f"would inflate to {total} bytes, over the {MAX_UNCOMPRESSED}-byte limit for a"
            f" {label} file; split it"
        )
    for info in infos:
        ratio = info.file_size // max(info.compress_size, 1)
        if info.file_size > 1024 * 1024 and ratio > MAX_RATIO:
            raise InputError(
                f"has a member {info.filename!r} that inflates {ratio} times"
                f" ({info.file_size} bytes): refused as a ZIP bomb"
            )


def missing(label: str, package: str) -> InputError:
    return InputError(
        f"is a {label} file, and reading one needs {package}: pip install 'pgrag[office]'"
    )


def cell(text: str) -> str:
    """A table cell on one line, its ``|`` escaped; only dashes escaped too (no row may read
    as a table's delimiter row)."""
    text = _SPACE.sub(" ", text).strip().replace("\\", "\\\\").replace("|", "\\|")
    return "\\" + text if _DASHES.fullmatch(text) else text


def markdown_table(rows: Iterable[list[str]]) -> list[str]:
    """A Markdown table's lines: the first row is the header (an empty header cell is named
    "column N"), rows are padded to the widest, and rows with no value are dropped."""
    kept = [[cell(c) for c in row] for row in rows]
    kept = [row for row in kept if any(row)]
    if not kept:
        return []
    width = max(len(r) for r in kept)
    header = kept[0] + [""] * (width - len(kept[0]))
    header = [c or f"column {k + 1}" for k, c in enumerate(header)]
    lines = [line(header), "|" + " --- |" * width]
    lines += [line(r + [""] * (width - len(r))) for r in kept[1:]]
    return lines


def line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def heading(level: int, text: str) -> str:
    return "#" * max(1, min(level, 6)) + " " + _SPACE.sub(" ", text).strip()


def paragraph(text: str) -> str:
    """A paragraph's text as Markdown prose: never read as a heading, a fence or a table row."""
    text = text.strip()
    if text.startswith(("#", "```", "~~~", "|")):
        text = "\\" + text
    return text


def loaded(
    path: Path,
    fh: BinaryIO,
    name: str,
    text: str,
    title: str | None,
    extra: dict[str, object] | None = None,
) -> LoadedFile:
    if not text.strip():
        raise InputError("has no text (only images, or empty)")
    st = path.stat()
    digest = hashlib.sha256()
    fh.seek(0)
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    return LoadedFile(
        label=str(path),
        source=str(path.resolve()),
        format=name,
        text=text,
        title=(title or "").strip() or name_title(path),
        content_hash=digest.hexdigest(),
        metadata={**file_metadata(path, name, st.st_size, st.st_mtime), **(extra or {})},
        markdown=True,
    )
