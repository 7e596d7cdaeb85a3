"""The README documents every command the CLI has, and the SQL and configuration entry points;
docs/cli.md is every command's --help as the commands print it now."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from psycopg.conninfo import make_conninfo

from pgrag.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"
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


def _blocks(readme: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", readme, flags=re.DOTALL)


@pytest.fixture(scope="module")
def handbook_dsn(admin_dsn: str, template_dsn: str) -> Iterator[str]:
    """A database with examples/handbook ingested as the README's 'handbook' collection."""
    import uuid

    import psycopg
    from psycopg import sql

    import pgrag
    from pgrag.embeddings.local import default_embedder

    name = f"pgrag_readme_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier("pgrag_test_template")
            )
        )
    dsn = make_conninfo(admin_dsn, dbname=name)
    db = pgrag.connect(dsn, embedder=default_embedder())
    pgrag.ingest(db, [README.parent / "examples" / "handbook"], collection="handbook")
    db.close()
    yield dsn
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_readme_sql_examples_run(readme: str, handbook_dsn: str) -> None:
    import psycopg
    from pgvector.psycopg import register_vector

    from pgrag.embeddings.local import default_embedder

    vector = default_embedder().embed(["refund window monthly plan"])[0]
    statements = [s.strip() for b in _blocks(readme, "sql") for s in b.split(";") if "SELECT" in s]
    assert len(statements) >= 4
    with psycopg.connect(handbook_dsn) as conn:
        register_vector(conn)
        for statement in statements:
            query = statement.replace("%", "%%").replace("$1", "%(v)s")
            rows = conn.execute(query, {"v": vector} if "%(v)s" in query else None).fetchall()
            assert rows, f"README example returned nothing: {statement}"


def test_readme_python_example_runs(
    readme: str,
    handbook_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (example,) = [b for b in _blocks(readme, "python") if "pgrag.connect()" in b]
    monkeypatch.setenv("PGRAG_DSN", handbook_dsn)
    monkeypatch.chdir(README.parent)
    exec(compile(example, "README.md", "exec"), {})  # noqa: S102 - our own documentation
    out = capsys.readouterr().out
    assert "collection 'handbook'" in out
    assert "[1]" in out or "I don't know" in out
