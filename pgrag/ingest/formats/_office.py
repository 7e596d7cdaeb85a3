"""What the office formats share (DOCX, XLSX, PPTX, EPUB: ZIP archives of XML, read by their
libraries, the ``office`` extra): the archive's guards, the document, and Markdown tables
(which CSV writes too)."""

from __future__ import annotations

import hashlib
import importlib
import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile, file_metadata, name_title, source_of
from pgrag.ingest.formats._base import one_line

# An office file is decompressed into memory to be read: at most this much in all, and no
# member inflating more than MAX_RATIO times (a "ZIP bomb" is refused before it is opened).
MAX_UNCOMPRESSED = 512 * 1024 * 1024
MAX_RATIO = 200
# python-docx and python-pptx parse every XML part of a file when they open it (about 20 bytes
# of memory a byte): the XML parts of a Word or PowerPoint file may hold at most this much.
MAX_XML = 64 * 1024 * 1024
# The Markdown an office file or book becomes: parts a file lists many times (a sheet, a slide
# or a chapter named again and again) must not grow it without bound.
MAX_TEXT = 100 * 1024 * 1024
_SPACE = re.compile(r"\s+")
_DASHES = re.compile(r":?-+:?")


def check_archive(path: Path, label: str, xml_limit: bool = False) -> None:
    """Refuse an archive that is not a readable ZIP, or that would inflate beyond the limits
    (with ``xml_limit``, its XML parts beyond MAX_XML too)."""
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
    xml = sum(i.file_size for i in infos if i.filename.lower().endswith((".xml", ".rels")))
    if xml_limit and xml > MAX_XML:
        raise InputError(
            f"has {xml} bytes of XML, over the {MAX_XML}-byte limit for a {label} file; split it"
        )
    for info in infos:
        ratio = info.file_size // max(info.compress_size, 1)
        if info.file_size > 1024 * 1024 and ratio > MAX_RATIO:
            raise InputError(
                f"has a member {info.filename!r} that inflates {ratio} times"
                f" ({info.file_size} bytes): refused as a ZIP bomb"
            )


# What each ZIP-based format's archive holds (the member that says which it is).
_KINDS = {
    "docx": "a Word document",
    "xlsx": "an Excel workbook",
    "pptx": "a PowerPoint presentation",
    "epub": "an EPUB book",
}


def kind_of(members: frozenset[str]) -> str | None:
    """Which office format (or EPUB) a ZIP archive's members say it is, if any."""
    if any(m.startswith("word/document") and m.endswith(".xml") for m in members):
        return "docx"
    if "xl/workbook.xml" in members:
        return "xlsx"
    if "ppt/presentation.xml" in members:
        return "pptx"
    if "META-INF/container.xml" in members and any(m.lower().endswith(".opf") for m in members):
        return "epub"
    return None


def claims(sample: Any, name: str, old: bytes | None = None, old_label: str = "") -> bool:
    """A ZIP-based format's detect(): the archive's members say it is ``name``, whatever its
    file name. A file named for it that is not is refused with a line saying what it is
    (another office format is left to that format's module)."""
    kind = kind_of(sample.members) if sample.is_zip else None
    if kind == name:
        return True
    if sample.known != name or kind is not None:
        return False
    suffix = sample.suffix
    if old is not None and sample.head.startswith(old):
        raise InputError(
            f"is {old_label} named {suffix}; save it as {suffix} (or `libreoffice --headless"
            f" --convert-to {suffix.lstrip('.')}`) to ingest it"
        )
    if sample.head.startswith(b"PK\x03\x04") and not sample.members:  # entries, no directory
        raise InputError(f"is named {suffix} but its ZIP archive is damaged (cut short?)")
    raise InputError(f"is named {suffix} but is not {_KINDS[name]}")


def library(module: str, label: str, package: str) -> Any:
    """The library that reads a format (of the ``office`` extra), or the one-line error that
    says to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise missing(label, package) from err


@contextmanager
def reading(kind: str) -> Iterator[None]:
    """A file read within its time budget, its library's warnings kept off stderr, and any
    error the library raises (they raise many kinds for a broken file) as one line:
    "cannot be read as KIND (...); it may be damaged"."""
    with budget.file_budget(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        except InputError:
            raise
        except Exception as err:
            raise InputError(
                f"cannot be read as {kind} ({type(err).__name__}: {one_line(err)});"
                " it may be damaged"
            ) from err


def missing(label: str, package: str) -> InputError:
    article = "an" if label[:1] in "AEIOU" else "a"
    return InputError(
        f"is {article} {label} file, and reading one needs {package}: pip install 'pgrag[office]'"
    )


class Text:
    """Markdown blocks, refused once they pass MAX_TEXT characters in all."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.size = 0

    def add(self, block: str) -> None:
        self.size += len(block)
        if self.size > MAX_TEXT:
            raise InputError(
                f"becomes more than {MAX_TEXT} characters of text (parts listed again and"
                " again?); split it"
            )
        self.blocks.append(block)

    def __bool__(self) -> bool:
        return bool(self.blocks)

    def joined(self) -> str:
        return "\n\n".join(self.blocks) + "\n"


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


_STRUCTURE = re.compile(r"^(?:#|```|~~~|\||-{3,}\s*$|\.{3}\s*$|={3,}\s*$)")


def paragraph(text: str) -> str:
    """A paragraph's text as Markdown prose: no line of it (a soft line break starts one) is
    read as a heading, a fence, a table row, a thematic break or front matter."""
    lines = [line.strip() for line in text.strip().split("\n")]
    return "\n".join("\\" + line if _STRUCTURE.match(line) else line for line in lines)


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
        source=source_of(path),
        format=name,
        text=text,
        title=(title or "").strip() or name_title(path),
        content_hash=digest.hexdigest(),
        metadata={**file_metadata(path, name, st.st_size, st.st_mtime), **(extra or {})},
        markdown=True,
    )
