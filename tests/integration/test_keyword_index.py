"""The BM25 keyword arm of the search: scores, statistics under writes, pruning, concurrency.

Chunks are written with plain SQL here (no embeddings needed for the keyword arm), which is also
how an application that writes pgrag's tables itself keeps the keyword index in step: the
statement trigger does it, in the writer's transaction.
"""

from __future__ import annotations

import math
import random
import threading
from collections import Counter
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgrag.db import schema as migrate
from tests.statistics import flush_statistics

WORDS = (
    "refund invoice billing card payment plan monthly annual seat license vpn laptop office"
    " password login travel expense receipt manager approval holiday leave salary tax report"
    " backup server outage incident support ticket escalation contract renewal discount"
).split()

K1, B = 1.5, 0.75


def _text(rng: random.Random, n: int) -> str:
    # Zipf-ish: early words are common, late words rare, so idf matters.
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    return " ".join(rng.choices(WORDS, weights=weights, k=n)) + "."


def _collection(conn: psycopg.Connection[Any], name: str = "kw") -> int:
    row = conn.execute(
        "INSERT INTO pgrag.collections (name) VALUES (%s) RETURNING id", (name,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _add_document(
    conn: psycopg.Connection[Any], collection_id: int, source: str, chunks: list[str]
) -> int:
    row = conn.execute(
        "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
        " VALUES (%s, %s, 'h') RETURNING id",
        (collection_id, source),
    ).fetchone()
    assert row is not None
    doc_id = int(row[0])
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config) VALUES (%s, %s, %s, %s, 1, 'h', 'english')",
            [(doc_id, collection_id, i, text) for i, text in enumerate(chunks)],
        )
    return doc_id


def _truth(conn: psycopg.Connection[Any], collection_id: int) -> dict[str, Any]:
    """Postings, document frequencies and totals recomputed from the chunks themselves."""
    rows = conn.execute(
        "SELECT c.id, u.lexeme, coalesce(array_length(u.positions, 1), 1)"
        " FROM pgrag.chunks c, unnest(c.tsv) u WHERE c.collection_id = %s",
        (collection_id,),
    ).fetchall()
    postings = {(lex, cid): tf for cid, lex, tf in rows}
    lengths: Counter[int] = Counter()
    for cid, _, tf in rows:
        lengths[cid] += tf
    row = conn.execute(
        "SELECT count(*) FROM pgrag.chunks WHERE collection_id = %s", (collection_id,)
    ).fetchone()
    assert row is not None
    return {
        "postings": postings,
        "df": Counter(lex for lex, _ in postings),
        "chunks": int(row[0]),
        "length": sum(lengths.values()),
        "dl": lengths,
    }


def _index(conn: psycopg.Connection[Any], collection_id: int) -> dict[str, Any]:
    """What the keyword index holds: postings, summed df deltas, summed totals."""
    postings = {
        (lex, cid): tf
        for lex, cid, tf in conn.execute(
            "SELECT lexeme, chunk_id, tf FROM pgrag.keyword_postings WHERE collection_id = %s",
            (collection_id,),
        ).fetchall()
    }
    df = Counter(
        {
            lex: int(n)
            for lex, n in conn.execute(
                "SELECT lexeme, sum(df) FROM pgrag.keyword_df WHERE collection_id = %s"
                " GROUP BY lexeme HAVING sum(df) <> 0",
                (collection_id,),
            ).fetchall()
        }
    )
    row = conn.execute(
        "SELECT coalesce(sum(chunks), 0), coalesce(sum(length), 0) FROM pgrag.keyword_totals"
        " WHERE collection_id = %s",
        (collection_id,),
    ).fetchone()
    assert row is not None
    return {"postings": postings, "df": df, "chunks": int(row[0]), "length": int(row[1])}


def _assert_in_step(conn: psycopg.Connection[Any], collection_id: int) -> None:
    truth, index = _truth(conn, collection_id), _index(conn, collection_id)
    assert index["postings"] == truth["postings"]
    assert index["df"] == truth["df"]
    assert (index["chunks"], index["length"]) == (truth["chunks"], truth["length"])


def _bm25(
    conn: psycopg.Connection[Any], collection_id: int, query: str, avgdl: float
) -> dict[int, float]:
    """BM25 computed in Python from the chunks' own tsvectors."""
    truth = _truth(conn, collection_id)
    lexemes = {
        r[0]
        for r in conn.execute(
            "SELECT lexeme FROM unnest(to_tsvector('english', %s))", (query,)
        ).fetchall()
    }
    n = truth["chunks"]
    scores: dict[int, float] = {}
    for (lex, cid), tf in truth["postings"].items():
        if lex in lexemes:
            df = truth["df"][lex]
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            dl = truth["dl"][cid]
            scores[cid] = scores.get(cid, 0.0) + idf * tf / (tf + K1 * (1 - B + B * dl / avgdl))
    return scores


def _keyword_search(
    conn: psycopg.Connection[Any], query: str, k: int = 10, **options: Any
) -> list[tuple[int, float, float]]:
    named = "".join(f", {name} => %({name})s" for name in options)
    return [
        (int(r[0]), float(r[1]), float(r[2]))
        for r in conn.execute(
            "SELECT chunk_id, keyword_score, probability FROM pgrag.search_v5('kw', %(q)s,"  # noqa: S608
            f" k => %(k)s{named})",
            {"q": query, "k": k, **options},
        ).fetchall()
    ]


def _reference_avgdl(conn: psycopg.Connection[Any]) -> float:
    row = conn.execute(
        "SELECT impact_avg_length FROM pgrag.keyword_maintain_v2('kw', max_drift => 0)"
    ).fetchone()
    assert row is not None
    return float(row[0])


@pytest.fixture
def kw(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cid = _collection(conn)
        rng = random.Random(7)
        for d in range(30):
            _add_document(
                conn, cid, f"doc{d}.md", [_text(rng, rng.randint(5, 60)) for _ in range(4)]
            )
        yield conn, cid


def test_scores_are_bm25_computed_from_the_stored_text(kw: Any) -> None:
    conn, cid = kw
    avgdl = _reference_avgdl(conn)
    for query in ("refund for an annual license", "vpn outage escalation", "tax salary report"):
        expected = _bm25(conn, cid, query, avgdl)
        got = _keyword_search(conn, query, k=50, postings_per_term=None)
        assert got, query
        ranked = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[: len(got)]
        assert [cid for cid, _, _ in got] == [c for c, _ in ranked]
        for (chunk_id, score, _), (_, want) in zip(got, ranked, strict=True):
            assert score == pytest.approx(want, rel=1e-5), (query, chunk_id)


def test_or_semantics_a_missing_word_does_not_empty_the_result(kw: Any) -> None:
    conn, _ = kw
    assert _keyword_search(conn, "refund zeppelin")  # no chunk says "zeppelin"
    assert _keyword_search(conn, "zeppelin") == []
    assert _keyword_search(conn, "the and of") == []  # only stop words


def test_probabilities_are_a_softmax_over_the_returned_results(kw: Any) -> None:
    conn, _ = kw
    rows = _keyword_search(conn, "refund invoice payment", k=10)
    probabilities = [p for _, _, p in rows]
    assert sum(probabilities) == pytest.approx(1.0)
    assert probabilities == sorted(probabilities, reverse=True)
    assert probabilities[0] > probabilities[-1]
    # A higher temperature flattens the distribution towards uniform.
    flat = [p for _, _, p in _keyword_search(conn, "refund invoice payment", temperature=1000.0)]
    assert max(flat) - min(flat) < 0.01
    assert max(flat) < probabilities[0]


def test_statistics_follow_inserts_updates_deletes_and_truncate(kw: Any) -> None:
    conn, cid = kw
    _assert_in_step(conn, cid)
    doc = _add_document(conn, cid, "new.md", ["zeppelin refund", "zeppelin airship hangar"])
    _assert_in_step(conn, cid)
    assert [r[0] for r in _keyword_search(conn, "zeppelin")]
    # An UPDATE that changes the words moves them; one that does not touches nothing.
    conn.execute(
        "UPDATE pgrag.chunks SET content = 'blimp hangar' WHERE document_id = %s AND ordinal = 0",
        (doc,),
    )
    conn.execute("UPDATE pgrag.chunks SET principals = '{alice}' WHERE document_id = %s", (doc,))
    _assert_in_step(conn, cid)
    # Deleting a document (chunks go by ON DELETE CASCADE) takes its postings with it.
    conn.execute("DELETE FROM pgrag.documents WHERE id = %s", (doc,))
    _assert_in_step(conn, cid)
    assert _keyword_search(conn, "zeppelin") == []
    # Folding the deltas changes nothing a search can see (impacts are left as they are here).
    before = _keyword_search(conn, "refund license vpn", k=20)
    folded = conn.execute(
        "SELECT * FROM pgrag.keyword_maintain_v2('kw', max_drift => 1000)"
    ).fetchone()
    assert folded is not None and folded[3] > 0  # df rows folded
    _assert_in_step(conn, cid)
    assert conn.execute(
        "SELECT count(*) = count(DISTINCT lexeme) FROM pgrag.keyword_df WHERE collection_id = %s",
        (cid,),
    ).fetchone() == (True,)
    assert _keyword_search(conn, "refund license vpn", k=20) == before
    conn.execute("TRUNCATE pgrag.chunks CASCADE")
    _assert_in_step(conn, cid)
    assert conn.execute("SELECT count(*) FROM pgrag.keyword_postings").fetchone() == (0,)


def test_deleting_a_collection_removes_its_keyword_index(kw: Any) -> None:
    conn, cid = kw
    other = _collection(conn, "other")
    _add_document(conn, other, "a.md", ["refund policy for the other collection"])
    conn.execute("DELETE FROM pgrag.collections WHERE id = %s", (cid,))
    for table in ("keyword_postings", "keyword_df", "keyword_totals", "keyword_settings"):
        row = conn.execute(
            f"SELECT count(*) FROM pgrag.{table} WHERE collection_id = %s",  # noqa: S608 - fixed names
            (cid,),
        ).fetchone()
        assert row == (0,), table
    _assert_in_step(conn, other)


def test_impacts_are_refreshed_when_the_average_length_drifts(kw: Any) -> None:
    conn, cid = kw
    reference = _reference_avgdl(conn)
    rng = random.Random(3)
    # Much longer chunks move the average far past 10%.
    _add_document(conn, cid, "long.md", [_text(rng, 400) for _ in range(40)])
    row = conn.execute("SELECT * FROM pgrag.keyword_maintain_v2('kw')").fetchone()
    assert row is not None
    chunks, live, refreshed_to, _, refreshed = row
    assert refreshed is True and refreshed_to == pytest.approx(live) and live > 1.5 * reference
    expected = _bm25(conn, cid, "refund annual license", live)
    got = _keyword_search(conn, "refund annual license", k=5, postings_per_term=None)
    for chunk_id, score, _ in got:
        assert score == pytest.approx(expected[chunk_id], rel=1e-5)
    # Within the drift allowed, nothing is rewritten.
    again = conn.execute("SELECT impacts_refreshed FROM pgrag.keyword_maintain_v2('kw')")
    assert again.fetchone() == (False,)


def _postings_read(conn: psycopg.Connection[Any], query: str, **options: Any) -> int:
    """Rows of keyword_postings read by one search, by index or by sequential scan (from the
    statistics views)."""

    def counter() -> int:
        flush_statistics(conn)
        row = conn.execute(
            "SELECT (SELECT sum(idx_tup_read) FROM pg_stat_user_indexes i"
            "         WHERE i.relid = t.relid) + t.seq_tup_read"
            " FROM pg_stat_user_tables t"
            " WHERE t.schemaname = 'pgrag' AND t.relname = 'keyword_postings'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    before = counter()
    _keyword_search(conn, query, **options)
    return counter() - before


def test_pruning_reads_a_budget_and_scores_exactly(kw: Any) -> None:
    conn, cid = kw
    rng = random.Random(5)
    for d in range(60):  # enough chunks that common words have long postings lists
        _add_document(conn, cid, f"more{d}.md", [_text(rng, rng.randint(5, 60)) for _ in range(25)])
    _add_document(
        conn, cid, "airships.md", [f"zeppelin airship hangar {_text(rng, 10)}" for _ in range(15)]
    )
    # Plans are made once per session from the statistics at hand: have some, as autovacuum
    # (or pgrag ingest, after a bulk load) provides them.
    conn.execute("ANALYZE pgrag.keyword_postings")
    avgdl = _reference_avgdl(conn)
    query = "zeppelin airship refund invoice billing plan card"
    dfs = _dfs(conn, cid, query)
    budget = 300
    assert sum(dfs) > 10 * budget  # so the arm prunes
    expected = _bm25(conn, cid, query, avgdl)
    exact = _keyword_search(conn, query, k=10, postings_per_term=None)
    pruned = _keyword_search(conn, query, k=10, postings_per_term=budget)
    assert len(pruned) == 10
    # Candidates are completed by primary-key probes, so every score is exact BM25...
    for chunk_id, score, _ in pruned:
        assert score == pytest.approx(expected[chunk_id], rel=1e-5)
    assert [s for _, s, _ in pruned] == sorted((s for _, s, _ in pruned), reverse=True)
    # ...and the rare words are read whole (their share of the budget covers them), so the
    # chunks that have them lead as in the exact ranking.
    assert {c for c, _, _ in pruned[:5]} == {c for c, _, _ in exact[:5]}
    # What it costs: about the budget, where the exact arm reads every posting of every term
    # (under RRF the arm alone needs k candidates; under the convex fusion, 40, for the
    # statistics of its scores: each term then reads at least 40 of its postings).
    full = _postings_read(conn, query, k=10, postings_per_term=None, rrf_k=5)
    pruned_reads = _postings_read(conn, query, k=10, postings_per_term=budget, rrf_k=5)
    assert full >= sum(dfs)
    assert pruned_reads < 2 * budget < full / 5, (pruned_reads, full)
    convex_reads = _postings_read(conn, query, k=10, postings_per_term=budget)
    terms = len(dfs)
    assert convex_reads < 2 * (budget + 40 * terms) and convex_reads < full / 3, (
        convex_reads,
        full,
    )


def _dfs(conn: psycopg.Connection[Any], collection_id: int, query: str) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT sum(d.df) FROM pgrag.keyword_df d, unnest(to_tsvector('english', %s)) u"
            " WHERE d.collection_id = %s AND d.lexeme = u.lexeme GROUP BY d.lexeme",
            (query, collection_id),
        ).fetchall()
    ]


def test_a_filter_reads_every_posting_so_it_keeps_k(kw: Any) -> None:
    conn, cid = kw
    conn.execute(
        "UPDATE pgrag.documents SET metadata = '{\"team\": \"ops\"}' WHERE source LIKE 'doc1%%'"
    )
    rows = conn.execute(
        "SELECT chunk_id, source FROM pgrag.search_v5('kw', 'refund invoice billing', k => 8,"
        ' filter => \'{"team": "ops"}\', postings_per_term => 1)'
    ).fetchall()
    assert len(rows) == 8 and all(r[1].startswith("doc1") for r in rows)


def test_concurrent_writers_to_one_collection_do_not_wait_for_each_other(kw: Any, dsn: str) -> None:
    conn, cid = kw
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        _add_document(first, cid, "first.md", ["refund window for annual plans"])
        second.execute("SET lock_timeout = '3s'")
        # Same collection, same common words, while the first transaction is still open.
        _add_document(second, cid, "second.md", ["refund window for monthly plans"])
        # Each sees exactly its own snapshot: the other's uncommitted chunk is not counted.
        n_first = first.execute("SELECT sum(chunks) FROM pgrag.keyword_totals").fetchone()
        n_second = second.execute("SELECT sum(chunks) FROM pgrag.keyword_totals").fetchone()
        assert n_first == n_second
        second.commit()
        first.commit()
    _assert_in_step(conn, cid)


def test_concurrent_ingest_and_maintenance_keep_statistics_exact(kw: Any, dsn: str) -> None:
    conn, cid = kw
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                for i in range(15):
                    with c.transaction():
                        doc = _add_document(c, cid, f"w{seed}-{i}.md", [_text(rng, 20)] * 2)
                        if i % 3 == 0:
                            c.execute("DELETE FROM pgrag.documents WHERE id = %s", (doc,))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    def maintainer() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                for _ in range(10):
                    c.execute("SELECT * FROM pgrag.keyword_maintain_v2('kw')").fetchall()
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
    threads.append(threading.Thread(target=maintainer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    _assert_in_step(conn, cid)


def test_upgrade_from_0001_indexes_the_chunks_already_stored(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "0001")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        cid = _collection(conn)
        rng = random.Random(11)
        for d in range(5):
            _add_document(conn, cid, f"d{d}.md", [_text(rng, 30), _text(rng, 8)])
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        _assert_in_step(conn, cid)
        assert _keyword_search(conn, "refund invoice")


def test_search_validates_the_keyword_arguments(kw: Any) -> None:
    conn, _ = kw
    for bad, message in (
        ("temperature => 0", "temperature must be a finite number > 0"),
        ("postings_per_term => 0", "postings_per_term must be at least 1"),
    ):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(f"SELECT * FROM pgrag.search_v5('kw', 'refund', {bad})")  # noqa: S608 - constant cases


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "update", "delete"]),
            st.lists(st.sampled_from(WORDS + ["the", "and"]), min_size=0, max_size=12),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_any_sequence_of_writes_leaves_the_index_exact(kw: Any, ops: list[Any]) -> None:
    conn, cid = kw
    with conn.transaction(force_rollback=True):
        for op, words in ops:
            text = " ".join(words)
            if op == "insert":
                _add_document(conn, cid, f"h{random.random()}.md", [text, text[::-1]])
            elif op == "update":
                conn.execute(
                    "UPDATE pgrag.chunks SET content = %s WHERE id IN"
                    " (SELECT id FROM pgrag.chunks WHERE collection_id = %s ORDER BY id LIMIT 3)",
                    (text, cid),
                )
            else:
                conn.execute(
                    "DELETE FROM pgrag.chunks WHERE id IN (SELECT id FROM pgrag.chunks"
                    " WHERE collection_id = %s ORDER BY id DESC LIMIT 2)",
                    (cid,),
                )
        _assert_in_step(conn, cid)


def test_keyword_only_fast_path_agrees_with_the_general_statement(kw: Any) -> None:
    """Keyword-only, unfiltered search has a statement of its own (the lean path); a
    filter every document passes takes the general statement: same rows, same numbers."""
    conn, _ = kw
    conn.execute("UPDATE pgrag.documents SET metadata = '{\"all\": true}'")
    columns = (
        "rank, score, chunk_id, document_id, source, title, section, text, vector_rank,"
        " keyword_rank, vector_distance, keyword_score, metadata, probability"
    )
    for query in ("refund invoice payment", "vpn outage escalation ticket", "tax"):
        fast = conn.execute(
            f"SELECT {columns} FROM pgrag.search_v5('kw', %s, k => 7)",  # noqa: S608 - fixed
            (query,),
        ).fetchall()
        general = conn.execute(
            f"SELECT {columns} FROM pgrag.search_v5('kw', %s, k => 7,"  # noqa: S608 - fixed
            " filter => '{\"all\": true}')",
            (query,),
        ).fetchall()
        assert fast and len(fast) == len(general)
        for a, b in zip(fast, general, strict=True):
            assert a[0] == b[0] and a[2:11] == b[2:11] and a[12] == b[12]
            assert a[1] == pytest.approx(b[1], abs=1e-12)  # (the z-score: summed in any order)
            assert a[11] == pytest.approx(b[11]) and a[13] == pytest.approx(b[13])


def test_changing_chunk_ids_moves_their_postings(kw: Any) -> None:
    conn, cid = kw
    conn.execute("UPDATE pgrag.chunks SET id = id + 100000 WHERE id % 5 = 0")
    _assert_in_step(conn, cid)
    # An id freed by a delete, taken by another chunk in the same transaction.
    with conn.transaction():
        lo, hi = conn.execute("SELECT min(id), max(id) FROM pgrag.chunks").fetchone()
        conn.execute("DELETE FROM pgrag.chunks WHERE id = %s", (lo,))
        conn.execute("UPDATE pgrag.chunks SET id = %s WHERE id = %s", (lo, hi))
    _assert_in_step(conn, cid)


def test_truncating_collections_or_chunks_empties_the_index(kw: Any) -> None:
    conn, cid = kw
    conn.execute("TRUNCATE pgrag.collections CASCADE")
    for table in ("keyword_postings", "keyword_df", "keyword_totals", "keyword_settings"):
        assert conn.execute(f"SELECT count(*) FROM pgrag.{table}").fetchone() == (0,), table  # noqa: S608 - fixed names
    cid = _collection(conn)
    _add_document(conn, cid, "a.md", ["refund window", "invoice address"])
    _assert_in_step(conn, cid)


def test_extreme_temperatures_and_long_queries(kw: Any) -> None:
    conn, cid = kw
    # A tiny temperature puts all the probability on the first result instead of failing.
    rows = _keyword_search(conn, "refund invoice payment", k=10, temperature=1e-9)
    assert rows[0][2] == pytest.approx(1.0) and rows[-1][2] == pytest.approx(0.0)
    for bad in ("'NaN'", "'Infinity'"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="finite"):
            conn.execute(f"SELECT * FROM pgrag.search_v5('kw', 'refund', temperature => {bad})")  # noqa: S608 - constant cases
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="finite"):
        conn.execute("SELECT * FROM pgrag.search_v5('kw', 'refund', keyword_weight => 'NaN')")
    # More distinct words than the pruned path can track: still exact BM25 scores.
    words = [f"w{i}x" for i in range(70)]
    _add_document(conn, cid, "long.md", [" ".join(words), " ".join(words[:40])])
    avgdl = _reference_avgdl(conn)
    query = " ".join(words) + " refund invoice"
    expected = _bm25(conn, cid, query, avgdl)
    for chunk_id, score, _ in _keyword_search(conn, query, k=5, postings_per_term=1):
        assert score == pytest.approx(expected[chunk_id], rel=1e-5)


def test_maintenance_waits_for_open_writers_so_impacts_stay_consistent(kw: Any, dsn: str) -> None:
    conn, cid = kw
    _reference_avgdl(conn)
    rng = random.Random(9)
    _add_document(conn, cid, "long.md", [_text(rng, 400) for _ in range(30)])  # avg drifts
    done = threading.Event()
    with psycopg.connect(dsn) as writer:
        _add_document(writer, cid, "open.md", ["refund refund invoice"])  # not committed yet

        def maintain() -> None:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT * FROM pgrag.keyword_maintain_v2('kw')").fetchall()
            done.set()

        thread = threading.Thread(target=maintain)
        thread.start()
        assert not done.wait(1.0), "the refresh must wait for the open writer"
        writer.commit()
        thread.join(timeout=30)
    assert done.is_set()
    # Every posting's impact is at the one reference length, the open writer's included.
    row = conn.execute(
        "SELECT count(*) FROM pgrag.keyword_postings p"
        " JOIN pgrag.keyword_settings s ON s.collection_id = p.collection_id"
        " WHERE p.collection_id = %s AND abs(p.impact"
        "   - p.tf / (p.tf + 1.5 * (0.25 + 0.75 * p.dl / s.impact_avgdl))) > 1e-5",
        (cid,),
    ).fetchone()
    assert row == (0,)
