"""Formats (issue 5): HTML, PDF and JSON Lines read into documents, the format decided by the
content, and the registry of format modules; real files written by the tests (PDFs by
reportlab). Ingesting them into a real database: tests/integration/test_formats.py.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pgrag.errors import ConfigError, InputError
from pgrag.ingest import formats
from pgrag.ingest.formats import sniff
from pgrag.ingest.formats.html import html_to_markdown
from pgrag.ingest.formats.jsonl import JsonlFields
from pgrag.ingest.formats.pdf import pdf_pages
from pgrag.ingest.loaders import LoadedFile, load_path
from tests.samples import HTML, RST_FORMAT, load_one, package_with, write_jsonl, write_pdf

# -- HTML ------------------------------------------------------------------------------------


def test_html_keeps_headings_lists_and_tables_and_drops_boilerplate() -> None:
    text, title = html_to_markdown(HTML)
    assert title == "Billing help"
    lines = text.splitlines()
    assert "# Refunds" in lines and "## Digital goods" in lines
    assert "- Ebooks: no refund after download." in lines
    assert "| Plan | Window |" in lines and "| Monthly | 14 days |" in lines
    assert "Refunds are processed within 5 business days." in lines
    assert "\\# not a heading" in lines  # text, not a heading
    for gone in ("Home", "navigation", "Pricing menu", "cookies", "Copyright", "tracking", "color"):
        assert gone not in text, gone


# -- PDF -------------------------------------------------------------------------------------


def test_an_html_tables_header_cells_get_a_delimiter_row() -> None:
    # (so the chunker repeats the header in every chunk of a long table)
    text, _ = html_to_markdown(
        "<html><body><table><thead><tr><th>Plan</th><th>Window</th></tr></thead>"
        "<tr><td>Annual</td><td>30 days</td></tr></table>"
        "<table><tr><th>Plan</th><td>Monthly</td></tr><tr><td>x</td><td>y</td></tr></table>"
        "</body></html>"
    )
    assert "| Plan | Window |\n| --- | --- |\n| Annual | 30 days |" in text
    # a row with data cells beside its th is not a header row
    assert "| Plan | Monthly |\n| x | y |" in text


def test_pdf_pages_and_table_rows(tmp_path: Path) -> None:
    doc = load_one(write_pdf(tmp_path / "report.pdf"))
    assert doc.format == "pdf" and doc.title == "Annual report"
    assert doc.pages is not None and len(doc.pages) == 2
    assert "board approved a dividend" in doc.pages[0]
    rows = doc.pages[1].splitlines()
    assert "| Region | Revenue | Growth |" in rows and "| South | 80 | 12% |" in rows
    assert doc.metadata["pages"] == 2


def test_a_pdf_tables_first_row_of_words_is_its_header() -> None:
    from pgrag.ingest.formats.pdf import _mark_headers

    rows = ["| Region | Sales | Growth |", "| North | 120 | 5% |", "| South | 95 | -2% |"]
    text = ["Results", *rows, "After the table.", "| 2025 | 2026 |", "| 1 | 2 |", "| 3 | 4 |"]
    cells = [0, 3, 3, 3, 0, 2, 2, 2]
    assert (
        _mark_headers(text, cells)
        == [
            "Results",
            rows[0],
            "| --- | --- | --- |",  # words: a header, repeated in each chunk of the table
            *rows[1:],
            "After the table.",
            "| 2025 | 2026 |",  # figures only: not taken for a header
            "| 1 | 2 |",
            "| 3 | 4 |",
        ]
    )
    # two rows are not enough to tell a table from a layout
    assert _mark_headers(rows[:2], [3, 3]) == rows[:2]


LONG_CELL = "Heat resistant ceramic coating for exhaust manifolds and turbo housings"


def write_ruled_pdf(path: Path, rows: list[list[object]], lines: str = "GRID") -> Path:
    """A page of prose, a table ruled by reportlab (a full GRID, a BOX, or only LINEBELOW
    rules under its rows) and prose after it."""
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table

    body = getSampleStyleSheet()["BodyText"]
    cells = [[Paragraph(c, body) if c == LONG_CELL else c for c in row] for row in rows]
    table = Table(cells, colWidths=[150] + [70] * (len(rows[0]) - 1))
    table.setStyle([(lines, (0, 0), (-1, -1), 0.5, colors.black)])
    flow = [Paragraph("Before the table.", body), table, Paragraph("After the table.", body)]
    SimpleDocTemplate(str(path), pagesize=A4).build(flow)
    return path


PARTS = [
    ["Part", "Code", "Price"],
    [LONG_CELL, "XK-1", "12.50"],
    ["Gasket", "XK-2", ""],
    ["Bolt", "", "0.40"],
]


def test_a_ruled_pdf_tables_wrapped_and_empty_cells_stay_in_their_rows(tmp_path: Path) -> None:
    # Issue 20: pypdf's layout text breaks a row whose cell wraps, and shifts the cells of a
    # row with an empty one; a table bounded by lines is read by pdfplumber instead.
    path = write_ruled_pdf(tmp_path / "parts.pdf", PARTS)
    page = load_one(path).pages[0]  # type: ignore[index]
    lines = page.splitlines()
    header = lines.index("| Part | Code | Price |")
    assert lines[header + 1] == "| --- | --- | --- |"
    assert f"| {LONG_CELL} | XK-1 | 12.50 |" in lines
    assert "| Gasket | XK-2 |  |" in lines and "| Bolt |  | 0.40 |" in lines
    assert page.index("Before the table.") < header < page.index("After the table.")
    # the layout text alone (the file's path not given: no pdfplumber) loses those rows
    with path.open("rb") as fh:
        [layout], _ = pdf_pages(fh)
    assert f"| {LONG_CELL} | XK-1 | 12.50 |" not in layout.splitlines()
    assert "| Gasket | XK-2 |  |" not in layout.splitlines()


def test_a_framed_paragraph_is_not_a_table(tmp_path: Path) -> None:
    path = write_ruled_pdf(tmp_path / "note.pdf", [["Remember to sign the form."]], "BOX")
    page = load_one(path).pages[0]  # type: ignore[index]
    assert "Remember to sign the form." in page.splitlines()
    assert "|" not in page


def test_a_page_of_horizontal_rules_is_not_searched_for_ruled_tables(tmp_path: Path) -> None:
    import pypdfium2

    from pgrag.ingest.formats._pdf_tables import _ruled

    rules = write_ruled_pdf(tmp_path / "rules.pdf", PARTS, "LINEBELOW")
    grid = write_ruled_pdf(tmp_path / "grid.pdf", PARTS)
    assert [_ruled(pypdfium2.PdfDocument(str(p)), 0) for p in (rules, grid)] == [False, True]


@pytest.mark.parametrize("how", ["no pdfplumber", "too many drawings", "pdfminer fails"])
def test_ruled_tables_fall_back_to_the_layout_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    import sys

    from pgrag.ingest.formats import _pdf_tables as pdf_tables

    path = write_ruled_pdf(tmp_path / "parts.pdf", PARTS)
    with path.open("rb") as fh:
        [layout], _ = pdf_pages(fh)
    if how == "no pdfplumber":
        monkeypatch.setitem(sys.modules, "pdfplumber", None)
    elif how == "too many drawings":  # (a plot or a map: not searched for tables)
        monkeypatch.setattr(pdf_tables, "MAX_PATHS", 3)
    else:

        def broken(page: object) -> None:
            raise ValueError("pdfminer cannot lay this page out")

        monkeypatch.setattr(pdf_tables, "page_markdown", broken)
    doc = load_one(path)
    assert doc.pages == (layout,) and "Before the table." in layout


def test_a_spent_time_budget_is_not_taken_for_a_page_pdfplumber_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag.ingest.formats import _pdf_tables as pdf_tables

    def spent(page: object, header: object = None) -> None:
        raise InputError("took longer than its budget")

    monkeypatch.setattr(pdf_tables, "page_markdown", spent)
    [(_, item)] = list(load_path(write_ruled_pdf(tmp_path / "parts.pdf", PARTS)))
    assert isinstance(item, InputError) and "budget" in str(item)


def test_a_corrupt_pdf_is_one_error_and_nothing_else(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 16: pypdf logged "EOF marker not found" before the real error.
    good = write_pdf(tmp_path / "good.pdf").read_bytes()
    path = tmp_path / "cut.pdf"
    path.write_bytes(good[: len(good) // 2])
    with caplog.at_level(logging.DEBUG):
        [(_, item)] = list(load_path(path))
    assert isinstance(item, InputError) and "cannot be read as a PDF" in str(item)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pypdf")] == []


def test_a_pdf_is_recognised_by_its_content_not_its_name(tmp_path: Path) -> None:
    named_txt = tmp_path / "report.txt"
    named_txt.write_bytes(write_pdf(tmp_path / "r.pdf").read_bytes())
    assert load_one(named_txt).format == "pdf"
    html_as_txt = tmp_path / "page.txt"
    html_as_txt.write_text(HTML)
    assert load_one(html_as_txt).format == "html"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage", "cannot be read as a PDF"),
        (b"This is not a PDF at all", "is named .pdf but does not start like a PDF"),
    ],
)
def test_broken_pdfs_are_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(content)
    [(label, item)] = list(load_path(path))
    assert isinstance(item, InputError) and message in str(item), item
    assert "\n" not in str(item)


def test_a_pdf_without_text_says_to_ocr_it(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    path = tmp_path / "scan.pdf"
    c = canvas.Canvas(str(path))
    c.rect(100, 100, 200, 200)  # a drawing, no text
    c.showPage()
    c.save()
    [(_, item)] = list(load_path(path))
    # (OCR is installed for the tests: tests/unit/test_ocr.py has the case without it)
    assert isinstance(item, InputError)
    assert str(item) == "has no text layer, and OCR found no text on its pages"


# -- JSON Lines ------------------------------------------------------------------------------


def test_jsonl_records_become_documents_with_metadata(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "faq.jsonl",
        [
            {"_id": "q1", "title": "Refunds", "text": "Refunds take 5 days.", "team": "billing"},
            {"_id": "q2", "title": "Badges", "text": "Guests wear a badge.", "team": "office"},
        ],
    )
    items = list(load_path(path))
    docs = [item for _, item in items]
    assert all(isinstance(d, LoadedFile) for d in docs)
    first = docs[0]
    assert isinstance(first, LoadedFile)
    assert first.source == f"{path.resolve()}#q1" and first.title == "Refunds"
    assert first.format == "jsonl" and first.text == "Refunds take 5 days."
    assert first.metadata["team"] == "billing" and first.metadata["record"] == "q1"
    assert [label for label, _ in items] == [f"{path}:1", f"{path}:2"]


def test_jsonl_fields_are_configurable_and_bad_lines_are_reported(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "rows.data",  # no known suffix: the content says JSON Lines
        [
            {"key": 7, "body": "Passwords rotate yearly.", "name": "Security", "x": 1, "y": 2},
            "not json",
            [1, 2],
            {"key": 8, "name": "Empty"},
            {"key": 7, "body": "Same id again."},
        ],
    )
    fields = JsonlFields(text="body", title="name", id="key", metadata=("x",))
    items = list(load_path(path, fields))
    ok = [i for _, i in items if isinstance(i, LoadedFile)]
    bad = {label: str(i) for label, i in items if isinstance(i, InputError)}
    assert len(ok) == 1 and ok[0].source.endswith("#7") and ok[0].title == "Security"
    assert ok[0].metadata == {"x": 1, "path": str(path), "record": "7", "format": "jsonl"}
    assert "is not valid JSON" in bad[f"{path}:2"]
    assert "is not a JSON object" in bad[f"{path}:3"]
    assert "no text in field 'body'" in bad[f"{path}:4"]
    assert "repeats id '7' of line 1" in bad[f"{path}:5"]


# -- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "suffix", "fmt"),
    [
        (b"%PDF-1.4\n...", ".txt", "pdf"),
        (b"<!doctype html><html><body><p>x</p></body></html>", ".md", "html"),
        (b"<div><p>a</p><p>b</p></div>", "", "html"),
        (b'<p align="center"><img src="logo.png"></p>\n\n# Title\n<div>x</div>', ".md", "markdown"),
        (b'{"text": "a"}\n{"text": "b"}\n', "", "jsonl"),
        (b'{"text": "a"}\n', ".txt", "text"),
        (b"# Title\n\nBody\n", "", "markdown"),
        (b"# Title\n\nBody\n", ".txt", "text"),
        (b"Just words.\n", "", "text"),
    ],
)
def test_sniff(head: bytes, suffix: str, fmt: str) -> None:
    assert sniff(head, suffix) == fmt


def test_a_binary_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "tool.exe"
    path.write_bytes(b"MZ\x90\x00\x03\x00\x00\x00\x04\x00")
    [(_, item)] = list(load_path(path))
    assert isinstance(item, InputError) and "a binary file (type '.exe')" in str(item)
    # an image is read by OCR: a damaged one is one line
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")
    [(_, item)] = list(load_path(photo))
    assert isinstance(item, InputError) and str(item).startswith("cannot be read as an image (")


def test_a_run_of_html_comments_is_sniffed_at_once() -> None:
    # Review finding: the pattern for leading comments took exponential time (30 comments
    # stalled an ingest for minutes); 200 would never finish.
    comments = b"<!-- note -->\n" * 200
    assert sniff(comments + b"# Title\n", ".md") == "markdown"
    assert sniff(comments + b"<!DOCTYPE html><html><body></body></html>", ".txt") == "html"


def test_nul_in_a_json_lines_title_or_metadata_fails_that_line_only(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "n.jsonl",
        [
            {"id": "a", "text": "fine", "title": "a\u0000b"},
            {"id": "b", "text": "fine", "note": "x\u0000y"},
            {"id": "c", "text": "fine too"},
        ],
    )
    items = list(load_path(path))
    bad = [str(i) for _, i in items if isinstance(i, InputError)]
    assert len(bad) == 2 and all("NUL character" in b for b in bad)
    assert [i.source.endswith("#c") for _, i in items if isinstance(i, LoadedFile)] == [True]


def test_deeply_nested_html_is_read_whatever_its_depth(tmp_path: Path) -> None:
    # Issue 16: "nested too deeply (over ~900 levels)" fired at 500 levels, and the time grew
    # with the square of the depth. Now there is no depth limit: 100,000 levels are read.
    path = tmp_path / "deep.html"
    depth = 100_000
    path.write_text(
        "<html><body>" + "<div>" * depth + "the deepest words" + "</div>" * depth
        + "<p>after</p></body></html>"
    )  # fmt: skip
    doc = load_one(path)
    assert doc.text.split("\n\n") == ["the deepest words", "after"]


def test_deeply_nested_lists_and_tables_keep_their_text_once() -> None:
    depth = 3000
    lists = "<ul><li>item" * depth + "</li></ul>" * depth
    tables = "<table><tr><td>cell" * depth + "</td></tr></table>" * depth
    text, _ = html_to_markdown(f"<html><body>{lists}<hr>{tables}<p>end</p></body></html>")
    first, second, last = text.split("\n\n")
    assert first == "- item" + " - item" * (depth - 1)  # one line: nested items inline
    assert second.startswith("| cell cell") and second.count("cell") == depth
    assert second.endswith(" |") and "\n" not in second and last == "end"


def test_a_file_over_its_time_budget_is_refused_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.html"
    path.write_text("<html><body>" + "<p>words</p>" * 50_000 + "</body></html>")
    monkeypatch.setenv("PGRAG_INGEST_FILE_SECONDS", "0.000001")
    [(label, item)] = list(load_path(path))
    assert label == str(path) and isinstance(item, InputError)
    message = str(item)
    assert "over 1e-06 s" in message and "PGRAG_INGEST_FILE_SECONDS" in message
    assert "\n" not in message
    monkeypatch.setenv("PGRAG_INGEST_FILE_SECONDS", "off")
    assert load_one(path).text.count("words") == 50_000


def test_a_bad_file_budget_setting_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "page.html"
    path.write_text(HTML)
    monkeypatch.setenv("PGRAG_INGEST_FILE_SECONDS", "soon")
    with pytest.raises(ConfigError, match="PGRAG_INGEST_FILE_SECONDS='soon'"):
        list(load_path(path))


def test_boilerplate_removal_never_drops_the_page_itself() -> None:
    page = (
        '<html><body><div class="layout has-sidebar"><h1>Guide</h1><p>The main text of the'
        ' guide, long enough to be most of the page.</p></div><div class="sidebar">Links'
        "</div><section><header><h2>Part two</h2></header><p>Second part.</p></section>"
        "</body></html>"
    )
    text, _ = html_to_markdown(page)
    assert "# Guide" in text and "main text of the guide" in text
    assert "## Part two" in text and "Links" not in text


# -- the registry: a format is one module ----------------------------------------------------


def test_the_shipped_formats_in_the_order_they_are_asked() -> None:
    assert [f.name for f in formats.formats()] == [
        "image", "docx", "xlsx", "pptx", "epub", "parquet", "pdf", "email", "html", "jsonl", "csv",
        "markdown", "text",
    ]  # fmt: skip
    assert dict(formats.suffixes()) == {
        ".docx": "docx",
        ".docm": "docx",
        ".dotx": "docx",
        ".dotm": "docx",
        ".xlsx": "xlsx",
        ".xlsm": "xlsx",
        ".xltx": "xlsx",
        ".xltm": "xlsx",
        ".pptx": "pptx",
        ".pptm": "pptx",
        ".ppsx": "pptx",
        ".ppsm": "pptx",
        ".potx": "pptx",
        ".potm": "pptx",
        ".epub": "epub",
        ".parquet": "parquet",
        ".pdf": "pdf",
        ".eml": "email",
        ".mbox": "email",
        ".html": "html",
        ".htm": "html",
        ".xhtml": "html",
        ".jsonl": "jsonl",
        ".ndjson": "jsonl",
        ".csv": "csv",
        ".tsv": "csv",
        ".md": "markdown",
        ".markdown": "markdown",
        ".txt": "text",
        ".text": "text",
    }


def test_a_module_that_is_not_a_format_or_claims_a_taken_suffix_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = package_with(tmp_path, "formats_broken", {"half": 'NAME = "half"\n'})
    with pytest.raises(TypeError, match="formats_broken.half is not a format module"):
        formats.discover(broken)
    twice = RST_FORMAT.replace('(".rst",)', '(".rst", ".md")')
    clash = package_with(tmp_path, "formats_clash", {"rst": twice})
    with pytest.raises(TypeError, match="claims '.md'"):
        formats.discover(clash)


def test_parquet_rows_become_documents_with_metadata_and_vectors(tmp_path: Path) -> None:
    # One document per row, as JSON Lines records: text, title and id fields, the other columns
    # as metadata (values JSON has no type for as text), a list column as the row's vector.
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "kb.parquet"
    table = pa.table(
        {
            "id": ["a", "b", "c", "a"],
            "title": ["Alpha", None, "Gamma", "Again"],
            "text": ["Alpha text.", "Beta text.", " ", "A repeated id."],
            "when": [dt.datetime(2024, 1, 2, 3, 4, 5)] * 4,
            "blob": [b"\x00\x01"] * 4,
            "score": [0.5, float("nan"), 1.0, 2.0],
            "embedding": [[0.6, 0.8], None, [1.0, 0.0], [0.0, 1.0]],
        }
    )
    pq.write_table(table, path, row_group_size=2)  # two row groups: read batch by batch
    out = list(load_path(path))
    assert [label for label, _ in out] == [f"{path}:{n}" for n in (1, 2, 3, 4)]
    a, b = out[0][1], out[1][1]
    assert isinstance(a, LoadedFile) and isinstance(b, LoadedFile)
    assert (a.source, a.title, a.text, a.vector) == (
        f"{path.resolve()}#a",
        "Alpha",
        "Alpha text.",
        (0.6, 0.8),
    )
    assert a.metadata == {
        "when": "2024-01-02T03:04:05", "blob": "0001", "score": 0.5, "path": str(path),
        "record": "a", "format": "parquet",
    }  # fmt: skip
    assert (b.title, b.vector, b.metadata["score"]) == ("kb b", None, None)  # NaN: no JSON
    assert str(out[2][1]).startswith("has no text in field 'text'")
    assert str(out[3][1]) == "repeats id 'a' of row 1"
    # The same options as JSON Lines name the fields.
    fields = JsonlFields(text="title", title=None, id=None, embedding=None)
    rows = [d for _, d in load_path(path, fields) if isinstance(d, LoadedFile)]
    assert [(d.source.rsplit("#", 1)[1], d.text, d.vector) for d in rows] == [
        ("a", "Alpha", None),
        ("c", "Gamma", None),
    ]  # fmt: skip (row 2 has no title, row 4 repeats id a)
    pq.write_table(table.drop(["id"]), path)  # without ids, a row is its number
    rows = [d for _, d in load_path(path) if isinstance(d, LoadedFile)]
    assert [d.source.rsplit("#", 1)[1] for d in rows] == ["row-1", "row-2", "row-4"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"PAR1 and then nothing a Parquet reader wants",
         "is not a readable Parquet file (Parquet magic bytes not found in footer."),
        (b"plain text named as Parquet", "is named .parquet but does not start with PAR1"),
    ],
)  # fmt: skip
def test_a_broken_parquet_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(content)
    [(label, err)] = list(load_path(path))
    assert label == str(path) and isinstance(err, InputError) and str(err).startswith(message)
    assert "\n" not in str(err)


def test_a_parquet_file_without_the_text_column_says_which_columns_it_has(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": ["x"], "id": [1]}), path)
    [(_, err)] = list(load_path(path))
    assert str(err) == (
        "has no column 'text' (it has body, id); name the text column with --jsonl-text"
    )


def test_without_pyarrow_a_parquet_file_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails
    [(_, err)] = list(load_path(path))
    assert str(err) == (
        "is a Parquet file, and reading one needs pyarrow: pip install 'pgrag[parquet]'"
    )


def test_metadata_json_cannot_hold_fails_its_record_only(tmp_path: Path) -> None:
    # PostgreSQL's jsonb refuses NaN; before this check one such record failed its whole batch
    # with "invalid input syntax for type json".
    import datetime as dt

    from pgrag.ingest.document import from_text

    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"text": "one", "score": NaN}\n{"text": "two", "score": -Infinity}\n'
        '{"text": "three", "score": 1.5}\n'
    )
    out = [item for _, item in load_path(path)]
    assert [str(e) for e in out[:2]] == [
        "has NaN or infinity in metadata field 'score'; JSON (and PostgreSQL's jsonb) has"
        " neither: use null or a string"
    ] * 2
    assert isinstance(out[2], LoadedFile) and out[2].metadata["score"] == 1.5
    with pytest.raises(InputError, match=r"^has a value JSON cannot hold in metadata field 'on'"):
        from_text("s", "text", metadata={"on": dt.date(2024, 1, 1)})
    assert from_text("s", "text", metadata={"on": "2024-01-01", "n": None}).metadata["n"] is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"source": "a\x00b"}, "has a NUL character in its source;"),
        ({"text": "lone \udc80"}, "has a text that is not valid Unicode (a lone surrogate)"),
        ({"title": "t\ud800"}, "has a title that is not valid Unicode (a lone surrogate)"),
        ({"metadata": {1: "a", "b": 2}}, "has metadata whose field names are not all strings;"),
        ({"metadata": {"\ud800": 1}}, "has a metadata field name that is not valid Unicode"),
        ({"metadata": {"k": "a\udc80"}},
         "has text that is not valid Unicode (a lone surrogate) in metadata field 'k'"),
        ({"metadata": {"k": {1: "a", "b": 2}}}, "has a value JSON cannot hold in metadata"),
        ({"metadata": {"k": {1, 2}}}, "has a value JSON cannot hold in metadata field 'k'"),
    ],
)  # fmt: skip
def test_from_text_refuses_what_postgresql_cannot_store_with_one_line(
    kwargs: dict[str, object], message: str
) -> None:
    # Each used to escape as a UnicodeEncodeError or TypeError (or fail its whole batch in the
    # database), not as the record's one-line InputError.
    from pgrag.ingest.document import from_text

    args: dict[str, object] = {"source": "s", "text": "Some text.", **kwargs}
    with pytest.raises(InputError) as err:
        from_text(**args)  # type: ignore[arg-type]
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_parquet_value_python_cannot_hold_fails_its_row_only(tmp_path: Path) -> None:
    # pyarrow converts a batch of rows at once; a timestamp beyond Python's datetime used to
    # fail the rest of the file. Only its row fails now.
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "ts.parquet"
    when = [1_000] * 1500
    when[1200] = 300_000_000_000_000  # year ~11,000
    pq.write_table(
        pa.table(
            {
                "text": [f"Row {i}." for i in range(1500)],
                "when": pa.array(when, type=pa.timestamp("ms")),
            }
        ),
        path,
    )
    out = list(load_path(path))
    assert len(out) == 1500
    failed = [(label, str(item)) for label, item in out if isinstance(item, InputError)]
    assert len(failed) == 1 and failed[0][0] == f"{path}:1201"
    assert failed[0][1].startswith("has a value that cannot be read (")


def test_a_parquet_text_column_that_is_not_text_is_one_line_for_the_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"text": list(range(3000))}), path)
    [(label, err)] = list(load_path(path))
    assert label == str(path) and str(err) == (
        "has a column 'text' of type int64, not text; name the text column with --jsonl-text"
    )


def test_a_parquet_vector_column_named_on_purpose_must_exist(tmp_path: Path) -> None:
    # --jsonl-embedding vec on a file without "vec" would embed every row without a word.
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "v.parquet"
    pq.write_table(pa.table({"text": ["a"], "vector": [[0.1, 0.2]]}), path)
    [(_, err)] = list(load_path(path, JsonlFields(embedding="vec")))
    assert str(err) == (
        "has no column 'vec' (it has text, vector); name the vector column with"
        " --jsonl-embedding, or '' for none"
    )
    # The default name may be absent (rows are then embedded), and '' reads no vector.
    assert isinstance(list(load_path(path))[0][1], LoadedFile)
    assert list(load_path(path, JsonlFields(embedding=None)))[0][1].vector is None  # type: ignore[union-attr]


@pytest.mark.parametrize("repeated", [False, True])
def test_a_ruled_table_going_on_over_pages_keeps_its_header_on_each(
    tmp_path: Path, repeated: bool
) -> None:
    # A hostile review: a table continued on the next page without its header row there
    # gave chunks of rows with no column names.
    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.platypus import SimpleDocTemplate, Table

    rows = [["Code", "City", "Stock"]] + [[f"P-{i:04d}", "Kyiv", str(i)] for i in range(150)]
    table = Table(rows, repeatRows=1 if repeated else 0)
    table.setStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)])
    path = tmp_path / "stock.pdf"
    SimpleDocTemplate(str(path), pagesize=A4).build([table])
    pages = load_one(path).pages
    assert pages is not None and len(pages) >= 3
    for page in pages:
        lines = page.splitlines()
        assert lines[:2] == ["| Code | City | Stock |", "| --- | --- | --- |"], lines[:3]
        assert lines.count("| Code | City | Stock |") == 1
    assert "| P-0149 | Kyiv | 149 |" in pages[-1].splitlines()


OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # (the container of Office 97-2003 files)


@pytest.mark.parametrize(
    ("name", "head", "said"),
    [
        ("old.doc", OLE2 + b"\0" * 600, "a Word 97-2003 file (.doc)"),
        ("old.xls", OLE2 + b"\0" * 600, "--convert-to xlsx FILE"),
        ("notes.odt", None, "an OpenDocument text"),
    ],
)
def test_office_files_pgrag_does_not_read_say_how_to_convert_them(
    tmp_path: Path, name: str, head: bytes | None, said: str
) -> None:
    import zipfile

    path = tmp_path / name
    if head is not None:
        path.write_bytes(head)
    else:  # (an ODF package: its uncompressed mimetype member first, as LibreOffice writes)
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
            z.writestr("content.xml", "<office:document-content/>" + "\0")
            z.writestr("META-INF/manifest.xml", "<manifest/>")
    [(_, item)] = list(load_path(path))
    assert isinstance(item, InputError) and said in str(item), item
    assert "libreoffice --headless --convert-to" in str(item)
