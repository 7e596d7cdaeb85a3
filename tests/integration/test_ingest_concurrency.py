"""Ingests beside searches and beside each other: the model's HNSW index (shared by every
collection of the model) is never taken away, a missing or invalid one is reported and built
again, and concurrent ingests wait only for the documents they share."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.embeddings import index
from pgrag.embeddings.worker import index_status
from pgrag.embeddings.worker import run as run_worker
from pgrag.ingest import writer
from pgrag.ingest.document import from_text
from tests.tables import read_table

SAFETY = 240  # seconds: only so that a broken build fails instead of hanging


def _model_index(dsn: str, collection: str) -> tuple[int, str, int | None, bool | None]:
    """From a connection of its own: the collection's model, its index, the index's oid and
    whether it is valid (None, None when it is missing)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        model_id = conn.execute(
            "SELECT model_id FROM pgrag.collections WHERE name = %s", (collection,)
        ).fetchone()[0]
        name = f"pgrag.chunk_embeddings_hnsw_{model_id}"
        row = conn.execute(
            "SELECT i.indexrelid::bigint, i.indisvalid FROM pg_index i"
            " WHERE i.indexrelid = to_regclass(%s)",
            (name,),
        ).fetchone()
    return model_id, name, *(row or (None, None))


def _state(db: Database, model_id: int) -> str:
    return next(m["state"] for m in index_status(db) if m["model_id"] == model_id)


@pytest.fixture
def second(dsn: str, embedder: Any) -> Iterator[Database]:
    """Another client of the same database."""
    other = pgrag.connect(dsn, embedder=embedder)
    yield other
    other.close()


def test_a_bulk_ingest_leaves_the_shared_index_in_place_and_searchable(
    db: Database, second: Database, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus], collection="y")  # another collection of the same model
    model_id, name, oid, valid = _model_index(db.dsn, "y")
    assert oid is not None and valid
    seen: list[tuple[int | None, bool | None, bool]] = []

    def mid_load(done: int, total: int) -> None:
        # From other sessions while the load goes on: the same index, valid, and the other
        # collection searchable.
        _, _, now, ok = _model_index(db.dsn, "y")
        seen.append((now, ok, bool(pgrag.search(second, "refund", collection="y"))))

    docs = [
        from_text(f"note-{i}", f"Note {i}: parcel {i * 7} for unit {i} arrived on day {i % 28}.")
        for i in range(1000)
    ]
    report = pgrag.ingest_documents(
        db, docs, collection="x", on_batch=mid_load, bulk_threshold=1000
    )
    assert report.chunks_written == 1000
    assert len(seen) > 3
    assert all(s == (oid, True, True) for s in seen), seen
    assert _model_index(db.dsn, "y")[2:] == (oid, True)
    assert pgrag.search(second, "refund", collection="y")


def test_ingests_lock_new_and_rewritten_documents_in_source_order_and_never_deadlock(
    dsn: str, embedder: Any, monkeypatch: Any
) -> None:
    # New documents are inserted a run at a time; they must still be locked in source order
    # with the rewritten ones. B plans a and b as rewrites; b is then deleted; A plans a as a
    # rewrite and b as new. Were A to insert its new b before rewriting a, A would hold b and
    # wait for a while B holds a and waits for b: a deadlock, and one ingest aborted.
    import time

    import numpy as np

    rng = np.random.default_rng(0)

    def doc(source: str, version: int) -> Any:
        vector = rng.standard_normal(384).tolist()
        return from_text(source, f"{source} version {version}", vector=vector)

    setup = pgrag.connect(dsn, embedder=embedder)
    pgrag.ingest_documents(setup, [doc("a", 1), doc("b", 1)], collection="dl")
    b_planned, b_deleted, a_planned = threading.Event(), threading.Event(), threading.Event()
    both = threading.Barrier(2, timeout=SAFETY)
    real = writer.replace_document

    def slow(conn: Any, coll: Any, d: Any, principals: Any) -> Any:
        # Each writer's first lock is held a while before it asks for its second.
        if (threading.current_thread().name, d.file.source) in (("A", "a"), ("B", "b")):
            time.sleep(1.0)
        return real(conn, coll, d, principals)

    monkeypatch.setattr(writer, "replace_document", slow)

    def ingest(docs: list[Any], on_plan: Any) -> Any:
        db = pgrag.connect(dsn, embedder=embedder)
        try:
            report = pgrag.ingest_documents(db, docs, collection="dl", on_plan=on_plan)
            return sorted((f.path, f.status) for f in report.files)
        finally:
            db.close()

    def b_hook(_: int) -> None:
        b_planned.set()
        b_deleted.wait(SAFETY)
        a_planned.wait(SAFETY)
        both.wait()

    def a_hook(_: int) -> None:
        a_planned.set()
        both.wait()

    b, b_result = _thread("B", lambda: ingest([doc("a", 2), doc("b", 2)], b_hook))
    b.start()
    assert b_planned.wait(SAFETY)
    setup.conn.execute("DELETE FROM pgrag.documents WHERE source = 'b'")
    setup.conn.commit()
    b_deleted.set()
    a, a_result = _thread("A", lambda: ingest([doc("a", 3), doc("b", 3)], a_hook))
    a.start()
    a.join(SAFETY)
    b.join(SAFETY)
    setup.close()
    assert a_result == [[("a", "updated"), ("b", "added")]], a_result
    assert b_result == [[("a", "updated"), ("b", "updated")]], b_result


@pytest.mark.parametrize(
    ("stored", "a_docs", "b_docs", "slow"),
    [
        # A's copy d locks its original a late; B rewrites a, then b.
        (
            [("a", "same"), ("b", "b 1")],
            [("b", "b 2"), ("d", "same")],
            [("a", "a 2"), ("b", "b 3")],
            (("A", "b"), ("B", "a")),
        ),
        # B's rewrite of a hands its content over to its copy z, locking z early; A rewrites
        # m, then z.
        (
            [("a", "same"), ("m", "m 1"), ("z", "same")],
            [("m", "m 2"), ("z", "z 2")],
            [("a", "a 2"), ("m", "m 3")],
            (("A", "m"), ("B", "a")),
        ),
    ],
    ids=["copy-locks-its-original", "rewrite-locks-its-copies"],
)
def test_ingests_with_copies_lock_every_document_they_touch_in_source_order(
    dsn: str,
    embedder: Any,
    monkeypatch: Any,
    stored: list[tuple[str, str]],
    a_docs: list[tuple[str, str]],
    b_docs: list[tuple[str, str]],
    slow: tuple[tuple[str, str], ...],
) -> None:
    # A copy locks its original, and a rewrite locks the copies it hands its content to:
    # rows outside the batch's own order. Both ingests must finish (neither gets "deadlock
    # detected").
    import time

    def doc(source: str, text: str) -> Any:
        return from_text(source, f"Content: {text}.", title="T")

    setup = pgrag.connect(dsn, embedder=embedder)
    pgrag.ingest_documents(setup, [doc(s, t) for s, t in stored], collection="dl")
    setup.close()
    real = writer.replace_document

    def held(conn: Any, coll: Any, d: Any, principals: Any) -> Any:
        out = real(conn, coll, d, principals)
        if (threading.current_thread().name, d.file.source) in slow:
            time.sleep(1.5)  # holding what it locked, before it asks for more
        return out

    monkeypatch.setattr(writer, "replace_document", held)
    both = threading.Barrier(2, timeout=SAFETY)

    def ingest(docs: list[tuple[str, str]]) -> Any:
        db = pgrag.connect(dsn, embedder=embedder)
        try:
            report = pgrag.ingest_documents(
                db, [doc(s, t) for s, t in docs], collection="dl", on_plan=lambda _: both.wait()
            )
            return sorted((f.path, f.status, f.reason or "") for f in report.files)
        finally:
            db.close()

    a, a_result = _thread("A", lambda: ingest(a_docs))
    b, b_result = _thread("B", lambda: ingest(b_docs))
    a.start()
    b.start()
    a.join(SAFETY)
    b.join(SAFETY)
    for result in (a_result, b_result):
        assert len(result) == 1 and not isinstance(result[0], BaseException), result
        # (A copy whose original the other ingest rewrote first fails, saying so.)
        assert all(
            status != "failed" or "changed during this ingest; run the ingest again" in why
            for _, status, why in result[0]
        ), result


def _notes(n: int) -> list[Any]:
    return [
        from_text(f"note-{i}", f"Note {i}: parcel {i * 7} for unit {i} arrived on day {i % 28}.")
        for i in range(n)
    ]


def test_a_first_bulk_load_builds_the_empty_index_once_after_it(db: Database) -> None:
    # No vector of the model is stored yet: its (empty) index is dropped for the load, which
    # writes into the table alone, and built once at the end -- valid, the one searches use.
    seen: list[int | None] = []

    def mid_load(done: int, total: int) -> None:
        if 0 < done < total:
            seen.append(_model_index(db.dsn, "x")[2])

    report = pgrag.ingest_documents(
        db, _notes(300), collection="x", on_batch=mid_load, batch_chunks=64, bulk_threshold=300
    )
    assert report.chunks_written == 300
    assert seen and all(oid is None for oid in seen), seen
    model_id, _, oid, valid = _model_index(db.dsn, "x")
    assert oid is not None and valid
    assert _state(db, model_id) == "ok"
    hits = pgrag.search(db, "parcel for unit 17", collection="x", mode="vector", k=3)
    assert "note-17" in [h.source for h in hits], hits


def test_a_first_bulk_load_keeps_the_index_live_while_another_session_is_in_a_transaction(
    db: Database,
) -> None:
    # A transaction open elsewhere (an idle session left in one) would hold the build after
    # the load back: the empty index is then not dropped.
    seen: list[int | None] = []

    def mid_load(done: int, total: int) -> None:
        if 0 < done < total:
            seen.append(_model_index(db.dsn, "x")[2])

    with psycopg.connect(db.dsn) as idle:
        idle.execute("SELECT 1")  # idle in transaction from here
        pgrag.ingest_documents(
            db, _notes(300), collection="x", on_batch=mid_load, batch_chunks=64,
            bulk_threshold=300,
        )  # fmt: skip
        oid = _model_index(db.dsn, "x")[2]
    assert oid is not None and seen and all(o == oid for o in seen), (seen, oid)


def test_an_index_set_aside_is_built_in_a_transaction_when_the_concurrent_build_gives_up(
    db: Database,
) -> None:
    # A transaction that begins during the load and is still open at its end holds
    # CREATE INDEX CONCURRENTLY back; the ingest then builds the index in a transaction (which
    # waits for writers only), rather than leave the index it took away missing.
    holder = psycopg.connect(db.dsn)
    # (Its snapshot held to the end: a read-committed one between statements holds none.)
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    warnings: list[tuple[str, str]] = []

    def mid_load(done: int, total: int) -> None:
        if 0 < done < total and _model_index(db.dsn, "x")[2] is None:
            holder.execute("SELECT count(*) FROM pgrag.documents")  # and stays open

    try:
        pgrag.ingest_documents(
            db, _notes(300), collection="x", on_batch=mid_load, batch_chunks=64,
            bulk_threshold=300, on_warning=lambda what, why: warnings.append((what, why)),
        )  # fmt: skip
        assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        model_id, _, oid, valid = _model_index(db.dsn, "x")
    finally:
        holder.close()
    assert oid is not None and valid and _state(db, model_id) == "ok"
    assert warnings == []


def test_a_failed_first_bulk_load_builds_the_index_it_took_away(
    db: Database, monkeypatch: Any
) -> None:
    # A load that fails part-way has committed whole batches without the index; it is built
    # before the error is raised.
    real = writer.copy_chunks
    calls: list[int] = []

    def failing(conn: Any, chunk_rows: Any, vector_rows: Any) -> None:
        calls.append(len(chunk_rows))
        if len(calls) == 3:
            raise RuntimeError("the disk is full")
        real(conn, chunk_rows, vector_rows)

    monkeypatch.setattr(writer, "copy_chunks", failing)
    with pytest.raises(RuntimeError, match="the disk is full"):
        pgrag.ingest_documents(db, _notes(300), collection="x", batch_chunks=64, bulk_threshold=300)
    model_id, _, oid, valid = _model_index(db.dsn, "x")
    assert oid is not None and valid and _state(db, model_id) == "ok"
    written = db.conn.execute("SELECT count(*) FROM pgrag.chunk_embeddings").fetchone()[0]
    db.conn.commit()
    assert written == 128  # the two batches before the failure


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_pgrag_ingest_stopped_during_a_first_bulk_load_builds_the_index_it_took_away(
    db: Database, tmp_path: Path, stop: str
) -> None:
    # systemd and Kubernetes stop with SIGTERM (the CLI unwinds: SystemExit), a user with
    # Ctrl-C (KeyboardInterrupt): neither is an Exception, and each used to leave the index
    # missing. The batches written stay; the index is built before the process ends.
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    import numpy as np

    rng = np.random.default_rng(3)
    path = tmp_path / "many.jsonl"
    with path.open("w") as fh:
        for i in range(10000):  # (the window to stop it in lasts while these are written)
            vector = [round(float(x), 5) for x in rng.standard_normal(384)]
            fh.write(json.dumps({"id": i, "text": f"Record {i}.", "embedding": vector}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgrag.cli", "--dsn", db.dsn, "ingest", str(path), "-c", "x"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # (a child of a shell without job control would ignore SIGINT)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + SAFETY
    with psycopg.connect(db.dsn, autocommit=True) as watch:
        while time.monotonic() < deadline and proc.poll() is None:
            # (one row is enough to know: a count of a growing table made each poll slower,
            # and a CI run missed the window)
            row = watch.execute(
                "SELECT to_regclass('pgrag.chunk_embeddings_hnsw_' || e.model_id) IS NULL"
                " FROM (SELECT model_id FROM pgrag.chunk_embeddings LIMIT 1) e"
            ).fetchone()
            if row and row[0]:  # loading, the index set aside
                proc.send_signal(getattr(signal, stop))
                break
            time.sleep(0.02)
    _, stderr = proc.communicate(timeout=SAFETY)
    assert proc.returncode != 0, "the load finished before it could be stopped"
    model_id, _, oid, valid = _model_index(db.dsn, "x")
    assert oid is not None and valid, stderr
    assert _state(db, model_id) == "ok"
    stored = db.conn.execute("SELECT count(*) FROM pgrag.chunk_embeddings").fetchone()[0]
    db.conn.commit()
    assert 0 < stored < 6000


def test_a_bulk_load_keeps_an_empty_index_it_may_not_drop_or_that_is_not_bulk(
    db: Database, writer_dsn: str, embedder: Any
) -> None:
    # Below the bulk threshold, or for a role that does not own the table, the empty index
    # stays where it is and takes the vectors live.
    for name, target, threshold in (("small", db, 1000), ("writer", None, 1)):
        who = target or pgrag.connect(writer_dsn, embedder=embedder)
        try:
            seen: list[int | None] = []
            collection = f"c-{name}"

            def mid_load(done: int, total: int, c: str = collection, s: list = seen) -> None:
                if 0 < done < total:
                    s.append(_model_index(db.dsn, c)[2])

            pgrag.ingest_documents(
                who, _notes(200), collection=collection, on_batch=mid_load, batch_chunks=64,
                bulk_threshold=threshold,
            )  # fmt: skip
            oid = _model_index(db.dsn, collection)[2]
            assert oid is not None and seen and all(o == oid for o in seen), (name, seen, oid)
        finally:
            if target is None:
                who.close()
        # (The next case starts from an empty model again.)
        db.conn.execute("DELETE FROM pgrag.collections WHERE name = %s", (collection,))
        db.conn.commit()


def test_status_reports_missing_invalid_and_building_indexes_and_they_are_built_again(
    db: Database, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus], collection="y")
    model_id, name, oid, _ = _model_index(db.dsn, "y")
    assert _state(db, model_id) == "ok"
    rows = pgrag.embeddings.worker.status(db)
    assert [r["index"] for r in rows] == ["ok"]

    db.conn.execute(f"DROP INDEX {name}")
    db.conn.commit()
    assert _state(db, model_id) == "missing"
    shown = CliRunner().invoke(cli, ["--dsn", db.dsn, "status"])
    assert shown.exit_code == 0, shown.output
    [row] = read_table(shown.stdout)
    assert row["INDEX"] == "missing"
    assert f"warning: index {name.split('.')[1]} of model " in shown.stderr
    assert "is missing: searches read every vector" in shown.stderr

    # Another session building it: reported as such, and an ingest does not wait for it.
    with psycopg.connect(db.dsn, autocommit=True) as builder:
        builder.execute("SELECT pg_advisory_lock(hashtext('pgrag.model_index'), %s)", (model_id,))
        assert _state(db, model_id) == "building"
        assert _write_one(db, "y", "while-building") == 1
        assert _model_index(db.dsn, "y")[2] is None
    # An ingest with nothing to write leaves it to one that writes (it never waits on a build).
    assert pgrag.ingest(db, [corpus], collection="y").chunks_written == 0
    assert _model_index(db.dsn, "y")[2] is None
    assert _write_one(db, "y", "after-building") == 1
    _, _, rebuilt, valid = _model_index(db.dsn, "y")
    assert rebuilt is not None and valid and _state(db, model_id) == "ok"

    # What an interrupted CREATE INDEX CONCURRENTLY leaves: an invalid index. The worker
    # builds it again on start.
    db.conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s", (rebuilt,))
    db.conn.commit()
    assert _state(db, model_id) == "invalid"
    assert [r["index"] for r in pgrag.embeddings.worker.status(db)] == ["invalid"]
    run_worker(db, once=True)
    _, _, again, valid = _model_index(db.dsn, "y")
    assert again not in (None, rebuilt) and valid and _state(db, model_id) == "ok"
    assert index.ensure(db, model_id) is False  # valid: left alone


def _write_one(db: Database, collection: str, name: str) -> int:
    """Ingest one new document; the chunks written."""
    doc = from_text(name, f"A note called {name} about the refund window of parcels.")
    return pgrag.ingest_documents(db, [doc], collection=collection).chunks_written


def _pause_in_write(stop_in: threading.Thread | None = None) -> tuple[Any, threading.Event]:
    """A copy_chunks that, in the given thread, waits inside the write transaction (its rows
    written, not committed) until released; returns it and the event that says it is there."""
    inside = threading.Event()
    release = threading.Event()
    original = writer.copy_chunks

    def paused(conn: Any, chunk_rows: Any, vector_rows: Any) -> None:
        original(conn, chunk_rows, vector_rows)
        if threading.current_thread().name == "held":
            inside.set()
            assert release.wait(SAFETY)

    paused.release = release  # type: ignore[attr-defined]
    return paused, inside


def _thread(name: str, target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(target())
        except BaseException as err:  # noqa: BLE001 - handed to the test
            result.append(err)

    return threading.Thread(target=run, name=name, daemon=True), result


def test_ingests_into_two_collections_of_one_model_go_side_by_side(
    db: Database, second: Database, corpus: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    pgrag.ingest(db, [corpus], collection="y")
    paused, inside = _pause_in_write()
    monkeypatch.setattr(writer, "copy_chunks", paused)
    # A load into x, held inside its first write transaction (bulk: an older release dropped
    # the shared index for it, and the other ingest then waited to build it again).
    # (More chunks than the model has vectors: what made an older release's load "bulk".)
    notes = [from_text(f"x-{i}", f"Shipment {i} left dock {i % 4} at hour {i}.") for i in range(40)]
    held, held_result = _thread(
        "held",
        lambda: pgrag.ingest_documents(second, notes, collection="x", bulk_threshold=1),
    )
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "parking.md").write_text("# Parking\n\nVisitors park on level two.\n")
    waits: list[str] = []
    other, other_result = _thread(
        "other",
        lambda: pgrag.ingest(db, [corpus, extra], collection="y", on_wait=waits.append),
    )
    held.start()
    try:
        assert inside.wait(SAFETY), held_result
        other.start()
        other.join(SAFETY)
        assert not other.is_alive(), f"the ingest into y waited for x: {waits}"
        assert held.is_alive() and not held_result, "x's transaction was still open"
        assert other_result[0].chunks_written > 0, other_result
    finally:
        paused.release.set()
        held.join(SAFETY)
        if other.ident is not None:  # (before the fixtures close the connection it uses)
            other.join(SAFETY)
    assert not isinstance(held_result[0], BaseException), held_result
    assert held_result[0].chunks_written == 40
    assert pgrag.search(db, "parking level", collection="y")


def test_ingests_into_one_collection_wait_only_for_the_documents_they_share(
    db: Database, tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha text about refunds.\n")
    pgrag.ingest(db, [folder], collection="x")
    (folder / "a.md").write_text("# A\n\nAlpha text about refunds, changed.\n")
    (tmp_path / "b.md").write_text("# B\n\nBeta text about badges.\n")
    with psycopg.connect(db.dsn) as holder:
        # Another writer holds document a (its transaction open).
        holder.execute("UPDATE pgrag.documents SET title = 'held' WHERE source LIKE '%%/a.md'")
        holder_pid = holder.info.backend_pid
        # A document it does not hold goes in at once...
        assert pgrag.ingest(db, [tmp_path / "b.md"], collection="x").chunks_written == 1
        # ...the one it holds waits, and says for whom.
        told = threading.Event()
        waits: list[str] = []

        def on_wait(line: str) -> None:
            waits.append(line)
            told.set()

        waiting, result = _thread(
            "waiting", lambda: pgrag.ingest(db, [folder], collection="x", on_wait=on_wait)
        )
        waiting.start()
        assert told.wait(SAFETY), "no word of the wait"
        assert waiting.is_alive() and not result
        assert f"(pid {holder_pid})" in waits[0] and waits[0].startswith("waiting for "), waits
        assert "idle in a transaction" in waits[0], waits
        holder.commit()
    waiting.join(SAFETY)
    assert not waiting.is_alive()
    assert not isinstance(result[0], BaseException), result
    assert result[0].chunks_written == 1


def test_repair_leaves_an_index_being_built_to_its_builder(db: Database, corpus: Path) -> None:
    from pgrag.db import repair

    pgrag.ingest(db, [corpus], collection="y")
    model_id, name, _, _ = _model_index(db.dsn, "y")
    db.conn.execute(f"DROP INDEX {name}")
    db.conn.commit()
    with psycopg.connect(db.dsn, autocommit=True) as builder:
        builder.execute("SELECT pg_advisory_lock(hashtext('pgrag.model_index'), %s)", (model_id,))
        done, _ = repair.repair_database(db.dsn)
        assert any(
            line.startswith(f"not done: build {name}") and "another session" in line
            for line in done
        ), done
        assert _model_index(db.dsn, "y")[2] is None
    done, left = repair.repair_database(db.dsn)  # the builder went away without building it
    assert any(line.startswith(f"built {name}") for line in done), done
    assert _model_index(db.dsn, "y")[3] is True


@pytest.fixture
def writer_dsn(db: Database) -> Iterator[str]:
    """A login role with pgrag_writer only: it may not build an index CONCURRENTLY."""
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    role = f"w_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgrag_writer").format(sql.Identifier(role))
        )
    yield make_conninfo(db.dsn, user=role)
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_writer_builds_a_missing_index_only_when_no_writer_would_wait_for_it(
    db: Database, corpus: Path, writer_dsn: str, embedder: Any
) -> None:
    pgrag.ingest(db, [corpus], collection="y")
    _, name, _, _ = _model_index(db.dsn, "y")
    db.conn.execute(f"DROP INDEX {name}")
    db.conn.commit()
    writer_db = pgrag.connect(writer_dsn, embedder=embedder)
    try:
        with psycopg.connect(db.dsn) as other_writer:
            # What another ingest's open batch holds on the table.
            other_writer.execute("LOCK TABLE pgrag.chunk_embeddings IN ROW EXCLUSIVE MODE")
            # The build (in a transaction, for this role) would queue behind it and hold every
            # writer back: the ingest goes on without it.
            ingest, result = _thread("writer", lambda: _write_one(writer_db, "y", "busy"))
            ingest.start()
            ingest.join(SAFETY)
            assert not ingest.is_alive(), "the writer's ingest waited to build the index"
            assert result[0] == 1, result
            assert _model_index(db.dsn, "y")[2] is None
        assert _write_one(writer_db, "y", "table-free") == 1
        assert _model_index(db.dsn, "y")[3] is True  # built once the table was free
    finally:
        writer_db.close()


def test_pgrag_ingest_says_on_stderr_what_it_waits_for(db: Database, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha text about refunds.\n")
    pgrag.ingest(db, [folder], collection="x")
    (folder / "a.md").write_text("# A\n\nAlpha text about refunds, changed.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    with psycopg.connect(db.dsn) as holder:
        holder.execute("UPDATE pgrag.documents SET title = 'held'")
        holder_pid = holder.info.backend_pid
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgrag.cli", "--dsn", db.dsn, "ingest", str(folder), "-c", "x"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        told = threading.Event()
        lines: list[str] = []

        def read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.append(line)
                if line.startswith("waiting for "):
                    told.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert told.wait(SAFETY), lines
            assert proc.poll() is None  # still waiting
        finally:
            holder.commit()
        assert proc.wait(SAFETY) == 0, lines
    reader.join(SAFETY)
    said = next(line for line in lines if line.startswith("waiting for "))
    assert f"(pid {holder_pid})" in said and "holding" in said, said
    assert any("1 updated" in line for line in lines), lines
