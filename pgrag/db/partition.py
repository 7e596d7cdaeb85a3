"""``pgrag db partition``: today's pgrag.chunk_embeddings copied into the partitioned layout
of migration 0015 ahead of ``pgrag db upgrade``, online: in batches, each its own transaction,
while searches and writes go on (they keep using today's table, and a trigger repeats every
write on the new one); stopped or killed, it resumes where it was. Then each model's HNSW index
is built on every partition CONCURRENTLY, and the upgrade switches the two tables over in a
moment (docs/scale.md#partitions).

It runs against the release installed before this one (revisions 0010 to 0014), as the owner
of schema pgrag, with plain SQL: none of this release's functions is there yet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, LiteralString, cast

from pgrag.db import ddl_locks, queries
from pgrag.db.dsn import open_connection
from pgrag.errors import PgragError

Q = queries.load(__name__)

BATCH = 5_000
# Above this many vectors migration 0015 refuses to copy them inside `pgrag db upgrade` (its
# transaction would hold every write to the vectors for minutes) unless this has run first,
# or PGRAG_PARTITION_IN_PLACE=1 says to. The migration keeps its own copy of the figure.
IN_PLACE_LIMIT = 100_000
RETRIES = 5
# Seconds to wait for another run's session (a killed command's statement still running).
LOCK_WAIT = 60.0
# Seconds an index statement may keep trying for its locks (ddl_locks) before the run stops
# (run it again: it resumes).
PATIENCE = 600.0


@dataclass(frozen=True)
class Partitioned:
    copied: int  # vectors copied by the batches (the trigger copied the others)
    indexes: list[str]  # the models' partitioned indexes built on the new table
    already: bool  # the database was partitioned (at 0015 or later): nothing to do


def run(
    dsn: str,
    *,
    batch: int = BATCH,
    on_progress: Callable[[str], None] | None = None,
) -> Partitioned:
    """Copy the vectors into the partitioned table and build its indexes; resumable."""
    from pgrag.db import schema

    if batch < 1:
        raise PgragError(f"--batch must be at least 1, got {batch}")
    say = on_progress or (lambda line: None)
    conn = open_connection(dsn, autocommit=True)
    with conn:
        revision = schema.revision_of(conn)
        if revision is None:
            raise PgragError(
                "pgrag's schema is not installed here: `pgrag db upgrade` installs it"
                " partitioned; there is nothing to copy"
            )
        layout = conn.execute(Q.layout).fetchone()
        if layout is None:
            raise PgragError("pgrag.chunk_embeddings is missing: run `pgrag db check`")
        partitioned, owner, estimate = layout
        if partitioned:
            return Partitioned(0, [], True)
        if revision < schema.FUNCTIONS_SINCE:
            raise PgragError(
                f"the database is at revision {revision}: upgrade it to 0014 first"
                " (`pgrag db upgrade 0014`), then run `pgrag db partition`"
            )
        bad = conn.execute(Q.nonpositive_collections).fetchone()
        if bad and bad[0]:
            raise PgragError(
                f"collections {bad[0]} have an id of 0 or less, and a collection's id names its"
                " partition: pgrag never makes such ids; delete those collections and ingest"
                " them again under positive ids, then run this again"
            )
        if not owner:
            raise PgragError(
                "`pgrag db partition` creates tables and triggers in schema pgrag: run it as"
                " the role that owns the schema (the one that runs `pgrag db upgrade`)"
            )
        # A run whose command was killed keeps its statement running on the server until the
        # server notices (client_connection_check_interval, below): waited for a while.
        _lock(conn, say)
        conn.execute(Q.check_client)
        # pgvector's types by name, wherever the extension lives (a schema of its own, often)
        conn.execute(Q.vector_on_search_path)
        _prepare(conn)
        copied = _copy(conn, batch, max(int(estimate), 0), say)
        built = _indexes(conn, say)
        conn.execute(Q.analyze_next)
        conn.execute(Q.mark_ready)
        say("ready: `pgrag db upgrade` now switches to the partitioned table in a moment")
        return Partitioned(copied, built, False)


def _lock(conn: Any, say: Callable[[str], None]) -> None:
    """The run's lock, waiting up to :data:`LOCK_WAIT` seconds for another run's session."""
    import time

    deadline = time.monotonic() + LOCK_WAIT
    said = False
    while True:
        got = conn.execute(Q.try_lock).fetchone()
        if got and got[0]:
            return
        who = conn.execute(Q.holder).fetchone()
        by = f" (pid {who[0]}, role {who[1]})" if who else ""
        if time.monotonic() > deadline:
            raise PgragError(
                f"another `pgrag db partition` is running on this database{by}: wait for it,"
                f" or end it (SELECT pg_terminate_backend(pid)) and run this again"
            )
        if not said:
            say(f"waiting for another `pgrag db partition`{by} (a killed run's last statement)")
            said = True
        time.sleep(1)


def _prepare(conn: Any) -> None:
    """The partitioned table beside today's, a partition per collection, the progress row, and
    the triggers that repeat every later write on it (and give a new collection its partition):
    one transaction, which changes nothing that is there when run again.

    The chunks and today's vectors are locked first (against writes, for the moment this
    takes), in the order a writer's transaction takes them (chunks, vectors, then through the
    trigger the new table), so that this cannot deadlock with it: in another order a writer
    holding chunks and waiting for the vectors held it back at every try (a test found it).
    The locks are asked for in short tries, so that a long ingest holds this back rather than
    every other writer behind it."""
    import time

    import psycopg

    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            with conn.transaction():
                conn.execute(Q.lock_briefly)
                conn.execute(Q.lock_vectors)
                _prepare_locked(conn)
            return
        except psycopg.errors.LockNotAvailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _prepare_locked(conn: Any) -> None:
    """:func:`_prepare`'s statements, today's table locked."""
    conn.execute(Q.create_next)
    conn.execute(Q.create_next_chunk_index)
    conn.execute(Q.create_progress)
    conn.execute(Q.start_progress)
    conn.execute(Q.create_next_partition_function)
    conn.execute(Q.guard_next_partition_function)
    conn.execute(Q.create_next_collection_function)
    conn.execute(Q.create_mirror_function)
    conn.execute(Q.create_mirror_truncate_function)
    conn.execute(Q.create_mirror_move_function)
    conn.execute(Q.drop_mirror_inserts)
    conn.execute(Q.mirror_inserts)
    conn.execute(Q.drop_mirror_updates)
    conn.execute(Q.mirror_updates)
    conn.execute(Q.drop_mirror_deletes)
    conn.execute(Q.mirror_deletes)
    conn.execute(Q.drop_mirror_truncates)
    conn.execute(Q.mirror_truncates)
    conn.execute(Q.drop_mirror_moves)
    conn.execute(Q.mirror_moves)
    conn.execute(Q.drop_partition_new_collections)
    conn.execute(Q.partition_new_collections)
    conn.execute(Q.partition_collections)


def _copy(conn: Any, batch: int, estimate: int, say: Callable[[str], None]) -> int:
    import time

    import psycopg

    done = conn.execute(Q.progress).fetchone()
    if done and done[3]:
        return 0
    total = 0
    copied = int(done[2]) if done else 0
    last = time.monotonic()
    while True:
        row = None
        for attempt in range(RETRIES):
            try:
                row = conn.execute(Q.copy_batch, {"batch": batch}).fetchone()
                break
            except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
                if attempt == RETRIES - 1:
                    raise
        n = int(row[0]) if row else 0
        if n == 0:
            break
        total += n
        copied += n
        if time.monotonic() - last >= 5:
            of = f" of about {estimate:,}" if estimate > copied else ""
            say(f"copied {copied:,}{of} vectors")
            last = time.monotonic()
    say(f"copied {copied:,} vectors; later writes are repeated on the new table by a trigger")
    return total


def _indexes(conn: Any, say: Callable[[str], None]) -> list[str]:
    """Each model's HNSW index on the new table: on the parent only, then each partition's
    CONCURRENTLY (writes go on), attached; one a stopped run left invalid is built again."""
    from psycopg import sql

    conn.execute(Q.build_memory)
    built = []
    for name, ddl in conn.execute(Q.model_indexes).fetchall():
        model = name.removeprefix("chunk_embeddings_hnsw_")
        parent = f"chunk_embeddings_next_hnsw_{model}"
        head = f"CREATE INDEX {name} ON pgrag.chunk_embeddings "
        if not ddl.startswith(head):
            continue  # not as pgrag builds it: the upgrade's next build makes it anew
        spec = ddl[len(head) :]
        # (spec: what follows the table in the definition PostgreSQL gave of pgrag's own index)
        ddl_locks.run(
            conn,
            sql.SQL(Q.create_parent_index).format(
                index=sql.Identifier(parent), spec=sql.SQL(cast(LiteralString, spec))
            ),
            give_up_s=PATIENCE,
        )
        while True:
            todo = [r[0] for r in conn.execute(Q.unbuilt, {"index": f"pgrag.{parent}"})]
            if not todo:
                break
            for part in todo:
                child = f"{part}_hnsw_{model}"
                bad = conn.execute(Q.invalid_index, {"name": f"pgrag.{child}"}).fetchone()
                if bad and bad[0]:
                    conn.execute(sql.SQL(Q.drop_index).format(index=sql.Identifier("pgrag", child)))
                say(f"building {child}")
                conn.execute(
                    sql.SQL(Q.create_child_index).format(
                        index=sql.Identifier(child),
                        table=sql.Identifier("pgrag", part),
                        spec=sql.SQL(cast(LiteralString, spec)),
                    )
                )
                # (waits for the partition's readers: in short tries, not in the lock queue)
                ddl_locks.run(
                    conn,
                    sql.SQL(Q.attach_index).format(
                        index=sql.Identifier("pgrag", parent), child=sql.Identifier("pgrag", child)
                    ),
                    give_up_s=PATIENCE,
                )
        built.append(parent)
    return built
