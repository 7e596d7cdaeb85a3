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

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.embeddings.models import collection_id as _collection_id
from pgrag.embeddings.models import embedder_for
from pgrag.embeddings.worker import embed_chunks, store_vectors
from pgrag.errors import DatabaseError, InputError, PgragError, command_line

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder
    from pgrag.embeddings.models import Model

Q = queries.load(__name__)


@dataclass
class Backfill:
    model: str
    collection: str
    embedded: int = 0  # chunks given a vector by this run
    reused: int = 0  # of which copied from a chunk with the same text
    missing_before: int = 0  # chunks without a vector when this run started
    index_built: bool = False


def attach(db: Database, model: Model, collection: str) -> int:
    """Add ``model`` to ``collection`` as ``building`` (again, if it was retired)."""
    collection_id = _collection_id(db, collection)
    with transaction(db) as conn:
        conn.execute(Q.attach_model, {"collection_id": collection_id, "model_id": model.id})
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
    if not 1 <= batch_size <= 10000:
        raise InputError(f"--batch-size must be between 1 and 10000, got {batch_size}")
    collection_id = attach(db, model, collection)
    embedder = embedder or embedder_for(model, db.settings)
    report = Backfill(model=model.name, collection=collection)
    with transaction(db) as conn:
        row = conn.execute(
            Q.missing_vectors, {"collection_id": collection_id, "model_id": model.id}
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
    """Create the model's HNSW index if it is missing, CONCURRENTLY where this role may:
    writes to pgrag.chunk_embeddings (every collection's) go on while it is built. Waits for
    a build another session is running. True when built."""
    from pgrag.embeddings import index

    return index.ensure(db, model.id, wait=True)


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
    with transaction(db) as conn:
        rows = conn.execute(
            Q.chunks_without_vector,
            {
                "collection_id": collection_id,
                "after": after,
                "model_id": model.id,
                "limit": size,
                "queued": queued,
            },
        ).fetchall()
    if not rows:
        return None
    with transaction(db) as conn:
        # Texts the collection has this model's vector for already (another copy) are copied.
        hashes = list({r[3] for r in rows})
        known = dict(
            conn.execute(
                Q.known_vectors,
                {
                    "model_id": model.id,
                    "collection_id": collection_id,
                    "prefixes": [h[:16] for h in hashes],
                    "hashes": hashes,
                },
            ).fetchall()
        )
    todo: dict[str, tuple[str | None, str, str | None]] = {}
    for _, section, content, digest, context in rows:
        if digest not in known:
            todo.setdefault(digest, (section, content, context))
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
    for _ in range(5):
        report = reembed(db, model, collection, embedder=embedder, queued=True)
        try:
            with transaction(db) as conn:
                conn.execute(Q.activate_model, {"collection": collection, "model_id": model.id})
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
    collection_id = _collection_id(db, collection)
    with transaction(db) as conn:
        status = conn.execute(
            Q.model_status, {"collection_id": collection_id, "model_id": model.id}
        ).fetchone()
        if status is None:
            raise InputError(
                f"model {model.name!r} is not a model of collection {collection!r};"
                f" {command_line('pgrag', 'models', 'list', '--collection', collection)}"
                " shows its models"
            )
        if status[0] != "retired":
            conn.execute(Q.retire_model, {"collection": collection, "model_id": model.id})
    deleted = 0
    while True:
        with transaction(db) as conn:
            row = conn.execute(
                Q.delete_retired_vectors,
                {"collection_id": collection_id, "model_id": model.id, "batch": batch},
            ).fetchone()
        n = int(row[0]) if row else 0
        deleted += n
        if on_batch and n:
            on_batch(deleted)
        if n == 0:
            return deleted
