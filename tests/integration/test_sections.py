"""Small-to-big retrieval (issue 5, migration 0006): small chunks in the index, their whole
section in the prompt, and only what the session may read."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.ingest.loaders import from_text
from pgrag.retrieval.sections import join_chunks
from tests.integration.test_access import Tenants, tenants  # noqa: F401 - fixture

SENTENCES = [
    f"Step {i}: the operator turns valve {i} and waits {i + 2} minutes before the next check."
    for i in range(40)
]
MANUAL = (
    "# Plant manual\n\n## Startup\n\n"
    + " ".join(SENTENCES)
    + "\n\n## Shutdown\n\nClose every valve in reverse order and log the time.\n"
)


@pytest.fixture
def manual(db: Database, tmp_path: Path) -> Database:
    path = tmp_path / "manual.md"
    path.write_text(MANUAL)
    pgrag.ingest(db, [path], collection="plant")
    return db


def _startup(dsn: str) -> list[tuple[int, int, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT id, ordinal, content FROM pgrag.chunks"
            " WHERE section = 'Plant manual > Startup' ORDER BY ordinal"
        ).fetchall()


def test_a_chunk_widens_to_its_whole_section_without_repeats(manual: Database) -> None:
    chunks = _startup(manual.dsn)
    assert len(chunks) >= 3, "the section should span several chunks"
    middle = chunks[len(chunks) // 2][0]
    with psycopg.connect(manual.dsn) as conn:
        rows = conn.execute(
            "SELECT chunk_id, sibling_id, ordinal, content FROM pgrag.section_chunks_v1(%s)",
            ([middle],),
        ).fetchall()
    assert [r[1] for r in rows] == [c[0] for c in chunks]  # all of it, in order, no Shutdown
    section = join_chunks([(r[2], r[3]) for r in rows])
    for sentence in SENTENCES:
        assert section.count(sentence) == 1, sentence  # each once: the overlaps are removed
    assert "reverse order" not in section


def test_nearest_chunks_first_when_a_section_is_too_long(manual: Database) -> None:
    chunks = _startup(manual.dsn)
    middle = len(chunks) // 2
    with psycopg.connect(manual.dsn) as conn:
        rows = conn.execute(
            "SELECT sibling_id FROM pgrag.section_chunks_v1(%s, 3)", ([chunks[middle][0]],)
        ).fetchall()
    assert [r[0] for r in rows] == [c[0] for c in chunks[middle - 1 : middle + 2]]


def test_ask_with_section_context_puts_the_section_in_the_prompt(manual: Database) -> None:
    question = "How long does the operator wait after turning valve 37?"
    narrow = pgrag.ask(manual, question, collection="plant", k=1, log=False, llm=None)
    wide = pgrag.ask(
        manual, question, collection="plant", k=1, log=False, llm=None, context="section"
    )

    def steps(prompt: str) -> set[str]:
        return set(re.findall(r"Step \d+:", prompt))

    assert steps(narrow.prompt) < steps(wide.prompt)
    assert len(steps(wide.prompt)) == len(SENTENCES)
    assert wide.citations and wide.citations[0].section == "Plant manual > Startup"
    with pytest.raises(pgrag.PgragError, match="context must be"):
        pgrag.ask(manual, question, collection="plant", log=False, llm=None, context="page")
    result = CliRunner().invoke(
        cli,
        [
            "--dsn",
            manual.dsn,
            "ask",
            question,
            "-c",
            "plant",
            "-k",
            "1",
            "--context",
            "section",
            "--show-prompt",
            "--no-log",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(steps(result.stderr)) == len(SENTENCES)


def test_two_chunks_of_one_section_become_one_passage(manual: Database) -> None:
    from pgrag.retrieval.sections import widen

    hits = pgrag.search(manual, "operator turns valve waits minutes", collection="plant", k=5)
    startup = [h for h in hits if h.section == "Plant manual > Startup"]
    assert len(startup) >= 2
    wide = widen(manual, hits)
    assert [h.section for h in wide].count("Plant manual > Startup") == 1
    [kept] = [h for h in wide if h.section == "Plant manual > Startup"]
    assert kept.rank == min(h.rank for h in startup)  # the best-ranked chunk holds it


def test_a_session_widens_only_into_what_it_may_read(tenants: Tenants, embedder: Any) -> None:  # noqa: F811
    db = pgrag.connect(tenants.dsn, embedder=embedder)
    try:
        pgrag.ingest_documents(
            db,
            [from_text("acme/manual.md", MANUAL, format="markdown")],
            collection="t",
            allow=["tenant:acme"],
        )
        ids = [
            r[0]
            for r in db.conn.execute(
                "SELECT c.id FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id"
                " WHERE d.source = 'acme/manual.md' ORDER BY c.ordinal"
            ).fetchall()
        ]
    finally:
        db.close()
    query = "SELECT count(*) FROM pgrag.section_chunks_v1(%s)"
    with psycopg.connect(tenants.reader_dsn) as conn:  # mapped to tenant:acme
        assert conn.execute(query, ([ids[1]],)).fetchone()[0] > 1
    with psycopg.connect(tenants.app_dsn) as conn:
        conn.execute("SELECT set_config('pgrag.principals', 'tenant:globex', false)")
        assert conn.execute(query, ([ids[1]],)).fetchone()[0] == 0  # as if it did not exist
        conn.execute("SELECT set_config('pgrag.principals', 'tenant:acme', false)")
        assert conn.execute(query, ([ids[1]],)).fetchone()[0] > 1
