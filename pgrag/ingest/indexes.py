"""Keeping the indexes right around writes: a bulk load drops a model's HNSW index and builds
it again once (several times faster than inserting into a live one), and the keyword
statistics are folded after every write."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgrag.db import queries
from pgrag.db.connect import transaction

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)


def vector_count(db: Database, model_id: int, enough: int) -> int:
    """How many vectors the model has, counting no further than ``enough`` (a load is "bulk"
    when it adds more than there are; an exact count of a huge table is not needed)."""
    with transaction(db) as conn:
        row = conn.execute(Q.vector_count, {"model_id": model_id, "n": enough + 1}).fetchone()
    return int(row[0]) if row else 0


def owns_vectors(db: Database) -> bool:
    """Whether this session may drop and rebuild the vector indexes (it owns the table;
    other writers insert into it)."""
    with transaction(db) as conn:
        row = conn.execute(Q.owns_vectors).fetchone()
    return bool(row and row[0])


def drop_model_index(db: Database, model_id: int) -> None:
    from psycopg import sql

    with transaction(db) as conn:
        conn.execute(
            sql.SQL(Q.drop_model_index).format(sql.Identifier(f"chunk_embeddings_hnsw_{model_id}"))
        )


def build_model_index(db: Database, model_id: int, analyze: bool = False) -> None:
    """Create the model's HNSW index if it is missing (a no-op when it exists)."""
    with transaction(db) as conn:
        conn.execute(Q.index_build_memory)
        conn.execute(Q.ensure_model_index, {"model_id": model_id})
    if analyze:
        with transaction(db) as conn:
            conn.execute(Q.analyze_chunks)
            conn.execute(Q.analyze_chunk_embeddings)


def maintain_keyword_index(db: Database, collection: str, analyze: bool = False) -> None:
    """Fold the keyword statistics the writes appended (one row per term again) and refresh
    BM25 impacts if the collection's average chunk length moved (keyword_maintain_v2)."""
    with transaction(db) as conn:
        conn.execute(Q.keyword_maintain, {"collection": collection})
        if analyze:
            conn.execute(Q.analyze_keyword_postings)
            conn.execute(Q.analyze_keyword_df)
