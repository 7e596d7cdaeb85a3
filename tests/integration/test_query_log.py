"""The question log's retention, and `ask` where it cannot be logged (issue 16, item 5).

pgrag.queries keeps, per collection, at most query_log_max_age and query_log_max_rows of its
questions: logging prunes a bounded batch, `pgrag queries prune` the rest. A role that may not
add to the log, or a read-only session (a replica, default_transaction_read_only), still gets
its answer, with a warning that it was not logged.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.answer.retention import get_retention, parse_age, prune, set_retention
from pgrag.cli import cli
from pgrag.errors import CollectionNotFound, InputError
from pgrag.ingest.loaders import from_text
from tests.integration.conftest import TEMPLATE, _create_database, _drop_database

QUESTION = "How long do refunds take?"
TEXT = "Refunds are processed within 14 business days by the billing team."


@dataclass
class Setup:
    dsn: str
    reader_dsn: str  # a pgrag_reader
    bare_dsn: str  # may search (granted directly), but not add to the log


@pytest.fixture(scope="module")
def setup(admin_dsn: str, template_dsn: str, embedder: Any) -> Iterator[Setup]:
    suffix = uuid.uuid4().hex[:8]
    name = f"pgrag_qlog_{suffix}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    reader, bare = f"qreader_{suffix}", f"qbare_{suffix}"
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        for collection in ("a", "b"):
            pgrag.ingest_documents(db, [from_text("refunds.txt", TEXT)], collection=collection)
    finally:
        db.close()
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in (reader, bare):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(reader)))
    with psycopg.connect(dsn, autocommit=True) as conn:
        # What an administrator grants a role that only searches: no INSERT on the log.
        ident = sql.Identifier(bare)
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgrag TO {}").format(ident))
        conn.execute(
            sql.SQL(
                "GRANT SELECT ON pgrag.collections, pgrag.embedding_models,"
                " pgrag.collection_models TO {}"
            ).format(ident)
        )
        for schema, table in conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE c.relname = 'alembic_version_pgrag'"
        ).fetchall():
            conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident)
            )
            conn.execute(
                sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
                    sql.Identifier(schema), sql.Identifier(table), ident
                )
            )
        for fn in ("search_v5", "query_cache_get", "query_cache_put", "section_chunks_v1"):
            for (signature,) in conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p"
                " WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = %s",
                (fn,),
            ).fetchall():
                conn.execute(
                    sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(sql.SQL(signature), ident)
                )
    yield Setup(dsn, make_conninfo(dsn, user=reader), make_conninfo(dsn, user=bare))
    _drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in (reader, bare):
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _logged(dsn: str, collection: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT q.id FROM pgrag.queries q JOIN pgrag.collections c"
                " ON c.id = q.collection_id WHERE c.name = %s ORDER BY q.id",
                (collection,),
            )
        ]


def _clear(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM pgrag.queries")
        conn.execute(
            "UPDATE pgrag.collections SET query_log_max_age = NULL, query_log_max_rows = NULL"
        )


def _ask(dsn: str, embedder: Any, collection: str = "a") -> Any:
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        return pgrag.ask(db, QUESTION, collection=collection, llm=None)
    finally:
        db.close()


# -- retention -----------------------------------------------------------------------------------


def test_logging_keeps_the_newest_max_rows_of_its_collection_only(
    setup: Setup, embedder: Any
) -> None:
    _clear(setup.dsn)
    db = pgrag.connect(setup.dsn, embedder=embedder)
    try:
        assert get_retention(db, "a") == {"collection": "a", "max_age": None, "max_rows": None}
        set_retention(db, "a", max_age=None, max_rows=3)
        ids = [pgrag.ask(db, QUESTION, collection="a", llm=None).query_id for _ in range(5)]
        other = [pgrag.ask(db, QUESTION, collection="b", llm=None).query_id for _ in range(4)]
    finally:
        db.close()
    assert all(ids) and all(other)
    assert _logged(setup.dsn, "a") == ids[-3:]  # the newest three
    assert _logged(setup.dsn, "b") == other  # no retention: all kept


def test_prune_removes_what_is_older_than_max_age_in_bounded_batches(
    setup: Setup, embedder: Any
) -> None:
    _clear(setup.dsn)
    with psycopg.connect(setup.dsn) as conn:
        for collection in ("a", "b"):
            conn.execute(
                "INSERT INTO pgrag.queries (collection_id, question, created_at)"
                " SELECT c.id, 'old ' || g, now() - interval '40 days' + g * interval '1 second'"
                " FROM pgrag.collections c, generate_series(1, 7) g WHERE c.name = %s",
                (collection,),
            )
    kept = _ask(setup.dsn, embedder).query_id
    db = pgrag.connect(setup.dsn, embedder=embedder)
    try:
        assert set_retention(db, "a", max_age=parse_age("30d"), max_rows=None)["max_age"] == (
            timedelta(days=30)
        )
        with db.conn.transaction():  # one bounded call removes at most its batch, oldest first
            (removed,) = db.conn.execute("SELECT pgrag.prune_queries('a', 2)").fetchone()
        assert removed == 2
        assert len(_logged(setup.dsn, "a")) == 6
        assert prune(db, "a", batch=2) == 5  # the rest, two per transaction
        assert _logged(setup.dsn, "a") == [kept]
        assert len(_logged(setup.dsn, "b")) == 7  # another collection's retention: none
        with pytest.raises(CollectionNotFound):
            prune(db, "missing")
        with pytest.raises(InputError, match="invalid max_rows -1"):
            set_retention(db, "a", max_age=None, max_rows=-1)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="batch must be 1 to"):
            with db.conn.transaction():
                db.conn.execute("SELECT pgrag.prune_queries('a', 0)")
    finally:
        db.close()
    with pytest.raises(InputError, match="invalid age '30'"):
        parse_age("30")


def test_concurrent_prunes_skip_each_others_entries(setup: Setup) -> None:
    _clear(setup.dsn)
    with psycopg.connect(setup.dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.queries (collection_id, question, created_at)"
            " SELECT c.id, 'old ' || g, now() - interval '9 days' + g * interval '1 second'"
            " FROM pgrag.collections c, generate_series(1, 6) g WHERE c.name = 'a'"
        )
        conn.execute("UPDATE pgrag.collections SET query_log_max_age = '1 day' WHERE name = 'a'")
    with psycopg.connect(setup.dsn) as first, psycopg.connect(setup.dsn) as second:
        assert first.execute("SELECT pgrag.prune_queries('a', 2)").fetchone() == (2,)
        # first's transaction is open, its two rows locked: second neither waits nor fails.
        second.execute("SET lock_timeout = '5s'")
        assert second.execute("SELECT pgrag.prune_queries('a', 10)").fetchone() == (4,)
        second.commit()
        first.commit()
    assert _logged(setup.dsn, "a") == []


def test_a_restricted_role_may_apply_the_retention_but_delete_nothing_else(
    setup: Setup, embedder: Any
) -> None:
    _clear(setup.dsn)
    answers = [_ask(setup.reader_dsn, embedder) for _ in range(3)]
    assert all(a.query_id for a in answers)  # a reader logs its questions
    with psycopg.connect(setup.reader_dsn) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM pgrag.queries")
    with psycopg.connect(setup.reader_dsn) as conn:
        assert conn.execute("SELECT pgrag.prune_queries()").fetchone() == (0,)  # no retention
    assert len(_logged(setup.dsn, "a")) == 3
    with psycopg.connect(setup.dsn) as conn:
        conn.execute("UPDATE pgrag.collections SET query_log_max_rows = 1 WHERE name = 'a'")
    with psycopg.connect(setup.reader_dsn) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor change the retention
            conn.execute("UPDATE pgrag.collections SET query_log_max_rows = NULL")
    with psycopg.connect(setup.reader_dsn) as conn:
        assert conn.execute("SELECT pgrag.prune_queries('a')").fetchone() == (2,)
    assert _logged(setup.dsn, "a") == [answers[-1].query_id]


def test_cli_sets_shows_and_prunes(setup: Setup, embedder: Any) -> None:
    _clear(setup.dsn)
    for _ in range(3):
        _ask(setup.dsn, embedder, "b")
    runner = CliRunner()
    base = ["--dsn", setup.dsn, "queries"]
    out = runner.invoke(cli, [*base, "retention", "-c", "b"])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == "b: keeps questions for no limit, at most no limit"
    with psycopg.connect(setup.dsn) as conn:  # set without pruning: logging did not run
        conn.execute("UPDATE pgrag.collections SET query_log_max_rows = 1 WHERE name = 'b'")
    out = runner.invoke(cli, [*base, "retention", "-c", "b", "--max-age", "2w", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {
        "collection": "b",
        "max_age": "14 days, 0:00:00",
        "max_rows": 1,
    }
    out = runner.invoke(cli, [*base, "prune"])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == "removed 2 logged questions"
    assert len(_logged(setup.dsn, "b")) == 1
    out = runner.invoke(cli, [*base, "retention", "-c", "b", "--unlimited", "--json"])
    assert json.loads(out.stdout) == {"collection": "b", "max_age": None, "max_rows": None}
    bad = runner.invoke(cli, [*base, "retention", "-c", "b", "--max-age", "soon"])
    assert bad.exit_code == 1
    assert "invalid age 'soon'" in bad.stderr


# -- ask where the log cannot be written ------------------------------------------------------


def _read_only(dsn: str) -> str:
    return make_conninfo(dsn, options="-c default_transaction_read_only=on")


@pytest.mark.parametrize("who", ["bare", "reader read-only", "owner read-only"])
def test_ask_answers_when_it_cannot_log(setup: Setup, embedder: Any, who: str) -> None:
    _clear(setup.dsn)
    dsn = {
        "bare": setup.bare_dsn,
        "reader read-only": _read_only(setup.reader_dsn),
        "owner read-only": _read_only(setup.dsn),
    }[who]
    answer = _ask(dsn, embedder)
    assert not answer.abstained and "14 business days" in answer.answer
    assert answer.query_id is None
    (warning,) = answer.warnings
    assert warning.startswith("the question was not logged: ")
    assert ("may not add entries" in warning) is (who == "bare")
    assert ("read-only" in warning) is (who != "bare")
    assert _logged(setup.dsn, "a") == []
    # The connection is still usable: the failed write was rolled back.
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        again = pgrag.ask(db, QUESTION, collection="a", llm=None)
        assert again.warnings and "14 business days" in again.answer
        assert pgrag.search(db, "refunds", collection="a")
    finally:
        db.close()


def test_cli_ask_read_only_prints_the_answer_and_warns(setup: Setup, tmp_path: Path) -> None:
    _clear(setup.dsn)
    runner = CliRunner()
    dsn = _read_only(setup.reader_dsn)
    out = runner.invoke(cli, ["--dsn", dsn, "ask", QUESTION, "-c", "a"])
    assert out.exit_code == 0, out.output
    assert "14 business days" in out.stdout
    assert "warning: the question was not logged: this session is read-only" in out.stderr
    as_json = runner.invoke(cli, ["--dsn", dsn, "ask", QUESTION, "-c", "a", "--json"])
    assert as_json.exit_code == 0, as_json.output
    body = json.loads(as_json.stdout)
    assert body["query_id"] is None and body["warnings"]
    assert _logged(setup.dsn, "a") == []
