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

pytestmark = pytest.mark.matrix  # (partitions and foreign keys: scripts/test-matrix runs it)

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
    assert (report.documents, report.chunks, report.questions) == (5, 5, 1)
    assert (report.partition, report.indexes) == ("dropped", [])  # (letters uses the model)
    assert _left(db.dsn, gone) == (0, 0, 0, 0, 0, 0, 0, 0, False)
    assert _left(db.dsn, kept) == kept_before
    hits = pgrag.search(db, "parcel ships", collection="letters", mode="keyword")
    assert {h.source for h in hits} == {f"letters/{i}.txt" for i in range(3)}
    with pytest.raises(CollectionNotFound):
        pgrag.search(db, "parcel ships", collection="parcels")
    with psycopg.connect(db.dsn) as conn:
        # The question log's entry went too: it quoted the collection's documents.
        logged = conn.execute("SELECT count(*) FROM pgrag.queries").fetchone()
    assert logged == (0,)
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
    with psycopg.connect(db.dsn) as conn:
        model = conn.execute("SELECT model_id FROM pgrag.collections WHERE id = %s", (cid,))
        index = f"chunk_embeddings_hnsw_{model.fetchone()[0]}"
        assert conn.execute("SELECT to_regclass(%s)", (f"pgrag.{index}",)).fetchone() != (None,)
    # (its model's index goes too: no other collection uses the model)
    assert json.loads(dry.stdout) == {
        "collection": "drafts",
        "documents": 2,
        "chunks": 2,
        "questions": 0,
        "moved_out": 0,
        "moved_in": 0,
        "dry_run": True,
        "partition": "to drop",
        "indexes": [index],
        "indexes_left": [],
    }
    assert _left(db.dsn, cid) == before  # (nothing changed)
    done = _cli(db.dsn, "collections", "--json", "delete", "drafts", "--yes")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["indexes"] == [index]
    assert "deleted collection 'drafts' with 2 documents (2 chunks)" in done.stderr
    assert _left(db.dsn, cid)[-2:] == (0, False)
    with psycopg.connect(db.dsn) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f"pgrag.{index}",)).fetchone() == (None,)
    checked = _cli(db.dsn, "db", "check")  # (no stray index, no stray partition)
    assert checked.exit_code == 0, checked.output
    missing = _cli(db.dsn, "collections", "delete", "drafts", "--yes")
    assert missing.exit_code == 1
    assert "collection 'drafts' does not exist" in missing.stderr
    assert _cli(db.dsn, "collections", "delete", "no name", "--yes").exit_code != 0
    listed = _cli(db.dsn, "collections", "--json")  # (the group still lists)
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []


def test_a_session_reading_as_principals_is_refused(db: Database, dsn: str) -> None:
    """However the principals are set: by the connection, or by the role's own setting (which
    a writer's session takes without naming them)."""
    cid = _ingest(db, "shared", 2)
    reader = pgrag.connect(dsn, principals=["alice"])
    try:
        with pytest.raises(InputError, match=r"reads as principals \(alice, public\)"):
            delete_collection(reader, "shared")
    finally:
        reader.close()
    role = "pgrag_test_principled_writer"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE pgrag_writer")
        conn.execute(f"ALTER ROLE {role} SET pgrag.principals = 'bob'")
    writer = pgrag.connect(psycopg.conninfo.make_conninfo(dsn, user=role))
    try:
        with pytest.raises(InputError, match=r"reads as principals \(bob, public\)"):
            delete_collection(writer, "shared")
    finally:
        writer.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")
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
    # Its model is used by no collection now: its index is left too, and named.
    assert report.indexes == [] and len(report.indexes_left) == 1, report
    assert f"left for `pgrag db repair`: {report.indexes_left[0]}" in report.summary()
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

    def delete(database: Database) -> None:
        try:
            done.append(delete_collection(database, "raced"))
        except CollectionNotFound as err:
            done.append(err)

    other = pgrag.connect(db.dsn)
    deleting = [threading.Thread(target=delete, args=(d,)) for d in (db, other)]
    for thread in deleting:
        thread.start()
    time.sleep(1.0)
    assert all(t.is_alive() for t in deleting)  # (both wait for the open ingest)
    writer.commit()
    writer.close()
    for thread in deleting:
        thread.join(60)
    other.close()
    # One deleted it, with the ingest's document; the other found it gone.
    reports = [d for d in done if not isinstance(d, Exception)]
    assert len(reports) == 1 and reports[0].documents == 2, done
    assert any(isinstance(d, CollectionNotFound) for d in done), done
    assert _left(db.dsn, cid)[:2] == (0, 0)


def test_a_writer_deletes_and_leaves_the_partition_to_the_owner(db: Database) -> None:
    """A member of pgrag_writer may delete a collection (PostgreSQL checks its privileges on
    every table the delete touches); the partition is the schema owner's to drop."""
    cid = _ingest(db, "written", 2)
    _ingest(db, "other", 1)  # (same model: its index stays, so only the partition is left)
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
    assert _cli(db.dsn, "db", "check").exit_code == 0  # (a left partition is no difference)
    repaired = _cli(db.dsn, "db", "repair")  # (but repair drops it)
    assert repaired.exit_code == 0, repaired.output
    assert f"dropped pgrag.chunk_embeddings_c{cid}" in repaired.output
    assert _left(db.dsn, cid)[-1] is False


def test_an_ingest_whose_collection_went_says_so(db: Database) -> None:
    """An ingest's batch locks its collection's row: when the collection was deleted in the
    meantime, it stops with that reason (not with a model switch)."""
    from dataclasses import replace

    from pgrag.collections import get_collection
    from pgrag.ingest.writer import lock_collection

    _ingest(db, "fleeting", 1)
    coll = get_collection(db, "fleeting")
    assert coll is not None
    delete_collection(db, "fleeting")
    with psycopg.connect(db.dsn) as conn:
        with pytest.raises(CollectionNotFound, match="'fleeting' was deleted during this ingest"):
            lock_collection(conn, coll)
        with pytest.raises(CollectionNotFound):
            lock_collection(conn, replace(coll, id=coll.id + 1000))


def test_chunks_moved_between_collections_are_counted(db: Database) -> None:
    """A chunk may be moved to another collection than its document's (pgrag lets SQL do
    that): it goes with its document, and a chunk moved in goes with the collection; the
    report says how many of each, before anything is deleted."""
    here = _ingest(db, "here", 2)
    there = _ingest(db, "there", 2)
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgrag.chunks SET collection_id = %s WHERE id IN"
            " (SELECT id FROM pgrag.chunks WHERE collection_id = %s ORDER BY id LIMIT 1)",
            (there, here),
        )
    dry = delete_collection(db, "here", dry_run=True)
    assert (dry.documents, dry.chunks, dry.moved_out, dry.moved_in) == (2, 1, 1, 0)
    assert "1 chunks of its documents in other collections go too" in dry.summary()
    into = delete_collection(db, "there", dry_run=True)
    assert (into.documents, into.chunks, into.moved_out, into.moved_in) == (2, 3, 0, 1)
    assert "leaving those documents without them" in into.summary()
    report = delete_collection(db, "here")
    assert report.moved_out == 1
    assert _left(db.dsn, there)[:2] == (2, 2)  # (the moved chunk went with its document)
