"""The README documents every command the CLI has, and the SQL and configuration entry points;
docs/cli.md is every command's --help as the commands print it now."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from pgrag.cli import cli

README = Path(__file__).resolve().parents[2] / "README.md"
CLI_REFERENCE = README.parent / "docs" / "cli.md"


def command_lines() -> list[str]:
    """``pgrag <cmd>`` for every command and ``pgrag <group> <sub>`` for every subcommand."""
    names = []
    for name, command in sorted(cli.commands.items()):
        names.append(f"pgrag {name}")
        if isinstance(command, click.Group):
            names.extend(f"pgrag {name} {sub}" for sub in sorted(command.commands))
    return names


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_cli_has_the_expected_shape() -> None:
    # Guards the walk below: if the group stops exposing its commands, the README test
    # would pass vacuously.
    lines = command_lines()
    assert {"pgrag ask", "pgrag search", "pgrag ingest", "pgrag db upgrade"} <= set(lines)


def test_readme_mentions_every_command(readme: str) -> None:
    # "pgrag db" counts when written as "pgrag db upgrade"; "pgrag search" does not count
    # inside "pgrag searches" or "pgrag search_v1".
    def mentioned(line: str) -> bool:
        words = r" +".join(map(re.escape, line.split()))
        return re.search(rf"(?<![\w.-]){words}(?![\w-])", readme) is not None

    missing = [line for line in command_lines() if not mentioned(line)]
    assert not missing, f"README.md does not mention: {', '.join(missing)}"


def test_cli_reference_is_current() -> None:
    from pgrag.cli.reference import COMMAND, render

    written = CLI_REFERENCE.read_text(encoding="utf-8") if CLI_REFERENCE.exists() else ""
    assert written == render(), f"docs/cli.md is out of date; regenerate it: {COMMAND}"


def test_cli_reference_has_every_command() -> None:
    # Guards the walk the generator does: a command it skipped would pass the test above.
    text = CLI_REFERENCE.read_text(encoding="utf-8")
    headings = re.findall(r"^## (pgrag.*)$", text, flags=re.MULTILINE)
    assert set(headings) == {"pgrag", *command_lines()}
    for line in command_lines():
        assert f"Usage: {line} [OPTIONS]" in text, line


def test_cli_reference_does_not_depend_on_the_terminal() -> None:
    from pgrag.cli.reference import render

    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "pgrag.cli.reference"],
        cwd=README.parent,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == render()


def test_readme_links_the_cli_reference(readme: str) -> None:
    terminal = readme.split("### 3. The terminal", 1)[1].split("\n## ", 1)[0]
    assert "(docs/cli.md)" in terminal


def test_readme_mentions_sql_entry_point_and_dsn(readme: str) -> None:
    assert "pgrag.search_v5(" in readme
    assert "PGRAG_DSN" in readme
