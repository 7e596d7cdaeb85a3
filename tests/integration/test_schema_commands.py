"""What `pgrag db upgrade` and `db downgrade` tell the person running them, and how they share
the database with the searches and ingests already running there (pgrag.db.schema)."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.db import schema
from pgrag.db.server import EmbeddedServer


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[str]:
    """A server of its own, without pgrag's roles (the shared test server has them)."""
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-srv-", dir="/tmp")).resolve()
    server = EmbeddedServer(directory, settings={"fsync": "off", "synchronous_commit": "off"})
    try:
        yield server.ensure_running()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _owned_database(admin: str, name: str, *, vector: bool) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")  # type: ignore[arg-type]
        conn.execute(f"CREATE DATABASE {name} OWNER {name}")  # type: ignore[arg-type]
    if vector:
        with psycopg.connect(make_conninfo(admin, dbname=name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
    return make_conninfo(admin, dbname=name, user=name)


def test_an_upgrade_that_cannot_create_the_roles_says_what_an_administrator_does(
    bare_cluster: str,
) -> None:
    app = _owned_database(bare_cluster, "noroles", vector=True)
    code, out, err = _cli("--dsn", app, "db", "upgrade")
    assert code == 0, err
    assert "up to date" in out
    for role in ("pgrag_reader", "pgrag_writer", "pgrag_app"):
        assert (
            f"notice: pgrag: role {role} does not exist and noroles may not create it;"
            " an administrator can create it and then run SELECT pgrag.grant_roles()"
        ) in err.splitlines()
    assert "skipping" not in err  # the server's own chatter is not passed on
    assert err.count("upgraded pgrag's schema: (none) -> ") == 1


def test_a_role_that_may_not_create_pgvector_is_told_who_can(bare_cluster: str) -> None:
    app = _owned_database(bare_cluster, "novector", vector=False)
    code, out, err = _cli("--dsn", app, "db", "upgrade")
    assert code == 1 and out == ""
    assert err.startswith(
        "error: role novector may not install pgrag in database novector"
        ' (permission denied to create extension "vector"): a superuser runs'
        " CREATE EXTENSION vector in database novector, then retry"
    )
    assert len(err.strip().splitlines()) == 1
    assert schema.current(app) is None


def test_revisions_that_mean_nothing_are_refused_in_one_line(empty_dsn: str) -> None:
    for args, words in (
        (("upgrade", "base"), "cannot upgrade to 'base'"),
        (("upgrade", ""), "the revision to upgrade to is empty"),
        (("downgrade", " "), "the revision to downgrade to is empty"),
        (("upgrade", "nonsense"), "cannot upgrade to 'nonsense'"),
    ):
        code, out, err = _cli("--dsn", empty_dsn, "db", *args)
        assert code == 1 and words in err and len(err.strip().splitlines()) == 1, (args, err)
    assert schema.current(empty_dsn) is None


def test_downgrading_nothing_or_to_where_it_is_says_so(empty_dsn: str) -> None:
    code, out, _ = _cli("--dsn", empty_dsn, "db", "downgrade", "base")
    assert code == 0 and out == "pgrag's schema is not installed here: nothing to downgrade\n"
    schema.upgrade(empty_dsn, "0009")
    code, out, _ = _cli("--dsn", empty_dsn, "db", "downgrade", "0009")
    assert code == 0 and out == "pgrag's schema is at 0009 already: nothing to downgrade\n"
    code, _, err = _cli("--dsn", empty_dsn, "db", "downgrade", "0010")
    assert code == 1 and "the database is at 0009, before it" in err
    moved = schema.upgrade(empty_dsn)
    assert (moved.before, moved.after) == ("0009", schema.head())
    code, _, err = _cli("--dsn", empty_dsn, "db", "upgrade")
    assert code == 0 and "upgraded" not in err  # nothing moved: nothing to announce


def test_a_schema_pgrag_without_its_version_table_is_not_taken_over(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pgrag")
        conn.execute("CREATE TABLE pgrag.mine (t text)")
    code, _, err = _cli("--dsn", empty_dsn, "db", "upgrade")
    assert code == 1 and "schema pgrag exists, but no version table of its owner" in err
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgrag.mine").fetchone() == (0,)


def test_tables_in_use_past_the_wait_leave_the_database_unchanged(dsn: str) -> None:
    with psycopg.connect(dsn) as reader, psycopg.connect(dsn) as migrating:
        reader.execute("SELECT count(*) FROM pgrag.chunks")  # holds its lock until it ends
        started = time.monotonic()
        (pid,) = reader.execute("SELECT pg_backend_pid()").fetchone()
        with pytest.raises(pgrag.SchemaError, match=r"stayed in use for 1 s .* nothing was") as e:
            schema.lock_tables(migrating, wait=1.0)
        assert f"(session {pid} (role postgres, application ?, idle in transaction))" in str(
            e.value
        )
        assert time.monotonic() - started < 10
        migrating.rollback()
        (locks,) = migrating.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND mode ="
            " 'AccessExclusiveLock'"
        ).fetchone()
        assert locks == 0
        reader.rollback()


def test_a_search_waiting_behind_a_migration_is_not_the_one_cancelled(dsn: str) -> None:
    # Tables are locked in name order: the migration holds chunks while another session keeps
    # it waiting for documents; a search that holds keyword_postings starts waiting for chunks;
    # the other session ends, and the migration comes to keyword_postings. That is a deadlock,
    # and the search began waiting first: the deadlock detector would cancel it. lock_tables
    # gives up each try before the detector runs, so the search finishes and the migration
    # gets its locks on a later try.
    outcome: dict[str, object] = {}

    def run(name: str, work: object) -> threading.Thread:
        def target() -> None:
            try:
                work()  # type: ignore[operator]
                outcome[name] = "done"
            except Exception as err:  # noqa: BLE001 - the test reports whatever happened
                outcome[name] = err

        thread = threading.Thread(target=target)
        thread.start()
        return thread

    with (
        psycopg.connect(dsn) as search,
        psycopg.connect(dsn) as other,
        psycopg.connect(dsn) as migrating,
    ):
        search.execute("SELECT count(*) FROM pgrag.keyword_postings")
        other.execute("SELECT count(*) FROM pgrag.documents")
        migration = run("migration", lambda: schema.lock_tables(migrating, wait=20.0))
        time.sleep(0.3)  # the migration holds chunks and waits for documents
        reading = run("search", lambda: search.execute("SELECT count(*) FROM pgrag.chunks"))
        time.sleep(0.1)  # the search waits for chunks
        other.rollback()  # the migration gets documents, then waits for keyword_postings
        reading.join(30)
        search.rollback()
        migration.join(30)
        migrating.rollback()
    assert outcome == {"search": "done", "migration": "done"}


def test_an_upgrade_with_nothing_to_do_takes_no_table_lock(dsn: str) -> None:
    with psycopg.connect(dsn) as reader:
        reader.execute("SELECT count(*) FROM pgrag.chunks")
        moved = schema.upgrade(dsn)  # would wait 30 s and fail if it wanted chunks
        assert moved.before == moved.after == schema.head()
        reader.rollback()


def test_the_migration_lock_held_elsewhere_is_waited_for_then_named(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(dsn, autocommit=True) as squatter:
        squatter.execute("SELECT pg_advisory_lock(%s)", (schema.MIGRATION_LOCK,))
        (pid,) = squatter.execute("SELECT pg_backend_pid()").fetchone()
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="pgrag"):
            with pytest.raises(pgrag.SchemaError, match="migration lock stayed held by") as e:
                with schema.locked(dsn, wait=6.0):
                    pass
        assert 6.0 <= time.monotonic() - started < 30
        assert f"session {pid} (role postgres" in str(e.value)
        assert "pg_terminate_backend" in str(e.value)
        assert any("waiting for pgrag's migration lock" in r.getMessage() for r in caplog.records)
    with schema.locked(dsn, wait=1.0):  # released with its session
        pass


def test_a_version_table_another_role_made_is_not_believed(dsn: str, admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS cmd_mallory")
        conn.execute("CREATE ROLE cmd_mallory")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA aaa AUTHORIZATION cmd_mallory")
            conn.execute("CREATE TABLE aaa.alembic_version_pgrag (version_num text)")
            conn.execute("INSERT INTO aaa.alembic_version_pgrag VALUES ('0001')")
            conn.execute("ALTER TABLE aaa.alembic_version_pgrag OWNER TO cmd_mallory")
        assert schema.current(dsn) == schema.head()
        assert schema.state(dsn).up_to_date
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA aaa CASCADE")
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute("DROP ROLE cmd_mallory")


def test_a_role_without_the_rights_is_told_whose_job_it_is(dsn: str, admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'cmd_reader'").fetchone():
            conn.execute("CREATE ROLE cmd_reader LOGIN IN ROLE pgrag_reader")
    reader = make_conninfo(dsn, user="cmd_reader")
    for command in (("downgrade", "0009"), ("check",), ("repair",)):
        code, out, err = _cli("--dsn", reader, "db", *command)
        assert code == 1 and out == "", (command, out, err)
        assert err.startswith(
            f"error: role cmd_reader may not do what `pgrag db {command[0]}` needs"
        ), (command, err)
        assert "run it as the owner of schema pgrag (postgres)" in err, err
        assert len(err.strip().splitlines()) == 1
    assert schema.current(dsn) == schema.head()


def test_a_held_version_row_stops_the_migration_before_it_starts(dsn: str) -> None:
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as migrating:
        holder.execute("SELECT * FROM public.alembic_version_pgrag FOR UPDATE")
        with pytest.raises(pgrag.SchemaError, match="stayed in use for 1 s"):
            schema.lock_tables(migrating, wait=1.0)
        migrating.rollback()
        holder.rollback()
        schema.lock_tables(migrating, wait=1.0)  # free again: locked at once
        (timeout,) = migrating.execute("SHOW lock_timeout").fetchone()
        assert timeout == "1s"  # and later waits in the migration end too
        migrating.rollback()


def test_the_version_table_is_not_put_in_a_schema_another_role_owns(
    bare_cluster: str,
) -> None:
    # A role with CREATE on the database made a schema named after the owner: "$user" on the
    # owner's search_path would put pgrag's version table there, at the other role's mercy.
    app = _owned_database(bare_cluster, "squatted", vector=True)
    with psycopg.connect(bare_cluster, autocommit=True) as conn:
        conn.execute("CREATE ROLE squatter")
    with psycopg.connect(make_conninfo(bare_cluster, dbname="squatted"), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA squatted AUTHORIZATION squatter")
        conn.execute("GRANT USAGE, CREATE ON SCHEMA squatted TO PUBLIC")
    code, out, err = _cli("--dsn", app, "db", "upgrade")
    assert code == 1 and out == ""
    assert err.startswith(
        "error: the first schema on this connection's search_path, squatted, belongs to role"
        " squatter"
    ), err
    assert schema.current(app) is None
