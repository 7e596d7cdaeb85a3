"""Documents as people really have them (issue 20): a Word document's text boxes, footnotes,
endnotes, comments, headers and footers, tracked changes and content controls, and an Excel
formula never calculated. The files are written here by python-docx and openpyxl, the parts
those libraries cannot write added as the XML Word itself writes; each is read, and ingested
into a real database and searched."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pgrag
from pgrag.db.connect import Database
from tests.samples import load_one

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NS = (
    f'xmlns:w="{W}"'
    ' xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
    ' xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"'
    ' xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
    ' xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"'
    ' xmlns:v="urn:schemas-microsoft-com:vml"'
)
FOOTNOTE = "The Rotterdam depot closes at 15:00 on Fridays."
SECOND_FOOTNOTE = "Prices exclude the harbour surcharge."
ENDNOTE = "Source: the 2025 carrier survey by Maritime Data Group."
NOTICE = "Notes continue overleaf."
BOX = "Call the night desk on extension 4417 for urgent pallets."
COMMENT = "Check the lead time with the Gdansk warehouse."
HEADER = "Acme Logistics internal handbook"
FOOTER = "Appendix pages are not controlled copies."
HIDDEN_HEADER = "First page header that Word does not show"


def _xml(fragment: str) -> Any:
    from docx.oxml.parser import parse_xml

    return parse_xml(fragment)


def _run(inner: str) -> Any:
    return _xml(f"<w:r {NS}>{inner}</w:r>")


def _text_box(text: str) -> Any:
    """A run holding a shape with a text box, as Word writes it: a DrawingML shape, and the
    same text box in VML for readers that do not know DrawingML."""
    content = f"<w:txbxContent><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:txbxContent>"
    return _run(
        "<mc:AlternateContent>"
        '<mc:Choice Requires="wps"><w:drawing><wp:anchor><a:graphic>'
        '<a:graphicData uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape">'
        f"<wps:wsp><wps:txbx>{content}</wps:txbx></wps:wsp>"
        "</a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>"
        f"<mc:Fallback><w:pict><v:shape><v:textbox>{content}</v:textbox></v:shape></w:pict>"
        "</mc:Fallback></mc:AlternateContent>"
    )


def _notes(doc: Any, kind: str, notes: dict[int, str], notice: str = "") -> None:
    """A footnotes or endnotes part, as Word writes it: its separators first."""
    from docx.opc.constants import CONTENT_TYPE as CT
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part

    parts = [
        f'<w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{kind}>',
        f'<w:{kind} w:type="continuationSeparator" w:id="0"><w:p><w:r>'
        f"<w:continuationSeparator/></w:r></w:p></w:{kind}>",
    ]
    if notice:
        parts.append(
            f'<w:{kind} w:type="continuationNotice" w:id="1"><w:p><w:r><w:t>{notice}</w:t>'
            f"</w:r></w:p></w:{kind}>"
        )
    for note_id, text in notes.items():
        parts.append(
            f'<w:{kind} w:id="{note_id}"><w:p><w:pPr><w:pStyle w:val="{kind.title()}Text"/>'
            f'</w:pPr><w:r><w:{kind}Ref/></w:r><w:r><w:t xml:space="preserve"> {text}</w:t>'
            f"</w:r></w:p></w:{kind}>"
        )
    xml = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f"<w:{kind}s {NS}>{''.join(parts)}</w:{kind}s>"
    )
    content_type = CT.WML_FOOTNOTES if kind == "footnote" else CT.WML_ENDNOTES
    reltype = RT.FOOTNOTES if kind == "footnote" else RT.ENDNOTES
    part = Part(PackURI(f"/word/{kind}s.xml"), content_type, xml.encode(), doc.part.package)
    doc.part.relate_to(part, reltype)


def _reference(paragraph: Any, kind: str, note_id: int) -> None:
    paragraph._p.append(_run(f'<w:{kind}Reference w:id="{note_id}"/>'))


def write_handbook(path: Path) -> Path:
    """A Word document with everything besides its body: three sections with the same
    header, a footer of its own in the second, a first-page header the document does not show,
    a text box, two footnotes (referred to in the other order than their IDs), an endnote,
    a comment."""
    import docx
    from docx.enum.section import WD_SECTION

    doc = docx.Document()
    doc.core_properties.title = "Depot handbook"
    doc.add_heading("Ordering", level=1)
    doc.add_paragraph("Orders are placed through the portal before noon.")
    anchor = doc.add_paragraph("Urgent pallets are handled overnight.")
    anchor._p.append(_text_box(BOX))
    doc.add_heading("Depots", level=1)
    depots = doc.add_paragraph("Every depot receives goods on weekdays.")
    _reference(depots, "footnote", 3)
    prices = doc.add_paragraph("Prices are quoted per pallet.")
    _reference(prices, "footnote", 2)
    _reference(prices, "endnote", 2)
    lead = doc.add_paragraph("Lead times are five working days.")
    doc.add_comment(lead.runs, text=COMMENT, author="Ana Silva", initials="AS")
    doc.add_section(WD_SECTION.NEW_PAGE)
    doc.add_heading("Appendix", level=1)
    doc.add_paragraph("The appendix lists the carriers.")
    doc.add_section(WD_SECTION.NEW_PAGE)
    doc.add_heading("Returns", level=1)
    doc.add_paragraph("Returns are collected on Mondays.")
    for n, section in enumerate(doc.sections):
        section.header.is_linked_to_previous = False  # a header of its own, the same text
        section.header.paragraphs[0].text = HEADER
        if n == 1:
            section.footer.is_linked_to_previous = False
            section.footer.paragraphs[0].text = FOOTER
    first = doc.sections[0].first_page_header  # defined, but "different first page" is off
    first.is_linked_to_previous = False
    first.paragraphs[0].text = HIDDEN_HEADER
    _notes(doc, "footnote", {2: SECOND_FOOTNOTE, 3: FOOTNOTE}, notice=NOTICE)
    _notes(doc, "endnote", {2: ENDNOTE})
    doc.save(str(path))
    return path


def _sections(db: Database) -> list[tuple[str, str]]:
    return db.conn.execute(
        "SELECT coalesce(c.section, ''), c.content FROM pgrag.chunks c ORDER BY c.ordinal"
    ).fetchall()


def test_notes_comments_text_boxes_and_headers_are_asked_about(
    db: Database, tmp_path: Path
) -> None:
    path = write_handbook(tmp_path / "depots.docx")
    report = pgrag.ingest(db, [path], collection="depots")
    assert report.count("added") == 1 and not report.failed, report.files
    rows = _sections(db)
    # Each part is a top-level section of its own, not within the body's last one.
    sections = {s for s, _ in rows}
    assert {"Footnotes", "Endnotes", "Comments", "Headers and footers"} <= sections, sections
    assert not any(s.startswith("Returns >") for s in sections), sections
    # an answer only in a footnote, one only in an endnote, one only in a comment
    hit = pgrag.search(db, "when does the Rotterdam depot close", collection="depots", k=3)[0]
    assert hit.section == "Footnotes" and f"[^1]: {FOOTNOTE}" in hit.text, hit
    hit = pgrag.search(db, "who ran the carrier survey", collection="depots", k=3)[0]
    assert hit.section == "Endnotes" and f"[^e1]: {ENDNOTE}" in hit.text, hit
    hit = pgrag.search(db, "Gdansk warehouse lead time", collection="depots", k=3)[0]
    assert hit.section == "Comments" and f"Ana Silva: {COMMENT}" in hit.text, hit
    # a text box's text: in the section of the paragraph it is anchored in
    hit = pgrag.search(db, "night desk extension", collection="depots", mode="keyword", k=3)[0]
    assert hit.section == "Ordering" and BOX in hit.text, hit


def test_a_text_box_is_read_once_after_its_paragraph(tmp_path: Path) -> None:
    text = load_one(write_handbook(tmp_path / "box.docx")).text
    assert text.count(BOX) == 1, text  # Word's DrawingML shape and its VML copy: one text
    anchor = text.index("Urgent pallets are handled overnight.")
    assert anchor < text.index(BOX) < text.index("# Depots")


def test_a_header_in_every_section_is_read_once(tmp_path: Path) -> None:
    text = load_one(write_handbook(tmp_path / "headers.docx")).text
    part = text[text.index("# Headers and footers") :]
    assert text.count(HEADER) == 1 and HEADER in part, text
    assert FOOTER in part
    assert HIDDEN_HEADER not in text  # a first-page header, but the first page is not different
    # Shown on its first page, it is read (and the default header still once).
    import docx

    doc = docx.Document(str(tmp_path / "headers.docx"))
    doc.sections[0].different_first_page_header_footer = True
    doc.save(str(tmp_path / "first.docx"))
    text = load_one(tmp_path / "first.docx").text
    assert text.count(HIDDEN_HEADER) == 1 and text.count(HEADER) == 1, text
    # A later section showing a first-page header of none of its own shows the nearest
    # earlier section's (linked to previous: Word's default), though that one hid it.
    doc = docx.Document(str(tmp_path / "headers.docx"))
    doc.sections[2].different_first_page_header_footer = True
    assert doc.sections[2].first_page_header.is_linked_to_previous
    doc.save(str(tmp_path / "later.docx"))
    text = load_one(tmp_path / "later.docx").text
    assert text.count(HIDDEN_HEADER) == 1, text


def test_notes_are_numbered_as_the_text_refers_to_them(tmp_path: Path) -> None:
    text = load_one(write_handbook(tmp_path / "notes.docx")).text
    # Footnote 3 is referred to first: it is [^1], wherever its ID puts it.
    assert "Every depot receives goods on weekdays.[^1]" in text
    assert "Prices are quoted per pallet.[^2][^e1]" in text
    notes = text[text.index("# Footnotes") : text.index("# Endnotes")]
    assert notes.index(f"[^1]: {FOOTNOTE}") < notes.index(f"[^2]: {SECOND_FOOTNOTE}"), notes
    assert NOTICE not in text  # a continuation notice is no note
    assert text.index("# Returns") < text.index("# Footnotes") < text.index("# Comments")


def test_tracked_changes_and_content_controls(tmp_path: Path) -> None:
    import docx

    doc = docx.Document()
    p = doc.add_paragraph("Deliveries arrive ")
    p._p.append(
        _xml(f'<w:ins {NS} w:id="1" w:author="Ana"><w:r><w:t>before seven</w:t></w:r></w:ins>')
    )
    p._p.append(
        _xml(
            f'<w:del {NS} w:id="2" w:author="Ana"><w:r><w:delText>after noon</w:delText></w:r>'
            "</w:del>"
        )
    )
    # A block content control (as Word's templates and cover pages hold them)
    doc.element.body.insert(
        0,
        _xml(
            f"<w:sdt {NS}><w:sdtPr/><w:sdtContent><w:p><w:r><w:t>Cover page: depot manual"
            "</w:t></w:r></w:p></w:sdtContent></w:sdt>"
        ),
    )
    doc.save(str(tmp_path / "tracked.docx"))
    text = load_one(tmp_path / "tracked.docx").text
    assert "Deliveries arrive before seven" in text
    assert "after noon" not in text
    assert text.startswith("Cover page: depot manual")


def _formulas(path: Path, saved: dict[str, tuple[str, str]]) -> Path:
    """A workbook written by openpyxl (no formula calculated), with the values (and value
    types) a spreadsheet would have saved for the cells ``saved`` names."""
    import re

    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Budget"
    sheet.append(["Item", "Cost"])
    for item, cost in (("Fuel", 120), ("Tolls", 30), ("Parking", 14)):
        sheet.append([item, cost])
    sheet.append(["Total", "=SUM(B2:B4)"])
    sheet.append(["Label", '=IF(B5>100,"","small")'])
    sheet.append(["Twice", "=B5*2"])
    book.save(str(path))
    written = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(written, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            for cell, (kind, value) in saved.items():
                data, n = re.subn(
                    rf'<c r="{cell}"><f>([^<]*)</f><v></v></c>'.encode(),
                    rf'<c r="{cell}"{kind}><f>\1</f><v>{value}</v></c>'.encode(),
                    data,
                )
                assert n == (info.filename == "xl/worksheets/sheet1.xml"), (cell, data)
            dst.writestr(info, data)
    written.replace(path)
    return path


def test_an_uncalculated_formula_reads_as_its_formula(db: Database, tmp_path: Path) -> None:
    from pgrag.ingest.formats import xlsx

    # Written by a library: no formula has a value; each reads as its formula.
    path = _formulas(tmp_path / "budget.xlsx", {})
    assert xlsx._uncalculated(path)
    text = load_one(path).text
    assert "| Total | =SUM(B2:B4) |" in text and "| Twice | =B5*2 |" in text, text
    # Saved by a spreadsheet: the values as saved, an empty string's too; not read twice.
    total, label, twice = ("B5", ("", "164")), ("B6", (' t="str"', "")), ("B7", ("", "328"))
    saved = _formulas(tmp_path / "saved.xlsx", dict([total, label, twice]))
    assert not xlsx._uncalculated(saved)
    text = load_one(saved).text
    assert "| Total | 164 |" in text and "| Twice | 328 |" in text and "=" not in text, text
    # Some calculated, some not: each cell its value, else its formula.
    mixed = _formulas(tmp_path / "mixed.xlsx", dict([total, label]))
    assert xlsx._uncalculated(mixed)
    text = load_one(mixed).text
    assert "| Total | 164 |" in text and "| Twice | =B5*2 |" in text, text
    report = pgrag.ingest(db, [path], collection="sheets")
    assert report.count("added") == 1, report.files
    hit = pgrag.search(db, "SUM", collection="sheets", mode="keyword", k=1)[0]
    assert "=SUM(B2:B4)" in hit.text and hit.section == "Budget", hit
