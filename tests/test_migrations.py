"""The schema moves only through pgrag's Alembic migrations (pgrag.migrate, `pgrag db ...`).

Also: the frozen-SQL manifest (sql/RELEASED.sha256), the security settings of the SQL
functions, and the wheel carrying migrations/ and sql/ as package data.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.db import schema as migrate

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "sql/RELEASED.sha256"
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
)
FUNCTIONS = (
    "search_v1",
    "search_v2",
    "register_model",
    "ensure_model_index",
    "ensure_model_index",
    "keyword_truncate",
    "keyword_maintain_v2",
    "keyword_sync",
    "search_v3",
    "session_principals",
    "visible_acls",
    "acl_for",
    "grant_roles",
    "filter_check",
    "filter_match",
    "documents_v1",
    "collections_v1",
    "unrestricted",
    "unrestricted_role",
    "search_v4",
    "grant_roles",
    "documents_hand_over",
    "documents_materialize",
    "documents_deleted",
    "documents_access_dedup",
    "section_chunks_v1",
    "grant_roles",
    "documents_renamed",
    "collection_model_changed",
    "ensure_model_index",
    "model_missing",
    "activate_model_v1",
    "retire_model_v1",
    "retire_model_vectors",
    "chunk_text_v1",
    "documents_body",
    "embedding_enqueue",
    "documents_sync",
    "sync_row_v1",
    "status",
    "query_cache_scope",
    "query_cache_get",
    "query_cache_put",
    "grant_roles",
    "search_with_model_v1",
    "search_v5",
)
DEFINERS = {
    "search_v3",
    "search_v4",
    "session_principals",
    "visible_acls",
    "documents_v1",
    "collections_v1",
    "section_chunks_v1",
    "ensure_model_index",
    "sync_row_v1",
    "query_cache_get",
    "query_cache_put",
    "search_v5",
}


def _one(dsn: str, query: str) -> object:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def _schema_exists(dsn: str) -> bool:
    return _one(dsn, "SELECT to_regnamespace('pgrag') IS NOT NULL") is True


def _vector_installed(dsn: str) -> bool:
    return _one(dsn, "SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 1


def _functions(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'pgrag'"
        ).fetchall()
    return {r[0] for r in rows}


# -- upgrade / downgrade ----------------------------------------------------------------------


def test_state_of_an_empty_database(empty_dsn: str) -> None:
    st = migrate.state(empty_dsn)
    assert st.current is None
    assert st.head == migrate.head()
    assert not st.up_to_date
    assert "not installed" in st.describe()
    assert "pgrag db upgrade" in st.describe()


def test_connect_refuses_an_unmigrated_database_and_changes_nothing(empty_dsn: str) -> None:
    with pytest.raises(pgrag.SchemaError, match="pgrag db upgrade"):
        pgrag.connect(empty_dsn)
    assert not _schema_exists(empty_dsn)
    assert _one(empty_dsn, f"SELECT to_regclass('public.{migrate.VERSION_TABLE}')") is None
    assert not _vector_installed(empty_dsn)


def test_upgrade_downgrade_upgrade(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == migrate.head()
    assert migrate.state(empty_dsn).up_to_date
    for table in TABLES:
        assert _one(empty_dsn, f"SELECT to_regclass('pgrag.{table}') IS NOT NULL") is True, table
    assert set(FUNCTIONS) <= _functions(empty_dsn)
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
    assert migrate.current(empty_dsn) == migrate.head()
    assert set(FUNCTIONS) <= _functions(empty_dsn)


def test_cli_db_commands(empty_dsn: str) -> None:
    runner = CliRunner()

    def run(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(cli, ["--dsn", empty_dsn, *args])

    current = run("db", "current")
    assert current.exit_code == 0 and current.stdout.strip() == ""

    check = run("db", "check")
    assert check.exit_code == 1
    assert check.stderr.startswith("error: ")
    assert "pgrag db upgrade" in check.stderr

    up = run("db", "upgrade")
    assert up.exit_code == 0, up.output
    assert "up to date" in up.stdout
    assert run("db", "current").stdout.strip() == migrate.head()
    check = run("db", "check")
    assert check.exit_code == 0, check.output
    assert "up to date" in check.stdout

    # A relative revision is an argument, not an unknown option.
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0009 -> 0008" in down.stdout
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0008 -> 0007" in down.stdout
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0007 -> 0006" in down.stdout
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0006 -> 0005" in down.stdout
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0005 -> 0004" in down.stdout
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0004 -> 0003" in down.stdout
    assert run("db", "current").stdout.strip() == "0003"
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0003 -> 0002" in down.stdout
    assert run("db", "current").stdout.strip() == "0002"
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "downgraded pgrag's schema: 0002 -> 0001" in down.stdout
    assert run("db", "current").stdout.strip() == "0001"
    down = run("db", "downgrade", "-1")
    assert down.exit_code == 0, down.output
    assert "removed pgrag's schema and its data (was at 0001)" in down.stdout
    assert not _schema_exists(empty_dsn)
    assert run("db", "check").exit_code == 1
    assert run("db", "upgrade").exit_code == 0

    down = run("db", "downgrade", "base")
    assert down.exit_code == 0, down.output
    assert not _schema_exists(empty_dsn)


def test_cli_command_on_an_unmigrated_database_says_what_to_do(empty_dsn: str) -> None:
    result = CliRunner().invoke(cli, ["--dsn", empty_dsn, "search", "x"])
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "run `pgrag db upgrade`" in lines[0]
    assert not _schema_exists(empty_dsn)


def test_own_version_table_leaves_the_apps_alembic_version_alone(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn) as conn:
        conn.execute(
            "CREATE TABLE public.alembic_version (version_num varchar(32) NOT NULL PRIMARY KEY)"
        )
        conn.execute("INSERT INTO public.alembic_version VALUES ('app_0042')")

    migrate.upgrade(empty_dsn)

    assert migrate.VERSION_TABLE == "alembic_version_pgrag"
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT * FROM public.alembic_version").fetchall() == [("app_0042",)]
        assert conn.execute("SELECT * FROM public.alembic_version_pgrag").fetchall() == [
            (migrate.head(),)
        ]
    migrate.downgrade(empty_dsn, "base")
    assert _one(empty_dsn, "SELECT version_num FROM public.alembic_version") == "app_0042"


# -- pgvector version check ----------------------------------------------------------------------


def _initial_migration() -> ModuleType:
    path = ROOT / "migrations" / "versions" / "0001_initial.py"
    spec = importlib.util.spec_from_file_location("pgrag_migration_0001", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pgvector_version_ordering() -> None:
    m = _initial_migration()
    assert m.MIN_PGVECTOR == (0, 8)
    assert m._version("0.7.4") < m.MIN_PGVECTOR
    assert m._version("0.7") < m.MIN_PGVECTOR
    assert m._version("0.5.1") < m.MIN_PGVECTOR
    assert m._version("0.8.0") >= m.MIN_PGVECTOR
    assert m._version("0.8.1") >= m.MIN_PGVECTOR
    assert m._version("0.10.0") >= m.MIN_PGVECTOR  # numeric, not string, comparison
    assert m._version("0.10.0") > m._version("0.9.9")
    assert m._version("1.0.0") >= m.MIN_PGVECTOR


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
def test_upgrade_refuses_a_missing_or_old_pgvector(
    empty_dsn: str, fake_rows: str, message: str
) -> None:
    # The migration reads the unqualified pg_available_extensions. A view of that name in a
    # schema placed before pg_catalog in search_path plays a server whose pgvector is missing
    # or old, without touching the real server.
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE SCHEMA fake")
        conn.execute(
            "CREATE VIEW fake.pg_available_extensions (name, default_version, installed_version)"
            f" AS {fake_rows}"
        )
    faked = make_conninfo(empty_dsn, options="-c search_path=fake,pg_catalog")

    with pytest.raises(pgrag.SchemaError, match=message) as err:
        migrate.upgrade(faked)

    assert "pgrag db upgrade" in str(err.value)
    assert not _schema_exists(empty_dsn)
    assert migrate.current(empty_dsn) is None
    assert not _vector_installed(empty_dsn)


# -- security ------------------------------------------------------------------------------------


def test_functions_are_security_invoker_with_a_fixed_search_path(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'pgrag' AND p.proname = ANY(%s)",
            [list(FUNCTIONS)],
        ).fetchall()
    found = {name: (secdef, config) for name, secdef, config in rows}
    assert set(found) == set(FUNCTIONS)
    for name, (secdef, config) in found.items():
        # The deliberate exceptions apply the session's own access (docs/application.md).
        assert secdef is (name in DEFINERS), f"pgrag.{name}: SECURITY DEFINER is {secdef}"
        assert "search_path=pg_catalog, pg_temp" in (config or []), (name, config)


def test_definer_entry_points_are_not_granted_to_public(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE'),"
            " has_function_privilege('pgrag_reader', p.oid, 'EXECUTE')"
            " FROM pg_proc p WHERE p.pronamespace = 'pgrag'::regnamespace"
            " AND p.proname IN ('search_v3', 'search_v4', 'documents_v1', 'collections_v1',"
            " 'section_chunks_v1')"
        ).fetchall()
    assert len(rows) == 5
    for name, public, reader in rows:
        assert (public, reader) == (False, True), name


# -- frozen SQL ----------------------------------------------------------------------------------


def _read_manifest(root: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in (root / MANIFEST).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        digest, path = line.split(maxsplit=1)
        entries[path.lstrip("*")] = digest  # sha256sum marks binary mode with "*"
    return entries


def _frozen_files(root: Path) -> list[str]:
    files = [p for p in (root / "sql" / "functions").rglob("*") if p.is_file()]
    files += (root / "migrations" / "versions").glob("*.py")
    return sorted(p.relative_to(root).as_posix() for p in files if "__pycache__" not in p.parts)


def _manifest_problems(root: Path) -> list[str]:
    manifest = _read_manifest(root)
    problems = []
    for path, digest in manifest.items():
        file = root / path
        if not file.is_file():
            problems.append(f"released file {path} was deleted; released files stay forever")
        elif hashlib.sha256(file.read_bytes()).hexdigest() != digest:
            problems.append(
                f"released file {path} was edited; add a new migration / a new _vN function instead"
            )
    for path in _frozen_files(root):
        if path not in manifest:
            problems.append(f"{path} is not in {MANIFEST}; add it to {MANIFEST} when it ships")
    return problems


def test_released_sql_and_migrations_are_unchanged() -> None:
    problems = _manifest_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_manifest_check_catches_edits_and_unlisted_files(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for part in ("sql", "migrations/versions"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    assert _manifest_problems(root) == []

    with (root / "sql/functions/search_v1.sql").open("a") as fh:
        fh.write("-- a tweak\n")
    (root / "sql/functions/search_v9.sql").write_text("-- next\n")
    (root / "migrations/versions/0009_next.py").write_text("# next\n")

    problems = "\n".join(_manifest_problems(root))
    assert (
        "released file sql/functions/search_v1.sql was edited; add a new migration / a new _vN"
        " function instead" in problems
    )
    assert "sql/functions/search_v9.sql is not in sql/RELEASED.sha256" in problems
    assert "migrations/versions/0009_next.py is not in" in problems
    assert "add it to sql/RELEASED.sha256 when it ships" in problems


# -- packaging -----------------------------------------------------------------------------------


def test_wheel_ships_migrations_and_sql(tmp_path: Path) -> None:
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
    wheels = list(wheelhouse.glob("pgrag-*.whl"))
    assert len(wheels) == 1, wheels

    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
        for required in (
            "pgrag/__init__.py",
            "pgrag/py.typed",
            "pgrag/migrations/env.py",
            "pgrag/migrations/versions/0001_initial.py",
            "pgrag/sql/functions/search_v1.sql",
            "pgrag/sql/RELEASED.sha256",
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
            "from pgrag.db.resources import migrations_dir, sql_dir, sql_file\n"
            "print(pgrag.__file__)\n"
            "print(migrations_dir())\n"
            "print(sql_dir())\n"
            "assert 'CREATE FUNCTION pgrag.search_v1' in sql_file('functions/search_v1.sql')\n",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    package_file, migrations, sql = (Path(line) for line in probe.stdout.splitlines())
    for path in (package_file, migrations, sql):
        assert path.resolve().is_relative_to(site.resolve()), path
    assert (migrations / "env.py").is_file()
    assert (sql / "functions" / "search_v1.sql").is_file()


def test_concurrent_upgrades_are_serialised(empty_dsn: str, tmp_path: Path) -> None:
    # Several replicas running `pgrag db upgrade` at start-up: one migrates, the others wait
    # for it and then find nothing to do. Without the lock the losers fail on CREATE SCHEMA.
    go = tmp_path / "go"
    code = (
        "import sys, time, pathlib, alembic.command, sqlalchemy, psycopg\n"
        "from pgrag.db import schema as migrate\n"
        "go = pathlib.Path(sys.argv[2])\n"
        "while not go.exists(): time.sleep(0.005)\n"
        "migrate.upgrade(sys.argv[1])\n"
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
    assert migrate.current(empty_dsn) == migrate.head()


def test_unknown_revision_is_a_one_line_error(dsn: str) -> None:
    with pytest.raises(pgrag.SchemaError, match="cannot upgrade to '9999'"):
        migrate.upgrade(dsn, "9999")
    result = CliRunner().invoke(cli, ["--dsn", dsn, "db", "downgrade", "nonsense"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot downgrade to 'nonsense'")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_downgrade_refuses_to_drop_what_an_application_built_on_pgrag(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.my_docs AS SELECT id, source FROM pgrag.documents")
    with pytest.raises(Exception, match="depend"):
        migrate.downgrade(dsn, "base")
    # Nothing was dropped: the view and pgrag's schema are both still there.
    assert migrate.current(dsn) == migrate.head()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('public.my_docs') IS NOT NULL").fetchone()[0]
