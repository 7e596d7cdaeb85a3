"""CSV and TSV: a file of delimited values is one table, its first row the header. It is
chunked as a Markdown table: whole rows only, and every chunk of a long table begins with the
header row, so a chunk from the middle of a price list still says which column is the price.

A file is read as CSV when it is named .csv or .tsv and its content is delimited text: a
.csv that starts as a PDF or an HTML page is read as that, one whose first line is a JSON
object is refused (name it .jsonl), and one that is not text is refused as any text file
is. The delimiter (comma, semicolon, tab or bar) and the quoting are found from the file's
first 16 KB by Python's ``csv.Sniffer`` (commas, or tabs if every line has one, when it
cannot tell). Cells are written on one line (line breaks inside a quoted cell become
spaces) with ``|`` escaped, and a cell of only dashes ("-", "---") escaped so that no row
reads as a table's delimiter row; an empty header cell is named "column N"; rows with no
value are dropped; a row shorter than the header is padded, and one longer gets more
columns. A cell over 128 KiB (the csv module's limit) or a row of more than 10,000 cells
fails the file, as does a quote never closed. Its title is the file name.
"""

from __future__ import annotations

import csv
import io
import re

from pgrag.errors import InputError
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample, one_line

NAME = "csv"
LABEL = "CSV"
SUFFIXES = (".csv", ".tsv")
ORDER = 350  # after PDF, HTML and JSON Lines (content they recognise wins), before Markdown
MARKDOWN = True

_DELIMITERS = ",;\t|"
_SPACE = re.compile(r"\s+")


def detect(sample: Sample) -> bool:
    """Named .csv or .tsv (content that another format recognises by its start, PDF or HTML,
    was claimed before); one whose first line is a JSON object is refused, not read as a
    table of JSON fragments."""
    if sample.known != NAME:
        return False
    first = sample.text.partition("\n")[0].strip()
    if first.startswith("{") and first.endswith("}"):
        raise InputError(
            f"is named {sample.suffix} but its first line is a JSON object: name it .jsonl"
            " to read it as JSON Lines"
        )
    return True


def convert(text: str) -> tuple[str, str | None]:
    lines = _office.markdown_table(_rows(text))
    if not lines:
        raise InputError("has no values: every row is empty")
    return "\n".join(lines) + "\n", None


def _dialect(text: str) -> type[csv.Dialect] | csv.Dialect:
    sample = text[:16384]
    if "\n" in sample[:-1]:
        sample = sample[: sample.rindex("\n", 0, len(sample) - 1) + 1]  # whole lines only
    try:
        return csv.Sniffer().sniff(sample, delimiters=_DELIMITERS)
    except csv.Error:
        # One column, or too little text to tell: commas (or tabs, if every line has one).
        lines = [line for line in sample.splitlines() if line.strip()]
        return csv.excel_tab if lines and all("\t" in line for line in lines) else csv.excel


def _rows(text: str) -> list[list[str]]:
    dialect = _dialect(text)
    rows = []
    try:
        rows_in = csv.reader(io.StringIO(text, newline=""), dialect, strict=True)
        for number, row in enumerate(rows_in, 1):
            if len(row) > 10_000:
                raise InputError(f"row {number} has {len(row)} cells; at most 10000 are read")
            cells = [_SPACE.sub(" ", cell).strip() for cell in row]
            if any(cells):
                rows.append(cells)
    except csv.Error as err:  # (a cell over the csv module's 128 KiB limit, a stray quote)
        raise InputError(f"is not valid CSV: {one_line(err)}") from None
    return rows
