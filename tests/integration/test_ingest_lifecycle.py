"""Ingest over time (issue 5): dry runs, re-ingesting edited files, pruning and removing
documents, broken files among good ones, and an ingest killed with SIGKILL half-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.ingest.loaders import from_text
from pgrag.ingest.removal import remove


def _write_corpus(root: Path, n: int, paragraphs: int = 3) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        body = "\n\n".join(
            f"## Part {p}\n\nDocument {i} part {p} describes topic {i * 7 + p} at length. "
            f"It mentions item {i}-{p} and the process number {p} for team {i % 5}."
            for p in range(paragraphs)
        )
        (root / f"doc-{i:03d}.md").write_text(f"# Document {i}\n\n{body}\n")
    return root


def _sources(dsn: str, collection: str) -> dict[str, int]:
    """Each stored document's source and its number of chunks."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT d.source, count(c.id) FROM pgrag.documents d"
            " JOIN pgrag.collections k ON k.id = d.collection_id AND k.name = %s"
            " LEFT JOIN pgrag.chunks c ON c.document_id = d.id GROUP BY d.source",
            (collection,),
        ).fetchall()
    return dict(rows)


def _counts(dsn: str, collection: str) -> dict[str, int]:
    """As _sources, by file name (for collections whose file names are unique)."""
    named = {Path(s).name: n for s, n in _sources(dsn, collection).items()}
    assert len(named) == len(_sources(dsn, collection)), "file names are not unique here"
    return named


def _cli(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--dsn", dsn, *args])


# -- dry run, edits, prune, rm ---------------------------------------------------------------


def test_dry_run_writes_nothing_and_says_what_would_happen(db: Database, tmp_path: Path) -> None:
    corpus = _write_corpus(tmp_path / "c", 3)
    dry = _cli(db.dsn, "ingest", str(corpus), "-c", "dry", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.count("added ") == 3 and "to embed" in dry.stdout
    assert "dry run, nothing written" in dry.stderr
    assert _counts(db.dsn, "dry") == {}
    pgrag.ingest(db, [corpus], collection="dry")
    before = _counts(db.dsn, "dry")
    (corpus / "doc-001.md").write_text("# Document 1\n\nEntirely new text about bicycles.\n")
    (corpus / "doc-002.md").unlink()
    report = pgrag.ingest(db, [corpus], collection="dry", dry_run=True, prune=True)
    statuses = {Path(f.path).name: f.status for f in report.files}
    assert statuses == {"doc-000.md": "unchanged", "doc-001.md": "updated", "doc-002.md": "deleted"}
    assert report.chunks_embedded == 1 and report.chunks_deleted == before["doc-002.md"]
    assert _counts(db.dsn, "dry") == before  # still nothing written


def test_an_edited_file_embeds_only_its_changed_chunks(db: Database, tmp_path: Path) -> None:
    corpus = _write_corpus(tmp_path / "c", 4, paragraphs=4)
    first = pgrag.ingest(db, [corpus], collection="edit")
    assert first.chunks_embedded == first.chunks_written
    before = _counts(db.dsn, "edit")
    path = corpus / "doc-002.md"
    text = path.read_text().replace("Document 2 part 3 describes", "Document 2 part 3 now covers")
    path.write_text(text)
    second = pgrag.ingest(db, [corpus], collection="edit")
    assert second.count("updated") == 1 and second.count("unchanged") == 3
    assert second.chunks_embedded == 1, second.summary()
    assert _counts(db.dsn, "edit") == before  # the same number of chunks, one of them new
    hits = pgrag.search(db, "part 3 now covers", collection="edit", k=1, mode="keyword")
    assert "now covers" in hits[0].text


def _rows(dsn: str, source: Path) -> list[tuple[int, int, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT c.id, c.ordinal, c.content FROM pgrag.chunks c"
            " JOIN pgrag.documents d ON d.id = c.document_id WHERE d.source = %s"
            " ORDER BY c.ordinal",
            (str(source.resolve()),),
        ).fetchall()


def test_unchanged_chunks_keep_their_rows_when_a_file_changes(db: Database, tmp_path: Path) -> None:
    corpus = _write_corpus(tmp_path / "c", 1, paragraphs=5)
    path = corpus / "doc-000.md"
    pgrag.ingest(db, [corpus], collection="keep")
    before = _rows(db.dsn, path)
    assert len(before) == 5
    # A new part first, part 2 deleted, part 4 edited: parts 0, 1 and 3 are unchanged.
    text = path.read_text()
    head, _, rest = text.partition("## Part 0")
    parts = ("## Part 0" + rest).split("\n\n## ")
    parts = [p if p.startswith("## ") else "## " + p for p in parts]
    parts[4] = parts[4].replace("at length", "briefly")
    new_parts = ["## Preface\n\nA preface about the handbook."] + parts[:2] + parts[3:]
    path.write_text(head + "\n\n".join(new_parts) + "\n")
    report = pgrag.ingest(db, [corpus], collection="keep")
    assert report.chunks_embedded == 2  # the preface and the edited part
    after = _rows(db.dsn, path)
    assert [o for _, o, _ in after] == list(range(5))
    old = {content: chunk_id for chunk_id, _, content in before}
    kept = [(o, content) for chunk_id, o, content in after if old.get(content) == chunk_id]
    assert [o for o, _ in kept] == [1, 2, 3]  # parts 0, 1, 3 moved one place down, same ids
    assert after[0][2] == "A preface about the handbook."
    assert after[0][0] not in old.values() and after[4][0] not in old.values()  # new rows
    assert not any("part 2 describes" in content for _, _, content in after)


def test_prune_removes_documents_of_vanished_files_only(db: Database, tmp_path: Path) -> None:
    corpus = _write_corpus(tmp_path / "c", 4)
    other = _write_corpus(tmp_path / "other", 1)
    pgrag.ingest(db, [corpus, other / "doc-000.md"], collection="p")
    (corpus / "doc-003.md").unlink()
    (corpus / "doc-001.md").write_bytes(b"\xff\xfe broken now")  # exists, fails to load
    report = pgrag.ingest(db, [corpus], collection="p", prune=True)
    assert [Path(f.path).name for f in report.files if f.status == "deleted"] == ["doc-003.md"]
    assert len(report.failed) == 1
    # The file that failed keeps its document; the file outside the directory is untouched.
    assert set(_sources(db.dsn, "p")) == {
        str((corpus / name).resolve()) for name in ("doc-000.md", "doc-001.md", "doc-002.md")
    } | {str((other / "doc-000.md").resolve())}
    # Nothing of the pruned document is left: chunks, vectors, keyword postings.
    with psycopg.connect(db.dsn) as conn:
        orphans = conn.execute(
            "SELECT (SELECT count(*) FROM pgrag.chunk_embeddings e"
            "         WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunks c WHERE c.id = e.chunk_id)),"
            "       (SELECT count(*) FROM pgrag.keyword_postings p"
            "         WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunks c WHERE c.id = p.chunk_id))"
        ).fetchone()
    assert orphans == (0, 0)


def test_rm_by_file_directory_and_source(db: Database, tmp_path: Path) -> None:
    corpus = _write_corpus(tmp_path / "c", 3)
    sub = _write_corpus(tmp_path / "c" / "sub", 2)
    pgrag.ingest(db, [corpus], collection="rm")
    pgrag.ingest_documents(db, [from_text("notes/a.txt", "A note about refunds.")], collection="rm")
    assert len(_sources(db.dsn, "rm")) == 6
    dry = _cli(db.dsn, "rm", str(sub), "-c", "rm", "--dry-run")
    assert dry.exit_code == 0 and dry.stdout.count("would remove") == 2
    assert len(_sources(db.dsn, "rm")) == 6
    gone = _cli(
        db.dsn, "rm", str(sub), str(corpus / "doc-000.md"), "notes/a.txt", "-c", "rm", "--json"
    )
    assert gone.exit_code == 0, gone.output
    assert len(json.loads(gone.stdout)["removed"]) == 4
    assert set(_sources(db.dsn, "rm")) == {
        str((corpus / name).resolve()) for name in ("doc-001.md", "doc-002.md")
    }
    missing = _cli(db.dsn, "rm", str(corpus / "nope.md"), "-c", "rm")
    assert missing.exit_code == 1
    assert f"error: {corpus / 'nope.md'}: no document in collection 'rm'" in missing.stderr
    assert _cli(db.dsn, "rm", "x", "-c", "no-such").exit_code == 1
    # Search no longer finds what was removed.
    assert not [
        h
        for h in pgrag.search(db, "refunds note", collection="rm", mode="keyword")
        if h.source == "notes/a.txt"
    ]


# -- bad input -------------------------------------------------------------------------------


def test_broken_files_among_good_ones(db: Database, tmp_path: Path) -> None:
    folder = _write_corpus(tmp_path / "mixed", 2)
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.4\n%garbage\n1 0 obj <<\n")
    (folder / "fake.pdf").write_bytes(b"hello, I am text")
    (folder / "empty.md").write_bytes(b"")
    (folder / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (folder / "binary.html").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (folder / "bad.jsonl").write_text('{"text": "fine record"}\n{oops\n')
    result = _cli(db.dsn, "ingest", str(folder), "-c", "broken")
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    by_file = {line.split(": ")[1]: line for line in errors}
    assert set(by_file) == {
        str(folder / "corrupt.pdf"),
        str(folder / "fake.pdf"),
        str(folder / "empty.md"),
        str(folder / "latin1.txt"),
        str(folder / "binary.html"),
        f"{folder / 'bad.jsonl'}:2",
    }, errors
    assert "cannot be read as a PDF" in by_file[str(folder / "corrupt.pdf")]
    assert "is not valid UTF-8" in by_file[str(folder / "latin1.txt")]
    # (a PNG's first bytes: content decides, so it is read as an image, and it is broken)
    assert "cannot be read as an image (damaged" in by_file[str(folder / "binary.html")]
    assert "6 failed" in result.stderr and "3 added" in result.stderr  # 2 docs + 1 record
    assert len(_counts(db.dsn, "broken")) == 3


# -- killed half-way -------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import sys
    import pgrag
    db = pgrag.connect(sys.argv[1])
    def batch(done, total):
        print(f"batch {done}/{total}", flush=True)
    report = pgrag.ingest(db, [sys.argv[2]], collection="killed", batch_chunks=8,
                          bulk_threshold=1, on_batch=batch)
    print("summary", report.summary(), flush=True)
    """
)


@pytest.mark.parametrize("shared", [True, False], ids=["model-in-use", "first-load"])
def test_sigkill_half_way_leaves_whole_documents_and_a_rerun_completes(
    db: Database, tmp_path: Path, shared: bool
) -> None:
    corpus = _write_corpus(tmp_path / "k", 30, paragraphs=3)
    if shared:  # another collection of the model has vectors: its index stays live
        pgrag.ingest_documents(
            db, [from_text("other", "Another collection's note.")], collection="other"
        )
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    proc = subprocess.Popen(
        [sys.executable, str(script), db.dsn, str(corpus)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    batches = 0
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        if line.startswith("batch ") and not line.startswith("batch 0/"):
            batches += 1
        if batches == 3 or time.monotonic() > deadline:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert batches == 3, "the ingest finished or stalled before it could be killed"

    half = _counts(db.dsn, "killed")
    assert 0 < len(half) < 30
    with psycopg.connect(db.dsn) as conn:
        # Every document visible has chunks, and every chunk its vector.
        assert conn.execute(
            "SELECT count(*) FROM pgrag.chunks c WHERE NOT EXISTS"
            " (SELECT 1 FROM pgrag.chunk_embeddings e WHERE e.chunk_id = c.id)"
        ).fetchone() == (0,)
        # With another collection's vectors in it, the model's index, which the bulk load
        # wrote into, is in place and valid for that collection's searches (an older release
        # dropped it for the load). Empty before this first load, it was dropped, to be built
        # after it: missing now, and built by the rerun.
        model_id = conn.execute(
            "SELECT model_id FROM pgrag.collections WHERE name = 'killed'"
        ).fetchone()[0]
        index = f"pgrag.chunk_embeddings_hnsw_{model_id}"
        valid = "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)"
        assert conn.execute(valid, (index,)).fetchone() == ((True,) if shared else None)
    assert all(n > 0 for n in half.values())

    rerun = subprocess.run(
        [sys.executable, str(script), db.dsn, str(corpus)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    assert f"{30 - len(half)} added" in rerun.stdout and f"{len(half)} unchanged" in rerun.stdout
    full = _counts(db.dsn, "killed")
    assert len(full) == 30
    with psycopg.connect(db.dsn) as conn:
        assert conn.execute(valid, (index,)).fetchone() == (True,)
    # The documents written before the kill were whole: a clean ingest gives the same counts.
    pgrag.ingest(db, [corpus], collection="clean")
    assert _counts(db.dsn, "clean") == full
    assert all(full[name] == n for name, n in half.items())


def test_readers_never_pass_from_one_document_to_the_next(db: Database, tmp_path: Path) -> None:
    # Regression: _write once reused the ingest's `principals` for each document's stored
    # readers, so in a batch of changed files a restricted one after a public one became public.
    folder = tmp_path / "readers"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha text about refunds.\n")
    (folder / "b.md").write_text("# B\n\nBeta text about refunds.\n")
    (folder / "c.md").write_text("# C\n\nGamma text about refunds.\n")
    pgrag.ingest(db, [folder / "a.md"], collection="r")
    pgrag.ingest(db, [folder / "b.md"], collection="r", allow=["bob"])
    pgrag.ingest(db, [folder / "c.md"], collection="r", allow=["carol", "group:x"])
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text((folder / name).read_text() + "\nChanged.\n")
    report = pgrag.ingest(db, [folder], collection="r")  # one batch, no --allow
    assert report.count("updated") == 3
    with psycopg.connect(db.dsn) as conn:
        docs = dict(conn.execute("SELECT source, principals FROM pgrag.documents").fetchall())
        chunks = conn.execute(
            "SELECT DISTINCT d.source, c.principals FROM pgrag.chunks c"
            " JOIN pgrag.documents d ON d.id = c.document_id"
        ).fetchall()
    want = {"a.md": ["public"], "b.md": ["bob"], "c.md": ["carol", "group:x"]}
    assert {Path(s).name: sorted(p) for s, p in docs.items()} == want
    assert {Path(s).name: sorted(p) for s, p in chunks} == want
    as_carol = pgrag.search(db, "text about refunds", collection="r", principals=["carol"])
    assert {Path(h.source).name for h in as_carol} == {"a.md", "c.md"}


def test_prune_keeps_what_it_could_not_read_or_never_walks(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = _write_corpus(tmp_path / "c", 2)
    sub = _write_corpus(corpus / "sub", 2)
    hidden = corpus / ".drafts"
    hidden.mkdir()
    (hidden / "h.md").write_text("# Hidden\n\nA draft about refunds.\n")
    (corpus / "README").write_text("Plain text without a suffix.\n")
    pgrag.ingest(db, [corpus, hidden / "h.md", corpus / "README"], collection="keep")
    assert len(_sources(db.dsn, "keep")) == 6
    # The subdirectory cannot be read this time (the OS's refusal, simulated: tests run as
    # root, who reads anything).
    from pgrag.ingest import loaders

    real_walk = os.walk

    def walk(top: Any, onerror: Any = None, **kw: Any) -> Any:
        for dirpath, dirnames, filenames in real_walk(top, onerror=onerror, **kw):
            if "sub" in dirnames:
                dirnames.remove("sub")
                if onerror:
                    onerror(PermissionError(13, "Permission denied", str(sub)))
            yield dirpath, dirnames, filenames

    monkeypatch.setattr(loaders.os, "walk", walk)
    report = pgrag.ingest(db, [corpus], collection="keep", prune=True)
    assert report.count("deleted") == 0 and len(report.failed) == 1
    assert len(_sources(db.dsn, "keep")) == 6
    monkeypatch.undo()
    # An empty directory (an unmounted share?) prunes nothing either.
    empty = tmp_path / "empty"
    empty.mkdir()
    pgrag.ingest(db, [_write_corpus(empty / "x", 1)], collection="e")
    for f in (empty / "x").iterdir():
        f.unlink()
    report = pgrag.ingest(db, [empty / "x"], collection="e", prune=True)
    assert report.count("deleted") == 0 and len(_sources(db.dsn, "e")) == 1


def test_rm_of_a_path_does_not_take_files_that_merely_start_like_it(
    db: Database, tmp_path: Path
) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "notes").write_text("Plain notes about refunds.\n")
    (folder / "notes#2.md").write_text("# Notes 2\n\nMore notes about refunds.\n")
    (folder / "notes-old.md").write_text("# Old\n\nOld notes about refunds.\n")
    pgrag.ingest(
        db, [folder / "notes", folder / "notes#2.md", folder / "notes-old.md"], collection="rm2"
    )
    report = remove(db, [folder / "notes"], collection="rm2")
    assert [Path(s).name for s, _ in report.documents] == ["notes"]
    assert {Path(s).name for s in _sources(db.dsn, "rm2")} == {"notes#2.md", "notes-old.md"}


def test_a_long_heading_changed_past_its_embedded_part_updates_the_section(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "long.md"
    heading = " ".join(f"word{i}" for i in range(60))
    path.write_text(f"# {heading} OLDTAIL\n\nBody text about refunds and more.\n")
    pgrag.ingest(db, [path], collection="h")
    path.write_text(f"# {heading} NEWTAIL\n\nBody text about refunds and more.\n")
    report = pgrag.ingest(db, [path], collection="h")
    assert report.count("updated") == 1
    with psycopg.connect(db.dsn) as conn:
        sections = [r[0] for r in conn.execute("SELECT section FROM pgrag.chunks").fetchall()]
    assert sections and all(s.endswith("NEWTAIL") for s in sections)
