"""Word documents (DOCX), read with python-docx (the ``office`` extra): the body in order,
headings (styles Heading 1-9, and Title) as Markdown headings, so they become each chunk's
section path; list paragraphs as list items; each table as a Markdown table whose first row
is its header, repeated in every chunk of a long table. The document's title is its core
property, else its Title paragraph, else the file name.

Not read: headers, footers, footnotes, comments, text boxes and images. A Word 97-2003 .doc
(not a ZIP archive) is refused with a line saying to convert it."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.formats import _office
from pgrag.ingest.formats._base import Sample

NAME = "docx"
LABEL = "Word (DOCX)"
SUFFIXES = (".docx",)
ORDER = 50
BINARY = True

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Word 97-2003, Excel 97-2003, PowerPoint 97-2003
_HEADING = re.compile(r"heading\s*([1-9])", re.IGNORECASE)


def detect(sample: Sample) -> bool:
    """A ZIP archive holding word/document.xml, whatever its name; a file named .docx that is
    not is refused (an older binary file with a line saying to convert it), unless it is
    another office file, which its own module reads."""
    return _office.claims(sample, NAME, _OLE2, "a Word 97-2003 document (.doc)")


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    _office.check_archive(path, "Word", xml_limit=True)
    docx = _office.library("docx", "Word (DOCX)", "python-docx")
    with _office.reading("a Word document"):
        text, title = _markdown(docx.Document(fh))
    yield str(path), _office.loaded(path, fh, NAME, text, title)


def _markdown(document: Any) -> tuple[str, str | None]:
    from docx.table import Table

    blocks = _office.Text()
    title = (document.core_properties.title or "").strip() or None
    for n, item in enumerate(document.iter_inner_content()):
        if n % 200 == 0:
            budget.check("reading the Word document")
        if isinstance(item, Table):
            rows = _office.markdown_table([c.text for c in row.cells] for row in item.rows)
            if rows:
                blocks.add("\n".join(rows))
            continue
        text = item.text.strip()
        if not text:
            continue
        style = (item.style.name if item.style is not None else "") or ""
        level = _HEADING.fullmatch(style.strip())
        if style.strip().lower() == "title":
            title = title or text
            blocks.add(_office.heading(1, text))
        elif level:
            blocks.add(_office.heading(int(level.group(1)), text))
        elif style.lower().startswith("list") or _numbered(item):
            blocks.add("- " + " ".join(_office.paragraph(text).split("\n")))
        else:
            blocks.add(_office.paragraph(text))
    return blocks.joined(), title


def _numbered(paragraph: Any) -> bool:
    ppr = paragraph._p.pPr
    return ppr is not None and ppr.numPr is not None
