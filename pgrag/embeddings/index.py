"""Each model's partial HNSW index (``chunk_embeddings_hnsw_<ID>``, a partitioned index: one
graph per collection's partition, ``chunk_embeddings_c<C>_hnsw_<ID>``): its health, and
building it when it is missing or invalid without taking it away from searches or blocking the
table's writers.

An index that holds vectors is never dropped to speed up a load: searches of every collection
of the model use it. An empty one (no collection of the model has a vector yet) is dropped
before a bulk load by a role that owns the table, and built once after it
(:func:`set_aside_empty`). A missing one (such a load, or an older release's bulk load, was
killed) or an invalid one (a build stopped before every partition's was attached) is built,
or finished, by the next ``pgrag ingest``, ``pgrag worker``, ``pgrag models reembed`` or
``pgrag db repair``; ``pgrag status`` shows each one's state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.db import ddl_locks, queries
from pgrag.db.connect import transaction
from pgrag.db.dsn import open_connection
from pgrag.errors import DatabaseError, PgragError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from pgrag.db.connect import Database

Q = queries.load(__name__)

# What health() reports of an index: wrong is a valid index of the name that is not what
# pgrag.model_index_ddl builds, which searches cannot use.
OK, BUILDING, MISSING, INVALID, WRONG, NONE = (
    "ok",
    "building",
    "missing",
    "invalid",
    "wrong",
    "none",
)
# Seconds a build nobody waits for (ingest, worker) may queue behind another session before it
# gives up: CREATE INDEX CONCURRENTLY waits for every transaction older than it, even a
# read-only one, and lock_timeout bounds that wait too.
GIVE_UP = 5


@dataclass(frozen=True)
class IndexHealth:
    model_id: int
    model: str
    index: str  # its name in schema pgrag
    state: str  # ok, building, missing, invalid, wrong, or none (the model is searched exactly)
    oid: int | None  # None when missing


def health(db: Database, models: Iterable[int] = ()) -> list[IndexHealth]:
    """The index of each model a collection uses (and of ``models``), by model id."""
    with transaction(db) as conn:
        return _health(conn, models)


def _health(conn: Any, models: Iterable[int] = (), *, own_build: bool = False) -> list[IndexHealth]:
    """:func:`health` on ``conn``; with ``own_build``, from the session that holds the build
    lock (which is then no sign of someone else's build)."""
    return [
        IndexHealth(
            int(r[0]),
            r[1],
            r[2],
            BUILDING if r[4] and not own_build and r[3] not in (OK, NONE) else r[3],
            r[5],
        )
        for r in conn.execute(Q.health, {"models": list(models)}).fetchall()
    ]


def ensure(
    db: Database,
    model_id: int,
    *,
    wait: bool = False,
    on_wait: Callable[[str], None] | None = None,
    on_warning: Callable[[str, str], None] | None = None,
) -> bool:
    """Build the model's index if it is missing, invalid or wrong; True when this call built it.

    A role that owns pgrag.chunk_embeddings builds it ``CONCURRENTLY`` on a connection of its
    own, so writers to every collection go on meanwhile; another (pgrag_writer) builds it with
    ``pgrag.ensure_model_index`` in a transaction, which writers wait for. A valid index is left
    alone, so this costs one catalog read. ``on_wait(line)`` says what a build waits for (after
    about 2 s), naming the session.

    With ``wait`` (``pgrag models reembed``) it waits for a build another session runs and for
    every transaction the build must outlast; a build that fails raises a one-line
    :class:`DatabaseError` naming the index. Without it (ingest, worker) a build someone else
    is running is left to them, and a build that would wait for another session over
    :data:`GIVE_UP` seconds, or that fails (its connection ended by the server), is given up:
    ``on_warning(index, reason)`` says so, the index is left missing (or invalid, for the next
    run to build; searches of the model read every vector meanwhile) and it returns False."""
    state = next((h.state for h in health(db, [model_id]) if h.model_id == model_id), NONE)
    if state in (OK, NONE) or (state == BUILDING and not wait):
        return False
    with transaction(db) as conn:
        row = conn.execute(Q.owns_vectors).fetchone()
    if not (row and row[0]):
        return _build_in_transaction(db, model_id, wait)
    return _build_concurrently(db, model_id, wait, on_wait, on_warning)


def build_in_transaction(db: Database, model_id: int) -> bool:
    """Build the model's index with ``pgrag.ensure_model_index``, in a transaction: it waits
    for no reader (a transaction open elsewhere, which ``CONCURRENTLY`` waits for), only for
    writers of the table, and gives up when one holds it over a second. True when built."""
    return _build_in_transaction(db, model_id, False)


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


def _state_holding_lock(conn: Any, model_id: int) -> str:
    """The model's index state, read by the session that holds its build lock."""
    return next(
        (h.state for h in _health(conn, [model_id], own_build=True) if h.model_id == model_id),
        NONE,
    )


def _lost(conn: Any) -> bool:
    return bool(conn.closed or conn.broken)


def _build_concurrently(
    db: Database,
    model_id: int,
    wait: bool,
    on_wait: Callable[[str], None] | None,
    on_warning: Callable[[str, str], None] | None,
) -> bool:
    import psycopg
    from psycopg import sql

    from pgrag.db.connect import describe_error
    from pgrag.db.waits import watching

    index = f"chunk_embeddings_hnsw_{int(model_id)}"
    drop = sql.SQL(Q.drop_partitioned_index).format(index=sql.Identifier("pgrag", index))
    seen: list[str] = []

    def waiting(line: str) -> None:
        seen.append(line)
        if on_wait is not None:
            on_wait(f"building index {index}: {line}")

    def gave_up(why: str) -> bool:
        if on_warning is not None:
            on_warning(
                f"index {index}",
                f"not built: {why}; searches of its model read every vector until the next"
                " ingest that writes, `pgrag worker` or `pgrag db repair` builds it",
            )
        return False

    try:
        conn = open_connection(db.dsn, autocommit=True)
    except PgragError as err:
        if wait:
            raise
        return gave_up(str(err))
    with conn:
        try:
            # One build per model at a time (ensure_model_index takes the same lock): an index
            # another session is still building is invalid too, and must not be dropped.
            if wait:
                conn.execute(Q.lock_build, {"model_id": model_id})
            else:
                got = conn.execute(Q.try_lock_build, {"model_id": model_id}).fetchone()
                if not (got and got[0]):
                    return False
                conn.execute(sql.SQL(Q.lock_timeout).format(ms=sql.Literal(GIVE_UP * 1000)))
            try:
                state = _state_holding_lock(conn, model_id)
                if state in (OK, NONE):
                    return False  # built meanwhile (or never to be)
                ddl = conn.execute(Q.model_index_ddl, {"model_id": model_id}).fetchone()
                if ddl is None or ddl[0] is None:
                    return False
                conn.execute(Q.build_memory)
                patience = 600.0 if wait else float(GIVE_UP)
                with watching(db.dsn, conn.info.backend_pid, waiting):
                    if state == WRONG:
                        ddl_locks.run(conn, drop, give_up_s=patience)  # searches cannot use it
                    # The partitioned index on the parent alone (at once, invalid), then each
                    # partition's CONCURRENTLY, attached; an invalid one (a build that stopped)
                    # is resumed at the partitions it had not reached.
                    create = ddl[0]  # the DDL pgrag.model_index_ddl returned
                    ddl_locks.run(conn, create, give_up_s=patience)
                    try:
                        _build_partitions(conn, model_id, index, patience)
                    except psycopg.Error:
                        if not _lost(conn):
                            _drop_if_unbuilt(conn, model_id, drop)
                        raise
                    if _state_holding_lock(conn, model_id) == INVALID:
                        # Invalid with every partition's attached (not a state a build
                        # leaves): built again from the start.
                        ddl_locks.run(conn, drop, give_up_s=patience)
                        ddl_locks.run(conn, create, give_up_s=patience)
                        _build_partitions(conn, model_id, index, patience)
                conn.execute(Q.analyze_embeddings)
            finally:
                if not _lost(conn):
                    conn.execute(Q.unlock_build, {"model_id": model_id})
        except psycopg.Error as err:
            if _lost(conn):
                why = (
                    f"the server ended the connection that built it ({describe_error(err)});"
                    " the invalid index it left is built again by the next run"
                )
            elif isinstance(err, psycopg.errors.LockNotAvailable):
                holder = seen[-1] if seen else "waiting for another session's transaction"
                why = f"the build gave up after {GIVE_UP} s {holder}"
            else:
                why = describe_error(err)
            if wait:
                raise DatabaseError(f"building index {index} failed: {why}") from err
            return gave_up(why)
    return True


def _build_partitions(conn: Any, model_id: int, index: str, patience: float) -> None:
    """Each partition's index of the model that is not attached to ``index`` yet, built
    CONCURRENTLY and attached, until none is left (a collection created meanwhile gets its
    own from the ATTACH that makes its partition, or here). An attach waits for the
    partition's readers, so it is tried in short waits (:mod:`pgrag.db.ddl_locks`) for at most
    ``patience`` seconds."""
    import psycopg
    from psycopg import sql

    done: set[str] = set()
    while True:
        todo = [
            (p, i)
            for p, i in conn.execute(Q.unbuilt_partitions, {"model_id": model_id}).fetchall()
            if i not in done
        ]
        if not todo:
            return
        for part, child in todo:
            drop_child = sql.SQL(Q.drop_index).format(index=sql.Identifier("pgrag", child))
            # One left invalid by a build that was stopped is built again.
            bad = conn.execute(Q.invalid_index, {"name": f"pgrag.{child}"}).fetchone()
            if bad and bad[0]:
                conn.execute(drop_child)
            ddl = conn.execute(
                Q.partition_index_ddl, {"model_id": model_id, "partition": part}
            ).fetchone()
            try:
                conn.execute(ddl[0])  # the DDL pgrag.model_index_partition_ddl returned
            except psycopg.Error:
                # A failed concurrent build leaves an invalid index behind: dropped (when the
                # connection still works), so that the next run builds it again.
                if not _lost(conn):
                    try:
                        conn.execute(drop_child)
                    except psycopg.Error:
                        pass  # left invalid: the next run drops and builds it
                raise
            attach = sql.SQL(Q.attach_index).format(
                index=sql.Identifier("pgrag", index), child=sql.Identifier("pgrag", child)
            )
            ddl_locks.run(conn, attach, give_up_s=patience)
            done.add(child)


def _drop_if_unbuilt(conn: Any, model_id: int, drop: Any) -> None:
    """After a build that failed: the model's partitioned index dropped if no partition's is
    attached to it yet (so that the index reads as missing, not half-built), waiting a second
    at most for the table's lock; otherwise left invalid for the next run to finish."""
    import psycopg

    try:
        row = conn.execute(Q.attached_count, {"model_id": model_id}).fetchone()
        if row and row[0] == 0:
            conn.execute(Q.one_second_lock_timeout)
            conn.execute(drop)
    except psycopg.Error:
        pass  # left invalid: the next run finishes it


def set_aside_empty(db: Database, model_id: int) -> bool:
    """Drop the model's index before a bulk load when it holds nothing: no vector of the
    model is stored in any collection, so no search uses it, and building it once after the
    load (:func:`ensure`, which every ingest that writes calls) is cheaper than inserting
    each vector into a live graph (1.2-1.6x the whole write path). True when dropped.

    Only a role that owns pgrag.chunk_embeddings (which row-level security does not filter,
    so "no vector" means none at all) drops it, ``CONCURRENTLY``, holding the model's build
    lock, giving up after :data:`GIVE_UP` seconds rather than wait for another session; and
    only when no other session of the database is in a transaction (one would hold the build
    back; a role that cannot see other sessions' state never drops it). If the concurrent
    build after the load gives up all the same, the ingest builds it in a transaction
    (:func:`build_in_transaction`); a load that fails builds it before it reports its error.
    A load killed meanwhile leaves the index missing, which ``pgrag status`` shows and the next
    ingest that writes, ``pgrag worker`` or ``pgrag db repair`` builds; searches read the
    model's vectors exactly until then. A model with any vector keeps its index."""
    import psycopg
    from psycopg import sql

    try:
        conn = open_connection(db.dsn, autocommit=True)
    except PgragError:
        return False
    with conn:
        try:
            owns = conn.execute(Q.owns_vectors).fetchone()
            if not (owns and owns[0]):
                return False
            got = conn.execute(Q.try_lock_build, {"model_id": model_id}).fetchone()
            if not (got and got[0]):
                return False  # someone builds it now
            try:
                state = _state_holding_lock(conn, model_id)
                has = conn.execute(Q.model_has_vectors, {"model_id": model_id}).fetchone()
                if state != OK or (has and has[0]):
                    return False
                # A session in a transaction now (an idle one left open, a long report) would
                # hold the build after the load back: the index stays live then.
                busy = conn.execute(Q.others_in_transaction).fetchone()
                if busy and busy[0]:
                    return False
                conn.execute(sql.SQL(Q.lock_timeout).format(ms=sql.Literal(GIVE_UP * 1000)))
                index = f"chunk_embeddings_hnsw_{int(model_id)}"
                conn.execute(
                    sql.SQL(Q.drop_partitioned_index).format(index=sql.Identifier("pgrag", index))
                )
            finally:
                if not _lost(conn):
                    conn.execute(Q.unlock_build, {"model_id": model_id})
        except psycopg.Error:
            # Not dropped, or left invalid (the load's build after it drops and builds it).
            return False
    return True


def ensure_all(
    db: Database,
    *,
    on_wait: Callable[[str], None] | None = None,
    on_warning: Callable[[str, str], None] | None = None,
) -> list[str]:
    """Build every missing, invalid or wrong index of a model a collection uses (not waiting
    for a build someone else runs, nor for long on other sessions); the names of those built."""
    return [
        h.index
        for h in health(db)
        if h.state in (MISSING, INVALID, WRONG)
        and ensure(db, h.model_id, wait=False, on_wait=on_wait, on_warning=on_warning)
    ]
