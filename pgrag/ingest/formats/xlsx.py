"""Excel workbooks (XLSX), read with openpyxl (the ``office`` extra), a row at a time: each
worksheet is a section (its name the heading, so each chunk's section path names the sheet)
holding one Markdown table whose first non-empty row is the header, repeated in every chunk
of a long sheet. Cells are their values as last saved (a formula's cached result; one never
calculated, as in a file written by a program, is empty); a date is written as ISO 8601, a
whole number without decimals. Chart sheets and images are not read. The title is the
workbook's core property, else the file name. An Excel 97-2003 .xls is refused with a line
saying to convert it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample

NAME = "xlsx"
LABEL = "Excel (XLSX)"
SUFFIXES = (".xlsx",)
ORDER = 51
BINARY = True

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
MAX_COLUMNS = 1_000  # (a sheet's used range can claim 16,384 columns of nothing)


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
        try:
            text, sheets = _markdown(book)
            title = book.properties.title
        finally:
            book.close()
    yield str(path), _office.loaded(path, fh, NAME, text, title, {"sheets": sheets})


def _markdown(book: Any) -> tuple[str, int]:
    text = _office.Text()
    for sheet in book.worksheets:
        # The cells the file holds, not the range its dimension claims (one cell at XFD1048576
        # would otherwise be a million rows of 16,384 empty cells).
        sheet.reset_dimensions()
        rows = []
        size = 0
        for n, row in enumerate(sheet.iter_rows(values_only=True)):
            if n % 1000 == 0:
                budget.check("reading the workbook's rows")
            if not row:
                continue
            cells = [_value(v) for v in row[:MAX_COLUMNS]]
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
    return text.joined(), len(book.worksheets)


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
