"""The schema: installed fresh, moved by migrations, the two the same (pgrag.db.schema).

One database built by upgrading release by release and one installed fresh at head must not
differ in anything `pgrag db check` looks at; nor a database downgraded to a revision from one
upgraded to it. Also: the frozen migrations, the security settings of the SQL functions, the
wheel carrying migrations/ and sql/, and the CLI's db commands.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.db import fingerprint
from pgrag.db import schema as migrate

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "migrations/RELEASED.sha256"
RELEASES = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
)
TABLES = (
    "collections",
    "documents",
    "chunks",
    "chunk_embeddings",
    "embedding_models",
    "queries",
    "keyword_postings",
    "keyword_df",
    "keyword_totals",
    "keyword_settings",
    "acls",
    "role_principals",
    "collection_models",
    "embedding_queue",
    "query_embedding_cache",
    "api_keys",
    "conversations",
    "conversation_turns",
)
# SECURITY DEFINER: they apply the session's own access (docs/application.md), or create an
# index or a row for a role that may not (ensure_model_index, sync_row_v1, the query cache).
DEFINERS = {
    "collections_partition",  # a trigger's: creates a new collection's partition
    # triggers' in place of the vectors' foreign keys (a cascade runs as the table's owner)
    "chunks_vectors_deleted",
    "chunks_vectors_moved",
    "chunks_vectors_truncated",
    "embedding_models_deleting",
    "chunks_id_changing",
    "search_v3",
    "search_v4",
    "search_v5",
    "session_principals",
    "visible_acls",
    "documents_v1",
    "collections_v1",
    "collections_v2",
    "section_chunks_v1",
    "document_chunks_v1",
    "ensure_model_index",
    "prune_queries",
    "sync_row_v1",
    "query_cache_get",
    "query_cache_put",
    "status",
    "collection_visible",  # the question log's policy calls it, as the role that logs
    "api_key_v1",  # reads pgrag.api_keys, which no restricted role may
    # a caller's own conversations, which no restricted role may read directly
    "conversation_start_v1",
    "conversation_v1",
    "conversations_v1",
    "conversation_turns_v1",
    "conversation_append_v1",
    "conversation_delete_v1",
    "conversation_match_v1",
}
# Executable only by pgrag's roles (or, the engine, by no one but the owner).
GUARDED = {
    "search_engine": (),
    "search_v3": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "search_v4": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "search_v5": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "documents_v1": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "collections_v1": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "collections_v2": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "prune_queries": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "status": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    # pgrag_writer may count through these; readers only through collections_v2 and status,
    # which run them as the owner.
    "count_rows": ("pgrag_writer",),
    "document_count": ("pgrag_writer",),
    "chunk_count": ("pgrag_writer",),
    "section_chunks_v1": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "document_chunks_v1": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "query_cache_get": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "query_cache_put": ("pgrag_reader", "pgrag_app", "pgrag_writer"),
    "sync_row_v1": ("pgrag_writer",),
    "ensure_model_index": ("pgrag_writer",),
    "api_key_v1": ("pgrag_app",),
    **{
        name: ("pgrag_reader", "pgrag_app", "pgrag_writer")
        for name in (
            "conversation_start_v1",
            "conversation_v1",
            "conversations_v1",
            "conversation_turns_v1",
            "conversation_append_v1",
            "conversation_delete_v1",
            "conversation_match_v1",
        )
    },
}


def _one(dsn: str, query: str) -> object:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def _schema_exists(dsn: str) -> bool:
    return _one(dsn, "SELECT to_regnamespace('pgrag') IS NOT NULL") is True


def _vector_installed(dsn: str) -> bool:
    return _one(dsn, "SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 1


def _fingerprint(dsn: str) -> dict[str, object]:
    with psycopg.connect(dsn) as conn:
        return fingerprint.take(conn)


def _differences(a: dict[str, object], b: dict[str, object]) -> list[str]:
    """The objects two fingerprints disagree on, named (for an assertion's message)."""
    out = []
    for section in sorted(set(a) | set(b)):
        x, y = a.get(section), b.get(section)
        if isinstance(x, dict) and isinstance(y, dict):
            for name in sorted(set(x) | set(y)):
                if x.get(name) != y.get(name):
                    out.append(f"{section} {name}: {x.get(name)!r} != {y.get(name)!r}")
        elif x != y:
            out.append(f"{section}: {x!r} != {y!r}")
    return out


@pytest.fixture
def databases(admin_dsn: str) -> Iterator[callable]:  # type: ignore[valid-type]
    """Make empty databases on the test server; all are dropped afterwards."""
    import uuid

    made: list[str] = []

    def make() -> str:
        name = f"pgrag_schema_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name))
            )
        made.append(name)
        return make_conninfo(admin_dsn, dbname=name)

    yield make
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


# -- one schema, however it was reached -----------------------------------------------------


def test_release_by_release_equals_fresh_at_head_equals_the_shipped_fingerprint(
    databases: callable,  # type: ignore[valid-type]
) -> None:
    fresh = databases()
    migrate.upgrade(fresh)  # an empty database: installed from sql/schema and sql/functions
    stepped = databases()
    for revision in RELEASES:  # each release's upgrade, one run each, as ops ran them
        migrate.upgrade(stepped, revision)
        assert migrate.current(stepped) == revision
    migrate.upgrade(stepped)
    # An ops pipeline driving Alembic itself runs every migration in one go, then env.py
    # applies the functions: the third way in.
    alembic_way = databases()
    from alembic import command

    with migrate._sqlalchemy(alembic_way) as conn:
        cfg = migrate.alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        conn.commit()
    prints = {
        name: _fingerprint(dsn)
        for name, dsn in (("fresh", fresh), ("stepped", stepped), ("alembic", alembic_way))
    }
    assert not _differences(prints["fresh"], prints["stepped"]), "\n".join(
        _differences(prints["fresh"], prints["stepped"])
    )
    assert not _differences(prints["fresh"], prints["alembic"])
    shipped = fingerprint.expected()
    assert prints["fresh"] == shipped, (
        "pgrag/db/expected_schema.json is not what this release installs; regenerate it:"
        " python -m pgrag.db.fingerprint --write\n"
        + "\n".join(_differences(shipped, prints["fresh"]))
    )
    for dsn in (fresh, stepped, alembic_way):
        assert migrate.state(dsn).up_to_date


@pytest.mark.parametrize("revision", ["0009", "0005", "0002"])
def test_a_downgrade_leaves_what_the_upgrade_to_that_revision_built(
    databases: callable,  # type: ignore[valid-type]
    revision: str,
) -> None:
    down = databases()
    migrate.upgrade(down)
    migrate.downgrade(down, revision)  # nothing stored: nothing to confirm
    up = databases()
    migrate.upgrade(up, revision)
    assert migrate.current(down) == migrate.current(up) == revision
    a, b = _fingerprint(up), _fingerprint(down)
    assert a == b, "\n".join(_differences(a, b))


def test_upgrade_downgrade_upgrade(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == migrate.head()
    assert migrate.state(empty_dsn).up_to_date
    for table in TABLES:
        assert _one(empty_dsn, f"SELECT to_regclass('pgrag.{table}') IS NOT NULL") is True, table
    assert _vector_installed(empty_dsn)
    with pgrag.connect(empty_dsn) as database:  # now accepted
        assert database.conn.execute("SELECT count(*) FROM pgrag.collections").fetchone() == (0,)
    migrate.downgrade(empty_dsn, "base")
    assert not _schema_exists(empty_dsn)
    assert migrate.current(empty_dsn) is None
    assert _vector_installed(empty_dsn), "downgrade must leave the vector extension alone"
    with pytest.raises(pgrag.SchemaError):
        pgrag.connect(empty_dsn)
    migrate.upgrade(empty_dsn)
    assert migrate.state(empty_dsn).up_to_date


def test_state_of_an_empty_database(empty_dsn: str) -> None:
    st = migrate.state(empty_dsn)
    assert st.current is None and st.head == migrate.head() and not st.up_to_date
    assert "not installed" in st.describe() and "pgrag db upgrade" in st.describe()


def test_connect_refuses_an_unmigrated_database_and_changes_nothing(empty_dsn: str) -> None:
    with pytest.raises(pgrag.SchemaError, match="pgrag db upgrade"):
        pgrag.connect(empty_dsn)
    assert not _schema_exists(empty_dsn)
    assert _one(empty_dsn, f"SELECT to_regclass('public.{migrate.VERSION_TABLE}')") is None
    assert not _vector_installed(empty_dsn)


def test_functions_of_another_release_are_refused_until_upgraded(dsn: str) -> None:
    from pgrag.errors import SchemaNotReady

    def release(value: str) -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE OR REPLACE FUNCTION pgrag.release() RETURNS jsonb LANGUAGE sql"
                    " IMMUTABLE AS {}"
                ).format(sql.Literal(f"SELECT '{value}'::jsonb"))
            )

    release('{"digest": "0000000000000000", "version": "0.0.1"}')  # an older release's
    with pytest.raises(SchemaNotReady, match=r"from pgrag 0\.0\.1\) are not this release's"):
        pgrag.connect(dsn)
    migrate.upgrade(dsn)  # the revision is head: only the functions are re-applied
    pgrag.connect(dsn).close()
    release('{"digest": "0000000000000000", "version": "99.0.0"}')  # a newer release's
    with pytest.raises(SchemaNotReady, match="newer than this pgrag"):
        pgrag.connect(dsn)
    with pytest.raises(pgrag.SchemaError, match="upgrade pgrag itself"):
        migrate.upgrade(dsn)  # never puts older functions over a newer release's


def test_own_version_table_leaves_the_apps_alembic_version_alone(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn) as conn:
        conn.execute(
            "CREATE TABLE public.alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY)"
        )
        conn.execute("INSERT INTO public.alembic_version VALUES ('app_0042')")
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT * FROM public.alembic_version").fetchall() == [("app_0042",)]
        assert conn.execute("SELECT * FROM public.alembic_version_pgrag").fetchall() == [
            (migrate.head(),)
        ]
    migrate.downgrade(empty_dsn, "base")
    assert _one(empty_dsn, "SELECT version_num FROM public.alembic_version") == "app_0042"


def test_concurrent_upgrades_are_serialised(empty_dsn: str, tmp_path: Path) -> None:
    # Several replicas running `pgrag db upgrade` at start-up: one installs, the others wait
    # for it and then find nothing to do. Without the lock the losers fail on CREATE SCHEMA.
    go = tmp_path / "go"
    code = (
        "import sys, time, pathlib, alembic.command, sqlalchemy, psycopg\n"
        "from pgrag.db import schema\n"
        "go = pathlib.Path(sys.argv[2])\n"
        "while not go.exists(): time.sleep(0.005)\n"
        "schema.upgrade(sys.argv[1])\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, empty_dsn, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(3)  # every process has imported everything and waits at the barrier
    go.touch()
    outcomes = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in outcomes), outcomes
    assert migrate.state(empty_dsn).up_to_date


# -- pgvector ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fake_rows", "message"),
    [
        ("SELECT 'vector'::name, '0.7.4'::text, NULL::text", "pgvector 0.7.4 is too old"),
        ("SELECT 'vector'::name, '0.8.0'::text, '0.7.4'::text", "pgvector 0.7.4 is too old"),
        (
            "SELECT 'vector'::name, '0.8.0'::text, NULL::text WHERE false",
            "does not have the pgvector extension",
        ),
    ],
    ids=["too-old", "installed-older-than-available", "missing"],
)
@pytest.mark.parametrize("target", ["head", "0001"])
def test_upgrade_refuses_a_missing_or_old_pgvector(
    empty_dsn: str, fake_rows: str, message: str, target: str
) -> None:
    # Both ways in (a fresh install, and the first migration) read the unqualified
    # pg_available_extensions: a view of that name in a schema before pg_catalog on the
    # search_path plays a server whose pgvector is missing or old.
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE SCHEMA fake")
        conn.execute(
            "CREATE VIEW fake.pg_available_extensions (name, default_version, installed_version)"  # noqa: S608
            f" AS {fake_rows}"
        )
    faked = make_conninfo(empty_dsn, options="-c search_path=fake,pg_catalog")
    with pytest.raises(pgrag.SchemaError, match=message) as err:
        migrate.upgrade(faked, target)
    assert "pgrag db upgrade" in str(err.value)
    assert not _schema_exists(empty_dsn) and migrate.current(empty_dsn) is None
    assert not _vector_installed(empty_dsn)


# -- security ---------------------------------------------------------------------------------


def test_every_function_has_a_fixed_search_path_and_definers_are_the_known_ones(
    dsn: str,
) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
            " WHERE p.pronamespace = 'pgrag'::regnamespace"
        ).fetchall()
    assert len(rows) > 40
    for name, definer, config in rows:
        assert definer is (name in DEFINERS), f"pgrag.{name}: SECURITY DEFINER is {definer}"
        assert "search_path=pg_catalog, pg_temp" in (config or []), (name, config)
    assert {name for name, _, _ in rows} >= DEFINERS | set(GUARDED)
    # No function carries a version suffix but the public entry points.
    suffixed = {
        name
        for name, _, _ in rows
        if name.rsplit("_", 1)[-1][:1] == "v" and name.rsplit("_", 1)[-1][1:].isdigit()
    }
    assert suffixed == {
        "search_v3",
        "search_v4",
        "search_v5",
        "documents_v1",
        "collections_v1",
        "collections_v2",
        "section_chunks_v1",
        "document_chunks_v1",
        "sync_row_v1",
        "chunk_text_v1",
        "keyword_maintain_v2",
        "activate_model_v1",
        "retire_model_v1",
        "api_key_v1",
        "conversation_start_v1",
        "conversation_v1",
        "conversations_v1",
        "conversation_turns_v1",
        "conversation_append_v1",
        "conversation_delete_v1",
        "conversation_match_v1",
    }


def test_guarded_entry_points_are_granted_to_pgrag_roles_only(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for name, roles in GUARDED.items():
            row = conn.execute(
                "SELECT has_function_privilege('public', p.oid, 'EXECUTE'),"
                " has_function_privilege('pgrag_reader', p.oid, 'EXECUTE'),"
                " has_function_privilege('pgrag_app', p.oid, 'EXECUTE'),"
                " has_function_privilege('pgrag_writer', p.oid, 'EXECUTE')"
                " FROM pg_proc p WHERE p.pronamespace = 'pgrag'::regnamespace"
                " AND p.proname = %s",
                (name,),
            ).fetchone()
            assert row is not None, name
            public, reader, app, writer = row
            assert not public, name
            assert (reader, app, writer) == tuple(
                r in roles for r in ("pgrag_reader", "pgrag_app", "pgrag_writer")
            ), name


# -- frozen history -----------------------------------------------------------------------------


def _manifest_problems(root: Path) -> list[str]:
    manifest: dict[str, str] = {}
    for line in (root / MANIFEST).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            digest, path = line.split(maxsplit=1)
            manifest[path.lstrip("*")] = digest
    problems = []
    for path, digest in manifest.items():
        file = root / path
        if not file.is_file():
            problems.append(f"released file {path} was deleted; released files stay forever")
        elif hashlib.sha256(file.read_bytes()).hexdigest() != digest:
            problems.append(
                f"released file {path} was edited; change a table with a new migration, a"
                " function in sql/functions/ (sql/README.md)"
            )
    # A migration after the last release (RELEASES) has not shipped: it may still change, and
    # is listed when it ships.
    frozen = [
        f
        for f in sorted((root / "migrations" / "versions").glob("*.py"))
        if f.name[:4] <= RELEASES[-1]
    ]
    frozen += sorted((root / "migrations" / "history").glob("*.sql"))
    for file in frozen:
        path = file.relative_to(root).as_posix()
        if path not in manifest:
            problems.append(f"{path} is not in {MANIFEST}; add it when it ships")
    return problems


def test_released_migrations_and_history_are_unchanged() -> None:
    problems = _manifest_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_the_manifest_check_catches_edits_and_unlisted_files(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    shutil.copytree(
        ROOT / "migrations", root / "migrations", ignore=shutil.ignore_patterns("__pycache__")
    )
    assert _manifest_problems(root) == []
    with (root / "migrations/history/search_v1.sql").open("a") as fh:
        fh.write("-- a tweak\n")
    (root / f"migrations/versions/{RELEASES[-1]}_other.py").write_text("# released\n")
    (root / "migrations/versions/9999_next.py").write_text("# not yet released\n")
    problems = "\n".join(_manifest_problems(root))
    assert "released file migrations/history/search_v1.sql was edited" in problems
    assert (
        f"migrations/versions/{RELEASES[-1]}_other.py is not in migrations/RELEASED.sha256"
        in problems
    )
    assert "9999_next" not in problems


def test_history_is_what_the_old_migrations_ran() -> None:
    # The function files migrations 0001-0009 ran moved to migrations/history/ byte for byte;
    # every name the migrations read there exists.
    import re

    versions = ROOT / "migrations" / "versions"
    names = set()
    for file in versions.glob("000*.py"):
        names |= set(re.findall(r'sql_file\("functions/([a-z0-9_]+\.sql)"\)', file.read_text()))
    assert len(names) >= 18
    for name in names:
        assert (ROOT / "migrations" / "history" / name).is_file(), name


# -- the CLI ----------------------------------------------------------------------------------


def test_cli_db_commands(empty_dsn: str) -> None:
    runner = CliRunner()

    def run(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(cli, ["--dsn", empty_dsn, *args])

    assert run("db", "current").stdout.strip() == ""
    check = run("db", "check")
    assert check.exit_code == 1 and "pgrag db upgrade" in check.output
    up = run("db", "upgrade")
    assert up.exit_code == 0, up.output
    assert "up to date" in up.stdout
    assert run("db", "current").stdout.strip() == migrate.head()
    check = run("db", "check")
    assert check.exit_code == 0, check.output
    assert "nothing differs from this release" in check.stdout
    assert json.loads(run("db", "check", "--json").stdout) == []
    # A relative revision is an argument, not an unknown option; an empty database removes
    # nothing, so needs no --yes.
    unreleased = sorted(
        (
            f.name[:4]
            for f in (ROOT / "migrations" / "versions").glob("[0-9]*.py")
            if f.name[:4] > RELEASES[-1]
        ),
        reverse=True,
    )
    assert unreleased[0] == migrate.head()
    steps = [*unreleased, *reversed(RELEASES)]
    for before, after in zip(steps, steps[1:], strict=False):
        down = run("db", "downgrade", "-1")
        assert down.exit_code == 0, down.output
        assert f"downgraded pgrag's schema: {before} -> {after}" in down.stdout
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "removed pgrag's schema and its data (was at 0001)" in down.stdout
    assert not _schema_exists(empty_dsn)
    assert run("db", "upgrade").exit_code == 0
    assert run("db", "downgrade", "base").exit_code == 0
    assert not _schema_exists(empty_dsn)


def test_cli_command_on_an_unmigrated_database_says_what_to_do(empty_dsn: str) -> None:
    result = CliRunner().invoke(cli, ["--dsn", empty_dsn, "search", "x"])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "run `pgrag db upgrade`" in lines[0]
    assert not _schema_exists(empty_dsn)


def test_unknown_revision_is_a_one_line_error(dsn: str) -> None:
    head = migrate.head()
    with pytest.raises(pgrag.InputError, match="cannot upgrade to '9999': not a revision"):
        migrate.upgrade(dsn, "9999")
    for args, words in (
        (("downgrade", "nonsense"), "cannot downgrade to 'nonsense': not a revision pgrag knows"),
        (("upgrade", "head+1"), "cannot upgrade to 'head+1': not a revision pgrag knows"),
        (("upgrade", "-1"), "cannot upgrade to '-1': not a revision pgrag knows"),
        (("upgrade", "0009"), f"cannot upgrade to 0009: the database is at {head}, after it"),
        (
            ("downgrade", "-99"),
            f"cannot downgrade 99 steps: the database is at {head}, {int(head)} after base",
        ),
    ):
        result = CliRunner().invoke(cli, ["--dsn", dsn, "db", *args])
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith(f"error: {words}"), (args, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert migrate.current(dsn) == migrate.head()


def test_downgrade_refuses_to_drop_what_an_application_built_on_pgrag(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.my_docs AS SELECT id, source FROM pgrag.documents")
    with pytest.raises(pgrag.SchemaError, match="would remove what objects of yours use") as e:
        migrate.downgrade(dsn, "base")
    assert "view my_docs depends on" in str(e.value) and "nothing was changed" in str(e.value)
    assert migrate.current(dsn) == migrate.head()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('public.my_docs') IS NOT NULL").fetchone()[0]


# -- packaging --------------------------------------------------------------------------------


def test_wheel_ships_migrations_sql_and_the_fingerprint(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheelhouse),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheelhouse.glob("pgrag-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        for required in (
            "pgrag/__init__.py",
            "pgrag/py.typed",
            "pgrag/db/expected_schema.json",
            "pgrag/db/schema.sql",
            "pgrag/ingest/writer.sql",
            "pgrag/migrations/env.py",
            "pgrag/migrations/versions/0001_initial.py",
            "pgrag/migrations/history/search_v1.sql",
            "pgrag/sql/functions/search.sql",
            "pgrag/sql/schema/tables.sql",
        ):
            assert required in names, f"{required} is missing from the wheel"
        site = tmp_path / "site"
        whl.extractall(site)
    # Only the unpacked wheel is importable: cwd is its parent, not the source checkout.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(site)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pgrag\n"
            "from pgrag.db import fingerprint, schema\n"
            "from pgrag.db.resources import migrations_dir, sql_dir, sql_file\n"
            "print(pgrag.__file__)\n"
            "print(migrations_dir())\n"
            "print(sql_dir())\n"
            "assert 'pgrag.search_engine' in sql_file('functions/search.sql')\n"
            "assert fingerprint.expected()['functions']\n"
            "assert schema.head() == sorted(p.name[:4] for p in"
            " (migrations_dir() / 'versions').glob('0*.py'))[-1]\n",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    for line in probe.stdout.splitlines():
        assert Path(line).resolve().is_relative_to(site.resolve()), line
