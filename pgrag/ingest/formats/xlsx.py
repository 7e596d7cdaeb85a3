"""Excel workbooks (XLSX), read with openpyxl (the ``office`` extra), a row at a time: each
worksheet is a section (its name the heading, so each chunk's section path names the sheet)
holding one Markdown table whose first non-empty row is the header, repeated in every chunk
of a long sheet. Cells are their values as last saved (a formula's cached result); a formula
never calculated (in a file written by a program, not saved by a spreadsheet) is its formula,
such as ``=SUM(B2:B4)`` (only such a workbook is read twice: for its values and its
formulas). A date is written as ISO 8601, a whole number without decimals. Chart sheets and
images are not read. The title is the workbook's core property, else the file name. An Excel
97-2003 .xls is refused with a line saying to convert it."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample

NAME = "xlsx"
LABEL = "Excel (XLSX)"
SUFFIXES = (".xlsx", ".xlsm", ".xltx", ".xltm")  # (macros are not run)
ORDER = 51
BINARY = True

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
MAX_COLUMNS = 1_000  # (a sheet's used range can claim 16,384 columns of nothing)
# A formula cell with no cached value (none, or an empty one that is not an empty string's):
# found in the sheets' XML by this, before any is parsed twice.
_UNCALCULATED = re.compile(
    rb"<(?:\w+:)?c\b([^>]*)>\s*<(?:\w+:)?f\b(?:[^>]*/>|[^>]*>[^<]*</(?:\w+:)?f>)\s*"
    rb"(?:<(?:\w+:)?v\s*/>|<(?:\w+:)?v>\s*</(?:\w+:)?v>)?\s*</(?:\w+:)?c>"
)
_STRING_TYPE = re.compile(rb"""\bt\s*=\s*["'](?:str|inlineStr)["']""")
_SCAN_CHUNK = 1 << 20
_SCAN_OVERLAP = 1 << 16  # longer than a cell (a formula is at most 8,192 characters)


def detect(sample: Sample) -> bool:
    """A ZIP archive holding xl/workbook.xml, whatever its name; a file named .xlsx that is
    not is refused (an older binary file with a line saying to convert it), unless it is
    another office file, which its own module reads."""
    return _office.claims(sample, NAME, _OLE2, "an Excel 97-2003 workbook (.xls)")


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    _office.check_archive(path, "Excel")
    openpyxl = _office.library("openpyxl", "Excel (XLSX)", "openpyxl")
    with _office.reading("an Excel workbook"):
        book = openpyxl.load_workbook(fh, read_only=True, data_only=True)
        # Only a workbook with formulas never calculated is read a second time, for them
        # (from a file object: given a path, openpyxl refuses a name it does not know, and
        # content, not the name, decides the format).
        second = path.open("rb") if _uncalculated(path) else None
        try:
            formulas = (
                openpyxl.load_workbook(second, read_only=True, data_only=False)
                if second is not None
                else None
            )
            try:
                text, sheets, cut = _markdown(book, formulas)
                title = book.properties.title
            finally:
                if formulas is not None:
                    formulas.close()
        finally:
            book.close()
            if second is not None:
                second.close()
    loaded = _office.loaded(path, fh, NAME, text, title, {"sheets": sheets})
    if cut:
        loaded = replace(
            loaded,
            notes=(
                f"sheet {cut[0]!r} has cells past column {MAX_COLUMNS:,}, which are not read"
                + (f" (and {len(cut) - 1} more sheets)" if len(cut) > 1 else ""),
            ),
        )
    yield str(path), loaded


def _uncalculated(path: Path) -> bool:
    """Whether a sheet of the workbook holds a formula with no cached value (its XML read as
    bytes, a megabyte at a time, not parsed)."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                continue
            with archive.open(name) as member:
                tail = b""
                while chunk := member.read(_SCAN_CHUNK):
                    budget.check("reading the workbook's formulas")
                    data = tail + chunk
                    if b"f" in data and any(
                        not _STRING_TYPE.search(m.group(1)) for m in _UNCALCULATED.finditer(data)
                    ):
                        return True
                    tail = data[-_SCAN_OVERLAP:]
    return False


def _markdown(book: Any, formulas: Any | None = None) -> tuple[str, int, list[str]]:
    """The workbook's sheets as Markdown, their number, and the sheets with cells past
    MAX_COLUMNS (not read); with ``formulas`` (the same workbook, read for its formulas), a
    cell with no value is its formula, if it has one."""
    text = _office.Text()
    cut: list[str] = []
    others = formulas.worksheets if formulas is not None else [None] * len(book.worksheets)
    for sheet, other in zip(book.worksheets, others, strict=True):
        # The cells the file holds, not the range its dimension claims (one cell at XFD1048576
        # would otherwise be a million rows of 16,384 empty cells).
        sheet.reset_dimensions()
        values = sheet.iter_rows(values_only=True)
        if other is not None:
            other.reset_dimensions()
            values = map(_merged, values, other.iter_rows(values_only=True))
        rows = []
        size = 0
        for n, row in enumerate(values):
            if n % 1000 == 0:
                budget.check("reading the workbook's rows")
            if not row:
                continue
            cells = [_value(v) for v in row[:MAX_COLUMNS]]
            if len(row) > MAX_COLUMNS and str(sheet.title) not in cut:
                if any(_value(v) for v in row[MAX_COLUMNS:]):
                    cut.append(str(sheet.title))
            while cells and not cells[-1]:
                cells.pop()
            if cells:
                rows.append(cells)
                size += sum(len(c) for c in cells)
                if size > _office.MAX_TEXT:
                    raise InputError(
                        f"has a sheet of more than {_office.MAX_TEXT} characters; split it"
                    )
        table = _office.markdown_table(rows)
        if table:
            text.add(_office.heading(1, str(sheet.title)) + "\n\n" + "\n".join(table))
    return text.joined(), len(book.worksheets), cut


def _merged(values: tuple[Any, ...], formulas: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row's values, a formula (``=SUM(B2:B4)``) where a cell has none."""
    return tuple(
        v if v is not None or f is None else str(getattr(f, "text", f))
        for v, f in zip(values, formulas, strict=False)
    )


def _value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value)
