"""Formats (issue 5): HTML, PDF and JSON Lines read into documents, the format decided by the
content; real files written by the tests (PDFs by reportlab), ingested into a real database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgrag
from pgrag.db.connect import Database
from pgrag.errors import InputError
from pgrag.ingest import formats, loaders
from pgrag.ingest.formats import sniff
from pgrag.ingest.formats.html import html_to_markdown
from pgrag.ingest.formats.jsonl import JsonlFields
from pgrag.ingest.loaders import LoadedFile, load_path

HTML = """<!DOCTYPE html>
<html><head><title>Billing help</title><script>var tracking = "refund-script";</script>
<style>.x { color: red }</style></head>
<body>
<header class="site-header"><a href="/">Home</a> <a href="/about">About the navigation</a></header>
<nav><ul><li><a href="/">Home</a></li><li>Pricing menu</li></ul></nav>
<main><article>
<header><h1>Refunds</h1></header>
<p>Refunds are processed within <b>5 business days</b>.</p>
<h2>Digital goods</h2>
<ul><li>Ebooks: no refund after download.</li><li>Courses: refund within 14 days.</li></ul>
<table><tr><th>Plan</th><th>Window</th></tr><tr><td>Monthly</td><td>14 days</td></tr>
<tr><td>Annual</td><td>30 days</td></tr></table>
<p># not a heading</p>
</article></main>
<div class="cookie-banner">We use cookies</div>
<footer>Copyright 2026 ACME</footer>
</body></html>
"""


def _one(path: Path, fields: JsonlFields | None = None) -> LoadedFile:
    items = list(load_path(path, fields))
    assert len(items) == 1, items
    label, item = items[0]
    assert label == str(path)
    assert isinstance(item, LoadedFile), item
    return item


def _pdf(path: Path, title: str = "Annual report") -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Table

    styles = getSampleStyleSheet()
    doc = SimpleDocTemplate(str(path), pagesize=A4, title=title)
    doc.build(
        [
            Paragraph("Annual report", styles["Title"]),
            Paragraph(
                "Revenue grew in every region. The board approved a dividend.", styles["Normal"]
            ),
            PageBreak(),
            Paragraph("Regional results", styles["Heading2"]),
            Table(
                [["Region", "Revenue", "Growth"], ["North", "120", "5%"], ["South", "80", "12%"]]
            ),
            Paragraph("Refunds fell by a third after the new policy.", styles["Normal"]),
        ]
    )
    return path


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


def test_html_sections_become_the_chunks_section_path(db: Database, tmp_path: Path) -> None:
    page = tmp_path / "help.html"
    page.write_text(HTML)
    report = pgrag.ingest(db, [page], collection="web")
    assert not report.failed and report.count("added") == 1
    rows = db.conn.execute(
        "SELECT c.section, c.content FROM pgrag.chunks c ORDER BY c.ordinal"
    ).fetchall()
    sections = {r[0] for r in rows}
    assert "Refunds > Digital goods" in sections, sections
    digital = " ".join(r[1] for r in rows if r[0] == "Refunds > Digital goods")
    assert "| Annual | 30 days |" in digital and "Ebooks" in digital
    hits = pgrag.search(db, "digital goods ebooks refund", collection="web", mode="keyword")
    assert hits[0].section == "Refunds > Digital goods"
    assert hits[0].metadata["format"] == "html"


# -- PDF -------------------------------------------------------------------------------------


def test_pdf_pages_and_table_rows(tmp_path: Path) -> None:
    doc = _one(_pdf(tmp_path / "report.pdf"))
    assert doc.format == "pdf" and doc.title == "Annual report"
    assert doc.pages is not None and len(doc.pages) == 2
    assert "board approved a dividend" in doc.pages[0]
    rows = doc.pages[1].splitlines()
    assert "| Region | Revenue | Growth |" in rows and "| South | 80 | 12% |" in rows
    assert doc.metadata["pages"] == 2


def test_pdf_chunks_record_their_page(db: Database, tmp_path: Path) -> None:
    _pdf(tmp_path / "report.pdf")
    report = pgrag.ingest(db, [tmp_path], collection="pdfs")
    assert not report.failed and report.chunks_written >= 2
    pages = db.conn.execute(
        "SELECT c.page, c.content FROM pgrag.chunks c ORDER BY c.ordinal"
    ).fetchall()
    assert {p for p, _ in pages} == {1, 2}
    assert all(("dividend" in text) == (page == 1) for page, text in pages)
    assert any("| North | 120 | 5% |" in text for page, text in pages if page == 2)


def test_a_pdf_is_recognised_by_its_content_not_its_name(tmp_path: Path) -> None:
    named_txt = tmp_path / "report.txt"
    named_txt.write_bytes(_pdf(tmp_path / "r.pdf").read_bytes())
    assert _one(named_txt).format == "pdf"
    html_as_txt = tmp_path / "page.txt"
    html_as_txt.write_text(HTML)
    assert _one(html_as_txt).format == "html"


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
    assert isinstance(item, InputError) and "run OCR" in str(item)


# -- JSON Lines ------------------------------------------------------------------------------


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_jsonl_records_become_documents_with_metadata(tmp_path: Path) -> None:
    path = _jsonl(
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
    path = _jsonl(
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


def test_jsonl_ingest_updates_one_record_and_removes_a_vanished_one(
    db: Database, tmp_path: Path
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "faq.jsonl"
    records = [
        {"id": f"r{i}", "text": f"Record {i} explains topic number {i} in detail."}
        for i in range(5)
    ]
    _jsonl(path, records)
    first = pgrag.ingest(db, [folder], collection="faq")
    assert first.count("added") == 5 and not first.failed
    records[2]["text"] = "Record 2 now explains something else entirely."
    del records[4]
    _jsonl(path, records)
    second = pgrag.ingest(db, [folder], collection="faq", prune=True)
    assert (second.count("updated"), second.count("unchanged"), second.count("deleted")) == (
        1,
        3,
        1,
    )
    sources = {r[0] for r in db.conn.execute("SELECT source FROM pgrag.documents").fetchall()}
    assert sources == {f"{path.resolve()}#r{i}" for i in range(4)}


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
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")
    [(_, item)] = list(load_path(path))
    assert isinstance(item, InputError) and "a binary file (type '.jpg')" in str(item)


def test_search_sees_pdf_html_and_jsonl_together(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    _pdf(folder / "report.pdf")
    (folder / "help.html").write_text(HTML)
    _jsonl(folder / "faq.jsonl", [{"id": "a", "text": "The Lisbon office opens at 8:00."}])
    report = pgrag.ingest(db, [folder], collection="mixed")
    assert report.count("added") == 3 and not report.failed
    with psycopg.connect(db.dsn) as conn:
        formats = {
            r[0]
            for r in conn.execute(
                "SELECT metadata ->> 'format' FROM pgrag.search_v4('mixed', 'refund', k => 20)"
            ).fetchall()
        }
    assert formats == {"pdf", "html"}


def test_a_run_of_html_comments_is_sniffed_at_once() -> None:
    # Review finding: the pattern for leading comments took exponential time (30 comments
    # stalled an ingest for minutes); 200 would never finish.
    comments = b"<!-- note -->\n" * 200
    assert sniff(comments + b"# Title\n", ".md") == "markdown"
    assert sniff(comments + b"<!DOCTYPE html><html><body></body></html>", ".txt") == "html"


def test_nul_in_a_json_lines_title_or_metadata_fails_that_line_only(tmp_path: Path) -> None:
    path = _jsonl(
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


def test_deeply_nested_html_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.html"
    path.write_text("<html><body>" + "<div>" * 3000 + "x" + "</div>" * 3000 + "</body></html>")
    [(_, item)] = list(load_path(path))
    assert isinstance(item, InputError) and "nested too deeply" in str(item)


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


def test_a_json_lines_metadata_change_is_stored_without_embedding(
    db: Database, tmp_path: Path
) -> None:
    path = _jsonl(tmp_path / "m.jsonl", [{"id": "a", "text": "Refunds take 5 days.", "team": "x"}])
    pgrag.ingest(db, [path], collection="meta")
    _jsonl(path, [{"id": "a", "text": "Refunds take 5 days.", "team": "y"}])
    report = pgrag.ingest(db, [path], collection="meta")
    assert report.count("updated") == 1 and report.chunks_embedded == 0
    hits = pgrag.search(db, "refunds", collection="meta", filter={"team": "y"}, mode="keyword")
    assert len(hits) == 1


# -- the registry: a format is one module ----------------------------------------------------

RST_FORMAT = '''
"""reStructuredText, for the test: a title underlined with ===, read as plain text."""

import re

NAME = "rst"
LABEL = "reStructuredText"
SUFFIXES = (".rst",)
ORDER = 350

_TITLE = re.compile(r"^(\\S.*)\\n=+\\s*$", re.M)


def detect(sample):
    return sample.known == NAME


def convert(text):
    match = _TITLE.search(text)
    return text, match.group(1).strip() if match else None
'''


def _package_with(tmp_path: Path, name: str, modules: dict[str, str]) -> str:
    """A package of format modules on sys.path: copies of pgrag's, plus ``modules``."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module in Path(formats.__file__).parent.glob("*.py"):
        if module.name != "__init__.py":
            (package / module.name).write_text(module.read_text())
    for module_name, source in modules.items():
        (package / f"{module_name}.py").write_text(source)
    return name


def test_the_shipped_formats_in_the_order_they_are_asked() -> None:
    assert [f.name for f in formats.formats()] == ["pdf", "html", "jsonl", "markdown", "text"]
    assert dict(formats.suffixes()) == {
        ".pdf": "pdf",
        ".html": "html",
        ".htm": "html",
        ".xhtml": "html",
        ".jsonl": "jsonl",
        ".ndjson": "jsonl",
        ".md": "markdown",
        ".markdown": "markdown",
        ".txt": "text",
        ".text": "text",
    }


def test_a_format_module_dropped_into_the_package_is_read_with_no_other_edit(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    package = _package_with(tmp_path, "formats_with_rst", {"rst": RST_FORMAT})
    monkeypatch.setattr(formats, "PACKAGE", package)
    folder = tmp_path / "docs"
    folder.mkdir()
    guide = folder / "guide.rst"
    guide.write_text("Refund guide\n============\n\nRefunds take five business days.\n")
    (folder / "notes.md").write_text("# Notes\n\nNothing about money.\n")
    assert sniff(guide.read_bytes(), ".rst") == "rst"
    assert sniff(b"# Title\n", ".md") == "markdown"  # the others still there
    doc = _one(guide)
    assert (doc.format, doc.title, doc.markdown) == ("rst", "Refund guide", False)
    empty = tmp_path / "empty"
    empty.mkdir()
    [(_, problem)] = list(loaders.find_files([empty]))
    assert problem is not None and ".rst" in str(problem)  # the walk's suffixes include it
    report = pgrag.ingest(db, [folder], collection="rst")
    assert report.count("added") == 2 and not report.failed
    hits = pgrag.search(db, "refunds business days", collection="rst", k=1, mode="keyword")
    assert hits[0].title == "Refund guide" and hits[0].metadata["format"] == "rst"
    again = pgrag.ingest(db, [folder], collection="rst", prune=True)  # walked: never pruned
    assert again.count("unchanged") == 2 and not again.count("deleted")


def test_a_module_that_is_not_a_format_or_claims_a_taken_suffix_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = _package_with(tmp_path, "formats_broken", {"half": 'NAME = "half"\n'})
    with pytest.raises(TypeError, match="formats_broken.half is not a format module"):
        formats.discover(broken)
    twice = RST_FORMAT.replace('(".rst",)', '(".rst", ".md")')
    clash = _package_with(tmp_path, "formats_clash", {"rst": twice})
    with pytest.raises(TypeError, match="claims '.md'"):
        formats.discover(clash)
