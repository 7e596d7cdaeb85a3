"""The README documents every command the CLI has, and the SQL and configuration entry points."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from pgrag.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"


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


def test_readme_mentions_sql_entry_point_and_dsn(readme: str) -> None:
    assert "pgrag.search_v1(" in readme
    assert "PGRAG_DSN" in readme
