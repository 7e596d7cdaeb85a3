"""Building a model's HNSW index again without holding anyone up: a no-op ingest never builds
it, a build that would wait for another session's transaction is given up with a warning
that names the session, a build whose connection the server ends is reported in one line, and
an index built otherwise than pgrag builds it is found and built again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgrag
from pgrag.db import drift
from pgrag.db.connect import Database
from pgrag.embeddings import index
from pgrag.embeddings.worker import run as run_worker
from pgrag.errors import DatabaseError
from pgrag.ingest import writer
from pgrag.ingest.document import from_text

SAFETY = 240  # seconds: only so that a hang fails instead of blocking the suite


def _index(dsn: str, model_id: int) -> tuple[int | None, bool | None]:
    """From a connection of its own: the index's oid and whether it is valid."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT i.indexrelid::bigint, i.indisvalid FROM pg_index i"
            " WHERE i.indexrelid = to_regclass(%s)",
            (f"pgrag.chunk_embeddings_hnsw_{model_id}",),
        ).fetchone()
    return (row[0], row[1]) if row else (None, None)


def _state(db: Database, model_id: int) -> str:
    return next(h.state for h in index.health(db) if h.model_id == model_id)


def _in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(target())
        except BaseException as err:  # noqa: BLE001 - handed to the test
            result.append(err)

    thread = threading.Thread(target=run, name="held", daemon=True)
    thread.start()
    return thread, result


def _doc(name: str) -> Any:
    return from_text(name, f"A note called {name} about the refund window of parcels.")


@pytest.fixture
def model_id(db: Database, corpus: Path) -> int:
    """A collection "y" ingested, its model's index then dropped."""
    pgrag.ingest(db, [corpus], collection="y")
    mid = int(db.conn.execute("SELECT model_id FROM pgrag.collections").fetchone()[0])
    db.conn.execute(f"DROP INDEX pgrag.chunk_embeddings_hnsw_{mid}")
    db.conn.commit()
    return mid


@pytest.fixture
def old_reader(db: Database) -> Iterator[psycopg.Connection[Any]]:
    """A read-only REPEATABLE READ transaction left open (as pg_dump holds one): a CREATE
    INDEX CONCURRENTLY waits for it to end."""
    with psycopg.connect(db.dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM pgrag.chunks").fetchone()
        yield conn
        conn.rollback()


def test_a_noop_ingest_does_not_wait_on_an_index_build_behind_an_old_transaction(
    db: Database, corpus: Path, model_id: int, old_reader: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(db.dsn, autocommit=True) as other:  # some write after the reader
        other.execute("UPDATE pgrag.collections SET name = name")
    ingest, result = _in_thread(lambda: pgrag.ingest(db, [corpus], collection="y"))
    ingest.join(SAFETY)
    try:
        assert not ingest.is_alive(), "a no-op ingest waited on an index build"
    finally:
        old_reader.rollback()
    assert result[0].chunks_written == 0, result
    assert _index(db.dsn, model_id) == (None, None)  # left for an ingest that writes


def test_a_build_that_would_wait_for_an_old_transaction_is_given_up_with_a_warning(
    db: Database, model_id: int, old_reader: psycopg.Connection[Any]
) -> None:
    reader_pid = old_reader.info.backend_pid
    waits: list[str] = []
    warnings: list[tuple[str, str]] = []
    ingest, result = _in_thread(
        lambda: pgrag.ingest_documents(
            db,
            [_doc("fresh")],
            collection="y",
            on_wait=waits.append,
            on_warning=lambda what, why: warnings.append((what, why)),
        )
    )
    ingest.join(SAFETY)
    try:
        assert not ingest.is_alive(), "the ingest waited for the old transaction"
    finally:
        old_reader.rollback()
    assert not isinstance(result[0], BaseException), result
    assert result[0].chunks_written == 1  # the load went on
    name = f"chunk_embeddings_hnsw_{model_id}"
    said = [w for w in waits if w.startswith(f"building index {name}: waiting for ")]
    assert any(f"(pid {reader_pid})" in w for w in said), waits
    assert any("older than the index build" in w for w in said), waits
    [(what, why)] = warnings
    assert what == f"index {name}"
    assert why.startswith("not built: the build gave up after ") and f"(pid {reader_pid})" in why
    assert "\n" not in why
    # Nothing half-built is left in the table's way: the next run builds it.
    assert _index(db.dsn, model_id) == (None, None)
    assert _state(db, model_id) == "missing"

    # The worker does not wait either, and says so; once the reader is gone it builds it.
    with psycopg.connect(db.dsn) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM pgrag.chunks").fetchone()
        lines: list[str] = []
        worker, done = _in_thread(lambda: run_worker(db, once=True, on_wait=lines.append))
        worker.join(SAFETY)
        try:
            assert not worker.is_alive(), "the worker waited for the old transaction"
        finally:
            reader.rollback()
        assert not isinstance(done[0], BaseException), done
        assert any(line.startswith(f"warning: index {name}: not built") for line in lines)
    run_worker(db, once=True)
    assert _index(db.dsn, model_id)[1] is True


def _terminate_build_once_it_waits(dsn: str) -> threading.Thread:
    """Terminate the backend running CREATE INDEX CONCURRENTLY once it waits."""

    def kill() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + SAFETY
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE query ILIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock'"
                ).fetchone()
                if row and row[0]:
                    return
                time.sleep(0.05)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    return killer


def test_a_build_whose_backend_is_terminated_is_one_line_and_left_for_the_next_run(
    db: Database, model_id: int, old_reader: psycopg.Connection[Any]
) -> None:
    name = f"chunk_embeddings_hnsw_{model_id}"
    # Waited for (pgrag models reembed): a one-line error naming the build.
    killer = _terminate_build_once_it_waits(db.dsn)
    with pytest.raises(DatabaseError) as caught:
        index.ensure(db, model_id, wait=True)
    killer.join(SAFETY)
    message = str(caught.value)
    assert message.startswith(f"building index {name} failed: the server ended the connection")
    assert "\n" not in message and "the connection is closed" not in message
    assert _index(db.dsn, model_id)[1] is False  # left invalid for the next run

    # Not waited for (an ingest): a warning, and the load goes on.
    warnings: list[tuple[str, str]] = []
    killer = _terminate_build_once_it_waits(db.dsn)
    report = pgrag.ingest_documents(
        db, [_doc("after-kill")], collection="y", on_warning=lambda *w: warnings.append(w)
    )
    killer.join(SAFETY)
    assert report.chunks_written == 1
    assert [w[0] for w in warnings] == [f"index {name}"], warnings
    assert "the server ended the connection that built it" in warnings[0][1], warnings
    old_reader.rollback()
    assert _state(db, model_id) == "invalid"
    assert index.ensure(db, model_id) is True  # the next run builds it
    assert _index(db.dsn, model_id)[1] is True


def test_an_ingest_whose_backend_is_terminated_mid_write_says_so_in_one_line(
    db: Database, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pgrag.ingest(db, [corpus], collection="y")
    inside = threading.Event()
    original = writer.copy_chunks

    def paused(conn: Any, chunk_rows: Any, vector_rows: Any) -> None:
        original(conn, chunk_rows, vector_rows)
        inside.set()
        with psycopg.connect(db.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))

    monkeypatch.setattr(writer, "copy_chunks", paused)
    before = db.dsn
    with pytest.raises(DatabaseError) as caught:
        pgrag.ingest_documents(db, [_doc("lost")], collection="y")
    assert inside.is_set()
    message = str(caught.value)
    assert message.startswith("the server ended the connection (terminating connection")
    assert "nothing of it was written" in message and "\n" not in message
    with psycopg.connect(before) as conn:
        assert (
            conn.execute("SELECT count(*) FROM pgrag.documents WHERE source = 'lost'").fetchone()[0]
            == 0
        )


def test_an_index_built_otherwise_is_reported_wrong_and_built_again(
    db: Database, model_id: int
) -> None:
    name = f"chunk_embeddings_hnsw_{model_id}"
    db.conn.execute(
        f"CREATE INDEX {name} ON pgrag.chunk_embeddings (chunk_id) WHERE model_id = {model_id}"
    )
    db.conn.commit()
    assert _state(db, model_id) == "wrong"
    rows = pgrag.embeddings.worker.status(db)
    assert [r["index"] for r in rows] == ["wrong"]
    wrong_oid = _index(db.dsn, model_id)[0]
    # The owner's ingest that writes builds it again, concurrently.
    assert pgrag.ingest_documents(db, [_doc("rebuild")], collection="y").chunks_written == 1
    assert _state(db, model_id) == "ok"
    oid, valid = _index(db.dsn, model_id)
    assert oid != wrong_oid and valid
    assert not [d for d in drift.check(db.conn) if d.kind == "index"]
    db.conn.rollback()

    # pgrag.ensure_model_index (pgrag_writer's way) builds a wrong one again too.
    db.conn.execute(f"DROP INDEX pgrag.{name}")
    db.conn.execute(
        f"CREATE INDEX {name} ON pgrag.chunk_embeddings USING hnsw"
        f" ((embedding::vector(384)) vector_l2_ops) WHERE model_id = {model_id}"
    )
    db.conn.commit()
    assert _state(db, model_id) == "wrong"  # another operator class than the model's
    built = db.conn.execute("SELECT pgrag.ensure_model_index(%s)", (model_id,)).fetchone()
    db.conn.commit()
    assert built == (True,)
    assert _state(db, model_id) == "ok"


def test_db_repair_says_what_it_waits_for(
    db: Database, model_id: int, old_reader: psycopg.Connection[Any]
) -> None:
    from pgrag.db import repair

    told = threading.Event()
    lines: list[str] = []

    def on_wait(line: str) -> None:
        lines.append(line)
        if f"(pid {old_reader.info.backend_pid})" in line:
            told.set()

    worker, result = _in_thread(lambda: repair.repair_database(db.dsn, on_wait=on_wait))
    try:
        assert told.wait(SAFETY), lines
        assert worker.is_alive()  # still waiting: the line came while it waited
    finally:
        old_reader.rollback()
    worker.join(SAFETY)
    done, left = result[0]
    assert any(line.startswith(f"built pgrag.chunk_embeddings_hnsw_{model_id}") for line in done)
    assert lines[0].startswith("waiting for ") and "a lock on pgrag." in lines[0], lines
