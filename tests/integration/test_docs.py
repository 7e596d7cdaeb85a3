"""The README documents every command the CLI has, and the SQL and configuration entry points;
docs/cli.md is every command's --help as the commands print it now; the README, docs/ and the
changelog name only what exists: current SQL functions, modules, files and headings."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


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
            # $1 is the query's vector, $2 the model that made it (what /v1/embeddings names).
            query = statement.replace("%", "%%").replace("$1", "%(v)s").replace("$2", "%(m)s")
            params = {"v": vector, "m": default_embedder().name} if "%(v)s" in query else None
            rows = conn.execute(query, params).fetchall()
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
