"""Keeping the indexes right around writes. A model's HNSW index stays in place while an
ingest writes (every collection of the model searches with it; pgvector inserts into a live
graph), unless it is empty and the load a bulk one: then it is dropped and built after. One
that is missing, invalid or wrong is built after a load that wrote something
(:func:`pgrag.embeddings.index.ensure`, CONCURRENTLY where the role may, never waiting for
another session's build nor for long on another session's transaction). Keyword statistics
are folded after every write, and a bulk load refreshes the planner's statistics without
waiting for a VACUUM or an index build."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.embeddings import index

if TYPE_CHECKING:
    from collections.abc import Callable

    from pgrag.db.connect import Database

Q = queries.load(__name__)


def ensure_model_index(
    db: Database,
    model_id: int,
    *,
    on_wait: Callable[[str], None] | None = None,
    on_warning: Callable[[str, str], None] | None = None,
    set_aside: bool = False,
) -> bool:
    """Build the model's HNSW index if it is missing, invalid or wrong (a catalog read when it
    is right; nothing when another session is building it; given up, with ``on_warning``,
    when it would wait for another session's transaction). True when built.

    ``set_aside``: this load dropped the (empty) index itself (:func:`set_aside_empty`). A
    concurrent build that gives up is then followed by one in a transaction, which waits for
    no reader, only for writers (and holds other writers of the table back while it builds),
    so that a load which took the index away does not leave it missing."""
    warnings: list[tuple[str, str]] = []
    built = index.ensure(
        db,
        model_id,
        wait=False,
        on_wait=on_wait,
        on_warning=(lambda what, why: warnings.append((what, why))) if set_aside else on_warning,
    )
    if set_aside and not built and _missing(db, model_id):
        built = index.build_in_transaction(db, model_id)
    if set_aside and not built and on_warning and warnings and _missing(db, model_id):
        for what, why in warnings:
            on_warning(what, why)
    return built


def _missing(db: Database, model_id: int) -> bool:
    return any(h.model_id == model_id and h.state != index.OK for h in index.health(db, [model_id]))


def set_aside_empty(db: Database, model_id: int) -> bool:
    """Before a bulk load: drop the model's index if no vector of the model is stored yet, to
    be built once after the load (:func:`pgrag.embeddings.index.set_aside_empty`)."""
    return index.set_aside_empty(db, model_id)


def analyze(db: Database, collection_id: int) -> None:
    """Planner statistics of the chunks and of the collection's vectors (its partition of
    pgrag.chunk_embeddings: the others did not change) after a bulk load, skipped for a table
    that a VACUUM or an index build holds."""
    from psycopg import sql

    with transaction(db) as conn:
        conn.execute(Q.analyze_chunks)
        name = conn.execute(Q.partition_name, {"collection_id": collection_id}).fetchone()
        if name and name[0]:
            conn.execute(
                sql.SQL(Q.analyze_partition).format(partition=sql.Identifier("pgrag", name[0]))
            )


def maintain_keyword_index(db: Database, collection: str, analyze: bool = False) -> None:
    """Fold the keyword statistics the writes appended (one row per term again) and refresh
    BM25 impacts if the collection's average chunk length moved (keyword_maintain_v2)."""
    with transaction(db) as conn:
        conn.execute(Q.keyword_maintain, {"collection": collection})
        if analyze:
            conn.execute(Q.analyze_keyword_postings)
            conn.execute(Q.analyze_keyword_df)
