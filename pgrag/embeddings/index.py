"""Each model's partial HNSW index (``chunk_embeddings_hnsw_<ID>``, shared by every collection
of the model): its health, and building it when it is missing or invalid without taking it
away from searches or blocking the table's writers.

An index is never dropped to speed up a load: searches of every collection of the model use
it. A missing one (an older release dropped it for a bulk load and was killed) or an invalid
one (an interrupted ``CREATE INDEX CONCURRENTLY``) is built again by the next ``pgrag
ingest``, ``pgrag worker``, ``pgrag models reembed`` or ``pgrag db repair``; ``pgrag status``
shows each one's state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.db.dsn import open_connection
from pgrag.errors import DatabaseError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pgrag.db.connect import Database

Q = queries.load(__name__)

# What health() reports of an index.
OK, BUILDING, MISSING, INVALID, NONE = "ok", "building", "missing", "invalid", "none"


@dataclass(frozen=True)
class IndexHealth:
    model_id: int
    model: str
    index: str  # its name in schema pgrag
    state: str  # ok, building, missing, invalid, or none (the model is searched exactly)
    oid: int | None  # None when missing


def health(db: Database, models: Iterable[int] = ()) -> list[IndexHealth]:
    """The index of each model a collection uses (and of ``models``), by model id."""
    with transaction(db) as conn:
        rows = conn.execute(Q.health, {"models": list(models)}).fetchall()
    return [IndexHealth(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows]


def ensure(db: Database, model_id: int, *, wait: bool = False) -> bool:
    """Build the model's index if it is missing or invalid; True when this call built it.

    A role that owns pgrag.chunk_embeddings builds it ``CONCURRENTLY`` on a connection of its
    own, so writers to every collection go on meanwhile; another (pgrag_writer) builds it with
    ``pgrag.ensure_model_index`` in a transaction, which writers wait for. A valid index is left
    alone, so this costs one catalog read. Without ``wait``, a build someone else is running is
    left to them, and a writer's build is given up if the table is busy (the call returns at
    once, False)."""
    state = next((h.state for h in health(db, [model_id]) if h.model_id == model_id), NONE)
    if state in (OK, NONE) or (state == BUILDING and not wait):
        return False
    with transaction(db) as conn:
        row = conn.execute(Q.owns_vectors).fetchone()
    if not (row and row[0]):
        return _build_in_transaction(db, model_id, wait)
    return _build_concurrently(db, model_id, wait)


def _build_in_transaction(db: Database, model_id: int, wait: bool) -> bool:
    """pgrag.ensure_model_index. Without ``wait`` it gives up when the table's lock is not
    free at once: queued behind another writer's open transaction, the build would hold every
    writer of every collection back until it is done (``pgrag status`` still shows the index
    missing; the owner's next ingest or worker builds it without blocking anyone)."""
    import psycopg

    try:
        with transaction(db) as conn:
            if not wait:
                got = conn.execute(Q.try_lock_build_xact, {"model_id": model_id}).fetchone()
                if not (got and got[0]):
                    return False
                conn.execute(Q.short_lock_timeout)
            conn.execute(Q.build_memory_local)
            built = conn.execute(Q.ensure_model_index, {"model_id": model_id}).fetchone()
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.LockNotAvailable):
            return False
        raise
    return bool(built and built[0])


def _build_concurrently(db: Database, model_id: int, wait: bool) -> bool:
    import psycopg
    from psycopg import sql

    index = f"chunk_embeddings_hnsw_{int(model_id)}"
    drop = sql.SQL(Q.drop_index).format(index=sql.Identifier("pgrag", index))
    with open_connection(db.dsn, autocommit=True) as conn:
        # One build per model at a time (ensure_model_index takes the same lock): an index
        # another session is still building is invalid too, and must not be dropped.
        if wait:
            conn.execute(Q.lock_build, {"model_id": model_id})
        else:
            got = conn.execute(Q.try_lock_build, {"model_id": model_id}).fetchone()
            if not (got and got[0]):
                return False
        try:
            again = conn.execute(Q.index_valid, {"index": f"pgrag.{index}"}).fetchone()
            if again is not None and again[0]:
                return False  # built meanwhile
            ddl = conn.execute(Q.model_index_ddl, {"model_id": model_id}).fetchone()
            if ddl is None or ddl[0] is None:
                return False
            conn.execute(Q.build_memory)
            if again is not None:  # a concurrent build that was killed left it invalid
                conn.execute(drop)
            try:
                conn.execute(ddl[0])  # the DDL pgrag.model_index_ddl returned
            except psycopg.Error:
                # A failed concurrent build leaves an invalid index behind: drop it, so that
                # the next run builds it again rather than skipping it as present.
                conn.execute(drop)
                raise
            conn.execute(Q.analyze_embeddings)
        finally:
            conn.execute(Q.unlock_build, {"model_id": model_id})
    return True


def ensure_all(db: Database) -> list[str]:
    """Build every missing or invalid index of a model a collection uses (not waiting for a
    build someone else runs); the names of those built."""
    return [
        h.index
        for h in health(db)
        if h.state in (MISSING, INVALID) and ensure(db, h.model_id, wait=False)
    ]
