"""Word documents (DOCX), read with python-docx (the ``office`` extra): the body in order,
headings (styles Heading 1-9, and Title) as Markdown headings, so they become each chunk's
section path; list paragraphs as list items; each table as a Markdown table whose first row
is its header, repeated in every chunk of a long table. Content controls and tracked
insertions read as the text they hold; tracked deletions are left out. The text of a text
box or shape follows the paragraph it is anchored in, once (Word stores it twice, for new
and for old readers).

After the body, each under a top-level heading of its own (so that no body section's path
takes them in): "Footnotes" and "Endnotes" (each note also marked where the body refers to
it, as ``[^1]`` and ``[^e1]``), "Comments" (each after its author's name), and "Headers and
footers" (every section's, each distinct one once; a first-page or even-page one only where
the document shows it). The document's title is its core property, else its Title
paragraph, else the file name.

Not read: images, charts, equations, and which text a comment is on. A Word 97-2003 .doc (not
a ZIP archive) is refused with a line saying to convert it."""

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
SUFFIXES = (".docx", ".docm", ".dotx", ".dotm")  # (macros are not run)
ORDER = 50
BINARY = True

_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Word 97-2003, Excel 97-2003, PowerPoint 97-2003
_HEADING = re.compile(r"heading\s*([1-9])", re.IGNORECASE)

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_ALTERNATE = "{http://schemas.openxmlformats.org/markup-compatibility/2006}AlternateContent"
_P, _TBL, _R, _T, _BR, _TXBX, _TYPE, _ID, _VAL = (
    _W + t for t in ("p", "tbl", "r", "t", "br", "txbxContent", "type", "id", "val")
)
_FOOTNOTE, _ENDNOTE = _W + "footnoteReference", _W + "endnoteReference"
# What holds paragraphs and tables, or a paragraph's runs, and is read through: content
# controls, custom XML, tracked insertions and moves, hyperlinks, simple fields (a tracked
# deletion, w:del or w:moveFrom, is not).
_BLOCK_HOLDERS = frozenset(_W + t for t in ("sdt", "sdtContent", "customXml", "ins", "moveTo"))
_RUN_HOLDERS = _BLOCK_HOLDERS | {
    _W + t for t in ("hyperlink", "smartTag", "fldSimple", "dir", "bdo")
}
_RUN_TEXT = {_W + "tab": "\t", _W + "ptab": "\t", _W + "cr": "\n", _W + "noBreakHyphen": "-"}
_NOT_NOTES = ("separator", "continuationSeparator", "continuationNotice")


def detect(sample: Sample) -> bool:
    """A ZIP archive holding word/document.xml, whatever its name; a file named .docx that is
    not is refused (an older binary file with a line saying to convert it), unless it is
    another office file, which its own module reads."""
    return _office.claims(sample, NAME, _OLE2, "a Word 97-2003 document (.doc)")


def read(
    path: Path, fh: BinaryIO, options: Mapping[str, Any]
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    # (Every XML part, the notes and comments this module parses itself included, is within
    # the archive's XML limit checked here.)
    _office.check_archive(path, "Word", xml_limit=True)
    docx = _office.library("docx", "Word (DOCX)", "python-docx")
    with _office.reading("a Word document"):
        text, title = _Reader(_document(docx, fh)).markdown()
    yield str(path), _office.loaded(path, fh, NAME, text, title)


# Word's main parts besides a document's (.docx): macro-enabled (.docm), template (.dotx) and
# macro-enabled template (.dotm); python-docx's Document() refuses them, its parts read them.
_WORD_MAINS = (
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
)


def _document(docx: Any, fh: BinaryIO) -> Any:
    from docx.opc.part import PartFactory
    from docx.package import Package
    from docx.parts.document import DocumentPart

    for content_type in _WORD_MAINS:
        PartFactory.part_type_for.setdefault(content_type, DocumentPart)
    part = Package.open(fh).main_document_part
    if not isinstance(part, DocumentPart):
        raise InputError(f"is not a Word document (its main part is {part.content_type})")
    return part.document


class _Reader:
    """One document's Markdown: its body, then its notes, comments, headers and footers."""

    def __init__(self, document: Any) -> None:
        self.document = document
        self.out = _office.Text()
        self.title: str | None = (document.core_properties.title or "").strip() or None
        self.styles: dict[str | None, str] = {}
        self.blocks = 0
        # The notes' labels, in the order the text refers to them: (kind, id) -> label.
        self.notes: dict[tuple[str, str], str] = {}
        self.counted = {"": 0, "e": 0}

    def markdown(self) -> tuple[str, str | None]:
        body = self.document.element.body
        self.add_blocks(body, self.out, in_body=True)
        for kind, name, heading in (("", "footnotes", "Footnotes"), ("e", "endnotes", "Endnotes")):
            root = self.part(name)
            if root is not None:
                self.add_notes(kind, root, heading)
        comments = self.part("comments")
        if comments is not None:
            self.add_comments(comments)
        self.add_headers_and_footers()
        return self.out.joined(), self.title

    # -- the body, and any other run of paragraphs and tables ---------------------------------

    def add_blocks(self, container: Any, out: _office.Text, in_body: bool = False) -> None:
        """The paragraphs and tables of ``container`` (the body, a note, a text box...) as
        Markdown blocks, each followed by the text boxes anchored in it. Headings are the
        body's only (a text box's "heading" is a paragraph)."""
        from docx.table import Table

        for element in _blocks(container):
            self.tick()
            if element.tag == _TBL:
                cells = Table(element, self.document).rows
                rows = _office.markdown_table([self.cell(c._tc) for c in r.cells] for r in cells)
                if rows:
                    out.add("\n".join(rows))
            else:
                self.add_paragraph(element, out, in_body)
            if element.find(".//" + _TXBX) is not None:
                for box in _boxes(element):
                    self.add_blocks(box, out)

    def tick(self) -> None:
        """One more block, note, comment or header read: within the file's time budget?"""
        self.blocks += 1
        if self.blocks % 200 == 0:
            budget.check("reading the Word document")

    def add_paragraph(self, p: Any, out: _office.Text, in_body: bool) -> None:
        text = self.text(p).strip()
        if not text:
            return
        style = self.style(p)
        level = _HEADING.fullmatch(style) if in_body else None
        if in_body and style.lower() == "title":
            self.title = self.title or text
            out.add(_office.heading(1, text))
        elif level:
            out.add(_office.heading(int(level.group(1)), text))
        elif style.lower().startswith("list") or p.find(f"{_W}pPr/{_W}numPr") is not None:
            out.add("- " + " ".join(_office.paragraph(text).split("\n")))
        else:
            out.add(_office.paragraph(text))

    def text(self, element: Any) -> str:
        """A paragraph's text: its runs' (with those within hyperlinks, content controls,
        fields and tracked insertions), a note's reference as its label; not its text boxes'."""
        pieces: list[str] = []
        self._runs(element, pieces)
        return "".join(pieces)

    def _runs(self, element: Any, pieces: list[str]) -> None:
        for child in element:
            tag = child.tag
            if tag == _R:
                for item in child:
                    kind = item.tag
                    if kind == _T:
                        pieces.append(item.text or "")
                    elif kind in _RUN_TEXT:
                        pieces.append(_RUN_TEXT[kind])
                    elif kind == _BR:
                        pieces.append(
                            "\n" if item.get(_TYPE, "textWrapping") == "textWrapping" else ""
                        )
                    elif kind == _FOOTNOTE or kind == _ENDNOTE:
                        pieces.append(
                            f"[^{self.label('' if kind == _FOOTNOTE else 'e', item.get(_ID))}]"
                        )
            elif tag in _RUN_HOLDERS:
                self._runs(child, pieces)
            elif tag == _ALTERNATE and len(child):
                self._runs(child[0], pieces)  # its first choice (the others say the same)

    def cell(self, tc: Any) -> str:
        """A table cell's text: its paragraphs', and a table within it on one line."""
        lines = []
        for element in _blocks(tc):
            if element.tag == _TBL:
                cells = (
                    tc
                    for tr in element.iterchildren(_W + "tr")
                    for tc in tr.iterchildren(_W + "tc")
                )
                lines.append(" ".join(self.cell(tc) for tc in cells))
            else:
                lines.append(self.text(element))
        return "\n".join(lines)

    def style(self, p: Any) -> str:
        """A paragraph style's name ("Heading 1", whatever its ID in a localised Word)."""
        from docx.enum.style import WD_STYLE_TYPE

        found = p.find(f"{_W}pPr/{_W}pStyle")
        style_id = found.get(_VAL) if found is not None else None
        if style_id not in self.styles:
            style = self.document.part.get_style(style_id, WD_STYLE_TYPE.PARAGRAPH)
            self.styles[style_id] = ((style.name if style is not None else "") or "").strip()
        return self.styles[style_id]

    # -- notes, comments, headers and footers ----------------------------------------------

    def label(self, kind: str, note_id: str | None) -> str:
        key = (kind, note_id or "")
        if key not in self.notes:
            self.counted[kind] += 1
            self.notes[key] = f"{kind}{self.counted[kind]}"
        return self.notes[key]

    def part(self, name: str) -> Any | None:
        """The root element of the document's footnotes, endnotes or comments part, if it
        has one (python-docx parses comments; the others are parsed here, safely)."""
        from docx.opc.constants import RELATIONSHIP_TYPE as RT

        reltype = {"footnotes": RT.FOOTNOTES, "endnotes": RT.ENDNOTES, "comments": RT.COMMENTS}
        for rel in self.document.part.rels.values():
            if rel.reltype == reltype[name] and not rel.is_external:
                part = rel.target_part
                element = getattr(part, "element", None)
                return element if element is not None else _parse(part.blob)
        return None

    def add_notes(self, kind: str, root: Any, heading: str) -> None:
        notes = {
            n.get(_ID): n
            for n in root.iterchildren(_W + ("footnote" if kind == "" else "endnote"))
            if n.get(_TYPE, "normal") not in _NOT_NOTES
        }
        # Those the text refers to in its order, then any it does not.
        for note_id in notes:
            self.label(kind, note_id)
        ordered = sorted(
            ((label, note_id) for (k, note_id), label in self.notes.items() if k == kind),
            key=lambda pair: int(pair[0].lstrip("e")),
        )
        blocks = _office.Text()
        for label, note_id in ordered:
            self.tick()
            note = notes.get(note_id)
            if note is None:
                continue
            body = _office.Text()
            self.add_blocks(note, body)
            if body:
                blocks.add(f"[^{label}]: " + " ".join(b.replace("\n", " ") for b in body.blocks))
        self.section(heading, blocks)

    def add_comments(self, root: Any) -> None:
        blocks = _office.Text()
        for comment in root.iterchildren(_W + "comment"):
            self.tick()
            body = _office.Text()
            self.add_blocks(comment, body)
            if body:
                author = " ".join((comment.get(_W + "author") or "").split())
                text = "\n\n".join(body.blocks)
                blocks.add(f"{_office.paragraph(author)}: {text}" if author else text)
        self.section("Comments", blocks)

    def add_headers_and_footers(self) -> None:
        even = self.document.settings.odd_and_even_pages_header_footer
        seen: set[str] = set()
        blocks = _office.Text()
        for section in self.document.sections:
            first = section.different_first_page_header_footer
            for part in (
                section.header,
                *([section.first_page_header] if first else []),
                *([section.even_page_header] if even else []),
                section.footer,
                *([section.first_page_footer] if first else []),
                *([section.even_page_footer] if even else []),
            ):
                self.tick()
                element = _shown(part)
                if element is None:
                    continue
                text = _office.Text()
                self.add_blocks(element, text)
                joined = text.joined()
                if text and joined not in seen:
                    seen.add(joined)
                    for block in text.blocks:
                        blocks.add(block)
        self.section("Headers and footers", blocks)

    def section(self, heading: str, blocks: _office.Text) -> None:
        """``blocks`` under a top-level heading (none if there are none)."""
        if blocks:
            self.out.add(_office.heading(1, heading))
            for block in blocks.blocks:
                self.out.add(block)


def _shown(part: Any) -> Any | None:
    """The XML of the header or footer a section shows: its own, or (linked to the previous
    section, as Word's are unless told otherwise) the nearest earlier section's of that kind,
    which may be one that section did not show; None where no section defines one. (Not
    python-docx's ``_element``, which adds an empty definition where there is none.)"""
    seen = 0
    while part is not None and seen < 10_000:
        if part._has_definition:
            return part._definition.element
        part = part._prior_headerfooter
        seen += 1
    return None


def _blocks(container: Any) -> Iterator[Any]:
    """The paragraphs and tables of ``container``, in order (those within content controls,
    custom XML and tracked insertions too)."""
    for child in container:
        if child.tag == _P or child.tag == _TBL:
            yield child
        elif child.tag in _BLOCK_HOLDERS:
            yield from _blocks(child)


def _boxes(element: Any) -> Iterator[Any]:
    """The text boxes (w:txbxContent) within ``element``, outermost only, in order; of an
    mc:AlternateContent (a shape for new readers, the same one for old), only the first
    choice that holds one."""
    for child in element:
        tag = child.tag
        if tag == _TXBX:
            yield child
        elif tag == _ALTERNATE:
            choice = next((c for c in child if c.find(".//" + _TXBX) is not None), None)
            if choice is not None:
                yield from _boxes(choice)
        elif isinstance(tag, str):
            yield from _boxes(child)


def _parse(xml: bytes) -> Any:
    """An XML part python-docx did not parse, with its parser's element classes (so that
    python-docx reads its tables) and without entities, network or huge trees."""
    from docx.oxml.parser import element_class_lookup
    from lxml import etree

    parser = etree.XMLParser(
        remove_blank_text=True, resolve_entities=False, no_network=True, huge_tree=False
    )
    parser.set_element_class_lookup(element_class_lookup)
    return etree.fromstring(xml, parser)
