"""Ingest on the real model and the real database: idempotency, updates, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import DatabaseError
from pgrag.ingest.document import from_text


def _counts(db: Database) -> tuple[int, int, int]:
    row = db.conn.execute(
        "SELECT (SELECT count(*) FROM pgrag.documents), (SELECT count(*) FROM pgrag.chunks),"
        " (SELECT count(*) FROM pgrag.chunk_embeddings)"
    ).fetchone()
    db.conn.commit()
    return row


def test_ingest_then_reingest_unchanged_writes_and_embeds_nothing(
    db: Database, corpus: Path
) -> None:
    first = pgrag.ingest(db, [corpus])
    assert first.count("added") == 3 and not first.failed
    assert first.chunks_written > 0 and first.chunks_embedded == first.chunks_written
    before = _counts(db)
    assert before[1] == before[2] == first.chunks_written
    ids_before = db.conn.execute("SELECT array_agg(id ORDER BY id) FROM pgrag.chunks").fetchone()
    db.conn.commit()

    second = pgrag.ingest(db, [corpus])
    assert second.count("unchanged") == 3
    assert second.chunks_written == 0 and second.chunks_embedded == 0
    assert _counts(db) == before
    ids_after = db.conn.execute("SELECT array_agg(id ORDER BY id) FROM pgrag.chunks").fetchone()
    assert ids_after == ids_before


def test_changed_file_is_replaced_and_unchanged_chunks_reuse_vectors(
    db: Database, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus])
    refunds = corpus / "policies" / "refunds.md"
    refunds.write_text(refunds.read_text() + "\n## Gift cards\n\nGift cards are never refunded.\n")
    report = pgrag.ingest(db, [corpus])
    assert report.count("updated") == 1 and report.count("unchanged") == 2
    # Only the new section was embedded; the two unchanged sections kept their vectors.
    assert report.chunks_written == 3 and report.chunks_embedded == 1
    hits = pgrag.search(db, "gift cards", mode="keyword")
    assert hits and "Gift cards are never refunded" in hits[0].text
    docs = db.conn.execute("SELECT count(*) FROM pgrag.documents").fetchone()[0]
    assert docs == 3


def test_chunks_fit_the_model_and_carry_sections(db: Database, tmp_path: Path) -> None:
    long = tmp_path / "long.md"
    sentences = " ".join(
        f"Sentence number {i} explains a detail about quarterly reporting and audits."
        for i in range(300)
    )
    long.write_text(f"# Handbook\n\n## Reporting\n\n{sentences}\n\n## Audits\n\n{'x' * 5000}\n")
    pgrag.ingest(db, [long])
    rows = db.conn.execute(
        "SELECT content, section, token_count FROM pgrag.chunks ORDER BY ordinal"
    ).fetchall()
    counter = configured_embedder(db).tokens
    assert len(rows) > 5
    for content, section, token_count in rows:
        # What the model sees: heading context + chunk + [CLS]/[SEP]; never over 256.
        assert counter.count(f"{section}\n{content}") + 2 <= configured_embedder(db).max_tokens
        assert token_count == counter.count(content)
    assert {r[1] for r in rows} == {"Handbook > Reporting", "Handbook > Audits"}


def test_bulk_load_keeps_the_hnsw_index_it_writes_into(db: Database, corpus: Path) -> None:
    # (An older release dropped it for the load and built it again afterwards.)
    pgrag.ingest(db, [corpus], collection="first")
    model_id = db.conn.execute(
        "SELECT model_id FROM pgrag.collections WHERE name = 'first'"
    ).fetchone()[0]
    name = f"pgrag.chunk_embeddings_hnsw_{model_id}"
    before = db.conn.execute("SELECT to_regclass(%s)::oid", (name,)).fetchone()[0]
    db.conn.commit()
    report = pgrag.ingest(db, [corpus], collection="bulk", bulk_threshold=1)
    assert report.chunks_written > 0
    index = db.conn.execute(
        "SELECT i.indexrelid, i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " WHERE i.indexrelid = to_regclass(%s)",
        (name,),
    ).fetchone()
    assert index[:2] == (before, True)
    assert "hnsw" in index[2] and f"model_id = {model_id}" in index[2]
    assert pgrag.search(db, "visitor badge", collection="bulk")


def test_invalid_collection_name_is_rejected(db: Database, corpus: Path) -> None:
    with pytest.raises(pgrag.InputError, match="invalid collection name"):
        pgrag.ingest(db, [corpus], collection="bad name; drop table x")


@pytest.fixture
def messy(corpus: Path) -> Path:
    (corpus / "empty.md").write_text("")
    (corpus / "blank.txt").write_text("  \n\n ")
    (corpus / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (corpus / "latin1.md").write_bytes("# Café\n\nCrème brûlée for everyone.".encode("latin-1"))
    (corpus / "nul.md").write_bytes(b"# Title\n\nSome text\x00with a NUL byte.\n")
    return corpus


def test_bad_files_get_one_line_each_and_the_rest_is_ingested(dsn: str, messy: Path) -> None:
    # A real process, as a user runs it: exit status, stderr lines, nothing on stdout.
    proc = subprocess.run(
        [sys.executable, "-m", "pgrag.cli", "--dsn", dsn, "ingest", str(messy)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    by_file = {Path(line.split(":", 2)[1].strip()).name: line for line in errors}
    assert set(by_file) == {"empty.md", "blank.txt", "binary.txt", "latin1.md", "nul.md"}
    assert "empty" in by_file["empty.md"] and "whitespace" in by_file["blank.txt"]
    assert "NUL" in by_file["binary.txt"] and "NUL" in by_file["nul.md"]
    assert "UTF-8" in by_file["latin1.md"]
    assert "Traceback" not in proc.stderr
    assert "3 added" in proc.stderr and "5 failed" in proc.stderr

    db = pgrag.connect(dsn)
    try:
        sources = {r[0] for r in db.conn.execute("SELECT source FROM pgrag.documents")}
    finally:
        db.close()
    assert {Path(s).name for s in sources} == {"refunds.md", "security.md", "office.txt"}


def test_explicit_unsupported_and_missing_paths(dsn: str, tmp_path: Path, corpus: Path) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    result = CliRunner().invoke(
        cli, ["--dsn", dsn, "ingest", str(pdf), str(tmp_path / "missing.md"), str(corpus)]
    )
    assert result.exit_code == 1
    # Named explicitly, it is read as what its content is: a PDF cut off after its header.
    assert f"error: {pdf}: cannot be read as a PDF" in result.stderr
    assert "missing.md: no such file or directory" in result.stderr
    assert "3 added" in result.stderr


def test_a_missing_model_index_is_rebuilt_by_the_next_ingest_that_writes(
    db: Database, corpus: Path
) -> None:
    # What an older release's bulk load, killed between DROP INDEX and the rebuild, left.
    pgrag.ingest(db, [corpus])
    model_id = db.conn.execute("SELECT model_id FROM pgrag.collections").fetchone()[0]
    index = f"chunk_embeddings_hnsw_{model_id}"
    db.conn.execute(f"DROP INDEX pgrag.{index}")
    db.conn.commit()
    exists = "SELECT to_regclass(%s) IS NOT NULL"
    report = pgrag.ingest(db, [corpus])  # nothing changed, nothing written: no build
    assert report.chunks_written == 0
    assert db.conn.execute(exists, (f"pgrag.{index}",)).fetchone() == (False,)
    db.conn.rollback()
    (corpus / "new.md").write_text("# New\n\nA new note about parcels.\n")
    assert pgrag.ingest(db, [corpus]).chunks_written == 1  # something written...
    assert db.conn.execute(exists, (f"pgrag.{index}",)).fetchone() == (True,), "...index back"


def test_an_ingest_that_writes_nothing_creates_no_collection(db: Database, tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_text("")
    report = pgrag.ingest(db, [tmp_path / "empty.md", tmp_path / "missing.md"], collection="typo")
    assert len(report.failed) == 2
    assert db.conn.execute("SELECT count(*) FROM pgrag.collections").fetchone()[0] == 0


def test_a_database_error_leaves_the_connection_usable(db: Database, corpus: Path) -> None:
    from pgrag.db.connect import transaction

    pgrag.ingest(db, [corpus])
    with pytest.raises(DatabaseError, match="division by zero"), transaction(db) as conn:
        conn.execute("SELECT 1 / 0")
    assert pgrag.search(db, "refund", mode="keyword")


class _OtherModel:
    """Stands in for a differently sized model: only its identity matters here."""

    name, provider, dimension, max_tokens = "other/model-768", "test", 768, 256
    distance, normalized = "cosine", True

    def __init__(self, real: object) -> None:
        self.tokens = real.tokens  # type: ignore[attr-defined]

    def embed(self, texts: list[str]) -> object:
        raise AssertionError("a mismatched model must be refused before embedding anything")


def test_a_collection_refuses_a_different_model(dsn: str, corpus: Path, embedder: object) -> None:
    db = pgrag.connect(dsn, embedder=embedder)  # type: ignore[arg-type]
    pgrag.ingest(db, [corpus])
    db.close()
    other = pgrag.connect(dsn, embedder=_OtherModel(embedder))  # type: ignore[arg-type]
    try:
        expected = r"embedded with 'sentence-transformers/all-MiniLM-L6-v2' \(384 dimensions\)"
        with pytest.raises(pgrag.PgragError, match=expected):
            pgrag.ingest(other, [corpus])
        with pytest.raises(pgrag.PgragError, match="other/model-768"):
            pgrag.search(other, "refund")
        assert pgrag.search(other, "refund", mode="keyword")  # no model needed for keywords
    finally:
        other.close()


def test_directories_with_nothing_to_ingest_and_utf16_files_are_explained(
    dsn: str, tmp_path: Path, corpus: Path
) -> None:
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "pdfs").mkdir()  # (of a word processor pgrag does not read)
    (tmp_path / "pdfs" / "a.odt").write_bytes(b"PK\x03\x04")
    (tmp_path / "utf16.txt").write_bytes("Hello".encode("utf-16"))
    result = CliRunner().invoke(
        cli,
        [
            "--dsn",
            dsn,
            "ingest",
            str(tmp_path / "empty_dir"),
            str(tmp_path / "pdfs"),
            str(tmp_path / "utf16.txt"),
            str(corpus),
        ],
    )
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert (
        f"error: {tmp_path / 'empty_dir'}: no .csv, .docm, .docx, .dotm, .dotx, .eml, .epub,"
        " .htm, .html, .jsonl, .markdown, .mbox, .md, .ndjson, .parquet, .pdf, .potm, .potx,"
        " .ppsm, .ppsx, .pptm, .pptx, .text, .tsv, .txt, .xhtml, .xlsm, .xlsx, .xltm, .xltx"
        " files in this directory" in lines
    )
    assert any(
        line.startswith(f"error: {tmp_path / 'pdfs'}: no ")
        and line.endswith("(1 file of other types skipped)")
        for line in lines
    )
    assert any("utf16.txt: is UTF-16 text" in line and "iconv -f utf-16" in line for line in lines)
    assert "3 added" in result.stderr


def test_two_ingests_of_the_same_files_at_once_leave_one_consistent_copy(
    dsn: str, tmp_path: Path
) -> None:
    # pgrag is never assumed to be the only writer: two processes ingest the same 30 files
    # at the same time (their embedding and writing overlap), then the result is checked.
    root = tmp_path / "many"
    root.mkdir()
    for i in range(30):
        (root / f"note{i:02d}.md").write_text(
            f"# Note {i}\n\n## Facts\n\n"
            + " ".join(
                f"Fact {j} of note {i} concerns topic {i * 7 + j} in the archive."
                for j in range(12)
            )
        )
    cmd = [sys.executable, "-m", "pgrag.cli", "--dsn", dsn, "ingest", str(root), "-c", "race"]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in results), results

    db = pgrag.connect(dsn)
    try:
        docs, chunks, vectors, dupes = db.conn.execute(
            "SELECT (SELECT count(*) FROM pgrag.documents),"
            " (SELECT count(*) FROM pgrag.chunks),"
            " (SELECT count(*) FROM pgrag.chunk_embeddings),"
            " (SELECT count(*) FROM (SELECT document_id, ordinal FROM pgrag.chunks"
            "   GROUP BY 1, 2 HAVING count(*) > 1) d)"
        ).fetchone()
        per_doc = db.conn.execute(
            "SELECT min(n), max(n)"
            " FROM (SELECT count(*) n FROM pgrag.chunks GROUP BY document_id) c"
        ).fetchone()
    finally:
        db.close()
    assert docs == 30 and dupes == 0
    assert vectors == chunks
    assert per_doc[0] == per_doc[1], "every note has the same shape, so the same chunk count"


def test_document_metadata_records_format_size_and_date(db: Database, corpus: Path) -> None:
    import datetime as dt
    import os

    refunds = corpus / "policies" / "refunds.md"
    stamp = dt.datetime(2025, 3, 4, 12, 0, tzinfo=dt.UTC).timestamp()
    os.utime(refunds, (stamp, stamp))
    pgrag.ingest(db, [corpus])
    meta = db.conn.execute(
        "SELECT metadata FROM pgrag.documents WHERE source = %s", (str(refunds.resolve()),)
    ).fetchone()[0]
    assert meta == {
        "path": str(refunds),
        "format": "markdown",
        "bytes": refunds.stat().st_size,
        "modified": "2025-03-04",
    }
    hit = pgrag.search(db, "annual plans refund", k=1)[0]
    assert hit.metadata["modified"] == "2025-03-04"


def test_dangling_links_are_warned_about_and_a_heading_only_file_is_its_title(
    dsn: str, tmp_path: Path
) -> None:
    # Issue 16: a dangling symbolic link in a directory was skipped without a word, and a
    # Markdown file of only a heading failed "has no text to index".
    (tmp_path / "guide.md").write_text("# Guide\n\nThe guide's only paragraph.\n")
    (tmp_path / "stub.md").write_text("# Quarterly planning notes\n")
    (tmp_path / "gone.md").symlink_to(tmp_path / "moved-away.md")
    proc = subprocess.run(
        [sys.executable, "-m", "pgrag.cli", "--dsn", dsn, "ingest", "-c", "links", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr  # a warning, not a failure
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {tmp_path / 'gone.md'}: skipped: a symbolic link to"
        f" {str(tmp_path / 'moved-away.md')!r}, which does not exist"
    ]
    assert "error:" not in proc.stderr
    assert "2 added" in proc.stderr and "1 skipped" in proc.stderr
    db = pgrag.connect(dsn)
    try:
        rows = db.conn.execute(
            "SELECT c.content FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id"
            " JOIN pgrag.collections k ON k.id = d.collection_id"
            " WHERE k.name = 'links' AND d.source LIKE '%%stub.md'"
        ).fetchall()
    finally:
        db.close()
    assert rows == [("Quarterly planning notes",)]


def test_symbolic_links_are_documents_where_they_are_and_a_loop_is_one_line(
    db: Database, tmp_path: Path
) -> None:
    # A hostile review: a loop of links crashed the whole ingest (a traceback), and a link to
    # a file outside the tree was stored under its target's path, so removing the link never
    # pruned it.
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (tree / "ok.md").write_text("# Ok\n\nThe plain file of the tree.\n")
    (outside / "shared.md").write_text("# Shared\n\nThe flamingo policy lives elsewhere.\n")
    (tree / "shared.md").symlink_to(outside / "shared.md")
    (tree / "x.md").symlink_to(tree / "y.md")
    (tree / "y.md").symlink_to(tree / "x.md")
    report = pgrag.ingest(db, [tree], collection="links")
    assert report.count("added") == 2, report.files
    looped = [f for f in report.files if f.path.endswith(("x.md", "y.md"))]
    assert len(looped) == 2 and all(f.status == "skipped" for f in looped), looped
    assert all("part of a loop of links" in (f.reason or "") for f in looped), looped
    hit = pgrag.search(db, "flamingo policy", collection="links", k=1)[0]
    assert hit.source == str(tree.resolve() / "shared.md")  # the link's place, not the target's
    named = pgrag.ingest(db, [tree / "x.md"], collection="links")
    assert named.count("failed") == 1 and "a loop" in (named.files[0].reason or "")
    (tree / "shared.md").unlink()
    pgrag.ingest(db, [tree], collection="links", prune=True)
    sources = {h.source for h in pgrag.search(db, "flamingo policy plain file", collection="links")}
    assert sources == {str(tree.resolve() / "ok.md")}


def test_what_reading_a_file_left_out_is_a_warning_line(db: Database, tmp_path: Path) -> None:
    # A hostile review: an EPUB read without a chapter its spine names said nothing.
    import zipfile

    from tests.samples import epub_book

    whole = epub_book(
        tmp_path / "w.epub", "Atlas", "X", [("One", "<p>Gone.</p>"), ("Two", "<p>Herons.</p>")]
    )
    path = tmp_path / "atlas.epub"
    with zipfile.ZipFile(whole) as src, zipfile.ZipFile(path, "w") as out:
        for info in src.infolist():
            if info.filename != "OEBPS/text/c0.xhtml":
                out.writestr(info, src.read(info.filename))
    warned: list[tuple[str, str]] = []
    report = pgrag.ingest(
        db, [path], collection="notes", on_warning=lambda p, why: warned.append((p, why))
    )
    assert report.count("added") == 1
    assert warned == [
        (str(path), "read without 1 chapter(s) its spine names but the book lacks (text/c0.xhtml)")
    ]


def test_progress_moves_by_chunks_within_one_large_file(db: Database, tmp_path: Path) -> None:
    # Issue 16: one big file was one batch, embedded whole: the progress bar stood still
    # until the file was written.
    path = tmp_path / "big.md"
    path.write_text(
        "# Big\n\n"
        + "\n\n".join(
            f"## Part {i}\n\nPart {i} explains topic number {i} in a sentence of its own."
            for i in range(40)
        )
    )
    calls: list[int] = []
    report = pgrag.ingest(db, [path], collection="progress", batch_chunks=8, progress=calls.append)
    assert report.chunks_written == report.chunks_embedded == 40
    assert sum(calls) == 40 and len(calls) == 5 and max(calls) == 8


def test_a_new_document_another_writer_stores_first_is_replaced_whole(
    dsn: str, embedder: object
) -> None:
    # New documents are inserted for a whole batch in one statement. One that a concurrent
    # writer stores between this ingest's plan and its write (planned as new, found stored)
    # must end up as this ingest's version alone: its row updated, the other writer's chunks
    # gone, no ordinal taken twice; the batch's other new documents are written as planned.
    db = pgrag.connect(dsn, embedder=embedder)
    other = pgrag.connect(dsn, embedder=embedder)
    try:
        pgrag.ingest_documents(
            db, [from_text("seed", "A seed so the collection exists.")], collection="c"
        )

        def meanwhile(_total: int) -> None:
            pgrag.ingest_documents(
                other,
                [from_text("a", "The other writer's version. " * 80, title="theirs")],
                collection="c",
            )

        report = pgrag.ingest_documents(
            db,
            [
                from_text("a", "Ours: the refund window is thirty days.", title="ours"),
                from_text("b", "Badges open the north door."),
            ],
            collection="c",
            on_plan=meanwhile,
        )
        assert [f.status for f in report.files] == ["added", "added"], report.files
        rows = db.conn.execute(
            "SELECT d.source, d.title, count(c.id), string_agg(c.content, '|'),"
            " count(DISTINCT c.ordinal), count(e.chunk_id)"
            " FROM pgrag.documents d JOIN pgrag.chunks c ON c.document_id = d.id"
            " LEFT JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id"
            " GROUP BY d.source, d.title ORDER BY d.source"
        ).fetchall()
    finally:
        db.close()
        other.close()
    assert rows == [
        ("a", "ours", 1, "Ours: the refund window is thirty days.", 1, 1),
        ("b", "b", 1, "Badges open the north door.", 1, 1),
        ("seed", "seed", 1, "A seed so the collection exists.", 1, 1),
    ], rows


def test_plan_lookups_made_a_window_at_a_time_see_what_each_file_needs(
    dsn: str, embedder: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The plan reads the stored documents and possible originals for a window of files at once;
    # with windows of 2, files on either side of a boundary are planned as one at a time were:
    # unchanged, changed, new, a copy of a stored document, a copy of one planned earlier.
    from pgrag.ingest.plan import StoredLookup

    monkeypatch.setattr(StoredLookup, "WINDOW", 2)
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        stored = [from_text(s, f"Text of {s}, stored first.", title="T") for s in ("a", "b", "c")]
        pgrag.ingest_documents(db, stored, collection="w")
        report = pgrag.ingest_documents(
            db,
            [
                from_text("a", "Text of a, stored first.", title="T"),  # unchanged
                from_text("b", "Text of b, changed now.", title="T"),  # changed
                from_text("c", "Text of c, stored first.", title="T"),  # unchanged
                from_text("d", "Text of a, stored first.", title="T"),  # a copy of a (stored)
                from_text("e", "Brand new text.", title="T"),  # new
                from_text("f", "Brand new text.", title="T"),  # a copy of e (planned in this run)
                from_text("g", "Another new text.", title="T"),  # new
            ],
            collection="w",
        )
    finally:
        db.close()
    got = {f.path: (f.status, f.reason) for f in report.files}
    assert got == {
        "a": ("unchanged", None),
        "b": ("updated", None),
        "c": ("unchanged", None),
        "d": ("duplicate", "same as a"),
        "e": ("added", None),
        "f": ("duplicate", "same as e"),
        "g": ("added", None),
    }, got


def test_a_source_given_twice_with_other_content_is_skipped_and_said(
    dsn: str, embedder: object
) -> None:
    # The first is ingested; the second, with other content, used to vanish from the report.
    db = pgrag.connect(dsn, embedder=embedder)
    warnings: list[tuple[str, str]] = []
    try:
        report = pgrag.ingest_documents(
            db,
            [
                from_text("a", "First text."),
                from_text("a", "First text."),  # the same again: read once, silently
                from_text("a", "Other text."),
            ],
            collection="twice",
            on_warning=lambda label, why: warnings.append((label, why)),
        )
        content = db.conn.execute("SELECT string_agg(content, '|') FROM pgrag.chunks").fetchone()
    finally:
        db.close()
    assert sorted((f.path, f.status) for f in report.files) == [("a", "added"), ("a", "skipped")]
    why = "repeats source 'a' with other content; the first was used"
    assert warnings == [("a", why)] and content == ("First text.",)


def test_a_source_whose_first_file_failed_is_planned_from_the_next(
    dsn: str, embedder: object
) -> None:
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        report = pgrag.ingest_documents(
            db,
            [from_text("a", "Short vector.", vector=[0.5, 0.5]), from_text("a", "Good text.")],
            collection="retry",
        )
    finally:
        db.close()
    assert sorted((f.path, f.status) for f in report.files) == [("a", "added"), ("a", "failed")]
