"""Contextual ingest (pgrag.ingest.contextual): a line per chunk from a language model.

The model is a real local HTTP server (tests.fakes.LLMServer) whose reply is computed from the
prompt: the first sentence of the document it was shown. So a chunk of a later section, whose
own text never names the document's subject, carries the subject in its context line, and the
tests can tell by searching for a word only the document's first section has. The database and
the embedding model are the real ones.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.config import from_env
from pgrag.embeddings.worker import embed_text
from pgrag.errors import ConfigError
from pgrag.ingest.contextual import INSTRUCTION, SITUATE
from pgrag.ingest.loaders import from_text
from tests.fakes import LLMServer

OBSERVATORY = """# Observatory handbook

The Kilauea volcano observatory monitors lava flows on Hawaii.

## Parking

Staff park their cars in the north garage on level two; visitors use the street.

## Lunch

The canteen serves soup, bread and salad at noon, and closes at two.
"""
BAKERY = """# Bakery handbook

The corner bakery sells sourdough loaves every morning.

## Ovens

The ovens are cleaned on Sundays and inspected every spring by the city.

## Deliveries

Flour arrives by truck on Tuesdays; the driver rings the back door bell.
"""


def first_sentence(body: dict[str, Any]) -> str:
    """The fake model's reply: "Context:" and the first sentence of the document's text."""
    prompt = body["messages"][-1]["content"]
    found = re.search(r"<document>\n(.*?)\n</document>", prompt, re.S)
    assert found, prompt
    lines = [line for line in found.group(1).splitlines() if line and not line.startswith("#")]
    return "Context: " + lines[0].split(".")[0] + "."


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    server = LLMServer(stream_chat=False)
    server.answer = first_sentence
    server.fail_status = 400  # a failure that is not retried: the tests need not wait
    yield server
    server.close()


@pytest.fixture
def cdb(dsn: str, embedder: Any, llm: LLMServer) -> Iterator[pgrag.Database]:
    """A connection whose settings name the fake model."""
    database = pgrag.connect(dsn, embedder=embedder, settings=from_env(llm.env))
    yield database
    database.close()


def docs(observatory: str = OBSERVATORY) -> list[Any]:
    return [
        from_text("observatory.md", observatory, format="markdown"),
        from_text("bakery.md", BAKERY, format="markdown"),
    ]


def chats(llm: LLMServer) -> list[str]:
    """The prompts the model was sent, in order."""
    return [
        r.body["messages"][-1]["content"]
        for r in llm.requests
        if r.path.endswith("/chat/completions")
    ]


def stored(db: pgrag.Database, collection: str) -> list[tuple[Any, ...]]:
    """(source, section, text, context, context_for, document hash) of every chunk."""
    return db.conn.execute(
        "SELECT d.source, c.section, c.content, c.context, c.context_for, d.content_hash"
        " FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id"
        " JOIN pgrag.collections k ON k.id = c.collection_id WHERE k.name = %s"
        " ORDER BY d.source, c.ordinal",
        (collection,),
    ).fetchall()


def parking(hits: list[Any]) -> list[Any]:
    return [h for h in hits if h.source == "observatory.md" and "north garage" in h.text]


def test_each_chunk_gets_its_line_and_search_finds_a_chunk_by_its_context(
    cdb: pgrag.Database, llm: LLMServer
) -> None:
    report = pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    pgrag.ingest_documents(cdb, docs(), collection="plain")
    rows = stored(cdb, "ctx")
    assert len(rows) == 6 and report.contexts_written == 6 == len(chats(llm))
    assert report.contexts_empty == report.contexts_missing == 0
    for source, _, _, context, context_for, doc_hash in rows:
        subject = "Kilauea volcano" if source == "observatory.md" else "corner bakery"
        assert subject in context and not context.startswith("Context:")
        assert context_for == doc_hash
    assert all(r[3] is None and r[4] is None for r in stored(cdb, "plain"))
    assert (
        report.to_dict()["contexts_written"] == 6 and "6 context lines written" in report.summary()
    )

    # Keyword arm: "Kilauea" is in the observatory's first section only, and in every context
    # line of that document.
    ctx = pgrag.search(cdb, "Kilauea", collection="ctx", mode="keyword")
    plain = pgrag.search(cdb, "Kilauea", collection="plain", mode="keyword")
    assert len(parking(ctx)) == 1 and parking(plain) == []
    assert {h.source for h in ctx} == {"observatory.md"} and len(ctx) == 3
    # Results show the chunk's own text, not its context line.
    assert all("Kilauea" not in h.text for h in parking(ctx))

    # Vector arm: the parking chunk's vector was made with the line, so it moves towards a
    # question about the volcano, above every chunk of the bakery.
    question = "Where is the volcano observatory that watches lava?"
    ctx = pgrag.search(cdb, question, collection="ctx", mode="vector", k=6)
    plain = pgrag.search(cdb, question, collection="plain", mode="vector", k=6)
    (near,), (far,) = parking(ctx), parking(plain)
    assert near.vector_distance < far.vector_distance - 0.05, (near, far)
    assert {h.source for h in ctx[:3]} == {"observatory.md"}
    # The hybrid's keyword arm counts it too.
    (hybrid,) = parking(pgrag.search(cdb, "Kilauea lava", collection="ctx", k=6))
    assert hybrid.keyword_rank is not None


def test_the_prompt_puts_the_document_first_so_its_chunks_share_a_prefix(
    cdb: pgrag.Database, llm: LLMServer
) -> None:
    pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    prompts = chats(llm)
    assert [r.body["max_tokens"] for r in llm.requests] == [80] * 6
    by_document: dict[str, list[str]] = {}
    for prompt in prompts:
        by_document.setdefault("Kilauea" if "Kilauea" in prompt else "bakery", []).append(prompt)
    # A document's chunks are asked one after the other (so an engine's prompt cache holds its
    # prefix from one to the next), and every prompt has the document before the chunk.
    assert prompts == by_document["bakery"] + by_document["Kilauea"]
    for group in by_document.values():
        assert len(group) == 3
        shared = os.path.commonprefix(group)
        assert shared.startswith("<document>\n") and shared.endswith(f"{SITUATE}\n<chunk>\n")
        for prompt in group:
            document, rest = prompt.split("</document>", 1)
            chunk = rest.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]
            assert chunk and chunk in document  # the chunk comes from the document shown
            assert prompt.endswith(f"</chunk>\n{INSTRUCTION}")


def test_an_unchanged_document_is_not_asked_again_and_a_changed_one_is_rewritten(
    cdb: pgrag.Database, llm: LLMServer
) -> None:
    pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    before = stored(cdb, "ctx")
    asked = len(llm.requests)
    again = pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    assert len(llm.requests) == asked  # not one call
    assert again.count("unchanged") == 2 and again.chunks_embedded == 0
    assert stored(cdb, "ctx") == before
    plain = pgrag.ingest_documents(cdb, docs(), collection="ctx")  # nor without --contextual
    assert plain.count("unchanged") == 2 and stored(cdb, "ctx") == before

    changed = OBSERVATORY.replace("The Kilauea volcano", "The Mauna Loa volcano")
    report = pgrag.ingest_documents(cdb, docs(changed), collection="ctx", contextual=True)
    assert report.count("updated") == 1 and report.count("unchanged") == 1
    assert len(llm.requests) == asked + 3  # the changed document's chunks, each once
    rows = [r for r in stored(cdb, "ctx") if r[0] == "observatory.md"]
    assert all("Mauna Loa" in r[3] and r[4] == r[5] for r in rows)
    assert parking(pgrag.search(cdb, "Kilauea", collection="ctx", mode="keyword")) == []
    assert len(parking(pgrag.search(cdb, "Mauna Loa", collection="ctx", mode="keyword"))) == 1
    assert report.chunks_embedded == 3  # every line changed, so every vector


def test_a_changed_document_ingested_without_contextual_drops_its_lines_and_says_so(
    cdb: pgrag.Database, llm: LLMServer
) -> None:
    pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    warnings: list[tuple[str, str]] = []
    changed = OBSERVATORY.replace("level two", "level three")
    pgrag.ingest_documents(
        cdb, docs(changed), collection="ctx", on_warning=lambda *w: warnings.append(w)
    )
    assert [w[0] for w in warnings] == ["observatory.md"]
    assert "rewritten without them" in warnings[0][1] and "--contextual" in warnings[0][1]
    rows = [r for r in stored(cdb, "ctx") if r[0] == "observatory.md"]
    assert all(r[3] is None for r in rows)
    assert parking(pgrag.search(cdb, "Kilauea", collection="ctx", mode="keyword")) == []


def test_a_failing_model_leaves_chunks_without_lines_and_a_later_run_writes_them(
    cdb: pgrag.Database, llm: LLMServer
) -> None:
    llm.fail_next = 100
    warnings: list[tuple[str, str]] = []
    report = pgrag.ingest_documents(
        cdb, docs(), collection="ctx", contextual=True, on_warning=lambda *w: warnings.append(w)
    )
    # The first failure stops the asking: one request, every document still written whole.
    assert len(llm.requests) == 1
    assert report.count("added") == 2 and report.chunks_written == 6
    assert report.contexts_missing == 6 and report.contexts_written == 0
    assert {w[0] for w in warnings} == {"bakery.md", "observatory.md"}
    assert all("the model failed" in w[1] and "--contextual" in w[1] for w in warnings)
    assert "HTTP 400" in warnings[0][1]
    assert all(r[3] is None and r[4] is None for r in stored(cdb, "ctx"))
    assert "6 chunks without (the model failed)" in report.summary()

    llm.fail_next = 0
    again = pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    assert again.count("updated") == 2 and again.contexts_written == 6
    assert {f.reason for f in again.files} == {"contexts to write"}
    assert len(llm.requests) == 1 + 6
    assert all(r[3] and r[4] == r[5] for r in stored(cdb, "ctx"))
    assert len(llm.requests) == 7
    pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    assert len(llm.requests) == 7  # done now


def test_a_useless_reply_is_no_context_and_is_not_asked_again(
    cdb: pgrag.Database, llm: LLMServer
) -> None:
    replies = iter(["", "[1]", "Context: a bakery handbook section on ovens and cleaning."])
    llm.answer = lambda body: next(replies, "The corner bakery handbook, its deliveries section.")
    warnings: list[tuple[str, str]] = []
    report = pgrag.ingest_documents(
        cdb, docs()[1:], collection="ctx", contextual=True, on_warning=lambda *w: warnings.append(w)
    )
    assert report.count("added") == 1 and report.contexts_empty == 2
    assert report.contexts_written == 1
    rows = stored(cdb, "ctx")
    assert [r[3] for r in rows] == [None, None, "a bakery handbook section on ovens and cleaning."]
    assert all(r[4] == r[5] for r in rows)  # asked for this version: not asked again
    assert warnings and "2 of 3 chunks was empty or not a sentence" in warnings[0][1]
    asked = len(llm.requests)
    assert (
        pgrag.ingest_documents(cdb, docs()[1:], collection="ctx", contextual=True).count(
            "unchanged"
        )
        == 1
    )
    assert len(llm.requests) == asked


def test_without_a_configured_model_it_says_what_to_set_and_writes_nothing(
    db: pgrag.Database,
) -> None:
    with pytest.raises(ConfigError, match="PGRAG_LLM_BASE_URL .* or PGRAG_LLM_GGUF") as err:
        pgrag.ingest_documents(db, docs(), collection="ctx", contextual=True)
    assert "\n" not in str(err.value)
    (n,) = db.conn.execute("SELECT count(*) FROM pgrag.collections").fetchone()
    assert n == 0


def test_the_vector_is_made_from_the_text_the_worker_and_reembed_make(
    cdb: pgrag.Database, embedder: Any
) -> None:
    # The content hash is of the text ingest embedded; the worker and `pgrag models reembed`
    # build it from the stored row (embed_text), so another model's vector is made from the
    # same text, context line included.
    pgrag.ingest_documents(cdb, docs(), collection="ctx", contextual=True)
    rows = cdb.conn.execute(
        "SELECT section, content, context, content_hash FROM pgrag.chunks"
    ).fetchall()
    assert rows and all(r[2] for r in rows)
    for section, content, context, digest in rows:
        text = embed_text(section, content, embedder, context)
        assert context in text and hashlib.sha256(text.encode()).hexdigest() == digest
        assert embedder.tokens.count(text) <= embedder.max_tokens - 2


def test_the_cli_ingests_with_contextual_and_shows_the_count(
    dsn: str, llm: LLMServer, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "observatory.md").write_text(OBSERVATORY)
    for name, value in llm.env.items():
        monkeypatch.setenv(name, value or "")
    runner = CliRunner()
    result = runner.invoke(
        cli, ["--dsn", dsn, "ingest", str(tmp_path), "--contextual", "--context-window", "50"]
    )
    assert result.exit_code == 0, result.output
    assert "3 context lines written" in result.stderr
    # The window: the document's first 50 tokens (the embedding model's, for this endpoint).
    (first, *_) = chats(llm)
    window = first.split("<document>\n", 1)[1].split("\n</document>", 1)[0]
    assert OBSERVATORY.startswith(window) and len(window) < len(OBSERVATORY.strip())
    plain = runner.invoke(cli, ["--dsn", dsn, "ingest", str(tmp_path), "--json"])
    assert plain.exit_code == 0 and '"contexts_written": 0' in plain.stdout


# -- who may read a context line ----------------------------------------------------------------


@pytest.fixture
def roles(admin_dsn: str, dsn: str) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    made = {"reader": f"ctx_reader_{suffix}", "writer": f"ctx_writer_{suffix}"}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for kind, role in made.items():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(
                    sql.Identifier(f"pgrag_{kind}"), sql.Identifier(role)
                )
            )
    yield {kind: make_conninfo(dsn, user=role) for kind, role in made.items()}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in made.values():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_restricted_principal_reads_no_context_of_another(
    cdb: pgrag.Database, roles: dict[str, str]
) -> None:
    observatory, bakery = docs()
    pgrag.ingest_documents(cdb, [observatory], collection="ctx", contextual=True, allow=["alice"])
    pgrag.ingest_documents(cdb, [bakery], collection="ctx", contextual=True, allow=["bob"])
    with psycopg.connect(roles["writer"]) as conn:
        conn.execute("SET pgrag.principals = 'bob'")
        contexts = [r[0] for r in conn.execute("SELECT context FROM pgrag.chunks")]
        assert len(contexts) == 3 and all("bakery" in c for c in contexts)
        (hidden,) = conn.execute(
            "SELECT count(*) FROM pgrag.keyword_postings WHERE lexeme = 'kilauea'"
        ).fetchone()
        assert hidden == 0  # nor the words of alice's lines in the keyword index
        conn.execute("SET pgrag.principals = 'alice'")
        (seen,) = conn.execute(
            "SELECT count(*) FROM pgrag.keyword_postings WHERE lexeme = 'kilauea'"
        ).fetchone()
        assert seen == 3  # the first section's text and the two other chunks' lines
    with psycopg.connect(roles["reader"]) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT context FROM pgrag.chunks")
    hits = pgrag.search(cdb, "Kilauea", collection="ctx", mode="keyword", principals=["bob"])
    assert hits == []
    hits = pgrag.search(cdb, "Kilauea", collection="ctx", mode="keyword", principals=["alice"])
    assert len(parking(hits)) == 1


# -- a local GGUF model (llama-cpp-python's Llama, stood in for) ----------------------------------


def test_a_local_model_is_loaded_once_and_its_window_fits_its_context(
    dsn: str,
    embedder: Any,
    gguf_file: Any,
    stand_in: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pgrag.llm import local as local_llm

    monkeypatch.setattr(local_llm, "_loaded", {})
    settings = from_env({"PGRAG_LLM_GGUF": str(gguf_file), "PGRAG_LLM_CTX": "1200"})
    db = pgrag.connect(dsn, embedder=embedder, settings=settings)
    try:
        long_doc = OBSERVATORY + "\n".join(
            f"\n## Room {i}\n\nRoom {i} holds seismometers." for i in range(40)
        )
        report = pgrag.ingest_documents(
            db, [from_text("observatory.md", long_doc, format="markdown")], collection="ctx",
            contextual=True,
        )  # fmt: skip
        assert len(stand_in.loads) == 1
        ((model, _),) = local_llm._loaded.values()
        assert len(model.calls) == report.chunks_written == report.contexts_written > 3
        for call in model.calls:
            assert call["max_tokens"] == 80 and call["stream"] is False
            window = (
                call["messages"][0]["content"].split("<document>\n", 1)[1].split("\n</document>")[0]
            )
            # The stand-in's tokenizer: a byte a token. 1200 less room for the chunk and reply.
            assert len(window.encode()) <= 1200 - (200 + 80 + 2 * embedder.max_tokens)
            assert long_doc.startswith(window)
        assert all(
            r[0] == stand_in.reply for r in db.conn.execute("SELECT context FROM pgrag.chunks")
        )
        monkeypatch.setattr(local_llm, "_loaded", {})
        again = pgrag.ingest_documents(
            db, [from_text("observatory.md", long_doc, format="markdown")], collection="ctx",
            contextual=True,
        )  # fmt: skip
        assert again.count("unchanged") == 1 and len(stand_in.loads) == 1  # not even loaded
    finally:
        db.close()
