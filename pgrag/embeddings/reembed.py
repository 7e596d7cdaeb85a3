"""Switching a collection to another embedding model without downtime.

``reembed`` adds the model to the collection (status ``building``) and backfills its vectors
in batches, each committed with the vectors it made: killed, it is simply run again and goes on
with the chunks that still have none; nothing is embedded twice. Searches keep using the active
model meanwhile. The model's HNSW index is built once the backfill is done (faster than
inserting into a live index). ``activate`` embeds whatever arrived since, then switches in one
transaction (``pgrag.activate_model_v1``); the old model becomes ``standby`` and keeps its
vectors, so queries embedded with it just before the switch are still answered correctly (they
name their model to ``search_v5``) and the switch can be undone. ``retire`` deletes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgrag.errors import InputError, PgragError

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.local import Embedder
    from pgrag.embeddings.models import Model


@dataclass
class Backfill:
    model: str
    collection: str
    embedded: int = 0  # chunks given a vector by this run
    reused: int = 0  # of which copied from a chunk with the same text
    missing_before: int = 0  # chunks without a vector when this run started
    index_built: bool = False


def _collection_id(db: Database, collection: str) -> int:
    from pgrag.db.connect import transaction

    with transaction(db) as conn:
        row = conn.execute(
            "SELECT id FROM pgrag.collections WHERE name = %(c)s", {"c": collection}
        ).fetchone()
    if row is None:
        raise InputError(
            f"collection {collection!r} does not exist; `pgrag collections` lists them"
        )
    return int(row[0])


def attach(db: Database, model: Model, collection: str) -> int:
    """Add ``model`` to ``collection`` as ``building`` (again, if it was retired)."""
    from pgrag.db.connect import transaction

    collection_id = _collection_id(db, collection)
    with transaction(db) as conn:
        conn.execute(
            "INSERT INTO pgrag.collection_models (collection_id, model_id, status)"
            " VALUES (%(c)s, %(m)s, 'building')"
            " ON CONFLICT (collection_id, model_id) DO UPDATE SET status = 'building',"
            " retired_at = NULL WHERE pgrag.collection_models.status = 'retired'",
            {"c": collection_id, "m": model.id},
        )
    return collection_id


def reembed(
    db: Database,
    model: Model,
    collection: str,
    *,
    batch_size: int = 256,
    embedder: Embedder | None = None,
    on_batch: Callable[[Backfill], None] | None = None,
    build_index: bool = True,
    queued: bool = False,
) -> Backfill:
    """Give every chunk of ``collection`` a vector of ``model``; resumable (see the module).
    Chunks waiting in the embedding queue for the model are left to ``pgrag worker`` unless
    ``queued``, so the two do not embed the same chunk."""
    from pgrag.db.connect import transaction
    from pgrag.embeddings.models import embedder_for

    if not 1 <= batch_size <= 10000:
        raise InputError(f"--batch-size must be between 1 and 10000, got {batch_size}")
    collection_id = attach(db, model, collection)
    embedder = embedder or embedder_for(model)
    report = Backfill(model=model.name, collection=collection)
    with transaction(db) as conn:
        row = conn.execute(
            "SELECT pgrag.model_missing(%(c)s, %(m)s)", {"c": collection_id, "m": model.id}
        ).fetchone()
        report.missing_before = int(row[0]) if row else 0
    last = 0
    while True:
        done = _batch(db, model, embedder, collection_id, last, batch_size, report, queued)
        if done is None:
            break
        last = done
        if on_batch:
            on_batch(report)
    if build_index:
        report.index_built = build_model_index(db, model)
    return report


def build_model_index(db: Database, model: Model) -> bool:
    """Create the model's HNSW index if it is missing, CONCURRENTLY: writes to
    pgrag.chunk_embeddings (every collection's) go on while it is built. True when built."""
    import psycopg

    from pgrag.db.connect import open_connection, transaction

    name = f"pgrag.chunk_embeddings_hnsw_{int(model.id)}"
    with transaction(db) as conn:
        row = conn.execute(
            "SELECT pgrag.model_index_ddl(%(m)s, true),"
            " (SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%(i)s))",
            {"m": model.id, "i": name},
        ).fetchone()
    if row is None or row[0] is None or row[1] is True:
        return False
    with open_connection(db.dsn, autocommit=True) as conn:
        # One build per model at a time (ensure_model_index takes the same lock): an index
        # another session is still building is invalid too, and must not be dropped.
        conn.execute("SELECT pg_advisory_lock(hashtext('pgrag.model_index'), %s)", (model.id,))
        again = conn.execute(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)", (name,)
        ).fetchone()
        if again is not None and again[0]:
            return False  # built meanwhile
        conn.execute("SET maintenance_work_mem = '512MB'")
        if again is not None:  # a concurrent build that was killed left it invalid
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        try:
            conn.execute(row[0])
        except psycopg.Error:
            # A failed concurrent build leaves an invalid index behind: drop it, so that the
            # next run builds it again rather than skipping it as present.
            conn.execute(
                f"DROP INDEX CONCURRENTLY IF EXISTS pgrag.chunk_embeddings_hnsw_{int(model.id)}"
            )
            raise
        conn.execute("ANALYZE pgrag.chunk_embeddings")
    return True


def _batch(
    db: Database,
    model: Model,
    embedder: Embedder,
    collection_id: int,
    after: int,
    size: int,
    report: Backfill,
    queued: bool = False,
) -> int | None:
    """Embed the next ``size`` chunks (by id, after ``after``) that have no vector of the
    model; returns the last id seen, None when there were none. No lock is held while the
    model runs: writers to the collection never wait for it."""
    from pgrag.db.connect import transaction
    from pgrag.embeddings.worker import embed_chunks, store_vectors

    with transaction(db) as conn:
        rows = conn.execute(
            "SELECT c.id, c.section, c.content, c.content_hash FROM pgrag.chunks c"
            " WHERE c.collection_id = %(c)s AND c.id > %(after)s"
            "   AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e"
            "                    WHERE e.model_id = %(m)s AND e.chunk_id = c.id)"
            "   AND (%(queued)s OR NOT EXISTS (SELECT 1 FROM pgrag.embedding_queue q"
            "                    WHERE q.chunk_id = c.id AND q.model_id = %(m)s))"
            " ORDER BY c.id LIMIT %(n)s",
            {"c": collection_id, "after": after, "m": model.id, "n": size, "queued": queued},
        ).fetchall()
    if not rows:
        return None
    with transaction(db) as conn:
        # Texts the collection has this model's vector for already (another copy) are copied.
        hashes = list({r[3] for r in rows})
        known = dict(
            conn.execute(
                "SELECT DISTINCT ON (c.content_hash) c.content_hash, e.embedding"
                " FROM pgrag.chunks c JOIN pgrag.chunk_embeddings e"
                "   ON e.chunk_id = c.id AND e.model_id = %(m)s"
                " WHERE c.collection_id = %(c)s AND left(c.content_hash, 16) = ANY (%(p)s)"
                "   AND c.content_hash = ANY (%(h)s)",
                {"m": model.id, "c": collection_id, "p": [h[:16] for h in hashes], "h": hashes},
            ).fetchall()
        )
    todo: dict[str, tuple[str | None, str]] = {}
    for _, section, content, digest in rows:
        if digest not in known:
            todo.setdefault(digest, (section, content))
    if todo:
        known.update(zip(todo, embed_chunks(embedder, list(todo.values())), strict=True))
    with transaction(db) as conn:
        store_vectors(conn, model.id, [(r[0], known[r[3]]) for r in rows])
    report.embedded += len(rows)
    report.reused += len(rows) - len(todo)
    return int(rows[-1][0])


def activate(
    db: Database, model: Model, collection: str, *, embedder: Embedder | None = None
) -> Backfill:
    """Make ``model`` the collection's active one (after embedding any chunk still without its
    vector); one transaction, so every search sees either the old model or the new."""
    from pgrag.db.connect import transaction
    from pgrag.errors import DatabaseError

    for _ in range(5):
        report = reembed(db, model, collection, embedder=embedder, queued=True)
        try:
            with transaction(db) as conn:
                conn.execute(
                    "SELECT pgrag.activate_model_v1(%(c)s, %(m)s)",
                    {"c": collection, "m": model.id},
                )
            return report
        except DatabaseError as err:
            if "have no vector" not in str(err):  # chunks written since: embed those too
                raise
    raise PgragError(
        f"chunks keep arriving in collection {collection!r} faster than model {model.name!r}"
        " embeds them; run `pgrag models activate` again when writes are quieter"
    )


def retire(
    db: Database,
    model: Model,
    collection: str,
    *,
    batch: int = 10000,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Retire ``model`` in ``collection`` and delete its vectors there, ``batch`` at a time
    (each batch its own transaction: interrupted, run it again). Returns how many went."""
    from pgrag.db.connect import transaction

    collection_id = _collection_id(db, collection)
    with transaction(db) as conn:
        status = conn.execute(
            "SELECT status FROM pgrag.collection_models"
            " WHERE collection_id = %(c)s AND model_id = %(m)s",
            {"c": collection_id, "m": model.id},
        ).fetchone()
        if status is None:
            raise InputError(
                f"model {model.name!r} is not a model of collection {collection!r};"
                f" `pgrag models list --collection {collection}` shows its models"
            )
        if status[0] != "retired":
            conn.execute(
                "SELECT pgrag.retire_model_v1(%(c)s, %(m)s)", {"c": collection, "m": model.id}
            )
    deleted = 0
    while True:
        with transaction(db) as conn:
            row = conn.execute(
                "SELECT pgrag.retire_model_vectors(%(c)s, %(m)s, %(n)s)",
                {"c": collection_id, "m": model.id, "n": batch},
            ).fetchone()
        n = int(row[0]) if row else 0
        deleted += n
        if on_batch and n:
            on_batch(deleted)
        if n == 0:
            return deleted
