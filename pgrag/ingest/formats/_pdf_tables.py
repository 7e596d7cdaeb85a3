"""Ruled tables on PDF pages, read with pdfplumber: a page that draws lines is searched for
tables bounded by them (pdfplumber's lines strategy), and each table found becomes a Markdown
table, its first row the header when it reads as one, a cell's wrapped lines joined, an empty
cell kept in its column. The rest of the page is read by position as before
(:func:`pgrag.ingest.formats.pdf.layout_markdown`), in order above, beside and below the
tables.

Measured on generated tables (benchmarks/pdf_tables_eval.py, docs/benchmarks.md): pypdf's
layout text keeps whole rows of tables whose cells fit one line, ruled or not, but a cell
that wraps onto a second line, or an empty cell, breaks the row; pdfplumber keeps them, but
only finds tables bounded by lines. So a page that draws no lines (most pages of prose) is
read by pypdf alone; pdfium counts a page's drawings first, in a few microseconds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pgrag.errors import InputError
from pgrag.ingest import budget

MAX_PATHS = 20_000  # no table is looked for on a page drawing more (a plot, a map)


class RuledTables:
    """One PDF's pages, for their ruled tables: :meth:`page` gives a page's Markdown when it
    has any, else None (read it another way). Use as a context manager."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._pdfium: Any = None
        self._plumber: Any = None
        # The header row of the previous page's last table, which a table that goes on at
        # the top of the next page without one of its own is given again.
        self._header: list[list[str] | None] = [None]

    def __enter__(self) -> RuledTables:
        if self._path is None:
            return self
        try:
            import pdfplumber  # noqa: F401
            import pypdfium2
        except ImportError:
            return self  # (installed without them: tables are read from the layout text)
        try:
            self._pdfium = pypdfium2.PdfDocument(str(self._path))
        except Exception:
            self._pdfium = None  # pypdf reads it; the tables are left to the layout text
        return self

    def __exit__(self, *exc: object) -> None:
        for document in (self._plumber, self._pdfium):
            if document is not None:
                try:
                    document.close()
                except Exception:
                    pass

    def page(self, index: int) -> str | None:
        if self._path is None or self._pdfium is None or not _ruled(self._pdfium, index):
            self._header[0] = None
            return None
        try:
            if self._plumber is None:
                import pdfplumber

                self._plumber = pdfplumber.open(self._path)
            page = self._plumber.pages[index]
        except Exception:  # pdfminer cannot read the file: its pages' layout text, from pypdf
            self._pdfium.close()
            self._pdfium = None
            return None
        try:
            with _quiet():
                return page_markdown(page, self._header)
        except InputError:
            raise  # (the file's time budget is spent)
        except Exception:  # a page pdfminer cannot lay out: its layout text from pypdf
            self._header[0] = None
            return None
        finally:
            page.close()


def _ruled(document: Any, index: int) -> bool:
    """Whether page ``index`` draws what could bound a table's cells: a vertical line or a
    box, and not so many drawings that it is a picture (rules under headings and underlines,
    the lines most pages of prose draw, bound no cells)."""
    import pypdfium2.raw as pdfium_c

    try:
        page = document[index]
    except Exception:
        return False
    try:
        count = 0
        upright = False
        for obj in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_PATH,), max_depth=4):
            count += 1
            if count > MAX_PATHS:
                return False
            if not upright:
                left, bottom, right, top = obj.get_bounds()
                upright = top - bottom >= 6
        return upright
    except Exception:
        return False
    finally:
        page.close()


def page_markdown(page: Any, header: list[list[str] | None] | None = None) -> str | None:
    """A pdfplumber page's Markdown with its ruled tables as tables, or None when it has none
    (of at least two rows and two columns: a framed paragraph is not a table). ``header``
    holds the previous page's last table's header row (or None), and is set to this page's:
    a table at the top of this page with as many columns and no header of its own goes on
    from there, and is given that header again."""
    header = header if header is not None else [None]
    from pdfplumber.table import Table

    from pgrag.ingest.formats.pdf import layout_markdown

    tables = []
    for found in page.find_tables():
        # (extracted from the table's own area: extract() tests every char of its page
        # against every row, so a page of prose around a table would cost it more)
        table = Table(page.crop(found.bbox, strict=False), found.cells)
        rows = [[_cell(c) for c in row] for row in table.extract()]
        rows = [row for row in rows if any(row)]
        if len(rows) >= 2 and max(len(r) for r in rows) >= 2:
            tables.append((found.bbox, rows))
        budget.check("reading the PDF's tables")
    if not tables:
        header[0] = None
        return None
    tables.sort(key=lambda t: (t[0][1], t[0][0]))
    carried, header[0] = header[0], None
    boxes = [bbox for bbox, _ in tables]
    outside = page.filter(lambda obj: not _inside(obj, boxes))

    def text(top: float, bottom: float) -> str:
        band = outside.filter(lambda obj: top <= (obj["top"] + obj["bottom"]) / 2 < bottom)
        return layout_markdown(band.extract_text(layout=True) or "")

    parts: list[str] = []
    above = 0.0
    for n, ((_, top, _, bottom), rows) in enumerate(tables):
        if top > above:
            parts.append(text(above, top))
        lines, own = _markdown(rows)
        width = max(len(r) for r in rows)
        if own is None and n == 0 and carried is not None and len(carried) == width:
            if top < page.height / 4:  # (a table that goes on from the previous page)
                lines[:0] = ["| " + " | ".join(carried) + " |", "|" + " --- |" * width]
                own = carried
        header[0] = own
        parts.append("\n".join(lines))
        parts.append(text(max(top, above), bottom))  # (text beside the table)
        above = max(above, bottom)
    parts.append(text(above, float("inf")))
    return "\n\n".join(p for p in parts if p.strip())


def _inside(obj: dict[str, Any], boxes: list[tuple[float, float, float, float]]) -> bool:
    x = (obj["x0"] + obj["x1"]) / 2
    y = (obj["top"] + obj["bottom"]) / 2
    return any(b[0] <= x <= b[2] and b[1] <= y <= b[3] for b in boxes)


_SPACE = re.compile(r"\s+")


def _cell(value: str | None) -> str:
    """A cell's text on one line, its pipes escaped (a wrapped cell's lines joined)."""
    return _SPACE.sub(" ", (value or "").replace("\x00", "")).strip().replace("|", "\\|")


def _markdown(rows: list[list[str]]) -> tuple[list[str], list[str] | None]:
    """A table's Markdown lines, and its header row when its first row reads as one."""
    from pgrag.ingest.formats.pdf import reads_as_header

    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    if reads_as_header([c for c in rows[0] if c]) and any(rows[0]):
        lines.insert(1, "|" + " --- |" * width)
        return lines, rows[0]
    return lines, None


@contextmanager
def _quiet() -> Iterator[None]:
    """pdfminer logs what it cannot parse; a page's failure ends in its layout text instead."""
    import logging

    logger = logging.getLogger("pdfminer")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)
