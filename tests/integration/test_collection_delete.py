"""`pgrag collections delete`: a collection goes with everything in it, in one transaction,
and its partition of the vectors after it; the other collections are untouched, and the
schema still matches this release."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.collection_removal import delete_collection
from pgrag.db.connect import Database
from pgrag.errors import CollectionNotFound, InputError
from pgrag.ingest.loaders import from_text

# What a collection leaves in each table, by its id.
LEFT = (
    "SELECT (SELECT count(*) FROM pgrag.documents WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.chunks WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.chunk_embeddings WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.keyword_postings WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.keyword_df WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.keyword_totals WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.collection_models WHERE collection_id = %(id)s),"
    " (SELECT count(*) FROM pgrag.collections WHERE id = %(id)s),"
    " to_regclass('pgrag.chunk_embeddings_c' || %(id)s) IS NOT NULL"
)


def _ingest(db: Database, collection: str, n: int) -> int:
    pgrag.ingest_documents(
        db,
        [
            from_text(f"{collection}/{i}.txt", f"Parcel {i} of {collection} ships on day {i}.")
            for i in range(n)
        ],
        collection=collection,
    )
    with psycopg.connect(db.dsn) as conn:
        row = conn.execute("SELECT id FROM pgrag.collections WHERE name = %s", (collection,))
        return int(row.fetchone()[0])


def _left(dsn: str, cid: int) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        return tuple(conn.execute(LEFT, {"id": cid}).fetchone())


def _cli(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--dsn", dsn, *args])


def test_a_deleted_collection_leaves_nothing_and_the_others_stay(db: Database) -> None:
    gone = _ingest(db, "parcels", 5)
    kept = _ingest(db, "letters", 3)
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgrag.queries (collection_id, question) VALUES (%s, 'a question')",
            (gone,),
        )
    before = _left(db.dsn, gone)
    assert before[:3] == (5, 5, 5) and all(before[3:])  # (everything is there to delete)
    kept_before = _left(db.dsn, kept)

    report = delete_collection(db, "parcels")
    assert (report.documents, report.chunks, report.partition) == (5, 5, "dropped")
    assert _left(db.dsn, gone) == (0, 0, 0, 0, 0, 0, 0, 0, False)
    assert _left(db.dsn, kept) == kept_before
    hits = pgrag.search(db, "parcel ships", collection="letters", mode="keyword")
    assert {h.source for h in hits} == {f"letters/{i}.txt" for i in range(3)}
    with pytest.raises(CollectionNotFound):
        pgrag.search(db, "parcel ships", collection="parcels")
    with psycopg.connect(db.dsn) as conn:
        # The question log keeps its entry, with no collection.
        logged = conn.execute("SELECT collection_id FROM pgrag.queries").fetchall()
    assert logged == [(None,)]
    checked = _cli(db.dsn, "db", "check")
    assert checked.exit_code == 0, checked.output
    # A name can be used again, for a new collection with a partition of its own.
    again = _ingest(db, "parcels", 1)
    assert again != gone and _left(db.dsn, again)[:3] == (1, 1, 1)


def test_the_command_asks_for_yes_and_names_what_would_go(db: Database) -> None:
    cid = _ingest(db, "drafts", 2)
    before = _left(db.dsn, cid)
    asked = _cli(db.dsn, "collections", "delete", "drafts")
    assert asked.exit_code == 1
    assert "would delete collection 'drafts' with 2 documents (2 chunks)" in asked.stderr
    assert "`pgrag collections delete drafts --yes` deletes it" in asked.stderr
    dry = _cli(db.dsn, "collections", "delete", "drafts", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout) == {
        "collection": "drafts",
        "documents": 2,
        "chunks": 2,
        "dry_run": True,
        "partition": "to drop",
    }
    assert _left(db.dsn, cid) == before  # (nothing changed)
    done = _cli(db.dsn, "collections", "delete", "drafts", "--yes")
    assert done.exit_code == 0, done.output
    assert "deleted collection 'drafts' with 2 documents (2 chunks)" in done.stderr
    assert _left(db.dsn, cid)[-2:] == (0, False)
    missing = _cli(db.dsn, "collections", "delete", "drafts", "--yes")
    assert missing.exit_code == 1
    assert "collection 'drafts' does not exist" in missing.stderr
    assert _cli(db.dsn, "collections", "delete", "no name", "--yes").exit_code != 0
    listed = _cli(db.dsn, "collections", "--json")  # (the group still lists)
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []


def test_principals_are_refused_before_anything_is_read(db: Database, dsn: str) -> None:
    cid = _ingest(db, "shared", 2)
    reader = pgrag.connect(dsn, principals=["alice"])
    try:
        with pytest.raises(InputError, match="principals alice may not read"):
            delete_collection(reader, "shared")
    finally:
        reader.close()
    assert _left(dsn, cid)[:2] == (2, 2)


def test_a_busy_vectors_table_leaves_the_partition_to_repair(db: Database) -> None:
    """Dropping the emptied partition waits at most a second for pgrag.chunk_embeddings: a
    transaction holding it (a long search) leaves the partition for `pgrag db repair`, and the
    collection is deleted all the same."""
    cid = _ingest(db, "busy", 2)
    holder = psycopg.connect(db.dsn)
    holder.execute("SELECT count(*) FROM pgrag.chunk_embeddings")  # (its lock, until rollback)
    try:
        started = time.monotonic()
        report = delete_collection(db, "busy")
        waited = time.monotonic() - started
    finally:
        holder.rollback()
        holder.close()
    assert report.partition.startswith("searches held pgrag.chunk_embeddings")
    assert "its empty partition of the vectors is left" in report.summary()
    assert waited < 30  # (a lock timeout, not a wait for the holder)
    assert _left(db.dsn, cid) == (0, 0, 0, 0, 0, 0, 0, 0, True)
    repaired = _cli(db.dsn, "db", "repair")
    assert repaired.exit_code == 0, repaired.output
    assert f"dropped pgrag.chunk_embeddings_c{cid}" in repaired.output
    assert _left(db.dsn, cid)[-1] is False


def test_an_ingest_waiting_on_the_collection_fails_cleanly(db: Database) -> None:
    """A delete locks the collection's row first: an ingest into it that is open when the
    delete starts makes the delete wait for it, and its documents go too (none is left in a
    collection that no longer exists)."""
    cid = _ingest(db, "raced", 1)
    writer = psycopg.connect(db.dsn)
    writer.execute(
        "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
        " VALUES (%s, 'raced/late.txt', 'h')",
        (cid,),
    )
    done: list[Any] = []
    deleting = threading.Thread(target=lambda: done.append(delete_collection(db, "raced")))
    deleting.start()
    time.sleep(1.0)
    assert deleting.is_alive()  # (waiting for the open ingest)
    writer.commit()
    writer.close()
    deleting.join(60)
    assert done and done[0].documents == 2
    assert _left(db.dsn, cid)[:2] == (0, 0)


def test_a_writer_deletes_and_leaves_the_partition_to_the_owner(db: Database) -> None:
    """A member of pgrag_writer may delete a collection (PostgreSQL checks its privileges on
    every table the delete touches); the partition is the schema owner's to drop."""
    cid = _ingest(db, "written", 2)
    role = "pgrag_test_deleter"
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE pgrag_writer")
    writer = pgrag.connect(psycopg.conninfo.make_conninfo(db.dsn, user=role))
    try:
        report = delete_collection(writer, "written")
    finally:
        writer.close()
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")
    assert report.documents == 2
    assert report.partition == "only the owner of schema pgrag may drop it (`pgrag db repair`)"
    assert _left(db.dsn, cid) == (0, 0, 0, 0, 0, 0, 0, 0, True)
    assert _cli(db.dsn, "db", "repair").exit_code == 0
    assert _left(db.dsn, cid)[-1] is False
