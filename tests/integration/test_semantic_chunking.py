"""Semantic chunking with the real model and the real database (docs/ingest.md#semantic-chunking):
chunks cut where the subject changes, the choice recorded on the collection, unchanged
documents skipped, and a switch of chunking refused unless asked for with --rechunk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import pgrag
from pgrag.cli import cli
from pgrag.collections import get_collection
from pgrag.db.connect import Database
from pgrag.embeddings.local import SentenceTransformerEmbedder
from pgrag.errors import InputError
from pgrag.ingest.loaders import from_text
from pgrag.ingest.plan import chunk_limits
from pgrag.text.chunking import chunk_text
from pgrag.text.semantic import semantic_chunk_text

# Two unrelated halves, about 76 tokens each: together they fit one fixed chunk (200 tokens).
BREAD = (
    "Bread dough needs flour, water, salt and yeast. Knead the dough for ten minutes until it"
    " is smooth and elastic. Let the dough rise in a warm place until it doubles in size. Shape"
    " the loaf and let it proof for another hour. Bake the bread in a hot oven until the crust"
    " is golden brown. Let the loaf cool on a rack before slicing it."
)
VOLCANO = (
    "A volcano forms where magma rises through the crust of the Earth. Tectonic plates pull"
    " apart or collide along volcanic belts. Lava flows can reach temperatures above one"
    " thousand degrees Celsius. Volcanic ash clouds can close airports across a whole"
    " continent. Geologists monitor seismic tremors to forecast eruptions. The eruption of"
    " Mount Vesuvius buried the Roman city of Pompeii."
)
TEXT = f"{BREAD} {VOLCANO}"


def chunks_of(db: Database, collection: str) -> list[str]:
    rows = db.conn.execute(
        "SELECT c.content FROM pgrag.chunks c JOIN pgrag.collections k ON k.id = c.collection_id"
        " JOIN pgrag.documents d ON d.id = c.document_id"
        " WHERE k.name = %s ORDER BY d.source, c.ordinal",
        (collection,),
    ).fetchall()
    db.conn.commit()
    return [r[0] for r in rows]


def recorded(db: Database, collection: str) -> Any:
    row = db.conn.execute(
        "SELECT settings -> 'chunking' FROM pgrag.collections WHERE name = %s", (collection,)
    ).fetchone()
    db.conn.commit()
    return None if row is None else row[0]


def cut_at_the_topic_change(chunks: list[str]) -> bool:
    return chunks == [BREAD, VOLCANO]


def test_the_real_model_cuts_where_the_subject_changes(
    embedder: SentenceTransformerEmbedder,
) -> None:
    counter = embedder.tokens
    limit, overlap = chunk_limits(None, embedder)
    fixed = chunk_text(TEXT, counter, limit=limit, overlap=overlap, markdown=False)
    assert [c.text for c in fixed] == [TEXT]  # one chunk: the fixed chunker sees no reason to cut
    semantic = semantic_chunk_text(
        TEXT, counter, embedder.embed, limit=limit, overlap=overlap, markdown=False
    )
    assert cut_at_the_topic_change([c.text for c in semantic])
    again = semantic_chunk_text(
        TEXT, counter, embedder.embed, limit=limit, overlap=overlap, markdown=False
    )
    assert again == semantic  # deterministic


def test_the_real_model_keeps_headings_and_tables(embedder: SentenceTransformerEmbedder) -> None:
    rows = [
        "| Plan | Refund window |",
        "| --- | --- |",
        "| Monthly | 14 days, prorated by the unused days of the month after that |",
        "| Annual | 30 days, then prorated by the unused months of the year |",
    ]
    text = f"# Baking\n\n{BREAD}\n\n{VOLCANO}\n\n## Refunds\n\n" + "\n".join(rows) + "\n"
    chunks = semantic_chunk_text(
        text, embedder.tokens, embedder.embed, limit=40, overlap=8, markdown=True
    )
    sections = [c.section for c in chunks]
    assert sections == sorted(sections, key=len)  # every Baking chunk, then the table's
    assert ("Baking", "Refunds") in sections
    table = [c.text.split("\n") for c in chunks if c.section == ("Baking", "Refunds")]
    # each row whole, on its own line, in order; every chunk of the table begins with its header
    assert [line for lines in table for line in lines[2:]] == rows[2:]
    assert all(lines[:2] == rows[:2] for lines in table)
    assert max(c.token_count for c in chunks) <= 40
    baking = [c.text for c in chunks if c.section == ("Baking",)]
    assert len(baking) > 2
    assert all(t in BREAD or t in VOLCANO for t in baking)  # none spans the change of subject


def test_python_ingest_records_the_chunking_and_skips_unchanged_documents(
    db: Database,
) -> None:
    doc = from_text("kitchen-and-geology", TEXT, title="Notes", format="text")
    report = pgrag.ingest_documents(db, [doc], collection="notes", chunking="semantic")
    assert [f.status for f in report.files] == ["added"]
    assert cut_at_the_topic_change(chunks_of(db, "notes"))
    assert recorded(db, "notes") == "semantic"
    coll = get_collection(db, "notes")
    assert coll is not None and coll.chunking == "semantic"

    # Unchanged: skipped, whether the chunking is named again or left to the collection.
    for chunking in (None, "semantic"):
        again = pgrag.ingest_documents(db, [doc], collection="notes", chunking=chunking)
        assert [f.status for f in again.files] == ["unchanged"]
        assert again.chunks_embedded == 0
    # A changed document is chunked the collection's way without being told.
    changed = from_text("kitchen-and-geology", f"{TEXT} {VOLCANO}", title="Notes", format="text")
    pgrag.ingest_documents(db, [changed], collection="notes")
    assert all(t in BREAD or t in f"{VOLCANO} {VOLCANO}" for t in chunks_of(db, "notes"))

    # Another chunking is refused, and nothing changes ...
    with pytest.raises(InputError, match="is chunked 'semantic'"):
        pgrag.ingest_documents(db, [doc], collection="notes", chunking="fixed")
    assert recorded(db, "notes") == "semantic"
    # ... unless asked for: every document read is chunked again, unchanged or not.
    switched = pgrag.ingest_documents(
        db, [changed], collection="notes", chunking="fixed", rechunk=True
    )
    assert [(f.status, f.reason) for f in switched.files] == [("updated", "re-chunked")]
    assert recorded(db, "notes") == "fixed"
    assert len(chunks_of(db, "notes")) == 2 and chunks_of(db, "notes")[0].startswith(BREAD)

    # A new collection without a word is fixed, and records nothing.
    pgrag.ingest_documents(db, [doc], collection="plain")
    assert chunks_of(db, "plain") == [TEXT]
    assert recorded(db, "plain") is None


def test_rechunk_embeds_only_chunk_texts_not_stored(
    db: Database, embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = from_text("notes", TEXT, title="Notes", format="text")
    pgrag.ingest_documents(db, [doc], collection="c", chunking="semantic")
    before = chunks_of(db, "c")
    embedded: list[str] = []
    real = embedder.embed

    def spy(texts: Any) -> Any:
        embedded.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedder, "embed", spy)
    report = pgrag.ingest_documents(db, [doc], collection="c", rechunk=True)
    assert [(f.status, f.reason) for f in report.files] == [("updated", "re-chunked")]
    assert chunks_of(db, "c") == before
    # The sentences were embedded again to find the breaks; the chunks, the same texts as
    # before, kept their vectors.
    assert report.chunks_embedded == 0
    assert embedded and all(not t.startswith("Notes\n") for t in embedded)
    assert "Let the loaf cool on a rack before slicing it." in embedded


def run(dsn: str, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--dsn", dsn, *args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_cli_ingest_with_semantic_chunking(dsn: str, db: Database, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text(TEXT + "\n")
    (tmp_path / "guide.md").write_text(f"# Guide\n\n{BREAD} {VOLCANO}\n\n# Other\n\nShort.\n")
    first = run(dsn, "ingest", str(tmp_path), "--collection", "kb", "--chunking", "semantic")
    assert first.exit_code == 0, first.stderr
    assert "2 added" in first.stderr
    chunks = chunks_of(db, "kb")
    assert chunks == [BREAD, VOLCANO, "Short.", BREAD, VOLCANO]  # guide.md, then notes.txt
    assert recorded(db, "kb") == "semantic"

    again = run(dsn, "ingest", str(tmp_path), "--collection", "kb")
    assert again.exit_code == 0, again.stderr
    assert "0 added, 0 updated, 2 unchanged" in again.stderr

    refused = run(dsn, "ingest", str(tmp_path), "--collection", "kb", "--chunking", "fixed")
    assert refused.exit_code == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("error: collection 'kb' is chunked 'semantic', not 'fixed'")
    assert "Traceback" not in refused.stderr

    dry = run(
        dsn, "ingest", str(tmp_path), "--collection", "kb", "--chunking", "fixed", "--rechunk",
        "--dry-run",
    )  # fmt: skip
    assert dry.exit_code == 0, dry.stderr
    assert "updated" in dry.stdout and "re-chunked" in dry.stdout
    assert recorded(db, "kb") == "semantic" and chunks_of(db, "kb") == chunks  # nothing written

    switched = run(
        dsn, "ingest", str(tmp_path), "--collection", "kb", "--chunking", "fixed", "--rechunk"
    )
    assert switched.exit_code == 0, switched.stderr
    assert "2 updated" in switched.stderr
    assert recorded(db, "kb") == "fixed"
    assert chunks_of(db, "kb") == [TEXT, "Short.", TEXT]


def test_a_streamed_file_is_chunked_semantically_too(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag.ingest import loaders

    monkeypatch.setattr(loaders, "MAX_BYTES", 200)  # every file here is streamed
    path = tmp_path / "notes.md"
    path.write_text(f"# Notes\n\n{BREAD}\n\n{VOLCANO}\n")
    report = pgrag.ingest(db, [path], collection="big", chunking="semantic")
    assert [f.status for f in report.files] == ["added"]
    assert "streamed" in (report.files[0].reason or "")
    assert chunks_of(db, "big") == [BREAD, VOLCANO]
    again = pgrag.ingest(db, [path], collection="big")
    assert [f.status for f in again.files] == ["unchanged"]
    switched = pgrag.ingest(db, [path], collection="big", chunking="fixed", rechunk=True)
    assert [f.status for f in switched.files] == ["updated"]
    assert chunks_of(db, "big") == [TEXT]


def test_rechunk_gives_a_copy_chunks_of_its_own(db: Database) -> None:
    docs = [from_text(name, TEXT, title="Notes", format="text") for name in ("a", "b")]
    first = pgrag.ingest_documents(db, docs, collection="c")
    assert sorted(f.status for f in first.files) == ["added", "duplicate"]
    again = pgrag.ingest_documents(db, docs, collection="c", chunking="semantic", rechunk=True)
    assert {f.path: f.status for f in again.files} == {"a": "updated", "b": "updated"}
    # Both chunked the new way (no copy is left holding the old chunks); each text embedded once.
    assert chunks_of(db, "c") == [BREAD, VOLCANO, BREAD, VOLCANO]
    assert again.chunks_embedded == 2
