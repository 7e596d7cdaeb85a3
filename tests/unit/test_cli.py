"""The ``pgrag`` command without a database: ``--help`` and usage errors, checked in a
subprocess so that nothing the tests imported hides a heavy import. The commands end to end:
tests/integration/test_cli.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "psycopg",
    "numpy",
    "sqlalchemy",
    "alembic",
)
COMMANDS = ("ask", "collections", "db", "ingest", "search", "server")


# --- help ------------------------------------------------------------------------------------


def test_importing_the_cli_loads_nothing_heavy() -> None:
    code = (
        f"import sys, pgrag.cli; heavy = [m for m in {HEAVY!r} if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_subcommand_help_and_usage_errors_load_nothing_heavy() -> None:
    # click's Exit and UsageError pass through the group's error translation; it must not
    # import psycopg to look at them.
    code = (
        "import sys, pgrag.cli\n"
        "for argv in (['--help'], ['search', '--help'], ['db', 'upgrade', '--help'],"
        " ['eval', 'retrieval', '--help'], ['nosuchcommand']):\n"
        "    try:\n"
        "        pgrag.cli.cli(argv, prog_name='pgrag')\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.stderr.splitlines()[-1] == "[]", out.stderr
    assert "Usage: pgrag search [OPTIONS] QUERY" in out.stdout


def test_help_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pgrag.cli", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split("Commands:", 1)[1].split()
    for command in COMMANDS:
        assert command in listed, f"{command} missing from --help:\n{out.stdout}"


def test_a_collection_name_no_collection_can_have_is_one_line_before_any_connection() -> None:
    # A name that is not UTF-8 (as a shell passes $'m\xffain') reached psycopg's encoder and
    # ended in a traceback; no collection can be called that, so -c refuses it as it parses.
    for command in (
        ["search", "x"],
        ["ask", "x"],
        ["acl", "show"],
        ["queries", "prune"],
        ["models", "list"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "pgrag.cli", "--dsn", "host=/nonexistent", *command, "-c"]
            + [b"m\xffain".decode("utf-8", "surrogateescape")],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            cwd=REPO,
        )
        assert done.returncode == 2, (command, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert "invalid collection name" in done.stderr, done.stderr
        assert "Invalid value for '--collection'" in done.stderr, done.stderr


def test_a_waiting_line_does_not_double_the_statements_semicolon() -> None:
    from pgrag.db.waits import describe

    line = describe(42, "psql as bob", "a lock", "LOCK TABLE pgrag.chunks; ")
    assert line.endswith("its statement: LOCK TABLE pgrag.chunks")
    assert describe(42, "psql", "a lock", None).endswith("holding a lock")
