"""search_v4 (migration 0004): the keyword fallback for queries nothing else matches, and the lean
statement for unrestricted keyword-only calls, which must agree with search_v3 exactly and must
never be taken by a restricted session."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.retrieval.search import SearchSettings
from tests.integration.test_access import DOCS, Tenants, expected_sources, tenants, visible  # noqa: F401 - fixture

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version

COLUMNS = "chunk_id, score, keyword_score, probability, keyword_rank, vector_rank"


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    report = pgrag.ingest(db, [corpus], collection="docs")
    assert not report.failed and report.chunks_written > 0
    return db


def _rows(conn: psycopg.Connection[Any], fn: str, query: str, extra: str = "") -> list[Any]:
    return conn.execute(
        f"SELECT {COLUMNS} FROM pgrag.{fn}('docs', %s, NULL, k => 10{extra})",  # noqa: S608 - fixed names
        (query,),
    ).fetchall()


def _chunks_with_words(conn: psycopg.Connection[Any], words: set[str]) -> set[int]:
    """Chunks whose section or text has any of the words, whole and in any case (in Python)."""
    found = set()
    for chunk_id, section, content in conn.execute(
        "SELECT id, coalesce(section, ''), content FROM pgrag.chunks"
    ).fetchall():
        body = f"{section} {content}"
        if any(re.search(rf"\b{re.escape(w)}\b", body, re.IGNORECASE) for w in words):
            found.add(chunk_id)
    return found


def test_stop_words_alone_find_what_has_them(loaded: Database) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        # Every word is an English stop word: the keyword index has none of them.
        assert _rows(conn, "search_v3", "Which are the ones at which it was?") == []
        rows = _rows(conn, "search_v4", "Which are the ones at which it was?")
        assert rows, "the fallback found nothing"
        assert {r[0] for r in rows} <= _chunks_with_words(conn, {"are", "the", "at", "it"})
        # Ranked as the arm's results are: keyword ranks 1..n, no vector rank, p(z|x) sums to 1.
        assert [r[4] for r in rows] == list(range(1, len(rows) + 1))
        assert all(r[5] is None for r in rows)
        assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
        assert abs(sum(r[3] for r in rows) - 1) < 1e-9
        # Turned off (0 or NULL), the search finds nothing, as search_v3 does.
        assert (
            _rows(
                conn, "search_v4", "Which are the ones at which it was?", ", fallback_chunks => 0"
            )
            == []
        )
        assert (
            _rows(
                conn,
                "search_v4",
                "Which are the ones at which it was?",
                ", fallback_chunks => NULL",
            )
            == []
        )


def test_unknown_words_fall_back_to_the_words_that_occur(loaded: Database) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        # "xylophones" is in no chunk; "where", "are" and "the" are stop words.
        query = "Where are the xylophones?"
        assert _rows(conn, "search_v3", query) == []
        rows = _rows(conn, "search_v4", query)
        assert {r[0] for r in rows} == _chunks_with_words(conn, {"are", "the"})
        # Chunks with both of the words outrank chunks with one: the score is their summed idf.
        both = _chunks_with_words(conn, {"are"}) & _chunks_with_words(conn, {"the"})
        assert both and {r[0] for r in rows[: len(both)]} == both


def test_query_words_are_matched_literally_never_as_patterns(loaded: Database) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        # As a regular expression "18.00" would match the office chunk's "18:00".
        assert _rows(conn, "search_v4", "18.00") == []
        assert _rows(conn, "search_v4", "18:00")  # the word as written is there
        for odd in ("a.* b+", "(x|y) [z] {2} \\m ^$", "what's 100% o'clock?"):
            _rows(conn, "search_v4", odd)  # no error: words are data


def test_the_fallback_reads_at_most_fallback_chunks(loaded: Database) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        everything = _rows(conn, "search_v4", "the")  # 'the': a stop word in most chunks
        assert len(everything) >= 2
        assert len(_rows(conn, "search_v4", "the", ", fallback_chunks => 1")) == 1


def test_a_query_with_indexed_words_never_falls_back(loaded: Database) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        # "refund" is indexed: BM25 answers, and only chunks with the word come back.
        rows = _rows(conn, "search_v4", "the refund of it")
        assert rows == _rows(conn, "search_v3", "the refund of it")
        texts = conn.execute(
            "SELECT text FROM pgrag.search_v4('docs', 'the refund of it')"
        ).fetchall()
        assert all("refund" in t[0].lower() for t in texts)


@pytest.mark.parametrize(
    "extra",
    [
        "",
        ", keyword_depth => 3",
        ", postings_per_term => 1",  # pruned: search_v3 answers
        ", postings_per_term => NULL",
        ", rrf_k => 60, keyword_weight => 2.5, temperature => 0.5",
        ", filter => '{}'",
    ],
)
def test_the_lean_statement_agrees_with_search_v3(loaded: Database, extra: str) -> None:
    queries = [
        "refund monthly subscription",
        "passwords rotated every year",
        "Lisbon office reception badge",
        "security breach within 24 hours",
        "annual plans prorated unused months",
    ]
    with psycopg.connect(loaded.dsn) as conn:
        for q in queries:
            v3, v4 = _rows(conn, "search_v3", q, extra), _rows(conn, "search_v4", q, extra)
            assert v4, q
            assert [r[0] for r in v4] == [r[0] for r in v3], (q, extra)
            for a, b in zip(v3, v4, strict=True):
                assert a[1:3] == pytest.approx(b[1:3], rel=1e-12) and a[4:] == b[4:]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("k => 0", "k must be between 1 and 1000"),
        ("keyword_weight => 'NaN'", "must be finite"),
        ("temperature => 'Infinity'", "temperature must be a finite number"),
        ("keyword_depth => 0", "keyword_depth must be between"),
        ("fallback_chunks => -1", "fallback_chunks must be between 0 and 50000"),
        ("postings_per_term => 0", "postings_per_term must be at least 1"),
    ],
)
def test_bad_arguments_get_search_v3s_errors(loaded: Database, bad: str, message: str) -> None:
    with (
        psycopg.connect(loaded.dsn) as conn,
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message),
    ):
        conn.execute(f"SELECT * FROM pgrag.search_v4('docs', 'refund', {bad})")  # noqa: S608 - constant test cases


def test_python_and_cli_reach_the_fallback(loaded: Database) -> None:
    hits = pgrag.search(loaded, "Where are the xylophones?", collection="docs", mode="keyword")
    assert hits and all(h.keyword_rank is not None for h in hits)
    off = pgrag.search(
        loaded,
        "Where are the xylophones?",
        collection="docs",
        mode="keyword",
        settings=SearchSettings(fallback_chunks=0),
    )
    assert off == []
    runner = CliRunner()
    base = ["--dsn", loaded.dsn, "search", "Where are the xylophones?", "-c", "docs"]
    found = runner.invoke(cli, [*base, "--mode", "keyword"])
    assert found.exit_code == 0 and found.stdout.startswith("1. "), found.output
    none = runner.invoke(cli, [*base, "--mode", "keyword", "--fallback-chunks", "0"])
    assert none.exit_code == 0 and "1. " not in none.stdout, none.output


# -- who gets the lean statement: only sessions search_v3 would not restrict ----------------------


def _sources(
    dsn: str, query: str, principals: str | None = None, fn: str = "search_v4"
) -> list[str]:
    with psycopg.connect(dsn) as conn:
        if principals is not None:
            conn.execute("SELECT set_config('pgrag.principals', %s, false)", (principals,))
        return [
            r[0]
            for r in conn.execute(
                f"SELECT source FROM pgrag.{fn}('t', %s, k => 1000)",  # noqa: S608 - fixed names
                (query,),
            ).fetchall()
        ]


def test_restricted_sessions_get_what_search_v3_gives_them(tenants: Tenants) -> None:  # noqa: F811
    everything = {s for s, _, _, _ in DOCS}
    for dsn, principals, session in (
        (tenants.reader_dsn, None, {"tenant:acme"}),
        (tenants.app_dsn, "tenant:globex", {"tenant:globex"}),
        (tenants.app_dsn, None, set()),
        (tenants.dsn, "alice", {"alice"}),  # the owner, reading as alice
        (tenants.writer_dsn, "tenant:initech", {"tenant:initech"}),
    ):
        want = expected_sources(session)
        assert want != everything
        got = _sources(dsn, "refund invoices", principals)
        assert set(got) == want and len(got) == len(want), (dsn, principals)
        assert got == _sources(dsn, "refund invoices", principals, fn="search_v3")
    # Unrestricted: the owner and a writer naming no principals see every document.
    for dsn in (tenants.dsn, tenants.writer_dsn):
        got = _sources(dsn, "refund invoices")
        assert set(got) == everything and got == _sources(dsn, "refund invoices", fn="search_v3")


def test_the_fallback_shows_only_what_the_caller_may_see(tenants: Tenants) -> None:  # noqa: F811
    # Only stop words: every chunk has "the", so the fallback returns exactly the visible ones.
    for dsn, principals, session in (
        (tenants.reader_dsn, None, {"tenant:acme"}),
        (tenants.app_dsn, "tenant:globex,alice", {"tenant:globex", "alice"}),
    ):
        got = _sources(dsn, "by the", principals)
        want = expected_sources(session)
        assert set(got) == want and len(got) == len(want), (principals, sorted(got))
    with psycopg.connect(tenants.reader_dsn) as conn:
        filtered = [
            r[0]
            for r in conn.execute(
                "SELECT source FROM pgrag.search_v4('t', 'by the', k => 1000,"
                ' filter => \'{"team": "sales"}\')'
            ).fetchall()
        ]
    assert set(filtered) == {
        s for s, p, m, _ in DOCS if visible(p, {"tenant:acme"}) and m["team"] == "sales"
    }
    assert filtered


def test_0004_downgrades_and_upgrades_cleanly(dsn: str) -> None:
    from pgrag.db import schema as migrate

    migrate.downgrade(dsn, "0003", confirm=True)
    with psycopg.connect(dsn) as conn:
        names = {
            r[0]
            for r in conn.execute(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'pgrag'::regnamespace"
            ).fetchall()
        }
        assert "search_v4" not in names and "grant_roles_v2" not in names
        assert "search_v3" in names and "grant_roles_v1" in names
    migrate.upgrade(dsn)
    with psycopg.connect(dsn) as conn:
        granted = conn.execute(
            "SELECT has_function_privilege('public', p.oid, 'EXECUTE'),"
            " has_function_privilege('pgrag_reader', p.oid, 'EXECUTE'),"
            " has_function_privilege('pgrag_app', p.oid, 'EXECUTE')"
            " FROM pg_proc p WHERE p.pronamespace = 'pgrag'::regnamespace"
            " AND p.proname = 'search_v4'"
        ).fetchall()
    assert granted == [(False, True, True)]
