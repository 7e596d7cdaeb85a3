"""Permissions enforced by PostgreSQL (migration 0003): several tenants' documents, searched and
read as restricted database roles, from psql-style SQL and from Python.

Every check compares what a role gets with what it may see, computed independently here from
the documents' principals; and tries to get more by other SQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pgrag
from pgrag import access
from pgrag.cli import cli
from pgrag.collections import list_collections
from pgrag.db.principals import PRINCIPAL, check_principals
from pgrag.ingest.loaders import from_text
from tests.integration.conftest import TEMPLATE, _create_database, _drop_database
from tests.tables import read_table

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version

TEAMS = ("billing", "sales", "support")
# (source, principals, metadata, text): three tenants, some individual grants, some public.
DOCS: list[tuple[str, list[str], dict[str, Any], str]] = []
for i in range(36):
    tenant = ("acme", "globex", "initech")[i % 3]
    principals = [f"tenant:{tenant}"]
    if i % 9 == 0:
        principals = ["public"]
    elif i % 7 == 0:
        principals = ["alice"]
    meta = {
        "team": TEAMS[(i // 3) % 3],
        "tags": ["gdpr", "eu"] if i % 4 == 0 else (["us"] if i % 4 == 1 else []),
        "date": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
        "n": i,
    }
    text = (
        f"Refund policy note {i} for {tenant}. Invoices are settled monthly and refunds are"
        f" processed within {5 + i % 10} business days by the {TEAMS[(i // 3) % 3]} team."
    )
    DOCS.append((f"{tenant}/note-{i:02d}.txt", principals, meta, text))


def visible(principals: list[str], session: set[str]) -> bool:
    return bool(set(principals) & (session | {"public"}))


@dataclass
class Tenants:
    dsn: str  # superuser
    reader_dsn: str  # a plain reader role mapped to tenant:acme
    app_dsn: str  # pgrag_app: asserts principals per transaction
    writer_dsn: str
    reader: str


def _role_dsn(dsn: str, role: str) -> str:
    return make_conninfo(dsn, user=role)


@pytest.fixture(scope="module")
def tenants(admin_dsn: str, template_dsn: str, embedder: Any) -> Iterator[Tenants]:
    suffix = uuid.uuid4().hex[:8]
    name = f"pgrag_acl_{suffix}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    reader, app, writer = f"reader_{suffix}", f"app_{suffix}", f"writer_{suffix}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role, group in ((reader, "pgrag_reader"), (app, "pgrag_app"), (writer, "pgrag_writer")):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role))
            )
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        for source, principals, meta, text in DOCS:
            pgrag.ingest_documents(
                db, [from_text(source, text, metadata=meta)], collection="t", allow=principals
            )
        access.map_role(db, reader, ["tenant:acme"])
    finally:
        db.close()
    yield Tenants(
        dsn=dsn,
        reader_dsn=_role_dsn(dsn, reader),
        app_dsn=_role_dsn(dsn, app),
        writer_dsn=_role_dsn(dsn, writer),
        reader=reader,
    )
    _drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in (reader, app, writer):
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _sources(conn: psycopg.Connection[Any], query: str, params: Any = None) -> list[str]:
    return [r[0] for r in conn.execute(query, params).fetchall()]


def expected_sources(session: set[str]) -> set[str]:
    return {s for s, p, _, _ in DOCS if visible(p, session)}


# -- the restricted role, by every SQL it can run -----------------------------------------------


PROTECTED = (
    "documents",
    "chunks",
    "chunk_embeddings",
    "keyword_postings",
    "keyword_df",
    "keyword_totals",
    "keyword_settings",
    "acls",
    "role_principals",
)


def test_a_reader_reads_no_table_and_lists_only_its_documents(tenants: Tenants) -> None:
    """Readers search and list through functions only: direct SQL on a table under row-level
    security leaks through side channels (EXPLAIN ANALYZE counts), so they get none."""
    want = expected_sources({"tenant:acme"})
    assert 0 < len(want) < len(DOCS)
    with psycopg.connect(tenants.reader_dsn, autocommit=True) as conn:
        for table in PROTECTED:
            for statement in ("SELECT count(*) FROM pgrag.{}", "EXPLAIN SELECT * FROM pgrag.{}"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement.format(table))
        assert set(_sources(conn, "SELECT source FROM pgrag.documents_v1('t')")) == want
        (row,) = conn.execute(
            "SELECT documents, chunks FROM pgrag.collections_v1() WHERE name = 't'"
        ).fetchall()
        assert row == (len(want), len(want))  # one chunk per document here
        # Planner statistics (most common values) of the tables are withheld as well.
        (stats,) = conn.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = 'pgrag'"
            " AND tablename IN ('chunks', 'documents', 'keyword_postings', 'keyword_df')"
        ).fetchone()
        assert stats == 0
        # Asking for another tenant's principals narrows, never widens.
        conn.execute("SET pgrag.principals = 'tenant:globex'")
        assert set(_sources(conn, "SELECT source FROM pgrag.documents_v1('t')")) == (
            expected_sources(set())
        )
        conn.execute("SET pgrag.principals = 'tenant:acme'")
        assert set(_sources(conn, "SELECT source FROM pgrag.documents_v1('t')")) == want
    with psycopg.connect(tenants.dsn) as owner:  # the statistics exist: the owner sees them
        (owner_stats,) = owner.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = 'pgrag'"
            " AND tablename IN ('chunks', 'documents', 'keyword_postings', 'keyword_df')"
        ).fetchone()
        assert owner_stats > 0
    # The Python API as the same role: connecting checks the schema revision (a grant of its
    # own), and search sees what the role sees.
    db = pgrag.connect(tenants.reader_dsn)
    try:
        hits = pgrag.search(db, "refund invoices", collection="t", k=100, mode="keyword")
        assert {h.source for h in hits} == want
        assert {c["name"]: c["documents"] for c in list_collections(db)} == {"t": len(want)}
        with pytest.raises(pgrag.PgragError, match="mmr reads the stored vectors"):
            pgrag.search(db, "refund", collection="t", mmr=0.5)
    finally:
        db.close()


def test_row_level_security_filters_every_table_for_a_writer_naming_principals(
    tenants: Tenants,
) -> None:
    """Roles that are granted the tables (pgrag_writer here) are filtered by row-level
    security as soon as they name principals: every table, the statistics, the access lists."""
    want = expected_sources({"tenant:acme"})
    with psycopg.connect(tenants.writer_dsn) as conn:
        (n_all,) = conn.execute("SELECT count(*) FROM pgrag.documents").fetchone()
        assert n_all >= len(DOCS)  # unrestricted until it names principals
        conn.execute("SET pgrag.principals = 'tenant:acme'")
        assert set(_sources(conn, "SELECT source FROM pgrag.documents")) == want
        doc_ids = {r[0] for r in conn.execute("SELECT id FROM pgrag.documents")}
        assert {r[0] for r in conn.execute("SELECT document_id FROM pgrag.chunks")} == doc_ids
        chunk_ids = {r[0] for r in conn.execute("SELECT id FROM pgrag.chunks")}
        for table in ("chunk_embeddings", "keyword_postings"):
            got = {r[0] for r in conn.execute(f"SELECT chunk_id FROM pgrag.{table}")}  # noqa: S608
            assert got == chunk_ids, table
        (n,) = conn.execute("SELECT sum(chunks) FROM pgrag.keyword_totals").fetchone()
        assert n == len(chunk_ids)
        (df,) = conn.execute(
            "SELECT sum(df) FROM pgrag.keyword_df WHERE lexeme = 'invoic'"
        ).fetchone()
        assert df == len(chunk_ids)  # a word of every document: visible chunks only
        acls = [r[0] for r in conn.execute("SELECT principals FROM pgrag.acls")]
        assert acls and all({"public", "tenant:acme"} & set(a) for a in acls)
        conn.rollback()


def test_a_reader_cannot_write_unprotect_or_change_role(tenants: Tenants) -> None:
    attempts = [
        "UPDATE pgrag.documents SET principals = '{public}'",
        "DELETE FROM pgrag.chunks",
        "INSERT INTO pgrag.role_principals VALUES (current_user, 'tenant:globex')",
        "ALTER TABLE pgrag.documents DISABLE ROW LEVEL SECURITY",
        "DROP POLICY visible ON pgrag.chunks",
        "SET ROLE pgrag_writer",
        "SET ROLE pgrag_app",
        "TRUNCATE pgrag.keyword_postings",
        # The engine runs as its caller: only the entry points' owner may call it.
        "SELECT * FROM pgrag.search_engine('t', 'refund', NULL, 10, '{}', 5, NULL, NULL,"
        " 0.5, 1.0, 0.02, 50000, 5000, NULL)",
        "SELECT pgrag.grant_roles()",
    ]
    with psycopg.connect(tenants.reader_dsn, autocommit=True) as conn:
        for statement in attempts:
            with pytest.raises(psycopg.Error):
                conn.execute(statement)
    with psycopg.connect(tenants.dsn) as conn:
        (n,) = conn.execute("SELECT count(*) FROM pgrag.documents").fetchone()
        assert n == len(DOCS)


def test_search_v3_as_a_reader_returns_min_k_visible(tenants: Tenants) -> None:
    want = expected_sources({"tenant:acme"})
    with psycopg.connect(tenants.reader_dsn) as conn:
        got = _sources(
            conn, "SELECT source FROM pgrag.search_v3('t', 'refund invoices', k => 1000)"
        )
        assert set(got) == want and len(got) == len(want)
        top = _sources(conn, "SELECT source FROM pgrag.search_v3('t', 'refund invoices', k => 5)")
        assert len(top) == 5 and set(top) <= want
        # Hybrid, with a stored vector as the query: still only visible chunks, still k.
        hybrid = _sources(
            conn,
            "SELECT source FROM pgrag.search_v3('t', 'refund', %s::vector, k => 7)",
            (_a_vector(tenants),),
        )
        assert len(hybrid) == 7 and set(hybrid) <= want


def _a_vector(tenants: Tenants) -> str:
    """A stored vector (read as the owner), to search with."""
    with psycopg.connect(tenants.dsn) as conn:
        (vector,) = conn.execute(
            "SELECT embedding::text FROM pgrag.chunk_embeddings LIMIT 1"
        ).fetchone()
    return str(vector)


def test_keyword_statistics_do_not_reveal_hidden_documents(tenants: Tenants, embedder: Any) -> None:
    """A reader's BM25 scores are computed over what it can see: adding a hidden document that
    uses the query's words changes nothing the reader can observe."""
    query = "SELECT source, keyword_score FROM pgrag.search_v3('t', 'refund zanzibar', k => 50)"
    with psycopg.connect(tenants.reader_dsn) as conn:
        before = conn.execute(query).fetchall()
    db = pgrag.connect(tenants.dsn, embedder=embedder)
    try:
        hidden = [
            from_text(f"globex/zanzibar-{i}.txt", f"Zanzibar refund refund note {i}.")
            for i in range(5)
        ]
        pgrag.ingest_documents(db, hidden, collection="t", allow=["tenant:globex"])
        with psycopg.connect(tenants.reader_dsn) as conn:
            after = conn.execute(query).fetchall()
        # ... while the owner, who sees everything, gets other scores.
        with psycopg.connect(tenants.dsn) as conn:
            owner = dict(conn.execute(query).fetchall())
    finally:
        with db.conn.transaction():
            db.conn.execute("DELETE FROM pgrag.documents WHERE source LIKE 'globex/zanzibar-%'")
        db.close()
    assert before == after
    assert any(abs(owner[s] - score) > 1e-9 for s, score in after)


def test_an_app_asserts_principals_per_transaction(tenants: Tenants) -> None:
    with psycopg.connect(tenants.app_dsn) as conn:
        # Nothing asserted: public only (fail closed).
        assert set(_sources(conn, "SELECT source FROM pgrag.documents_v1('t')")) == (
            expected_sources(set())
        )
        conn.commit()
        with conn.transaction():
            conn.execute("SELECT set_config('pgrag.principals', 'alice, tenant:initech', true)")
            got = _sources(conn, "SELECT source FROM pgrag.search_v3('t', 'refund', k => 1000)")
            assert set(got) == expected_sources({"alice", "tenant:initech"})
        # The next transaction on the same (pooled) connection is back to public.
        got = _sources(conn, "SELECT source FROM pgrag.search_v3('t', 'refund', k => 1000)")
        assert set(got) == expected_sources(set())


@pytest.mark.parametrize(
    "raw",
    [
        "alice' OR '1'='1",
        "alice;DROP TABLE pgrag.chunks",
        "tenant:acme,)",
        "{public}",
        "a" * 129,
    ],
)
def test_malformed_principals_in_the_session_are_an_error(tenants: Tenants, raw: str) -> None:
    with psycopg.connect(tenants.app_dsn) as conn:
        conn.execute("SELECT set_config('pgrag.principals', %s, true)", (raw,))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="pgrag.principals"):
            conn.execute("SELECT count(*) FROM pgrag.search_v3('t', 'refund')").fetchone()
    with psycopg.connect(tenants.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgrag.chunks").fetchone()[0] > 0


def test_python_principals_on_a_superuser_connection(tenants: Tenants, embedder: Any) -> None:
    db = pgrag.connect(tenants.dsn, embedder=embedder, principals=["alice"])
    try:
        want = expected_sources({"alice"})
        got = {r.source for r in pgrag.search(db, "refund invoices", collection="t", k=100)}
        assert got == want
        # A per-call override, and the connection's default again afterwards.
        acme = pgrag.search(db, "refund", collection="t", k=100, principals=["tenant:acme"])
        assert {r.source for r in acme} == expected_sources({"tenant:acme"})
        again = pgrag.search(db, "refund", collection="t", k=100, mode="keyword")
        assert {r.source for r in again} == want
        answer = pgrag.ask(db, "How are invoices settled?", collection="t", llm=None)
        assert answer.sources and all(
            visible(next(p for s, p, _, _ in DOCS if s == src.result.source), {"alice"})
            for src in answer.sources
        )
        logged = db.conn.execute(
            "SELECT principals FROM pgrag.queries WHERE id = %s", (answer.query_id,)
        ).fetchone()
        assert logged == (["alice", "public"],)
        db.conn.commit()
    finally:
        db.close()
    with pytest.raises(pgrag.InputError, match="invalid principal 'alice,tenant:acme'"):
        pgrag.connect(tenants.dsn, principals=["alice,tenant:acme"])


def test_principal_pattern_agrees_with_the_database(tenants: Tenants) -> None:
    cases = [
        "alice",
        "group:billing",
        "a@b.c",
        "x+y-z_1",
        "",
        " a",
        "a,b",
        "a b",
        "é",
        "a" * 128,
        "a" * 129,
        ":x",
        "_x",
        "x'",
    ]
    with psycopg.connect(tenants.dsn) as conn:
        for case in cases:
            (ok,) = conn.execute("SELECT pgrag.principals_valid(ARRAY[%s])", (case,)).fetchone()
            assert ok == bool(PRINCIPAL.fullmatch(case)), case
    assert check_principals(["a", "a", "b"]) == ["a", "b"]


# -- access lists change without re-embedding ---------------------------------------------------


def _vectors_of(tenants: Tenants, source: str) -> list[Any]:
    """(chunk id, vector) of a document's chunks, read as the owner."""
    with psycopg.connect(tenants.dsn) as conn:
        return conn.execute(
            "SELECT e.chunk_id, e.embedding::text FROM pgrag.chunk_embeddings e"
            " JOIN pgrag.chunks c ON c.id = e.chunk_id JOIN pgrag.documents d"
            " ON d.id = c.document_id WHERE d.source = %s ORDER BY 1",
            (source,),
        ).fetchall()


def test_acl_grant_and_revoke_from_the_cli(tenants: Tenants) -> None:
    source = "globex/note-01.txt"
    vectors_before = _vectors_of(tenants, source)
    runner = CliRunner()
    base = ["--dsn", tenants.dsn, "acl"]
    granted = runner.invoke(cli, [*base, "grant", "tenant:acme", "-c", "t", "--source", source])
    assert granted.exit_code == 0, granted.output
    assert "tenant:acme" in granted.stdout and "tenant:globex" in granted.stdout
    with psycopg.connect(tenants.reader_dsn) as conn:
        assert source in _sources(
            conn, "SELECT source FROM pgrag.search_v3('t', 'refund', k => 100)"
        )
    shown = runner.invoke(cli, [*base, "show", "-c", "t", "--prefix", "globex/note-01"])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0].split() == ["SOURCE", "READABLE", "BY"]
    [row] = read_table(shown.stdout)
    assert row["SOURCE"] == source and "tenant:acme" in row["READABLE BY"].split(", ")

    revoked = runner.invoke(cli, [*base, "revoke", "tenant:acme", "-c", "t", "--source", source])
    assert revoked.exit_code == 0, revoked.output
    with psycopg.connect(tenants.reader_dsn) as conn:
        assert source not in _sources(conn, "SELECT source FROM pgrag.documents_v1('t')")
        assert source not in _sources(
            conn, "SELECT source FROM pgrag.search_v3('t', 'refund', k => 100)"
        )
    vectors_after = _vectors_of(tenants, source)
    assert vectors_after == vectors_before  # the same rows: nothing was re-embedded

    missing = runner.invoke(cli, [*base, "grant", "bob", "-c", "t", "--source", "nope.txt"])
    assert missing.exit_code != 0
    assert missing.stderr.count("\n") == 1 and "no document 'nope.txt'" in missing.stderr
    bad = runner.invoke(cli, [*base, "grant", "bob,eve", "-c", "t", "--all"])
    assert bad.exit_code != 0 and "invalid principal" in bad.stderr


# -- metadata filters ---------------------------------------------------------------------------


def _match(meta: dict[str, Any], f: dict[str, Any]) -> bool:
    """The filter language, independently in Python (for the documents above)."""
    for key, cond in f.items():
        if key == "$or":
            if not any(_match(meta, c) for c in cond):
                return False
            continue
        if key == "$not":
            if _match(meta, cond):
                return False
            continue
        value = meta.get(key)
        if isinstance(cond, dict):
            for op, arg in cond.items():
                if op == "$in":
                    ok = value in arg or (isinstance(value, list) and bool(set(value) & set(arg)))
                elif op == "$all":
                    ok = isinstance(value, list) and set(arg) <= set(value)
                elif op == "$gte":
                    ok = value is not None and value >= arg
                elif op == "$lt":
                    ok = value is not None and value < arg
                elif op == "$ne":
                    ok = value != arg
                else:
                    raise AssertionError(op)
                if not ok:
                    return False
        elif isinstance(cond, list):
            if not (isinstance(value, list) and set(cond) <= set(value)):
                return False
        elif value != cond:
            return False
    return True


FILTERS = [
    {"team": "billing"},
    {"tags": ["gdpr"]},
    {"team": {"$in": ["sales", "support"]}},
    {"tags": {"$in": ["us", "eu"]}},
    {"tags": {"$all": ["gdpr", "eu"]}},
    {"date": {"$gte": "2024-03-01", "$lt": "2024-07-01"}},
    {"n": {"$gte": 10, "$lt": 20}, "team": {"$ne": "sales"}},
    {"$or": [{"team": "billing"}, {"tags": ["us"]}], "$not": {"n": {"$lt": 5}}},
]


@pytest.mark.parametrize("f", FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_filters_return_exactly_the_matching_visible_documents(
    tenants: Tenants, f: dict[str, Any]
) -> None:
    want = {s for s, p, m, _ in DOCS if _match(m, f) and visible(p, {"tenant:acme"})}
    assert want, f
    with psycopg.connect(tenants.reader_dsn) as conn:
        for embedding in (None, _a_vector(tenants)):
            got = _sources(
                conn,
                "SELECT source FROM pgrag.search_v3('t', 'refund', %s::vector,"
                " k => 100, filter => %s)",
                (embedding, Jsonb(f)),
            )
            assert set(got) == want and len(got) == len(want), (f, embedding)
            k = min(3, len(want))
            top = _sources(
                conn,
                "SELECT source FROM pgrag.search_v3('t', 'refund', %s::vector,"
                " k => %s, filter => %s)",
                (embedding, k, Jsonb(f)),
            )
            assert len(top) == k and set(top) <= want


@pytest.mark.parametrize(
    ("f", "message"),
    [
        ({"team": {"$regex": ".*"}}, "unknown filter operator $regex"),
        ({"$where": "1=1"}, "unknown filter operator $where"),
        ({"date": {"$gte": "2024-02-30"}}, "not a valid ISO date"),
        ({"team": {"$in": "billing"}}, "must be a list"),
        ({"team": {"$gt": {"a": 1}}}, "must be a number, a date or a string"),
        ({"$or": []}, "non-empty list"),
    ],
)
def test_bad_filters_are_one_line_errors(tenants: Tenants, f: Any, message: str) -> None:
    with (
        psycopg.connect(tenants.reader_dsn) as conn,
        pytest.raises(psycopg.errors.InvalidParameterValue, match=message.replace("$", r"\$")),
    ):
        conn.execute("SELECT * FROM pgrag.search_v3('t', 'refund', filter => %s)", (Jsonb(f),))


def test_filter_injection_is_data(tenants: Tenants) -> None:
    """Keys and values travel as data: they match nothing, or are refused as malformed."""
    matches_nothing = [
        {"team'); DROP TABLE pgrag.chunks; --": "x"},
        {"team": "billing' OR '1'='1"},
        {"team": {"$in": ["x') OR true --"]}},
        {"team": {"$gte": "z' OR '1'='1"}},
    ]
    with psycopg.connect(tenants.reader_dsn) as conn:
        for f in matches_nothing:
            rows = conn.execute(
                "SELECT source FROM pgrag.search_v3('t', 'refund', k => 100, filter => %s)",
                (Jsonb(f),),
            ).fetchall()
            assert rows == [], f
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a valid ISO date"):
            conn.execute(
                "SELECT * FROM pgrag.search_v3('t', 'refund', filter => %s)",
                (Jsonb({"date": {"$gte": "2024-01-01'; DELETE FROM pgrag.documents; --"}}),),
            )
        conn.rollback()
        for collection in ("t'; DROP TABLE pgrag.chunks; --", "t' OR '1'='1"):
            with pytest.raises(psycopg.errors.UndefinedObject, match="does not exist"):
                conn.execute("SELECT * FROM pgrag.search_v3(%s, 'refund')", (collection,))
            conn.rollback()
    with psycopg.connect(tenants.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgrag.documents").fetchone()[0] >= len(DOCS)
        assert conn.execute("SELECT to_regclass('pgrag.chunks') IS NOT NULL").fetchone()[0]


def test_cli_search_filter_and_principal(tenants: Tenants) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "--dsn",
            tenants.dsn,
            "search",
            "refund",
            "-c",
            "t",
            "--mode",
            "keyword",
            "--k",
            "100",
            "--filter",
            '{"team": {"$in": ["billing"]}}',
            "--principal",
            "tenant:initech",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    got = {r["source"] for r in json.loads(result.stdout)}
    want = {s for s, p, m, _ in DOCS if m["team"] == "billing" and visible(p, {"tenant:initech"})}
    assert got == want


def test_cli_search_sql_names_the_principals(tenants: Tenants) -> None:
    result = CliRunner().invoke(
        cli,
        ["--dsn", tenants.dsn, "search", "refund", "-c", "t", "--principal", "alice", "--sql"],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "BEGIN;" and lines[-1] == "COMMIT;"
    assert lines[1] == "SELECT set_config('pgrag.principals', 'alice', true);"
    assert "pgrag.search_v5('t', 'refund'" in lines[2]


def test_an_empty_principal_list_reads_public_only(tenants: Tenants) -> None:
    # On a writer's (unrestricted) connection, [] must not mean "not set": public only.
    db = pgrag.connect(tenants.writer_dsn, principals=[])
    try:
        hits = pgrag.search(db, "refund invoices", collection="t", k=100, mode="keyword")
        assert {h.source for h in hits} == expected_sources(set())
    finally:
        db.close()


def test_the_query_log_takes_entries_from_restricted_roles_but_shows_them_nothing(
    tenants: Tenants,
) -> None:
    """The log holds prompts (retrieved text): restricted roles add entries and get their id
    back, and can neither read the text nor file an entry under principals they lack, nor
    outside a collection they may read."""
    with psycopg.connect(tenants.app_dsn) as conn:
        with conn.transaction():
            conn.execute("SELECT set_config('pgrag.principals', 'tenant:acme', true)")
            (entry,) = conn.execute(
                "INSERT INTO pgrag.queries (collection_id, question, principals, prompt)"
                " SELECT c.id, 'acme question', pgrag.session_principals(), 'acme passages'"
                " FROM pgrag.collections c WHERE c.name = 't' RETURNING id"
            ).fetchone()
            assert entry > 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute(  # under no collection: no retention would ever remove it
                "INSERT INTO pgrag.queries (question, principals)"
                " VALUES ('acme question', pgrag.session_principals())"
            )
        for statement in (
            "SELECT question FROM pgrag.queries",
            "SELECT count(*) FROM pgrag.queries WHERE prompt >= 'a'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(statement)
        with conn.transaction():
            conn.execute("SELECT set_config('pgrag.principals', 'tenant:globex', true)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO pgrag.queries (question, principals)"
                    " VALUES ('forged', '{public,tenant:acme}')"
                )
    with psycopg.connect(tenants.dsn) as owner:
        assert owner.execute(
            "SELECT principals FROM pgrag.queries WHERE question = 'acme question'"
        ).fetchone() == (["public", "tenant:acme"],)


def test_a_chunk_moved_to_another_document_takes_its_vector_along(tenants: Tenants) -> None:
    with psycopg.connect(tenants.dsn) as conn:
        (chunk, target) = conn.execute(
            "SELECT c.id,"
            " (SELECT x.id FROM pgrag.documents x WHERE x.source = 'globex/note-01.txt')"
            " FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id"
            " WHERE d.source = 'acme/note-09.txt'"
        ).fetchone()
        conn.execute(
            "UPDATE pgrag.chunks SET document_id = %s, ordinal = 99 WHERE id = %s", (target, chunk)
        )
        acls = conn.execute(
            "SELECT c.acl_id, e.acl_id, d.acl_id FROM pgrag.chunks c"
            " JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id"
            " JOIN pgrag.documents d ON d.id = c.document_id WHERE c.id = %s",
            (chunk,),
        ).fetchone()
        conn.rollback()
    assert acls[0] == acls[1] == acls[2]


def test_odd_values_in_metadata_and_arguments_are_handled(tenants: Tenants) -> None:
    with psycopg.connect(tenants.dsn) as conn:
        # An offset PostgreSQL cannot represent is "not a date", never an error.
        for value in (
            "2024-01-01T00:00+16:00",
            "2024-01-01T00:00+99",
            "2024-02-30",
            "2024-01-01-05",
            "2024-01-01-0530",
        ):
            assert conn.execute("SELECT pgrag.metadata_time(%s)", (value,)).fetchone() == (None,)
        assert conn.execute(
            "SELECT pgrag.metadata_time('2024-01-01T00:00+15:30') IS NOT NULL"
        ).fetchone() == (True,)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="between 1 and 10000"):
            conn.execute("SELECT * FROM pgrag.search_v3('t', 'refund', vector_depth => 2000000000)")


def test_activity_counters_do_not_show_whether_a_hidden_chunk_has_a_word(
    tenants: Tenants,
) -> None:
    """The side channel a review found: pg_stat_get_xact_* counts the index entries a search
    touched. A restricted caller's statistics lookup reads only its own access lists' rows, so
    a word that only hidden chunks have leaves the counters where they were."""
    counters = (
        "SELECT sum(pg_stat_get_xact_tuples_returned(c.oid))"
        "     + sum(pg_stat_get_xact_tuples_fetched(c.oid))"
        "  FROM pg_class c WHERE c.relnamespace = 'pgrag'::regnamespace"
        "   AND c.relname IN ('keyword_df', 'keyword_df_lexeme_idx')"
    )
    with psycopg.connect(tenants.dsn, autocommit=True) as owner:
        doc = owner.execute(
            "INSERT INTO pgrag.documents (collection_id, source, content_hash, principals)"
            " SELECT id, 'globex/quetzal.txt', 'h', '{tenant:globex}' FROM pgrag.collections"
            " WHERE name = 't' RETURNING id"
        ).fetchone()[0]
        owner.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config) SELECT %s, collection_id, 0, 'quetzal feathers', 2,"
            " 'h', 'english' FROM pgrag.documents WHERE id = %s",
            (doc, doc),
        )
    try:
        # With the planner's own choice, and with index scans forced (as on a big table); the
        # settings are the caller's, and plans are made per session.
        for forced in ((), ("enable_seqscan", "enable_bitmapscan")):
            with psycopg.connect(tenants.reader_dsn) as conn:
                for setting in forced:
                    conn.execute(f"SET {setting} = off")
                deltas = {}
                # only in a hidden chunk; in no chunk at all; in every visible chunk
                for word in ("quetzal", "xylograph", "invoices"):
                    (before,) = conn.execute(counters).fetchone()
                    rows = conn.execute(
                        "SELECT source FROM pgrag.search_v3('t', %s, k => 5)", (word,)
                    ).fetchall()
                    (after,) = conn.execute(counters).fetchone()
                    deltas[word] = (after or 0) - (before or 0)
                    assert all(not r[0].startswith("globex/") for r in rows)
                conn.rollback()
            # A hidden-only word looks exactly like a word nobody has...
            assert deltas["quetzal"] == deltas["xylograph"], (forced, deltas)
            # ... while the counters do count this caller's own reads.
            assert deltas["invoices"] > 0, (forced, deltas)
    finally:
        with psycopg.connect(tenants.dsn, autocommit=True) as owner:
            owner.execute("DELETE FROM pgrag.documents WHERE id = %s", (doc,))
