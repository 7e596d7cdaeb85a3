"""Formats (issue 5): HTML, PDF and JSON Lines read into documents, the format decided by the
content; real files written by the tests (PDFs by reportlab), ingested into a real database."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

import pgrag
from pgrag.db.connect import Database
from pgrag.ingest import formats, loaders
from pgrag.ingest.formats import sniff
from tests.samples import (
    HTML,
    LEASE,
    RST_FORMAT,
    load_one,
    package_with,
    scan_image,
    write_docx,
    write_eml,
    write_epub,
    write_jsonl,
    write_mbox,
    write_pdf,
    write_pptx,
    write_scanned_pdf,
    write_xlsx,
)


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


def test_pdf_chunks_record_their_page(db: Database, tmp_path: Path) -> None:
    write_pdf(tmp_path / "report.pdf")
    report = pgrag.ingest(db, [tmp_path], collection="pdfs")
    assert not report.failed and report.chunks_written >= 2
    pages = db.conn.execute(
        "SELECT c.page, c.content FROM pgrag.chunks c ORDER BY c.ordinal"
    ).fetchall()
    assert {p for p, _ in pages} == {1, 2}
    assert all(("dividend" in text) == (page == 1) for page, text in pages)
    assert any("| North | 120 | 5% |" in text for page, text in pages if page == 2)


# -- JSON Lines ------------------------------------------------------------------------------


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
    write_jsonl(path, records)
    first = pgrag.ingest(db, [folder], collection="faq")
    assert first.count("added") == 5 and not first.failed
    records[2]["text"] = "Record 2 now explains something else entirely."
    del records[4]
    write_jsonl(path, records)
    second = pgrag.ingest(db, [folder], collection="faq", prune=True)
    assert (second.count("updated"), second.count("unchanged"), second.count("deleted")) == (
        1,
        3,
        1,
    )
    sources = {r[0] for r in db.conn.execute("SELECT source FROM pgrag.documents").fetchall()}
    assert sources == {f"{path.resolve()}#r{i}" for i in range(4)}


def test_prune_removes_the_rows_of_a_parquet_file_gone_from_its_directory(
    db: Database, tmp_path: Path
) -> None:
    # (Found while adding mail: only JSON Lines records were matched to their file, so the rows
    # of a deleted Parquet file were never pruned.)
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "tables"
    folder.mkdir()
    for name in ("a", "b"):
        rows = {
            "id": [f"{name}1", f"{name}2"],
            "text": [f"Row one of {name}.", f"Row two of {name}."],
        }
        pq.write_table(pa.table(rows), folder / f"{name}.parquet")
    assert pgrag.ingest(db, [folder], collection="pq").count("added") == 4
    (folder / "b.parquet").unlink()
    report = pgrag.ingest(db, [folder], collection="pq", prune=True)
    assert (report.count("unchanged"), report.count("deleted")) == (2, 2), report.files
    sources = {r[0] for r in db.conn.execute("SELECT source FROM pgrag.documents").fetchall()}
    assert sources == {f"{(folder / 'a.parquet').resolve()}#a{i}" for i in (1, 2)}


def test_search_sees_pdf_html_and_jsonl_together(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    write_pdf(folder / "report.pdf")
    (folder / "help.html").write_text(HTML)
    write_jsonl(folder / "faq.jsonl", [{"id": "a", "text": "The Lisbon office opens at 8:00."}])
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


def test_a_json_lines_metadata_change_is_stored_without_embedding(
    db: Database, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "m.jsonl", [{"id": "a", "text": "Refunds take 5 days.", "team": "x"}]
    )
    pgrag.ingest(db, [path], collection="meta")
    write_jsonl(path, [{"id": "a", "text": "Refunds take 5 days.", "team": "y"}])
    report = pgrag.ingest(db, [path], collection="meta")
    assert report.count("updated") == 1 and report.chunks_embedded == 0
    hits = pgrag.search(db, "refunds", collection="meta", filter={"team": "y"}, mode="keyword")
    assert len(hits) == 1


# -- CSV ------------------------------------------------------------------------------------


def test_a_csv_is_a_table_whose_every_chunk_names_its_columns(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "sheets"
    folder.mkdir()
    rows = "".join(
        f"WX-{i:03d},Widget model {i},{10 + i * 3} EUR,ships in {i % 7 + 1} days\n"
        for i in range(120)
    )
    (folder / "prices.csv").write_text("sku,product,price,delivery\n" + rows)
    (folder / "offices.tsv").write_text("city\topens\nLisbon\t8:00\nPorto\t9:30\n")
    (folder / "broken.csv").write_bytes(b"sku,price\n\x00\x01\x02 binary\n")
    (folder / "notes.md").write_text("# Notes\n\nThe price list is in prices.csv.\n")
    report = pgrag.ingest(db, [folder], collection="sheets")
    assert report.count("added") == 3, report.files
    [failed] = report.failed
    assert failed.path.endswith("broken.csv") and "\n" not in (failed.reason or "")
    chunks = db.conn.execute(
        "SELECT c.content, d.metadata ->> 'format' FROM pgrag.chunks c"
        " JOIN pgrag.documents d ON d.id = c.document_id"
        " WHERE d.source LIKE '%%prices.csv' ORDER BY c.ordinal"
    ).fetchall()
    assert len(chunks) > 3 and {f for _, f in chunks} == {"csv"}
    header = "| sku | product | price | delivery |\n| --- | --- | --- | --- |\n"
    assert all(text.startswith(header) for text, _ in chunks)
    assert sum(text.count("| WX-") for text, _ in chunks) >= 120  # every row (some overlap)
    # A question about one row finds the chunk with that row, and the chunk says what the
    # columns are.
    hits = pgrag.search(db, "WX-097 price", collection="sheets", mode="keyword", k=3)
    assert "| WX-097 | Widget model 97 | 301 EUR | ships in 7 days |" in hits[0].text
    assert hits[0].text.startswith(header)
    tsv = pgrag.search(db, "when does the Porto office open", collection="sheets", k=3)
    assert any("| Porto | 9:30 |" in h.text and h.text.startswith("| city | opens |") for h in tsv)
    # Unchanged files are skipped; a removed one is pruned.
    (folder / "offices.tsv").unlink()
    again = pgrag.ingest(db, [folder], collection="sheets", prune=True)
    assert (again.count("unchanged"), again.count("deleted")) == (2, 1), again.files


# -- office files -----------------------------------------------------------------------------


def test_word_excel_powerpoint_and_epub_files_are_asked_about(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "office"
    folder.mkdir()
    write_docx(folder / "handbook.docx")
    write_xlsx(folder / "prices.xlsx")
    write_pptx(folder / "board.pptx")
    write_epub(folder / "harbour.epub")
    (folder / "damaged.docx").write_bytes((folder / "handbook.docx").read_bytes()[:3000])
    report = pgrag.ingest(db, [folder], collection="office")
    assert report.count("added") == 4, report.files
    [failed] = report.failed
    assert failed.path.endswith("damaged.docx") and "ZIP archive is damaged" in (
        failed.reason or ""
    )
    rows = db.conn.execute(
        "SELECT d.metadata ->> 'format', c.section, c.content FROM pgrag.chunks c"
        " JOIN pgrag.documents d ON d.id = c.document_id ORDER BY d.source, c.ordinal"
    ).fetchall()
    assert {f for f, _, _ in rows} == {"docx", "xlsx", "pptx", "epub"}
    sections = {(f, s) for f, s, _ in rows}
    assert ("docx", "Ordering > Lead times") in sections
    assert ("pptx", "Slide 1: Quarterly review") in sections
    assert ("xlsx", "Offices") in sections
    # an answer that sits in a table cell, a slide's notes and a sheet
    hit = pgrag.search(db, "price of WX-042", collection="office", mode="keyword", k=3)[0]
    assert "| WX-042 | Widget model 42 | 136 |" in hit.text and hit.text.startswith("| SKU |")
    hits = pgrag.search(db, "Lisbon launch", collection="office", k=3)
    assert any("Notes: Mention the Lisbon launch." in h.text for h in hits)
    hits = pgrag.search(db, "when does the Porto office open", collection="office", k=5)
    assert any("| Porto | 09:30:00 | 7.5 |" in h.text for h in hits)
    hits = pgrag.search(db, "which mooring did the storm break", collection="office", k=3)
    assert hits[0].section == "Storm" and hits[0].metadata["format"] == "epub"
    # unchanged files are skipped; a removed one is pruned
    (folder / "board.pptx").unlink()
    again = pgrag.ingest(db, [folder], collection="office", prune=True)
    assert (again.count("unchanged"), again.count("deleted")) == (3, 1), again.files


# -- mail -------------------------------------------------------------------------------------


def test_mail_and_its_attachments_are_asked_about(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()
    write_eml(folder / "prices.eml", tmp_path)
    write_mbox(folder / "team.mbox")
    report = pgrag.ingest(db, [folder], collection="mail")
    # the message, its CSV, Word and attached message; the three in the mailbox
    assert report.count("added") == 7, report.files
    [failed] = report.failed
    assert failed.path.endswith("#prices-2027@example.com/scan.pdf")
    # An answer that sits only in an attachment's table, with where it came from.
    hit = pgrag.search(db, "price of WX-002", collection="mail", mode="keyword", k=3)[0]
    assert "| WX-002 | 16 EUR |" in hit.text and hit.metadata["format"] == "csv"
    assert hit.metadata["attachment_of"].endswith("prices.eml#prices-2027@example.com")
    hits = pgrag.search(db, "when does the Porto depot open", collection="mail", k=3)
    assert any("7:30" in h.text and h.metadata["format"] == "email" for h in hits)
    hits = pgrag.search(db, "who covers the help desk on 24 December", collection="mail", k=3)
    assert hits[0].title == "Holiday rota" and hits[0].metadata["from"].startswith("Ana Silva")
    # A message gone from the mailbox is pruned with its own documents only.
    import mailbox

    box = mailbox.mbox(folder / "team.mbox")
    box.remove(next(k for k, m in box.items() if m["Subject"] == "Holiday rota"))
    box.flush()
    box.close()
    again = pgrag.ingest(db, [folder], collection="mail", prune=True)
    assert again.count("deleted") == 1 and again.count("added") == 0, again.files
    titles = {r[0] for r in db.conn.execute("SELECT title FROM pgrag.documents").fetchall()}
    assert "Holiday rota" not in titles and "Supplier prices for 2027" in titles


def test_a_mailbox_with_an_attachment_pgrag_does_not_read_is_still_pruned(
    db: Database, tmp_path: Path
) -> None:
    # A picture attached to one message is skipped with a warning; that is not a failure of
    # the mailbox, so a message deleted from it is pruned (a failed file's documents are kept).
    import mailbox

    from tests.samples import mail_message

    folder = tmp_path / "box"
    folder.mkdir()
    photo = mail_message("Team photo", "The photo from Friday.", msgid="<photo@example.com>")
    photo.add_attachment(b"GIF89a\x01\x00;", maintype="image", subtype="gif", filename="t.gif")
    box = mailbox.mbox(folder / "team.mbox")
    for message in (photo, mail_message("Canteen", "Closed on Monday.", msgid="<c@example.com>")):
        box.add(message)
    box.flush()
    box.close()
    warnings: list[str] = []
    first = pgrag.ingest(db, [folder], collection="box", on_warning=lambda f, w: warnings.append(w))
    assert first.count("added") == 2 and not first.failed, first.files
    assert [w for w in warnings if "does not read (image/gif)" in w], warnings
    box = mailbox.mbox(folder / "team.mbox")
    box.remove(next(k for k, m in box.items() if m["Subject"] == "Canteen"))
    box.flush()
    box.close()
    again = pgrag.ingest(db, [folder], collection="box", prune=True)
    assert again.count("deleted") == 1, again.files
    titles = {r[0] for r in db.conn.execute("SELECT title FROM pgrag.documents").fetchall()}
    assert titles == {"Team photo"}


def test_a_message_whose_headers_decode_to_nul_or_bad_bytes_is_stored(
    db: Database, tmp_path: Path
) -> None:
    # NUL characters and undecodable bytes in headers would fail the write (PostgreSQL's text
    # and jsonb cannot hold them): they are dropped and replaced.
    raw = (
        b"From: =?utf-8?q?Ana=00Silva?= <ana@example.com>\r\nTo: team@example.com\r\n"
        b"Subject: caf\xe9 =?utf-8?q?menu=00today?=\r\nMessage-ID: <menu@example.com>\r\n"
        b"Date: Thu, 03 Dec 2026 09:15:00 +0000\r\n\r\nThe canteen serves soup \xe9 today.\r\n"
    )
    (tmp_path / "menu.eml").write_bytes(raw)
    report = pgrag.ingest(db, [tmp_path / "menu.eml"], collection="menu")
    assert report.count("added") == 1 and not report.failed, report.files
    [hit] = pgrag.search(db, "what does the canteen serve", collection="menu", k=1)
    assert "\x00" not in hit.title and "menutoday" in hit.title
    assert hit.metadata["from"] == "AnaSilva <ana@example.com>"


# -- scans --------------------------------------------------------------------------------------


def test_a_scanned_contract_is_asked_about(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "contracts"
    folder.mkdir()
    write_scanned_pdf(folder / "lease.pdf", [LEASE])
    scan_image(["Parking space 14 is included with the flat."]).save(tmp_path / "annex.png")
    scan_image(["Unrelated."]).save(folder / "photo.png")  # (a walk does not pick images up)
    report = pgrag.ingest(db, [folder, tmp_path / "annex.png"], collection="scans")
    assert report.count("added") == 2 and not report.failed, report.files
    hit = pgrag.search(db, "how much is the monthly rent", collection="scans", k=3)[0]
    assert "1,250 EUR" in hit.text and hit.metadata["ocr_pages"] == [1]
    assert db.conn.execute(
        "SELECT page FROM pgrag.chunks WHERE id = %s", (hit.chunk_id,)
    ).fetchone() == (1,)
    hit = pgrag.search(db, "is a parking space included", collection="scans", k=3)[0]
    assert "Parking space 14" in hit.text and hit.metadata["format"] == "image"


# -- the registry: a format is one module ----------------------------------------------------


def test_a_format_module_dropped_into_the_package_is_read_with_no_other_edit(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    package = package_with(tmp_path, "formats_with_rst", {"rst": RST_FORMAT})
    monkeypatch.setattr(formats, "PACKAGE", package)
    folder = tmp_path / "docs"
    folder.mkdir()
    guide = folder / "guide.rst"
    guide.write_text("Refund guide\n============\n\nRefunds take five business days.\n")
    (folder / "notes.md").write_text("# Notes\n\nNothing about money.\n")
    assert sniff(guide.read_bytes(), ".rst") == "rst"
    assert sniff(b"# Title\n", ".md") == "markdown"  # the others still there
    doc = load_one(guide)
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
