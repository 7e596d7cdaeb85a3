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
from tests.statistics import flush_statistics

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


def test_a_collections_vector_search_reads_its_own_partition_and_graph(
    random_vectors: tuple[Database, np.ndarray],
) -> None:
    """Two collections of one model: each has its partition of pgrag.chunk_embeddings and its
    own HNSW graph there. Searching the small one walks its graph only (the large one's
    partition is neither scanned nor probed), and finds its exact neighbours: a graph of 300
    vectors, not one of 3,300 it must step through."""
    db, vectors = random_vectors
    rng = np.random.default_rng(23)
    small = rng.normal(size=(300, DIM)).astype(np.float32)
    small /= np.linalg.norm(small, axis=1, keepdims=True)
    docs = [from_text(f"s{i}", f"small vector {i}", vector=small[i]) for i in range(len(small))]
    assert not pgrag.ingest_documents(db, docs, collection="small").failed
    ids = dict(db.conn.execute("SELECT name, id FROM pgrag.collections").fetchall())
    model = db.conn.execute(
        "SELECT model_id FROM pgrag.collections WHERE name = 'small'"
    ).fetchone()
    assert model is not None
    # One model, two partitions, each with its own index of the model's partitioned index.
    assert db.conn.execute(
        "SELECT count(*) FROM pg_inherits"
        " WHERE inhparent = to_regclass('pgrag.chunk_embeddings_hnsw_' || %s)",
        (model[0],),
    ).fetchone() == (2,)
    assert db.conn.execute(
        "SELECT count(*) FROM pgrag.chunk_embeddings_c" + str(ids["small"])  # noqa: S608 - an id
    ).fetchone() == (300,)
    db.conn.commit()
    queries = rng.normal(size=(20, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    small_before = _partition_reads(db, ids["small"])
    large_before = _partition_reads(db, ids["vectors"])
    hits = 0
    for text in (None, "small vector"):
        for q in queries:
            exact = [f"s{i}" for i in np.argsort(-(small @ q))[:10]]
            with db.conn.transaction():
                # (At 300 rows the planner may rather sort them; told not to, it walks the graph.)
                db.conn.execute("SET LOCAL enable_sort = off")
                rows = db.conn.execute(
                    "SELECT source FROM pgrag.search_v5('small', %s, %s, k => 10)", (text, q)
                ).fetchall()
            assert len(rows) == 10
            if text is None:
                hits += len({s for (s,) in rows} & set(exact))
    assert hits / (10 * len(queries)) >= 0.95
    assert _partition_reads(db, ids["small"])[1] > small_before[1]  # its graph was walked
    assert _partition_reads(db, ids["vectors"]) == large_before  # the other's: not touched


def _partition_reads(db: Database, collection_id: int) -> tuple[int, int]:
    """A collection's partition: its sequential scans and its HNSW indexes' scans."""
    flush_statistics(db.conn)
    with db.conn.transaction():
        row = db.conn.execute(
            "SELECT t.seq_scan,"
            "       (SELECT coalesce(sum(s.idx_scan), 0) FROM pg_stat_user_indexes s"
            "         WHERE s.relid = t.relid AND s.indexrelname LIKE t.relname || '_hnsw_%%')"
            "  FROM pg_stat_user_tables t"
            " WHERE t.relid = to_regclass('pgrag.chunk_embeddings_c' || %s)",
            (collection_id,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
