"""Listing costs what the caller may see (issue 16, item 4), and counts that would be slow are
estimates only for sessions that see everything.

documents_v1 and collections_v2 compute the caller's visible acls once and find its documents
through the (collection_id, acl_id) index; `pgrag collections` / `pgrag status` count exactly
up to pgrag.exact_count_limit rows and estimate above it, but a restricted session always gets
exact counts of what it may read (an estimate of the whole would tell it what it may not).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag import access
from pgrag.cli import cli
from pgrag.collections import list_collections
from pgrag.embeddings.worker import status
from pgrag.ingest.loaders import from_text
from tests.integration.conftest import TEMPLATE, _create_database, _drop_database
from tests.tables import read_table

# 30 documents of tenant:big, 4 of tenant:small, 2 public.
DOCS = (
    [(f"big/{i:02d}.txt", ["tenant:big"]) for i in range(30)]
    + [(f"small/{i}.txt", ["tenant:small"]) for i in range(4)]
    + [(f"pub/{i}.txt", ["public"]) for i in range(2)]
)


@dataclass
class Setup:
    dsn: str
    small_dsn: str  # a reader mapped to tenant:small
    nobody_dsn: str  # a reader mapped to nothing: public only


@pytest.fixture(scope="module")
def setup(admin_dsn: str, template_dsn: str, embedder: Any) -> Iterator[Setup]:
    suffix = uuid.uuid4().hex[:8]
    name = f"pgrag_list_{suffix}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    small, nobody = f"small_{suffix}", f"nobody_{suffix}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in (small, nobody):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(role)))
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        for source, principals in DOCS:
            text = f"Note {source}: the quarterly report is filed by the finance team."
            pgrag.ingest_documents(db, [from_text(source, text)], collection="l", allow=principals)
        access.map_role(db, small, ["tenant:small"])
    finally:
        db.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE pgrag.documents, pgrag.chunks")
    yield Setup(dsn, make_conninfo(dsn, user=small), make_conninfo(dsn, user=nobody))
    _drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in (small, nobody):
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _collection(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT documents, chunks, estimated FROM pgrag.collections_v2() WHERE name = 'l'"
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_documents_v1_lists_exactly_what_each_session_may_read(setup: Setup) -> None:
    for user_dsn, want in (
        (setup.dsn, {s for s, _ in DOCS}),
        (setup.small_dsn, {s for s, p in DOCS if p != ["tenant:big"]}),
        (setup.nobody_dsn, {s for s, p in DOCS if p == ["public"]}),
    ):
        with psycopg.connect(user_dsn) as conn:
            rows = [r[0] for r in conn.execute("SELECT source FROM pgrag.documents_v1('l')")]
            assert rows == sorted(want)  # in source order
            assert conn.execute("SELECT count(*) FROM pgrag.documents_v1('none')").fetchone() == (
                0,
            )


@pytest.mark.auto_explain
def test_a_restricted_listing_reads_only_its_acls_rows_through_the_index(setup: Setup) -> None:
    """The plan documents_v1 runs for a restricted session: the (collection_id, acl_id) index
    with the acls as one array, reading the visible rows only (not the collection's 36)."""
    with psycopg.connect(setup.dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # 36 rows: the planner would scan the table
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_analyze = on")
        conn.execute("SET client_min_messages = log")
        conn.execute("SET auto_explain.log_level = notice")
        conn.execute("SET pgrag.principals = 'tenant:small'")
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        rows = conn.execute("SELECT source FROM pgrag.documents_v1('l')").fetchall()
        assert len(rows) == 6
    plans = "\n".join(notices)
    assert "documents_collection_acl_idx" in plans, plans
    assert "acl_id = ANY" in plans, plans
    # The documents scan returned the 6 visible rows, not the 36 of the collection.
    scan = [line for line in plans.splitlines() if "documents_collection_acl_idx" in line]
    assert any("rows=6 " in line for line in scan), scan


def test_collection_counts_are_exact_for_restricted_sessions_even_past_the_limit(
    setup: Setup,
) -> None:
    with psycopg.connect(setup.dsn) as conn:
        chunks_per_doc = conn.execute(
            "SELECT count(*)::float / count(DISTINCT document_id) FROM pgrag.chunks"
        ).fetchone()[0]
        assert chunks_per_doc == 1.0
        assert _collection(conn) == (36, 36, False)
    for user_dsn, want in ((setup.small_dsn, 6), (setup.nobody_dsn, 2)):
        with psycopg.connect(user_dsn) as conn:
            assert _collection(conn) == (want, want, False)
            # A limit below what it sees changes nothing: a restricted session never gets an
            # estimate, which would be the whole collection's.
            conn.execute("SET pgrag.exact_count_limit = 1")
            assert _collection(conn) == (want, want, False)
            assert conn.execute(
                "SELECT documents, chunks FROM pgrag.collections_v1() WHERE name = 'l'"
            ).fetchone() == (want, want)
        # The counting helpers run as the owner inside collections_v2; a reader may not call
        # them to count (or estimate) what it may not read.
        for call in (
            "SELECT pgrag.count_rows('SELECT 1 FROM pgrag.documents')",
            "SELECT pgrag.document_count(1, NULL)",
            "SELECT pgrag.chunk_count(1, NULL)",
        ):
            with psycopg.connect(user_dsn) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(call)


def test_an_unrestricted_session_gets_estimates_past_the_limit_marked_as_such(
    setup: Setup,
) -> None:
    with psycopg.connect(setup.dsn) as conn:
        conn.execute("SET pgrag.exact_count_limit = 10")
        documents, chunks, estimated = _collection(conn)
        assert estimated is True
        assert documents >= 11  # at least the bound it counted, else the planner's estimate
        assert chunks == 36  # chunks come from keyword_totals: exact
        assert conn.execute(
            "SELECT * FROM pgrag.count_rows('SELECT 1 FROM pgrag.acls')"
        ).fetchone() == (
            conn.execute("SELECT count(*) FROM pgrag.acls").fetchone()[0],
            False,
        )
        # Naming principals narrows an unrestricted session: exact again.
        conn.execute("SET pgrag.principals = 'tenant:small'")
        assert _collection(conn) == (6, 6, False)
        conn.execute("RESET pgrag.principals")
        conn.execute("SET pgrag.exact_count_limit = ''")  # empty: the default, 100,000
        assert _collection(conn) == (36, 36, False)


@pytest.mark.parametrize("value", ["abc", "-1", "1e30", "12345678901234567890", "5 rows"])
def test_an_exact_count_limit_that_is_not_a_row_count_is_refused_naming_it(
    setup: Setup, value: str
) -> None:
    with psycopg.connect(setup.dsn) as conn:
        conn.execute(sql.SQL("SET pgrag.exact_count_limit = {}").format(sql.Literal(value)))
        for query in ("SELECT * FROM pgrag.collections_v2()", "SELECT * FROM pgrag.status()"):
            with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
                with conn.transaction():
                    conn.execute(query)
            assert "pgrag.exact_count_limit must be a whole number" in str(err.value)
            assert repr(value) in str(err.value)


def test_status_works_for_a_reader_and_counts_what_it_may_read(setup: Setup) -> None:
    for dsn, documents in ((setup.small_dsn, 6), (setup.nobody_dsn, 2)):
        with psycopg.connect(dsn) as conn:
            (row,) = conn.execute(
                "SELECT documents, chunks, pending, failed, estimated FROM pgrag.status()"
                " WHERE collection = 'l'"
            ).fetchall()
        # The queue is the whole collection's: not shown to a restricted role.
        assert row == (documents, documents, None, None, False)
    out = CliRunner().invoke(cli, ["--dsn", setup.small_dsn, "status", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = [r for r in json.loads(out.stdout) if r["collection"] == "l"]
    assert (row["documents"], row["pending"]) == (6, None)
    table = CliRunner().invoke(cli, ["--dsn", setup.small_dsn, "status"])
    assert table.exit_code == 0, table.output
    (line,) = [r for r in read_table(table.stdout) if r["COLLECTION"] == "l"]
    assert line["DOCUMENTS"] == "6"


def test_status_counts_exactly_up_to_the_limit_and_estimates_above(
    setup: Setup, embedder: Any
) -> None:
    db = pgrag.connect(setup.dsn, embedder=embedder)
    try:
        (row,) = [r for r in status(db) if r["collection"] == "l"]
        assert (row["documents"], row["chunks"], row["estimated"]) == (36, 36, False)
        db.conn.execute("SET pgrag.exact_count_limit = 5")
        (row,) = [r for r in status(db) if r["collection"] == "l"]
        assert row["estimated"] is True and row["documents"] >= 6 and row["chunks"] >= 6
        (listed,) = [r for r in list_collections(db) if r["name"] == "l"]
        assert listed["estimated"] is True and listed["chunks"] == 36
    finally:
        db.close()


def test_cli_marks_estimates(setup: Setup) -> None:
    runner = CliRunner()
    env = {"PGOPTIONS": "-c pgrag.exact_count_limit=5"}
    out = runner.invoke(cli, ["--dsn", setup.dsn, "collections"], env=env)
    assert out.exit_code == 0, out.output
    (line,) = [r for r in read_table(out.stdout) if r["COLLECTION"] == "l"]
    assert line["DOCUMENTS"].startswith("~"), line
    assert "ESTIMATED" not in line
    out = runner.invoke(cli, ["--dsn", setup.dsn, "status", "--json"], env=env)
    assert out.exit_code == 0, out.output
    (row,) = [r for r in json.loads(out.stdout) if r["collection"] == "l"]
    assert row["estimated"] is True
    exact = runner.invoke(cli, ["--dsn", setup.small_dsn, "collections", "--json"], env=env)
    assert exact.exit_code == 0, exact.output
    (row,) = [r for r in json.loads(exact.stdout) if r["name"] == "l"]
    assert (row["documents"], row["estimated"]) == (6, False)
