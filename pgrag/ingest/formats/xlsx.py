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
from pgrag.ingest.formats._base import Sample, one_line

NAME = "xlsx"
LABEL = "Excel (XLSX)"
SUFFIXES = (".xlsx",)
ORDER = 51
BINARY = True

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
MAX_COLUMNS = 1_000  # (a sheet's used range can claim 16,384 columns of nothing)


def detect(sample: Sample) -> bool:
    """A ZIP archive with xl/workbook.xml, whatever its name; one named .xlsx that is not is
    refused."""
    if sample.is_zip and "xl/workbook.xml" in sample.members:
        return True
    if sample.known == NAME:
        if sample.head.startswith(_OLE2):
            raise InputError(
                "is an Excel 97-2003 workbook (.xls) named .xlsx; save it as .xlsx (Excel, or"
                " `libreoffice --headless --convert-to xlsx`) to ingest it"
            )
        raise InputError("is named .xlsx but is not an Excel workbook (no xl/workbook.xml)")
    return False


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    _office.check_archive(path, "Excel")
    try:
        import openpyxl
    except ImportError as err:
        raise _office.missing("Excel (XLSX)", "openpyxl") from err
    with budget.file_budget():
        try:
            book = openpyxl.load_workbook(fh, read_only=True, data_only=True)
            try:
                text, sheets = _markdown(book)
                title = book.properties.title
            finally:
                book.close()
        except InputError:
            raise
        except Exception as err:  # openpyxl, zipfile and lxml raise many types for bad files
            raise InputError(
                f"cannot be read as an Excel workbook ({type(err).__name__}: {one_line(err)});"
                " it may be damaged"
            ) from err
    yield str(path), _office.loaded(path, fh, NAME, text, title, {"sheets": sheets})


def _markdown(book: Any) -> tuple[str, int]:
    blocks: list[str] = []
    for sheet in book.worksheets:
        rows = []
        for n, row in enumerate(sheet.iter_rows(values_only=True)):
            if n % 1000 == 0:
                budget.check("reading the workbook's rows")
            cells = [_value(v) for v in row[:MAX_COLUMNS]]
            while cells and not cells[-1]:
                cells.pop()
            rows.append(cells)
        table = _office.markdown_table(rows)
        if table:
            blocks.append(_office.heading(1, str(sheet.title)) + "\n\n" + "\n".join(table))
    return "\n\n".join(blocks) + "\n", len(book.worksheets)


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
