"""search_v5 in the database and pgrag.search in Python, on the real model.

The contract every search entry point keeps (validation, fixed search_path, ef_search restored,
the k guarantee under a selective filter) is tested on search_v5 and on the deprecated
search_v3 and search_v4, which are wrappers over the same engine.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgrag
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.retrieval.search import SearchSettings
from tests.fakes import RerankServer

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    report = pgrag.ingest(db, [corpus], collection="docs")
    assert not report.failed and report.chunks_written > 0
    return db


def test_search_v5_from_plain_sql_keyword_only(loaded: Database) -> None:
    # What an application does from any language: no Python layer, no embedding.
    with psycopg.connect(loaded.dsn) as conn:
        rows = conn.execute(
            "SELECT rank, chunk_id, source, title, section, text, vector_rank, keyword_rank"
            " FROM pgrag.search_v5('docs', 'refund monthly subscription')"
        ).fetchall()
    assert rows, "keyword-only search found nothing"
    top = rows[0]
    assert top[0] == 1
    assert top[2].endswith("refunds.md")
    assert "14 days" in top[5]
    assert all(r[6] is None for r in rows), "no vector arm without a query embedding"
    assert [r[7] for r in rows] == sorted(r[7] for r in rows)


def test_search_v5_from_plain_sql_with_vector(loaded: Database) -> None:
    vector = configured_embedder(loaded).embed(["two-factor login requirement"])[0]
    literal = "[" + ",".join(f"{x:.7f}" for x in vector) + "]"
    with psycopg.connect(loaded.dsn) as conn:
        rows = conn.execute(
            "SELECT rank, source, section, vector_rank, keyword_rank, vector_distance"
            " FROM pgrag.search_v5('docs', 'two-factor login requirement', %s::vector, k => 3)",
            (literal,),
        ).fetchall()
    assert len(rows) == 3
    assert rows[0][1].endswith("security.md") and rows[0][2] == "Security > Passwords"
    assert rows[0][3] == 1 and rows[0][5] < 0.7


def test_keyword_arm_uses_or_semantics(loaded: Database) -> None:
    # "quarantine" appears nowhere; an AND query would return nothing at all.
    results = pgrag.search(loaded, "refund quarantine", collection="docs", mode="keyword")
    assert results and all(r.keyword_rank is not None for r in results)
    assert "refund" in results[0].text.lower()


def test_both_arms_contribute_to_fused_ranking(loaded: Database) -> None:
    # The keyword arm finds "Lisbon" literally; the vector arm finds the passwords passage by
    # meaning ("credentials", "length") without sharing its words.
    query = "Lisbon credentials minimum length"
    hybrid = pgrag.search(loaded, query, collection="docs", k=5)
    keyword = pgrag.search(loaded, query, collection="docs", k=5, mode="keyword")
    vector = pgrag.search(loaded, query, collection="docs", k=5, mode="vector")
    assert any(r.keyword_rank and not r.vector_rank for r in hybrid) or any(
        r.keyword_rank and r.vector_rank for r in hybrid
    )
    assert {r.chunk_id for r in keyword} | {r.chunk_id for r in vector} >= {
        r.chunk_id for r in hybrid
    }
    assert any(r.vector_rank is not None for r in hybrid)
    assert any(r.keyword_rank is not None for r in hybrid)
    # By default the fused score is the convex combination of the arms' normalised scores
    # (tests/integration/test_fusion.py checks it exactly), in order. Asked for RRF (rrf_k),
    # it is exactly RRF over the two arm ranks, at search_v5's RRF weights.
    assert [r.score for r in hybrid] == sorted((r.score for r in hybrid), reverse=True)
    rrf = pgrag.search(loaded, query, collection="docs", k=5, settings=SearchSettings(rrf_k=5))
    for r in rrf:
        expected = (0.5 / (5 + r.vector_rank) if r.vector_rank else 0) + (
            1.0 / (5 + r.keyword_rank) if r.keyword_rank else 0
        )
        assert r.score == pytest.approx(expected)
    assert [r.score for r in rrf] == sorted((r.score for r in rrf), reverse=True)
    assert [r.score for r in hybrid] == sorted((r.score for r in hybrid), reverse=True)
    # Each top hit of an arm is in the hybrid top-5.
    assert keyword[0].chunk_id in {r.chunk_id for r in hybrid}
    assert vector[0].chunk_id in {r.chunk_id for r in hybrid}


def test_search_returns_k_rows_and_metadata(loaded: Database) -> None:
    results = pgrag.search(loaded, "office", collection="docs", k=2)
    assert len(results) == 2
    assert [r.rank for r in results] == [1, 2]
    d = results[0].to_dict()
    for key in (
        "rank",
        "score",
        "chunk_id",
        "document_id",
        "source",
        "title",
        "section",
        "text",
        "vector_rank",
        "keyword_rank",
    ):
        assert key in d
    assert d["metadata"]["format"] in {"markdown", "text"}


def test_metadata_filter_is_applied_inside_search(loaded: Database) -> None:
    results = pgrag.search(
        loaded, "office hours refund", collection="docs", filter={"format": "text"}
    )
    assert results and {r.source.rsplit(".", 1)[1] for r in results} == {"txt"}


def test_unknown_collection_and_wrong_dimension_are_clear_errors(loaded: Database) -> None:
    with pytest.raises(pgrag.PgragError, match="collection 'nope' does not exist"):
        pgrag.search(loaded, "x", collection="nope")
    with pytest.raises(pgrag.InputError, match="empty"):
        pgrag.search(loaded, "   ", collection="docs")


SEARCH_FUNCTIONS = {
    "search_v3": "text,text,vector,integer,jsonb,integer,integer,integer,double precision,"
    "double precision,double precision,integer",
    "search_v4": "text,text,vector,integer,jsonb,integer,integer,integer,double precision,"
    "double precision,double precision,integer,integer",
    "search_v5": "text,text,vector,integer,jsonb,integer,integer,integer,double precision,"
    "double precision,double precision,integer,integer,text",
}
each_function = pytest.mark.parametrize("fn", sorted(SEARCH_FUNCTIONS))


@each_function
def test_a_query_vector_of_the_wrong_size_is_refused(loaded: Database, fn: str) -> None:
    with (
        psycopg.connect(loaded.dsn) as conn,
        pytest.raises(psycopg.errors.DataException, match="has 3 dimensions"),
    ):
        conn.execute(f"SELECT * FROM pgrag.{fn}('docs', 'x', '[1,2,3]'::vector)")  # noqa: S608 - fixed names


def test_search_injection_through_collection_name_is_harmless(loaded: Database) -> None:
    evil = "docs'; DROP TABLE pgrag.chunks; --"
    with pytest.raises(pgrag.PgragError):
        pgrag.search(loaded, "refund", collection=evil)
    assert pgrag.search(loaded, "refund", collection="docs")


def _nested_plans(dsn: str, sql: str, params: tuple[object, ...]) -> str:
    """The plans of the statements a search runs inside itself, via auto_explain as NOTICEs."""
    notices: list[str] = []
    with psycopg.connect(dsn) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_level = notice",
            # Tiny tables: exact scans are cheaper and the planner rightly takes
            # them. Forbid them so the plan shows whether the indexes *match*.
            "enable_seqscan = off",
            "enable_sort = off",
        ):
            conn.execute(f"SET {setting}")
        conn.execute(sql, params).fetchall()
    return "\n".join(notices)


@pytest.mark.auto_explain
@pytest.mark.parametrize(
    ("fn", "keyword_index"),
    [
        ("search_v3", "keyword_postings_impact_idx"),
        ("search_v4", "keyword_postings_impact_idx"),
        ("search_v5", "keyword_postings_impact_idx"),
    ],
)
def test_plans_use_the_vector_and_keyword_indexes(
    loaded: Database, fn: str, keyword_index: str
) -> None:
    collection_id, model_id = loaded.conn.execute(
        "SELECT id, model_id FROM pgrag.collections WHERE name = 'docs'"
    ).fetchone()
    # Enough unrelated rows that scanning the collection is clearly worse than the GIN index.
    with loaded.conn.transaction():
        loaded.conn.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config)"
            " SELECT d.id, d.collection_id, 1000 + g, 'filler about gardening and weather ' || g,"
            " 8, md5(g::text), 'english'"
            " FROM pgrag.documents d, generate_series(1, 3000) g WHERE d.id = (SELECT min(id)"
            " FROM pgrag.documents)"
        )
    loaded.conn.execute("ANALYZE pgrag.chunks")
    loaded.conn.commit()
    vector = configured_embedder(loaded).embed(["passwords"])[0]
    literal = "[" + ",".join(f"{x:.7f}" for x in vector) + "]"
    plans = _nested_plans(
        loaded.dsn,
        f"SELECT * FROM pgrag.{fn}('docs', 'refund password', %s::vector)",  # noqa: S608 - fixed names
        (literal,),
    )
    # (each collection's own graph: its partition's index of the model's partitioned index)
    assert f"Index Scan using chunk_embeddings_c{collection_id}_hnsw_{model_id}" in plans, plans
    assert keyword_index in plans, plans


@each_function
def test_search_security_and_fixed_search_path(loaded: Database, fn: str) -> None:
    row = loaded.conn.execute(
        "SELECT prosecdef, proconfig FROM pg_proc WHERE oid = %s::regprocedure",
        (f"pgrag.{fn}({SEARCH_FUNCTIONS[fn]})",),
    ).fetchone()
    # The entry points are SECURITY DEFINER on purpose: the engine applies the session's access
    # itself, so restricted roles search without any SELECT on the tables
    # (docs/application.md). The engine runs as its caller (the entry point's owner), and no
    # one else may call it.
    assert row[0] is True
    assert "search_path=pg_catalog, pg_temp" in row[1]
    engine = loaded.conn.execute(
        "SELECT p.prosecdef, p.proconfig, has_function_privilege('public', p.oid, 'EXECUTE')"
        " FROM pg_proc p WHERE p.pronamespace = 'pgrag'::regnamespace"
        " AND p.proname = 'search_engine'"
    ).fetchall()
    assert len(engine) == 1
    assert engine[0][0] is False and engine[0][2] is False
    assert "search_path=pg_catalog, pg_temp" in engine[0][1]


@each_function
def test_search_restores_callers_ef_search(loaded: Database, fn: str) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        conn.execute("SET hnsw.ef_search = 77")
        vector = configured_embedder(loaded).embed(["office"])[0]
        literal = "[" + ",".join(f"{x:.7f}" for x in vector) + "]"
        conn.execute(
            f"SELECT count(*) FROM pgrag.{fn}('docs', 'office', %s::vector, k => 50)",  # noqa: S608 - fixed names
            (literal,),
        ).fetchone()
        assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "77"


@each_function
def test_search_validates_its_arguments(loaded: Database, fn: str) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="needs query_text"):
            conn.execute(f"SELECT * FROM pgrag.{fn}('docs', NULL, NULL)")  # noqa: S608 - fixed names
    for bad in (
        "vector_weight => -1",
        "temperature => -1",
        "k => 0",
        "rrf_k => 0",
        "filter => '[1]'",
    ):
        with (
            psycopg.connect(loaded.dsn) as conn,
            pytest.raises(psycopg.errors.InvalidParameterValue),
        ):
            conn.execute(f"SELECT * FROM pgrag.{fn}('docs', 'refund', {bad})")  # noqa: S608 - constant test cases
    # NULL for a fusion knob is its default (the collection's fusion setting, else built in)
    with psycopg.connect(loaded.dsn) as conn:
        named = "rrf_k => NULL, vector_weight => NULL, keyword_weight => NULL, temperature => NULL"
        assert conn.execute(f"SELECT * FROM pgrag.{fn}('docs', 'refund', {named})").fetchall()  # noqa: S608 - constant


@each_function
def test_an_arm_weighted_zero_is_switched_off(loaded: Database, fn: str) -> None:
    vector = configured_embedder(loaded).embed(["refund"])[0]
    with psycopg.connect(loaded.dsn) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        rows = conn.execute(
            f"SELECT vector_rank, keyword_rank, score FROM pgrag.{fn}('docs', 'refund', %s,"  # noqa: S608 - fixed names
            " keyword_weight => 0)",
            (vector,),
        ).fetchall()
    assert rows and all(r[1] is None and r[0] is not None for r in rows)
    # (convex fusion, search_v5's default, scores z-scores of the arm's list; RRF is positive)
    assert rows[0][2] > 0
    assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)


@each_function
def test_selective_filter_still_returns_k_rows_via_exact_fallback(
    loaded: Database, fn: str
) -> None:
    # Bury 12 "rare" chunks among 3,000 others, then starve the HNSW scan (max_scan_tuples):
    # the index alone would return fewer than k of them; the exact fallback must return k.
    import numpy as np

    conn = loaded.conn
    with conn.transaction():
        coll, model = conn.execute(
            "SELECT id, model_id FROM pgrag.collections WHERE name = 'docs'"
        ).fetchone()
        common = conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, content_hash, metadata)"
            " VALUES (%s, 'synthetic-common', 'x', '{\"kind\": \"common\"}') RETURNING id",
            (coll,),
        ).fetchone()[0]
        rare = conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, content_hash, metadata)"
            " VALUES (%s, 'synthetic-rare', 'y', '{\"kind\": \"rare\"}') RETURNING id",
            (coll,),
        ).fetchone()[0]
        rng = np.random.default_rng(1)
        for doc, n in ((common, 3000), (rare, 12)):
            ids = [
                r[0]
                for r in conn.execute(
                    "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content,"
                    " token_count, content_hash, text_config)"
                    " SELECT %s, %s, g, 'synthetic ' || g, 2, md5(g::text), 'english'"
                    " FROM generate_series(1, %s) g RETURNING id",
                    (doc, coll, n),
                ).fetchall()
            ]
            vecs = rng.standard_normal((n, 384)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            with conn.cursor().copy(
                "COPY pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int4", "int8", "vector", "int4"])
                for chunk_id, v in zip(ids, vecs, strict=True):
                    copy.write_row((model, chunk_id, v, coll))
    conn.execute("ANALYZE pgrag.chunk_embeddings")
    conn.commit()
    query = rng.standard_normal(384).astype(np.float32)
    with psycopg.connect(loaded.dsn) as c:
        from pgvector.psycopg import register_vector

        register_vector(c)
        c.execute("SET hnsw.max_scan_tuples = 50")
        # Make the planner take the HNSW path first, as it does on a large table.
        c.execute("SET enable_seqscan = off")
        c.execute("SET enable_sort = off")
        rows = c.execute(
            f"SELECT chunk_id, source FROM pgrag.{fn}('docs', NULL, %s, k => 10,"  # noqa: S608 - fixed names
            ' filter => \'{"kind": "rare"}\')',
            (query,),
        ).fetchall()
        exact = c.execute(
            "SELECT ce.chunk_id FROM pgrag.chunk_embeddings ce"
            " JOIN pgrag.chunks ch ON ch.id = ce.chunk_id WHERE ch.document_id = %s"
            " ORDER BY ce.embedding::vector(384) <=> %s LIMIT 10",
            (rare, query),
        ).fetchall()
    assert len(rows) == 10
    assert {r[1] for r in rows} == {"synthetic-rare"}
    assert [r[0] for r in rows] == [r[0] for r in exact]


def test_search_sql_is_the_statement_search_runs(loaded: Database) -> None:
    from click.testing import CliRunner
    from pgvector.psycopg import register_vector

    from pgrag.cli import cli

    query = "refund o'clock"  # a quote, to prove the literal is escaped
    result = CliRunner().invoke(
        cli, ["--dsn", loaded.dsn, "search", query, "-c", "docs", "--k", "4", "--sql"]
    )
    assert result.exit_code == 0, result.stderr
    statement = result.stdout.strip().rstrip(";")
    assert "pgrag.search_v5('docs', 'refund o''clock', $1::vector, k => 4" in statement
    vector = configured_embedder(loaded).embed([query])[0]
    with psycopg.connect(loaded.dsn) as conn:
        register_vector(conn)
        rows = conn.execute(statement.replace("$1", "%s"), (vector,)).fetchall()
    expected = pgrag.search(loaded, query, collection="docs", k=4)
    assert [r[2] for r in rows] == [r.chunk_id for r in expected]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(min_size=1, max_size=80))
def test_any_query_text_is_searched_safely(loaded: Database, query: str) -> None:
    # Whatever a user types (quotes, backslashes, tsquery operators, emoji, control
    # characters): keyword search answers with at most k rows or refuses cleanly, and never
    # breaks the connection.
    if "\x00" in query:
        with pytest.raises(pgrag.PgragError):
            pgrag.search(loaded, query, collection="docs", mode="keyword", k=5)
    elif not query.strip():
        with pytest.raises(pgrag.InputError):
            pgrag.search(loaded, query, collection="docs", mode="keyword", k=5)
    else:
        assert len(pgrag.search(loaded, query, collection="docs", mode="keyword", k=5)) <= 5
    assert pgrag.search(loaded, "refund", collection="docs", mode="keyword")


# --- second stage: reranking and MMR ---------------------------------------------------------


class _WordReranker:
    """A reranker that prefers passages mentioning a word: a stand-in with a known order."""

    name = "word"

    def __init__(self, word: str) -> None:
        self.word = word
        self.calls: list[int] = []

    def score(self, query: str, passages: list[str]) -> list[float]:
        self.calls.append(len(passages))
        return [3.0 if self.word in p.lower() else -float(i) / 10 for i, p in enumerate(passages)]


def test_a_reranker_reorders_the_candidates_and_gives_probabilities(loaded: Database) -> None:
    import math

    plain = pgrag.search(loaded, "refund window", collection="docs", k=3)
    assert "bicycles" not in plain[0].text.lower()
    reranker = _WordReranker("bicycles")
    hits = pgrag.search(loaded, "refund window", collection="docs", k=3, reranker=reranker)
    # The reranker saw the retriever's candidates (all chunks here: fewer than 40), not just 3.
    total = loaded.conn.execute(
        "SELECT count(*) FROM pgrag.chunks c JOIN pgrag.collections k ON k.id = c.collection_id"
        " WHERE k.name = 'docs'"
    ).fetchone()[0]
    loaded.conn.commit()
    assert reranker.calls == [total] and total > 3
    assert "bicycles" in hits[0].text.lower()
    assert [h.rank for h in hits] == [1, 2, 3]
    scores = [h.rerank_score for h in hits]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    weights = [math.exp(s - scores[0]) for s in scores]  # type: ignore[operator]
    for hit, w in zip(hits, weights, strict=True):
        assert hit.probability == pytest.approx(w / sum(weights))


def test_mmr_pushes_a_near_duplicate_down(loaded: Database, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "refunds-again.md").write_text(
        "# Refund policy\n\n## Annual plans\n\n"
        "Customers on annual plans can request a full refund within 30 days of purchase. "
        "After thirty days, refunds are prorated by the unused months.\n"
    )
    pgrag.ingest(loaded, [copy], collection="docs")
    query = "full refund annual plan within 30 days"
    plain = pgrag.search(loaded, query, collection="docs", k=3)
    texts = [h.text for h in plain]
    assert texts[0] == texts[1]  # the passage and its copy lead the plain ranking
    diverse = pgrag.search(loaded, query, collection="docs", k=3, mmr=0.3)
    assert diverse[0].text == texts[0]
    assert diverse[1].text != texts[0]  # the copy gave way to another passage
    assert sum(h.probability or 0 for h in diverse) == pytest.approx(1.0)
    with pytest.raises(pgrag.InputError, match="mmr must be between 0 and 1"):
        pgrag.search(loaded, query, collection="docs", mmr=1.5)


def test_cli_search_reranks_through_a_rerank_endpoint(loaded: Database) -> None:
    import json

    from click.testing import CliRunner

    from pgrag.cli import cli

    # TEI's shape: the passage about the office first.
    server = RerankServer("tei", score=lambda query, text: 5.0 if "office" in text.lower() else 0.0)
    try:
        url = server.base_url
        result = CliRunner().invoke(
            cli,
            [
                "--dsn",
                loaded.dsn,
                "search",
                "refund window",
                "-c",
                "docs",
                "--k",
                "2",
                "--reranker",
                url,
                "--json",
            ],
        )
    finally:
        server.close()
    seen = [{"path": r.path, **r.body} for r in server.requests]
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert len(hits) == 2 and "office" in hits[0]["text"].lower()
    assert hits[0]["rerank_score"] == 5.0
    assert seen and seen[0]["path"] == "/rerank" and seen[0]["query"] == "refund window"
