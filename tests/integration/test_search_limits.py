"""search_v5 under hostile input (issue 16, items 3, 6 and 7): filters compiled once and
bounded in size, a time limit on filtered searches, zero query vectors refused, and every
argument at its extremes answered by a one-line error naming it, never a raw PostgreSQL one.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgrag
from pgrag.errors import DatabaseError, InputError
from pgrag.ingest.loaders import from_text
from tests.integration.conftest import TEMPLATE, _create_database, _drop_database

REFERENCE = Path(__file__).with_name("filter_reference.sql")

# 60 documents; n is the document's number, so {"n": {"$in": [...]}} selects known ones.
DOCS = [
    (
        f"note-{i:02d}.txt",
        {"n": i, "team": ("billing", "sales", "support")[i % 3], "tags": ["a", str(i % 5)]},
        f"Refund note {i}: refunds are processed within {5 + i % 10} business days.",
    )
    for i in range(60)
]


@pytest.fixture(scope="module")
def limits_dsn(admin_dsn: str, template_dsn: str, embedder: Any) -> Iterator[str]:
    name = f"pgrag_limits_{uuid.uuid4().hex[:8]}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        pgrag.ingest_documents(
            db,
            [from_text(source, text, metadata=meta) for source, meta, text in DOCS],
            collection="lim",
        )
    finally:
        db.close()
    yield dsn
    _drop_database(admin_dsn, name)


@pytest.fixture
def conn(limits_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(limits_dsn, autocommit=True) as c:
        yield c


def _vector(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(
        "SELECT embedding::text FROM pgrag.chunk_embeddings ORDER BY chunk_id LIMIT 1"
    ).fetchone()
    assert row is not None
    return str(row[0])


def _sources(conn: psycopg.Connection[Any], query: str, params: Any = None) -> list[str]:
    return [r[0] for r in conn.execute(query, params).fetchall()]


# -- item 3: filters ----------------------------------------------------------------------------

METADATA = [
    {},
    {"n": 1},
    {"n": 1.0},
    {"n": 2.5},
    {"n": "1"},
    {"n": None},
    {"n": True},
    {"n": [1, 2]},
    {"n": [3, "x", None]},
    {"n": [[1, 2], {"a": 1}]},
    {"n": {"a": 1, "b": 2}},
    {"n": "2024-03-01", "tags": ["gdpr", "eu"]},
    {"n": "2024-03-01T10:00:00Z", "tags": []},
    {"team": "billing", "tags": ["us"], "n": 10},
    {"team": "sales", "tags": "us", "n": 20},
    {"team": {"x": "y"}, "draft": False},
]

FILTERS: list[dict[str, Any]] = [
    {"n": 1},
    {"n": [1]},
    {"n": {"a": 1}},
    {"n": {"$eq": 1}},
    {"n": {"$eq": {"a": 1}}},
    {"n": {"$ne": 1}},
    {"n": {"$in": [1, "x", None, True]}},
    {"n": {"$in": [1.00, 20, 2.5e0]}},
    {"n": {"$in": [[1, 2], {"a": 1}, [3]]}},
    {"n": {"$in": []}},
    {"n": {"$nin": [1, "1", None]}},
    {"n": {"$nin": [[1], {"a": 1}]}},
    {"n": {"$in": [[1], [3], {}, {}, ["x"], [None]]}},
    {"n": {"$nin": [[1.0], [[1, 2]], [2, 1], {"a": 1}, {"a": 1}]}},
    {"n": {"$in": [[True], [[1, 2]]]}},
    {"tags": {"$in": ["us", "eu"]}},
    {"tags": {"$nin": ["us"]}},
    {"tags": {"$all": ["gdpr", "eu"]}},
    {"n": {"$all": [1]}},
    {"n": {"$gt": 1}},
    {"n": {"$gte": 1, "$lt": 20}},
    {"n": {"$lte": "2024-03-01"}},
    {"n": {"$gt": "2024-02-28T23:00:00+01:00"}},
    {"n": {"$lt": "1"}},
    {"draft": {"$exists": True}},
    {"draft": {"$exists": False}},
    {"$or": [{"team": "billing"}, {"n": {"$in": [20, 2.5]}}]},
    {"$and": [{"n": {"$gte": 1}}, {"n": {"$nin": [10]}}]},
    {"$not": {"n": {"$in": [1, [1, 2]]}}},
    {"$or": [{"$not": {"tags": {"$in": ["us"]}}}, {"team": {"$in": ["sales"]}}], "n": {"$ne": 5}},
]


def test_compiled_filters_agree_with_the_released_evaluator(conn: psycopg.Connection[Any]) -> None:
    """Every operator, on values of every JSON type: the compiled filter admits exactly what
    the per-row evaluator released before it admitted."""
    conn.execute(REFERENCE.read_text())
    disagreements = []
    for meta, f in itertools.product(METADATA, FILTERS):
        conn.execute("SELECT pgrag.filter_check(%s)", (Jsonb(f),))
        row = conn.execute(
            "SELECT pgrag.filter_match(%(m)s, pgrag.filter_check(%(f)s)),"
            " pg_temp.filter_match_reference(%(m)s, %(f)s)",
            {"m": Jsonb(meta), "f": Jsonb(f)},
        ).fetchone()
        assert row is not None and row[0] is not None
        if row[0] != row[1]:
            disagreements.append((meta, f, row))
    assert disagreements == []
    # and the cases are not trivial: each filter admits some metadata and refuses some
    admitted = {
        json.dumps(f): conn.execute(
            "SELECT count(*) FILTER (WHERE pgrag.filter_match(m, pgrag.filter_check(%s)))"
            " FROM unnest(%s::jsonb[]) m",
            (Jsonb(f), [Jsonb(m) for m in METADATA]),
        ).fetchone()[0]  # type: ignore[index]
        for f in FILTERS
    }
    assert sum(0 < count < len(METADATA) for count in admitted.values()) >= len(FILTERS) - 2


def test_a_10000_value_in_list_returns_exactly_its_documents(
    conn: psycopg.Connection[Any],
) -> None:
    wanted = {3, 17, 42, 59}
    values = [v for v in range(1000, 10996)] + sorted(wanted)  # 10,000 values, 4 of them hit
    assert len(values) == 10000
    for extra in ({}, {"team": {"$ne": "nobody"}}):  # containment and compiled paths
        for embedding in (None, _vector(conn)):
            got = _sources(
                conn,
                "SELECT source FROM pgrag.search_v5('lim', 'refund', %s::vector, k => 100,"
                " filter => %s)",
                (embedding, Jsonb({"n": {"$in": values}, **extra})),
            )
            assert sorted(got) == sorted(f"note-{i:02d}.txt" for i in wanted), (extra, embedding)
    # $nin of the same list: every other document
    got = _sources(
        conn,
        "SELECT source FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s)",
        (Jsonb({"n": {"$nin": values}}),),
    )
    assert len(got) == len(DOCS) - len(wanted)


@pytest.mark.parametrize(
    ("f", "message"),
    [
        ({"n": {"$in": list(range(10001))}}, "filter has 10001 list values; the limit is 10000"),
        (
            {"$or": [{"n": {"$in": list(range(6000))}}, {"n": {"$nin": list(range(4001))}}]},
            "filter has 10003 list values; the limit is 10000",
        ),
        ({f"k{i}": {"$ne": i} for i in range(101)}, "filter has 202 keys and operators"),
        (
            {"n": {"$in": ["x" * 1100000]}},
            r"filter is 11000\d\d bytes of JSON; the limit is 1000000",
        ),
    ],
    ids=["values", "values-spread", "keys", "bytes"],
)
def test_an_oversized_filter_is_a_one_line_error(
    conn: psycopg.Connection[Any], f: dict[str, Any], message: str
) -> None:
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match=message) as caught:
        conn.execute("SELECT * FROM pgrag.search_v5('lim', 'refund', filter => %s)", (Jsonb(f),))
    assert "\n" not in (caught.value.diag.message_primary or "\n")


def test_a_deeply_nested_filter_is_a_one_line_error(conn: psycopg.Connection[Any]) -> None:
    def nested(levels: int) -> dict[str, Any]:
        f: dict[str, Any] = {"n": 1}  # one level: an object (its scalar value is none)
        for _ in range(levels - 1):
            f = {"$not": f}
        return f

    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="more than 32 levels deep"):
        conn.execute(
            "SELECT * FROM pgrag.search_v5('lim', 'refund', filter => %s)", (Jsonb(nested(33)),)
        )
    rows = conn.execute(  # 30 $not (an even number) around {"n": 1}: that document alone
        "SELECT source FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s)",
        (Jsonb(nested(31)),),
    ).fetchall()
    assert rows == [("note-01.txt",)]


def test_a_filtered_search_stops_at_its_time_limit(conn: psycopg.Connection[Any]) -> None:
    f = Jsonb({"n": {"$in": list(range(30))}})
    query = "SELECT count(*) FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s)"
    assert conn.execute(query, (f,)).fetchone() == (30,)  # the default (30 s) lets it finish
    conn.execute("SET pgrag.search_timeout = '0.001'")  # a microsecond: the first row is late
    with pytest.raises(psycopg.errors.QueryCanceled, match=r"time limit of 0\.001 ms"):
        conn.execute(query, (f,))
    conn.execute("SET pgrag.search_timeout = 0")  # no lower limit: the collection's 30 s
    assert conn.execute(query, (f,)).fetchone() == (30,)
    # a collection's own limit applies, and the smaller of the two wins
    conn.execute("RESET pgrag.search_timeout")
    conn.execute(
        'UPDATE pgrag.collections SET settings = settings || \'{"search_timeout": "1us"}\''
        " WHERE name = 'lim'"
    )
    try:
        with pytest.raises(psycopg.errors.QueryCanceled, match="pgrag.search_timeout"):
            conn.execute(query, (f,))
        for longer in ("10s", "0"):  # a session cannot raise the collection's limit
            conn.execute("SELECT set_config('pgrag.search_timeout', %s, false)", (longer,))
            with pytest.raises(psycopg.errors.QueryCanceled):
                conn.execute(query, (f,))
    finally:
        conn.execute(
            "UPDATE pgrag.collections SET settings = settings - 'search_timeout' WHERE name = 'lim'"
        )
    conn.execute("SET pgrag.search_timeout = 'soon'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be a duration"):
        conn.execute(query, (f,))


# -- item 6: zero query vectors -----------------------------------------------------------------


@pytest.mark.parametrize("fn", ["search_v5", "search_v4", "search_v3"])
def test_a_zero_query_vector_is_refused(conn: psycopg.Connection[Any], fn: str) -> None:
    dims = conn.execute("SELECT dimension FROM pgrag.embedding_models LIMIT 1").fetchone()
    assert dims is not None
    zero = "[" + ",".join(["0"] * dims[0]) + "]"
    for text in (None, "refund"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be nonzero"):
            conn.execute(f"SELECT * FROM pgrag.{fn}('lim', %s, %s::vector)", (text, zero))  # noqa: S608 - fixed names


def test_python_refuses_a_zero_query_embedding(limits_dsn: str, embedder: Any) -> None:
    class Zeros:
        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

        def embed(self, texts: list[str]) -> Any:
            return np.zeros((len(texts), embedder.dimension), dtype=np.float32)

    db = pgrag.connect(limits_dsn, embedder=embedder)
    try:
        assert pgrag.search(db, "refund", collection="lim", k=3)  # the real model: results
    finally:
        db.close()
    db = pgrag.connect(limits_dsn, embedder=Zeros())  # type: ignore[arg-type]
    try:
        with pytest.raises(InputError, match="zero"):
            pgrag.search(db, "refund days", collection="lim", k=3)
    finally:
        db.close()


# -- item 7: every argument at its extremes -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("NULL, NULL", "search_v5 needs query_text, query_embedding or both"),
        ("NULL, 'refund'", "search_v5 needs a collection name"),
        ("'lim', 'refund', rrf_k => 2147483647", "rrf_k must be between 1 and 1000000"),
        ("'lim', 'refund', rrf_k => 0", "rrf_k must be at least 1"),
        ("'lim', 'refund', k => 2147483647", "k must be between 1 and 1000"),
        ("'lim', 'refund', k => -1", "k must be between 1 and 1000"),
        ("'lim', 'refund', vector_depth => 2147483647", "vector_depth and keyword_depth"),
        ("'lim', 'refund', keyword_depth => -2147483648", "vector_depth and keyword_depth"),
        ("'lim', 'refund', vector_weight => 1e308", "between 0 and 1000000"),
        ("'lim', 'refund', keyword_weight => 1e7", "between 0 and 1000000"),
        ("'lim', 'refund', keyword_weight => 'Infinity'", "must be finite"),
        ("'lim', 'refund', keyword_weight => 'NaN'", "keyword_weight"),
        ("'lim', 'refund', temperature => 5e-324", "temperature must be between"),
        ("'lim', 'refund', temperature => 1e308", "temperature must be between"),
        ("'lim', 'refund', postings_per_term => -2147483648", "postings_per_term"),
        ("'lim', 'refund', fallback_chunks => 2147483647", "fallback_chunks"),
        (
            "'lim', 'refund', fallback_chunks => 1000000",
            "fallback_chunks must be between 0 and 50000",
        ),
    ],
)
def test_extreme_arguments_are_one_line_errors_naming_them(
    conn: psycopg.Connection[Any], args: str, message: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        conn.execute(f"SELECT * FROM pgrag.search_v5({args})")  # noqa: S608 - fixed arguments
    assert message in str(caught.value)
    assert "\n" not in (caught.value.diag.message_primary or "\n")


def test_extreme_arguments_that_are_valid_still_search(conn: psycopg.Connection[Any]) -> None:
    vector = _vector(conn)
    for args in (
        "rrf_k => 1000000",
        "postings_per_term => 2147483647",
        "postings_per_term => 1",
        "vector_depth => 10000, keyword_depth => 10000",
        "vector_weight => 1000000, keyword_weight => 1000000",
        "temperature => 1e-300",
        "temperature => 1000000",
        "k => 1000",
    ):
        rows = conn.execute(
            f"SELECT rank, probability FROM pgrag.search_v5('lim', 'refund', %s::vector, {args})",  # noqa: S608 - fixed arguments
            (vector,),
        ).fetchall()
        assert rows, args
        assert abs(sum(p for _, p in rows) - 1) < 1e-6, args


def test_a_huge_query_text_is_a_one_line_error(conn: psycopg.Connection[Any]) -> None:
    words = " ".join(f"w{i:07d}x" for i in range(100000))  # ~1 MB of distinct words
    with pytest.raises(psycopg.errors.ProgramLimitExceeded) as caught:
        conn.execute("SELECT * FROM pgrag.search_v5('lim', %s)", (words,))
    assert "query_text is 999999 characters; the limit is 20000" in str(caught.value)
    # at the limit: searched (nothing matches these words; the fallback reads 100 of them)
    at_limit = words[:20000]
    assert conn.execute("SELECT * FROM pgrag.search_v5('lim', %s)", (at_limit,)).fetchall() == []


def test_python_reports_the_limits_as_one_line_errors(limits_dsn: str, embedder: Any) -> None:
    db = pgrag.connect(limits_dsn, embedder=embedder)
    try:
        with pytest.raises(DatabaseError, match="the limit is 10000"):
            pgrag.search(
                db, "refund", collection="lim", mode="keyword", filter={"n": {"$in": [0] * 10001}}
            )
        with pytest.raises(InputError, match="35000 characters; the limit is 20000"):
            pgrag.search(db, "refund " * 5000, collection="lim")  # before embedding it
    finally:
        db.close()


def test_python_sessions_stop_a_query_whose_client_went_away(limits_dsn: str) -> None:
    """pgrag.connect asks the server to check the socket while a query runs (so an
    interrupted `pgrag search` stops there), unless the session chose an interval itself."""
    db = pgrag.connect(limits_dsn)
    try:
        if db.conn.info.server_version < 140000:
            # PostgreSQL 13 has no such check: pgrag connects all the same, setting nothing.
            setting = "SELECT current_setting('client_connection_check_interval', true)"
            assert db.conn.execute(setting).fetchone() == (None,)
            return
        shown = db.conn.execute("SHOW client_connection_check_interval").fetchone()
        assert shown == ("1s",)
    finally:
        db.close()
    from psycopg.conninfo import make_conninfo

    chosen = make_conninfo(limits_dsn, options="-c client_connection_check_interval=5s")
    db = pgrag.connect(chosen)
    try:
        shown = db.conn.execute("SHOW client_connection_check_interval").fetchone()
        assert shown == ("5s",)
    finally:
        db.close()


# -- review findings on items 3, 6 and 7 -----------------------------------------------------


def test_the_keyword_fallback_stops_at_the_time_limit(conn: psycopg.Connection[Any]) -> None:
    """The fallback reads up to fallback_chunks chunks for any query text: it checks the same
    deadline as filter testing (a reader may SET statement_timeout = 0)."""
    query = "SELECT source FROM pgrag.search_v5('lim', %s, k => 5)"
    # only stop words: the keyword arm finds nothing, the fallback matches them as typed
    assert len(conn.execute(query, ("are",)).fetchall()) == 5
    assert conn.execute(query, ("zzqxv " * 3,)).fetchall() == []
    conn.execute("SET statement_timeout = 0")
    conn.execute("SET pgrag.search_timeout = '0.001'")
    try:
        for text in ("are", " ".join(f"{c * 190}" for c in "bcdfghjklm")):
            with pytest.raises(psycopg.errors.QueryCanceled, match="keyword fallback"):
                conn.execute(query, (text,))
        # a search the keyword arm answers never reaches the fallback
        assert conn.execute(query, ("refund",)).fetchall()
    finally:
        conn.execute("RESET pgrag.search_timeout")
    assert len(conn.execute(query, ("are",)).fetchall()) == 5


def test_the_fallback_matches_whole_words_as_typed(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        "SELECT source, keyword_score FROM pgrag.search_v5('lim', 'Are', k => 100)"
    ).fetchall()
    assert len(rows) == len(DOCS)  # every note has "are" (a stop word, matched as a word)
    assert conn.execute("SELECT * FROM pgrag.search_v5('lim', 'ar', k => 100)").fetchall() == []


def test_in_lists_of_objects_and_lists_are_compiled(conn: psycopg.Connection[Any]) -> None:
    compiled = conn.execute(
        "SELECT pgrag.filter_check(%s)",
        (Jsonb({"tags": {"$in": [{}] * 9996 + [[str(i)] for i in range(1, 3)]}}),),
    ).fetchone()[0]  # type: ignore[index]
    (ins,) = compiled["$groups"][0]
    assert ins["rest"] == [{}]  # 9,996 equal objects tested once, not once each per row
    assert sorted(compiled["$sets"][ins["set"]]) == ["as1", "as2"]  # [x]: a lookup
    got = _sources(
        conn,
        "SELECT source FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s)",
        (Jsonb({"tags": {"$in": [[str(i)] for i in range(1, 5000)]}}),),  # 9,998 values
    )
    assert sorted(got) == sorted(f"note-{i:02d}.txt" for i in range(60) if i % 5 in (1, 2, 3, 4))
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="101 distinct objects and lists"):
        conn.execute(
            "SELECT * FROM pgrag.search_v5('lim', 'refund', filter => %s)",
            (Jsonb({"tags": {"$in": [[i, i] for i in range(101)]}}),),
        )


def test_range_bounds_are_parsed_once_and_agree(conn: psycopg.Connection[Any]) -> None:
    compiled = conn.execute(
        "SELECT pgrag.filter_check(%s)", (Jsonb({"d": {"$gte": "2024-03-01T10:00:00+01:00"}}),)
    ).fetchone()[0]  # type: ignore[index]
    assert compiled["$groups"][0][0]["t"] == 1709283600  # epoch seconds, parsed at compile time
    for bound, admitted in ((30.5, 29), (-1, 60), (59, 0), (1e-300, 59)):
        got = _sources(
            conn,
            "SELECT source FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s)",
            (Jsonb({"n": {"$gt": bound}}),),
        )
        assert len(got) == admitted, bound


@pytest.mark.parametrize(
    "text",
    [
        '{"n": {"$gt": 1e131000}}',
        '{"n": {"$in": [' + ",".join(["1e131000"] * 9000) + "]}}",
        '{"n": {"$lt": 1e-1001}}',
        '{"n": {"$eq": 0.' + "0" * 1000 + "1}}",
        '{"n": {"$gt": 1e100000}}',
    ],
    ids=["huge", "many-huge", "tiny", "long", "bound"],
)
def test_absurd_numbers_in_a_filter_are_one_line_errors(
    conn: psycopg.Connection[Any], text: str
) -> None:
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="number beyond the limits"):
        conn.execute("SELECT * FROM pgrag.search_v5('lim', 'refund', filter => %s::jsonb)", (text,))
    ok = '{"n": {"$lt": 1e999, "$gt": 1e-1000}}'
    assert (
        len(
            conn.execute(
                "SELECT * FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s::jsonb)",
                (ok,),
            ).fetchall()
        )
        == 59
    )


def test_nesting_counts_the_levels_written(conn: psycopg.Connection[Any]) -> None:
    def nots(count: int) -> dict[str, Any]:
        f: dict[str, Any] = {"n": 1}
        for _ in range(count):
            f = {"$not": f}
        return f

    def ands(count: int) -> dict[str, Any]:
        f: dict[str, Any] = {"n": 1}
        for _ in range(count):
            f = {"$and": [f]}
        return f

    query = "SELECT source FROM pgrag.search_v5('lim', 'refund', k => 100, filter => %s)"
    assert _sources(conn, query, (Jsonb(nots(30)),)) == ["note-01.txt"]  # 31 levels
    assert len(_sources(conn, query, (Jsonb(nots(31)),))) == 59  # 32 levels: the limit
    assert _sources(conn, query, (Jsonb(ands(31)),)) == ["note-01.txt"]
    for too_deep in (nots(32), ands(32)):
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="more than 32 levels"):
            conn.execute(query, (Jsonb(too_deep),))


def _fill(conn: psycopg.Connection[Any], value: float, first: float | None = None) -> str:
    dims = conn.execute("SELECT dimension FROM pgrag.embedding_models LIMIT 1").fetchone()
    assert dims is not None
    values = [value] * dims[0]
    if first is not None:
        values = [first] + [0.0] * (dims[0] - 1)
    return "[" + ",".join(repr(v) for v in values) + "]"


def test_vectors_single_precision_cannot_measure_are_refused(conn: psycopg.Connection[Any]) -> None:
    for vector in (_fill(conn, 0, first=1e-45), _fill(conn, 1e-23), _fill(conn, 1e38)):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="norm|halfvec"):
            conn.execute("SELECT * FROM pgrag.search_v5('lim', NULL, %s::vector)", (vector,))
    # small and large but measurable: searched, with real distances
    for value in (1e-10, 1e10):
        rows = conn.execute(
            "SELECT vector_distance FROM pgrag.search_v5('lim', NULL, %s::vector, k => 5)",
            (_fill(conn, value),),
        ).fetchall()
        assert len(rows) == 5 and all(r[0] == r[0] for r in rows)  # not NaN


def test_python_refuses_a_vector_single_precision_cannot_measure(
    limits_dsn: str, embedder: Any
) -> None:
    class Tiny:
        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

        def embed(self, texts: list[str]) -> Any:
            return np.full((len(texts), embedder.dimension), 1e-23, dtype=np.float32)

    db = pgrag.connect(limits_dsn, embedder=Tiny())  # type: ignore[arg-type]
    db.query_cache = False
    try:
        with pytest.raises(InputError, match="single precision"):
            pgrag.search(db, "refund tiny", collection="lim", k=3)
    finally:
        db.close()


@pytest.mark.parametrize(
    ("f", "message"),
    [
        ({"tag": "\x00"}, "NUL character"),
        ({"tag": "\ud800"}, "not valid Unicode"),
        ({"n": float("nan")}, "JSON cannot hold"),
        ({"n": {"$gt": float("inf")}}, "JSON cannot hold"),
    ],
)
def test_python_refuses_filter_values_jsonb_cannot_hold(
    limits_dsn: str, f: dict[str, Any], message: str
) -> None:
    db = pgrag.connect(limits_dsn)
    try:
        with pytest.raises(InputError, match=message):
            pgrag.search(db, "refund", collection="lim", mode="keyword", filter=f)
        with pytest.raises(InputError, match="the search query is not valid UTF-8"):
            pgrag.search(db, "\udcff refund", collection="lim", mode="keyword")
    finally:
        db.close()


def test_a_long_query_stops_at_the_time_limit(conn: psycopg.Connection[Any]) -> None:
    """A query of more terms than pruning tracks (62) reads every posting of each: a read its
    text stretches, so each posting read checks the time limit (here on the general path, which
    a filter or a restricted caller takes)."""
    text = "refund note processed business days " + " ".join(str(i) for i in range(60))  # 65 terms
    query = "SELECT source FROM pgrag.search_v5('lim', %s, k => 5, filter => %s)"
    for f in ({"team": "billing"}, {"n": {"$gte": 0}}):
        assert len(conn.execute(query, (text, Jsonb(f))).fetchall()) == 5
    few = conn.execute(query, ("refund note 1", Jsonb({"team": "sales"}))).fetchall()
    conn.execute("SET pgrag.search_timeout = '0.001'")
    try:
        with pytest.raises(psycopg.errors.QueryCanceled, match="reading keyword postings"):
            conn.execute(query, (text, Jsonb({"team": "billing"})))
        # a short query is not watched per posting (containment filter: no row test either)
        assert conn.execute(query, ("refund note 1", Jsonb({"team": "sales"}))).fetchall() == few
    finally:
        conn.execute("RESET pgrag.search_timeout")
