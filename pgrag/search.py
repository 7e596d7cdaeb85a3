"""Hybrid search from Python: embed the question, call ``pgrag.search_v1`` in the database.

All ranking happens in SQL (one statement: vector arm, keyword arm, Reciprocal Rank Fusion),
so Python, psql and any other client get the same results under the same permissions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .errors import InputError, PgragError

if TYPE_CHECKING:
    from .db import Database

MODES = ("hybrid", "keyword", "vector")

SEARCH_SQL = (
    "SELECT rank, score, chunk_id, document_id, source, title, section, text,"
    " vector_rank, keyword_rank, vector_distance, keyword_score, metadata"
    " FROM pgrag.search_v1(%(collection)s, %(query)s, %(embedding)s, k => %(k)s,"
    " filter => %(filter)s)"
)


@dataclass(frozen=True)
class SearchResult:
    rank: int
    score: float
    chunk_id: int
    document_id: int
    source: str
    title: str | None
    section: str | None
    text: str
    vector_rank: int | None
    keyword_rank: int | None
    vector_distance: float | None
    keyword_score: float | None
    metadata: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def search_sql(
    query: str,
    *,
    collection: str = "default",
    k: int = 10,
    mode: str = "hybrid",
    filter: dict[str, Any] | None = None,
) -> str:
    """The statement :func:`search` runs, as SQL text to paste into psql or an application:
    literals inlined (safely quoted), the query embedding left as ``$1``."""
    import json

    from psycopg import sql

    embedding = sql.SQL("NULL") if mode == "keyword" else sql.SQL("$1::vector")
    statement = sql.SQL(
        "SELECT rank, score, chunk_id, document_id, source, title, section, text,"
        " vector_rank, keyword_rank, vector_distance, keyword_score, metadata"
        " FROM pgrag.search_v1({collection}, {query}, {embedding}, k => {k},"
        " filter => {filter}::jsonb)"
    ).format(
        collection=sql.Literal(collection),
        query=sql.Literal(None if mode == "vector" else query),
        embedding=embedding,
        k=sql.Literal(k),
        filter=sql.Literal(json.dumps(filter or {})),
    )
    return statement.as_string(None)


def collection_model(db: Database, collection: str) -> tuple[str, int] | None:
    """(model name, dimension) of a collection's active model; raises if it does not exist."""
    from .db import transaction

    with transaction(db) as conn:
        row = conn.execute(
            "SELECT c.id, m.name, m.dimension FROM pgrag.collections c"
            " LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id WHERE c.name = %(name)s",
            {"name": collection},
        ).fetchone()
    if row is None:
        raise PgragError(
            f"collection {collection!r} does not exist; create it with"
            f" `pgrag ingest PATH --collection {collection}` (`pgrag collections` lists them)"
        )
    return None if row[1] is None else (row[1], row[2])


def search(
    db: Database,
    query: str,
    *,
    collection: str = "default",
    k: int = 10,
    mode: str = "hybrid",
    filter: dict[str, Any] | None = None,
    timings: dict[str, float] | None = None,
) -> list[SearchResult]:
    """Ranked chunks for ``query``; ``mode`` is hybrid, keyword or vector."""
    if mode not in MODES:
        raise InputError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if not query or not query.strip():
        raise InputError("the search query is empty; pass some words to search for")
    if not 1 <= k <= 1000:
        raise InputError(f"k must be between 1 and 1000, got {k}")
    if filter is not None and not isinstance(filter, dict):
        raise InputError(f"filter must be a dict such as {{'team': 'billing'}}, got {filter!r}")
    from psycopg.types.json import Jsonb

    from .db import transaction

    t0 = time.perf_counter()
    model = collection_model(db, collection)
    embedding = None
    if mode != "keyword" and model is not None:
        from .embeddings import require_model

        embedder = db.embedder
        require_model(collection, model, embedder)
        embedding = embedder.embed([query])[0]
    t1 = time.perf_counter()
    with transaction(db) as conn:
        rows = conn.execute(
            SEARCH_SQL,
            {
                "collection": collection,
                "query": None if mode == "vector" else query,
                "embedding": embedding,
                "k": k,
                "filter": Jsonb(filter or {}),
            },
        ).fetchall()
    t2 = time.perf_counter()
    if timings is not None:
        timings["embed_ms"] = round((t1 - t0) * 1000, 2)
        timings["retrieve_ms"] = round((t2 - t1) * 1000, 2)
    return [SearchResult(*row) for row in rows]
