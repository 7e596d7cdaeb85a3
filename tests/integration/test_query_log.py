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
from pgrag.answer.traces import get_trace
from pgrag.cli import cli
from pgrag.errors import CollectionNotFound, InputError, PgragError
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
        # A collection the reader may read nothing of.
        pgrag.ingest_documents(
            db, [from_text("refunds.txt", TEXT)], collection="hidden", allow=["tenant:owner"]
        )
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


# -- what a restricted role may write (the retention must not be a way to erase others' log) ------


def _as_reader(setup: Setup, statement: str) -> None:
    with psycopg.connect(setup.reader_dsn) as conn:
        conn.execute(statement)


def test_a_reader_cannot_choose_an_entrys_time_or_id_nor_log_where_it_reads_nothing(
    setup: Setup, embedder: Any
) -> None:
    _clear(setup.dsn)
    owners = [_ask(setup.dsn, embedder, "hidden").query_id for _ in range(3)]
    with psycopg.connect(setup.dsn) as conn:
        conn.execute("UPDATE pgrag.collections SET query_log_max_rows = 3 WHERE name = 'hidden'")
    hidden = "(SELECT id FROM pgrag.collections WHERE name = 'hidden')"
    visible = "(SELECT id FROM pgrag.collections WHERE name = 'a')"
    refused = [
        # The reviewer's repro: rows dated in the future, in a collection it sees nothing of.
        "INSERT INTO pgrag.queries (collection_id, question, created_at, principals)"
        " SELECT HIDDEN, 'junk', 'infinity', '{public}' FROM generate_series(1, 5)",
        # Where it may log, it still may not date an entry, nor number it.
        "INSERT INTO pgrag.queries (collection_id, question, created_at, principals)"
        " VALUES (VISIBLE, 'junk', 'infinity', '{public}')",
        "INSERT INTO pgrag.queries (id, collection_id, question, principals)"
        " OVERRIDING SYSTEM VALUE VALUES (999999, VISIBLE, 'junk', '{public}')",
        # Nor log into a collection it may read nothing of, or into none.
        "INSERT INTO pgrag.queries (collection_id, question, principals)"
        " SELECT HIDDEN, 'junk', '{public}' FROM generate_series(1, 5)",
        "INSERT INTO pgrag.queries (question, principals) VALUES ('junk', '{public}')",
    ]
    for statement in refused:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _as_reader(setup, statement.replace("HIDDEN", hidden).replace("VISIBLE", visible))
    with psycopg.connect(setup.reader_dsn) as conn:
        assert conn.execute("SELECT pgrag.prune_queries('hidden', 1000)").fetchone() == (0,)
    assert _logged(setup.dsn, "hidden") == owners
    # Asking there still answers (it finds nothing it may read), and says why it was not logged.
    answer = _ask(setup.reader_dsn, embedder, "hidden")
    assert answer.query_id is None
    assert any("may read none of 'hidden'" in w for w in answer.warnings), answer.warnings
    assert _logged(setup.dsn, "hidden") == owners
    # What a reader may still do: log where it may read, with the time the database gives.
    _as_reader(
        setup,
        "INSERT INTO pgrag.queries (collection_id, question, principals)"
        " VALUES (VISIBLE, 'mine', '{public}')".replace("VISIBLE", visible),
    )
    with psycopg.connect(setup.dsn) as conn:
        row = conn.execute(
            "SELECT created_at > now() - interval '1 hour' FROM pgrag.queries"
            " WHERE question = 'mine'"
        ).fetchone()
    assert row == (True,)


def test_the_row_limit_keeps_the_newest_entries_by_id_not_by_created_at(setup: Setup) -> None:
    _clear(setup.dsn)
    with psycopg.connect(setup.dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.queries (collection_id, question, created_at)"
            " SELECT c.id, 'dated ' || g, CASE WHEN g = 1 THEN 'infinity'::timestamptz"
            " ELSE now() END FROM pgrag.collections c, generate_series(1, 3) g"
            " WHERE c.name = 'a' ORDER BY g"
        )
        conn.execute("UPDATE pgrag.collections SET query_log_max_rows = 2 WHERE name = 'a'")
    first, *newest = _logged(setup.dsn, "a")
    with psycopg.connect(setup.dsn) as conn:
        assert conn.execute("SELECT pgrag.prune_queries('a')").fetchone() == (1,)
    assert _logged(setup.dsn, "a") == newest  # the oldest entry went, whatever its date said


def test_with_a_row_limit_of_0_the_entry_ask_returns_exists_until_the_next(
    setup: Setup, embedder: Any
) -> None:
    _clear(setup.dsn)
    with psycopg.connect(setup.dsn) as conn:
        conn.execute("UPDATE pgrag.collections SET query_log_max_rows = 0 WHERE name = 'a'")
    db = pgrag.connect(setup.dsn, embedder=embedder)
    try:
        first = pgrag.ask(db, QUESTION, collection="a", llm=None)
        assert first.query_id is not None and not first.warnings
        assert get_trace(db, first.query_id)["question"] == QUESTION
        assert _logged(setup.dsn, "a") == [first.query_id]
        second = pgrag.ask(db, QUESTION, collection="a", llm=None)
        assert _logged(setup.dsn, "a") == [second.query_id]  # the next prune removed the first
        assert prune(db, "a") == 1  # an explicit prune keeps nothing back: 0 rows
        assert _logged(setup.dsn, "a") == []
    finally:
        db.close()


def test_one_collection_that_cannot_be_pruned_does_not_stop_the_others(setup: Setup) -> None:
    _clear(setup.dsn)
    constraint = "collections_query_log_max_age_check"
    with psycopg.connect(setup.dsn) as conn:
        (definition,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = %s",
            (constraint,),
        ).fetchone()
        # What an older release let be set: now() - 999999999 days is out of range.
        conn.execute(
            sql.SQL("ALTER TABLE pgrag.collections DROP CONSTRAINT {}").format(
                sql.Identifier(constraint)
            )
        )
        conn.execute(
            "UPDATE pgrag.collections SET query_log_max_age = '999999999 days' WHERE name = 'a'"
        )
        conn.execute("UPDATE pgrag.collections SET query_log_max_rows = 1 WHERE name = 'b'")
        conn.execute(
            "INSERT INTO pgrag.queries (collection_id, question) SELECT c.id, 'q' || g"
            " FROM pgrag.collections c, generate_series(1, 3) g WHERE c.name IN ('a', 'b')"
        )
    notices: list[str] = []
    try:
        with psycopg.connect(setup.dsn) as conn:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            assert conn.execute("SELECT pgrag.prune_queries()").fetchone() == (2,)
        assert len(_logged(setup.dsn, "b")) == 1 and len(_logged(setup.dsn, "a")) == 3
        assert any(n.startswith("prune_queries: collection a: ") for n in notices), notices
    finally:
        with psycopg.connect(setup.dsn) as conn:
            conn.execute("UPDATE pgrag.collections SET query_log_max_age = NULL")
            conn.execute(
                sql.SQL("ALTER TABLE pgrag.collections ADD CONSTRAINT {} {}").format(
                    sql.Identifier(constraint), sql.SQL(definition)
                )
            )
    with psycopg.connect(setup.dsn) as conn:  # and no longer can be set
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "UPDATE pgrag.collections SET query_log_max_age = '36501 days' WHERE name = 'a'"
            )


def test_retention_limits_are_bounded_with_one_line_errors(setup: Setup, embedder: Any) -> None:
    assert parse_age("36500d") == timedelta(days=36500)
    for text in ("300000000w", "999999999999d", "999999999d", "36501d"):
        with pytest.raises(InputError, match=f"invalid age '{text}': at most 36500d"):
            parse_age(text)
    db = pgrag.connect(setup.dsn, embedder=embedder)
    try:
        with pytest.raises(InputError, match="invalid max_rows 9223372036854775808: use 0 to"):
            set_retention(db, "a", max_age=None, max_rows=2**63)
        with pytest.raises(InputError, match="invalid max_age"):
            set_retention(db, "a", max_age=timedelta(days=36501), max_rows=None)
    finally:
        db.close()
    runner = CliRunner()
    base = ["--dsn", setup.dsn, "queries", "retention", "-c", "a"]
    for args, words in (
        (["--max-age", "300000000w"], "--max-age: invalid age '300000000w': at most 36500d"),
        (["--max-age", "999999999999d"], "--max-age: invalid age '999999999999d': at most"),
    ):
        out = runner.invoke(cli, [*base, *args])
        assert out.exit_code == 1, out.output
        assert out.stderr.startswith(f"error: {words}"), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    out = runner.invoke(cli, [*base, "--max-rows", "99999999999999999999"])
    assert out.exit_code == 2 and "--max-rows" in out.stderr, out.output
    assert "out of range" not in out.stderr
    reader = runner.invoke(
        cli, ["--dsn", setup.reader_dsn, "queries", "retention", "-c", "a", "--max-rows", "1"]
    )
    assert reader.exit_code == 1, reader.output
    assert "only the owner of schema pgrag or a pgrag_writer may" in reader.stderr
    assert len(reader.stderr.strip().splitlines()) == 1, reader.stderr
    with pytest.raises(PgragError, match="may not set the retention of collection 'a'"):
        db = pgrag.connect(setup.reader_dsn, embedder=embedder)
        try:
            set_retention(db, "a", max_age=None, max_rows=1)
        finally:
            db.close()


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


def test_a_role_that_may_not_read_the_version_table_is_told_what_to_grant(
    setup: Setup, admin_dsn: str, embedder: Any
) -> None:
    role = f"qnone_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with pytest.raises(pgrag.SchemaError) as err:
            pgrag.connect(make_conninfo(setup.dsn, user=role), embedder=embedder)
        message = str(err.value)
        assert f"role {role} may not read pgrag's version table" in message, message
        assert "grant it pgrag_reader, pgrag_app or pgrag_writer" in message
        out = CliRunner().invoke(cli, ["--dsn", make_conninfo(setup.dsn, user=role), "status"])
        assert out.exit_code == 1
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "may not read pgrag's version table" in out.stderr
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
