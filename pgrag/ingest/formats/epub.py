"""E-books (EPUB), read with EbookLib (the ``office`` extra): the chapters in reading order (the
spine), each turned into Markdown as HTML pages are (headings kept, navigation dropped), under
a top-level heading of its own unless it opens with one (its table-of-contents label, else its
page title, else "Chapter N"), so every chunk's section path names its chapter. The title is
the book's (Dublin Core title), else the file name; its author and language are kept in the
metadata. Images are not read; an encrypted (DRM) book's chapters read as nothing, and it is
refused as having no text."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample, one_line

NAME = "epub"
LABEL = "EPUB"
SUFFIXES = (".epub",)
ORDER = 53
BINARY = True


def detect(sample: Sample) -> bool:
    """A ZIP archive with META-INF/container.xml and a package (.opf) file, whatever its name;
    one named .epub that is not is refused."""
    if (
        sample.is_zip
        and "META-INF/container.xml" in sample.members
        and any(m.lower().endswith(".opf") for m in sample.members)
    ):
        return True
    if sample.known == NAME:
        raise InputError("is named .epub but is not an EPUB book (no META-INF/container.xml)")
    return False


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    _office.check_archive(path, "EPUB")
    try:
        from ebooklib import epub
    except ImportError as err:
        raise _office.missing("EPUB", "EbookLib") from err
    with budget.file_budget():
        try:
            with warnings.catch_warnings():  # (EbookLib warns about options it will change,
                warnings.simplefilter("ignore")  # BeautifulSoup about XHTML read as HTML)
                book = epub.read_epub(fh, {"ignore_ncx": True})
                text, chapters = _markdown(book)
            title = _first(book, "title")
            extra: dict[str, object] = {"chapters": chapters}
            for key in ("creator", "language"):
                if (value := _first(book, key)) is not None:
                    extra["author" if key == "creator" else key] = value
        except InputError:
            raise
        except Exception as err:  # EbookLib, zipfile and lxml raise many types for bad books
            raise InputError(
                f"cannot be read as an EPUB book ({type(err).__name__}: {one_line(err)});"
                " it may be damaged"
            ) from err
    yield str(path), _office.loaded(path, fh, NAME, text, title, extra)


def _first(book: Any, key: str) -> str | None:
    found = book.get_metadata("DC", key)
    value = str(found[0][0]).strip() if found and found[0] and found[0][0] else ""
    return value or None


def _markdown(book: Any) -> tuple[str, int]:
    from pgrag.ingest.formats.html import html_to_markdown

    labels: dict[str, str] = {}
    stack = list(book.toc)
    while stack:  # the table of contents: links, and (section, links) pairs, nested
        entry = stack.pop()
        if isinstance(entry, tuple | list):
            stack.extend(entry[1] if len(entry) > 1 else [])
            entry = entry[0]
        href = getattr(entry, "href", None)
        if href and getattr(entry, "title", None):
            labels.setdefault(href.split("#")[0], str(entry.title).strip())
    blocks: list[str] = []
    for idref, _linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None:
            continue
        budget.check("reading the book's chapters")
        html = item.get_content().decode("utf-8", errors="replace")
        text, page_title = html_to_markdown(html)
        text = text.strip()
        if not text:
            continue
        if not text.startswith("# "):  # (a chapter that opens with a subheading is under it)
            label = labels.get(item.get_name()) or page_title or f"Chapter {len(blocks) + 1}"
            text = _office.heading(1, label) + "\n\n" + text
        blocks.append(text)
    return "\n\n".join(blocks) + "\n", len(blocks)
