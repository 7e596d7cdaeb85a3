"""The vector arm's speed/recall knob: pgrag.ef_search (session) and the collection's
settings ->> 'ef_search', on a real HNSW index (docs/search.md#speed-and-recall)."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

import pgrag
from pgrag.db.connect import Database
from pgrag.ingest.loaders import from_text

N = 3000
DIM = 384  # the bundled model's: vectors are brought, not embedded


@pytest.fixture
def random_vectors(db: Database) -> tuple[Database, np.ndarray]:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(N, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs = [from_text(f"v{i}", f"vector {i}", vector=vectors[i]) for i in range(N)]
    report = pgrag.ingest_documents(db, docs, collection="vectors")
    assert not report.failed and report.chunks_embedded == 0
    return db, vectors


def _recall(db: Database, vectors: np.ndarray, queries: np.ndarray, *, ef: str | None) -> float:
    by_source = {}
    hits = 0
    for q in queries:
        exact = set(np.argsort(-(vectors @ q))[:10].tolist())
        with db.conn.transaction():
            if ef is not None:
                db.conn.execute("SELECT set_config('pgrag.ef_search', %s, true)", (ef,))
            rows = db.conn.execute(
                "SELECT source FROM pgrag.search_v5('vectors', NULL, %s, k => 10,"
                " vector_depth => 10)",
                (q,),
            ).fetchall()
        found = {by_source.setdefault(s, int(s[1:])) for (s,) in rows}
        assert len(rows) == 10  # the iterative scan still returns k, however short the list
        hits += len(found & exact)
    return hits / (10 * len(queries))


def test_ef_search_trades_recall_and_the_session_wins_over_the_collection(
    random_vectors: tuple[Database, np.ndarray],
) -> None:
    db, vectors = random_vectors
    rng = np.random.default_rng(11)
    queries = rng.normal(size=(20, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    low = _recall(db, vectors, queries, ef="1")
    high = _recall(db, vectors, queries, ef="400")
    assert high >= 0.95 and low < high - 0.1, (low, high)
    # the collection's setting applies when the session sets none ...
    db.conn.execute(
        "UPDATE pgrag.collections SET settings = settings || '{\"ef_search\": 1}'"
        " WHERE name = 'vectors'"
    )
    db.conn.commit()
    assert _recall(db, vectors, queries, ef=None) == pytest.approx(low)
    # ... and the session's wins over it
    assert _recall(db, vectors, queries, ef="400") == pytest.approx(high)


@pytest.mark.parametrize(
    ("session", "collection", "named"),
    [
        ("0", None, "pgrag.ef_search"),
        ("1001", None, "pgrag.ef_search"),
        ("abc", None, "pgrag.ef_search"),
        (None, '"1e3"', "the ef_search setting of collection 'vectors'"),
        (None, "5000", "the ef_search setting of collection 'vectors'"),
    ],
)
def test_a_bad_ef_search_is_one_line_naming_where_it_came_from(
    random_vectors: tuple[Database, np.ndarray], session: str | None, collection: Any, named: str
) -> None:
    db, vectors = random_vectors
    if collection is not None:
        db.conn.execute(
            "UPDATE pgrag.collections SET settings = settings"
            " || jsonb_build_object('ef_search', %s::jsonb) WHERE name = 'vectors'",
            (collection,),
        )
        db.conn.commit()
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught, db.conn.transaction():
        if session is not None:
            db.conn.execute("SELECT set_config('pgrag.ef_search', %s, true)", (session,))
        db.conn.execute(
            "SELECT * FROM pgrag.search_v5('vectors', NULL, %s, k => 5)", (vectors[0],)
        ).fetchall()
    message = caught.value.diag.message_primary or ""
    assert message.startswith(f"{named} must be a whole number between 1 and 1000")
