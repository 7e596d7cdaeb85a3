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


def test_pdf_pages_and_table_rows(tmp_path: Path) -> None:
    doc = load_one(write_pdf(tmp_path / "report.pdf"))
    assert doc.format == "pdf" and doc.title == "Annual report"
    assert doc.pages is not None and len(doc.pages) == 2
    assert "board approved a dividend" in doc.pages[0]
    rows = doc.pages[1].splitlines()
    assert "| Region | Revenue | Growth |" in rows and "| South | 80 | 12% |" in rows
    assert doc.metadata["pages"] == 2


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
    assert isinstance(item, InputError) and "run OCR" in str(item)


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
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01")
    [(_, item)] = list(load_path(path))
    assert isinstance(item, InputError) and "a binary file (type '.jpg')" in str(item)


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
