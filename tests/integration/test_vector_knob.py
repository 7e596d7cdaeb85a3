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


def test_a_small_collection_sharing_the_models_index_is_searched_exactly(
    random_vectors: tuple[Database, np.ndarray],
) -> None:
    """A collection whose model's HNSW index also holds other collections' vectors would
    walk theirs to find its own; small, it is scored exactly instead (its recall is 1 even
    at ef_search 1), in the vector arm alone and in a hybrid search."""
    db, vectors = random_vectors
    rng = np.random.default_rng(23)
    small = rng.normal(size=(300, DIM)).astype(np.float32)
    small /= np.linalg.norm(small, axis=1, keepdims=True)
    docs = [from_text(f"s{i}", f"small vector {i}", vector=small[i]) for i in range(len(small))]
    assert not pgrag.ingest_documents(db, docs, collection="small").failed
    queries = rng.normal(size=(20, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    before = _hnsw_scans(db)
    for text in (None, "small vector"):
        for q in queries:
            exact = [f"s{i}" for i in np.argsort(-(small @ q))[:40]]  # (the arm's depth)
            with db.conn.transaction():
                db.conn.execute("SELECT set_config('pgrag.ef_search', '1', true)")
                # (At this size the planner would sort all 3,300 vectors rather than walk the
                # index; at a million it walks it. Told to avoid sorting, it does.)
                db.conn.execute("SET LOCAL enable_sort = off")
                rows = db.conn.execute(
                    "SELECT source, vector_rank FROM pgrag.search_v5('small', %s, %s, k => 10)",
                    (text, q),
                ).fetchall()
            assert len(rows) == 10
            # Each row's rank in the vector arm is its rank among all 300 by exact distance.
            assert all(exact[rank - 1] == source for source, rank in rows if rank is not None)
            if text is None:
                assert [source for source, _ in rows] == exact[:10]
    assert _hnsw_scans(db) == before  # (exact, not an index scan that happened to find all)
    # The larger collection (3,000 chunks) still walks the index: ef_search 1 shows it.
    assert _recall(db, vectors, queries, ef="1") < 0.9
    assert _hnsw_scans(db) > before


def _hnsw_scans(db: Database) -> int:
    """How many scans the model's HNSW index has had (this session's counted too)."""
    with db.conn.transaction():
        db.conn.execute("SELECT pg_stat_force_next_flush()")
    with db.conn.transaction():
        db.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = db.conn.execute(
            "SELECT sum(s.idx_scan) FROM pg_stat_user_indexes s"
            " JOIN pg_index i ON i.indexrelid = s.indexrelid"
            " JOIN pg_am a ON a.oid = (SELECT relam FROM pg_class WHERE oid = s.indexrelid)"
            " WHERE s.schemaname = 'pgrag' AND a.amname = 'hnsw'"
        ).fetchone()
    assert row is not None and row[0] is not None
    return int(row[0])
