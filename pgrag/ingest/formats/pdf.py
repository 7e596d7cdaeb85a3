"""PDF: one text per page with pypdf, so each chunk knows its page (chunks never span pages);
a table's row stays on one line. Read an object at a time, never whole."""

from __future__ import annotations

import hashlib
import logging
import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile, file_metadata, name_title, source_of
from pgrag.ingest.formats._base import Sample, one_line

NAME = "pdf"
LABEL = "PDF"
SUFFIXES = (".pdf",)
ORDER = 100
MARKDOWN = True  # (for table rows: a page's lines never become headings)
BINARY = True

MAX_PDF_BYTES = 2 * 1024 * 1024 * 1024


def detect(sample: Sample) -> bool:
    """Starts with %PDF-, whatever its name; a file named .pdf that does not is refused."""
    if sample.head.lstrip(b"\xef\xbb\xbf \t\r\n")[:5] == b"%PDF-":
        return True
    if sample.known == NAME:
        raise InputError("is named .pdf but does not start like a PDF (%PDF-); corrupt or misnamed")
    return False


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    yield str(path), _load(path, fh)


def _load(path: Path, fh: BinaryIO) -> LoadedFile:
    st = path.stat()
    if st.st_size > MAX_PDF_BYTES:
        raise InputError(f"file is {st.st_size} bytes, over the {MAX_PDF_BYTES}-byte PDF limit")
    digest = hashlib.sha256()
    fh.seek(0)
    for block in iter(lambda: fh.read(1 << 20), b""):
        digest.update(block)
    fh.seek(0)
    with budget.file_budget():
        pages, title = pdf_pages(fh, path)
        scanned = [k for k, page in enumerate(pages) if not page.strip()]
        if scanned:
            pages = _ocr(path, pages, scanned)
    pages = [p.replace("\r\n", "\n").replace("\r", "\n") for p in pages]
    return LoadedFile(
        label=str(path),
        source=source_of(path),
        format=NAME,
        text="\n\n".join(pages),
        title=title or name_title(path),
        content_hash=digest.hexdigest(),
        metadata={
            **file_metadata(path, NAME, st.st_size, st.st_mtime),
            "pages": len(pages),
            **({"ocr_pages": [k + 1 for k in scanned]} if scanned else {}),
        },
        pages=tuple(pages),
        markdown=MARKDOWN,
    )


def pdf_pages(stream: IO[bytes], path: Path | None = None) -> tuple[list[str], str | None]:
    """(text of each page, the document's title) of a PDF, read from an open file: pypdf
    reads the objects it needs from it, not the whole file into memory. With the file's
    ``path``, ruled tables are read by pdfplumber (pgrag.ingest.formats._pdf_tables)."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    from pgrag.ingest.formats._pdf_tables import RuledTables

    try:
        with _quiet_pypdf(), RuledTables(path) as ruled:
            reader = PdfReader(stream)
            if reader.is_encrypted and not reader.decrypt(""):
                raise InputError("is an encrypted PDF; decrypt it first (e.g. `qpdf --decrypt`)")
            pages = []
            for k, page in enumerate(reader.pages):
                tables = ruled.page(k)
                pages.append(tables if tables is not None else _page_text(page))
                budget.check("reading the PDF's pages")
            meta = reader.metadata
        title = str(meta.title).replace("\x00", "").strip() if meta and meta.title else None
    except InputError:
        raise
    except PdfReadError as err:
        raise InputError(f"cannot be read as a PDF ({one_line(err)}); it may be corrupt") from err
    except Exception as err:  # pypdf raises many types on malformed files
        raise InputError(
            f"cannot be read as a PDF ({type(err).__name__}: {one_line(err)}); it may be corrupt"
        ) from err
    return pages, title


def _ocr(path: Path, pages: list[str], scanned: list[int]) -> list[str]:
    """The pages without a text layer read by OCR (pgrag.ingest.ocr), when it is installed;
    without it, a PDF with no text layer at all is refused, and one with some is read as it is
    (its pages without text stay empty)."""
    from pgrag.ingest import ocr

    why = ocr.missing()
    if why is not None:
        if len(scanned) == len(pages):
            raise InputError(f"has no text layer (a scanned PDF?); to read it by OCR, {ocr.HINT}")
        return pages
    import pypdfium2

    try:
        document = pypdfium2.PdfDocument(str(path))
    except Exception as err:  # (pypdf read it; pdfium may still refuse it)
        raise InputError(f"cannot be rendered for OCR ({one_line(err)})") from err
    out = list(pages)
    try:
        for k in scanned:
            budget.check("reading scanned pages by OCR")
            out[k] = ocr.pdf_page_text(document, k)
    finally:
        document.close()
    if not any(p.strip() for p in out):
        raise InputError("has no text layer, and OCR found no text on its pages")
    return out


@contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """pypdf logs what it repairs ("EOF marker not found", "Ignoring wrong pointing object")
    and warns through the warnings module: a file's problem is reported once, as the
    InputError its reading ends in, not as stray lines before it."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


_COLUMN_GAP = re.compile(r" {4,}")


def _page_text(page: Any) -> str:
    """A page's text in reading order, a table row per line as ``| a | b |`` (pypdf's layout
    mode keeps a row's cells on one line, columns apart; plain mode gives one cell a line)."""
    try:
        raw = page.extract_text(extraction_mode="layout") or ""
    except Exception:  # layout mode is the fussier one; plain text is still worth having
        raw = page.extract_text() or ""
    return layout_markdown(raw)


def layout_markdown(raw: str) -> str:
    """Text laid out by position (columns apart) as Markdown: a line whose parts stand four
    or more spaces apart is a table row, a header row marked under runs of them; no line
    becomes a heading."""
    lines: list[str] = []
    cells: list[int] = []  # each line's number of cells (0: not a table row)
    for line in raw.replace("\x00", "").splitlines():
        line = line.strip()
        if not line and lines and not lines[-1]:
            continue  # (runs of blank lines: one is enough)
        if _COLUMN_GAP.search(line):
            parts = _COLUMN_GAP.split(line)
            line = "| " + " | ".join(p.replace("|", "\\|") for p in parts) + " |"
            cells.append(len(parts))
        else:
            line = re.sub(r" {2,}", " ", line)
            cells.append(0)
        if line.startswith("#"):
            line = "\\" + line  # chunked as Markdown (for the rows): never a heading
        lines.append(line)
    return "\n".join(_mark_headers(lines, cells)).strip()


_NUMERIC_CELL = re.compile(r"[\d\s.,:%+\-\u2212$\u20ac\u00a3()]+")


def _mark_headers(lines: list[str], cells: list[int]) -> list[str]:
    """Under the first row of each run of at least three table rows with the same number of
    cells, a Markdown delimiter row, when that first row reads as a header (no cell of only
    figures, none over five words): the chunker then repeats it in every chunk of a table."""
    out: list[str] = []
    k = 0
    while k < len(lines):
        end = k
        while end < len(lines) and cells[end] and cells[end] == cells[k]:
            end += 1
        if end - k >= 3:
            first = [c.strip() for c in re.split(r"(?<!\\)\|", lines[k])[1:-1]]
            out.append(lines[k])
            if reads_as_header(first):
                out.append("|" + " --- |" * cells[k])
            out.extend(lines[k + 1 : end])
            k = end
        else:
            out.append(lines[k])
            k += 1
    return out


def reads_as_header(cells: list[str]) -> bool:
    """Whether a table's first row reads as its header: short labels, none only figures (two
    columns of prose make rows of long cells; a table's continuation starts with data)."""
    return not any(_NUMERIC_CELL.fullmatch(c) or len(c.split()) > 5 for c in cells)
