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
