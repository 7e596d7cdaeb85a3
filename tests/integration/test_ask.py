"""ask() with the offline extractive reader on the real model and database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pgrag
from pgrag.answer.prompt import ABSTAIN_TEXT
from pgrag.config import from_env
from pgrag.db.connect import Database
from pgrag.embeddings.embedder import Embedder
from pgrag.errors import ConfigError, InputError
from pgrag.llm.chat import LLMConfig
from tests.fakes import LLMServer


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


@pytest.mark.parametrize(
    ("question", "expected", "source"),
    [
        (
            "How many days do I have to get a refund on a monthly subscription?",
            "14 days",
            "refunds.md",
        ),
        ("How long must passwords be?", "14 characters", "security.md"),
        ("When does the Lisbon office close?", "18:00", "office.txt"),
        ("Where do I park my bicycle?", "courtyard", "office.txt"),
    ],
)
def test_extractive_answer_cites_the_passage_that_holds_the_answer(
    loaded: Database, question: str, expected: str, source: str
) -> None:
    answer = pgrag.ask(loaded, question, collection="docs", llm=None)
    assert not answer.abstained, answer.reason
    assert expected in answer.answer
    assert answer.citations
    first = answer.citations[0]
    assert first.source.endswith(source)
    cited = {s.n: s for s in answer.sources}[first.n]
    assert cited.result.chunk_id == first.chunk_id
    assert expected in cited.result.text
    assert f"[{first.n}]" in answer.answer


@pytest.mark.parametrize(
    "question",
    ["What is the capital of Mongolia?", "Who won the football world cup in 1998?"],
)
def test_extractive_reader_abstains_when_sources_do_not_cover_the_question(
    loaded: Database, question: str
) -> None:
    answer = pgrag.ask(loaded, question, collection="docs", llm=None)
    assert answer.abstained
    assert answer.answer == ABSTAIN_TEXT
    assert answer.reason
    assert answer.citations == []


def test_ask_logs_question_retrieval_prompt_and_answer(loaded: Database) -> None:
    answer = pgrag.ask(loaded, "How long must passwords be?", collection="docs", llm=None)
    row = loaded.conn.execute(
        "SELECT question, retrieved, prompt, generator, answer, citations, abstained, timings"
        " FROM pgrag.queries WHERE id = %s",
        (answer.query_id,),
    ).fetchone()
    assert row is not None
    question, retrieved, prompt, generator, text, citations, abstained, timings = row
    assert question == "How long must passwords be?"
    assert [r["chunk_id"] for r in retrieved][:3] == [
        s.result.chunk_id for s in sorted(answer.sources, key=lambda s: s.result.rank)
    ][:3]
    assert prompt.rstrip().endswith("Question: How long must passwords be?")
    assert generator == "extractive" and text == answer.answer and abstained is False
    assert citations[0]["chunk_id"] == answer.citations[0].chunk_id
    assert set(timings) >= {"embed_ms", "retrieve_ms", "generate_ms", "total_ms"}


def test_ask_without_logging_writes_nothing(loaded: Database) -> None:
    answer = pgrag.ask(
        loaded, "How long must passwords be?", collection="docs", llm=None, log=False
    )
    assert answer.query_id is None
    assert loaded.conn.execute("SELECT count(*) FROM pgrag.queries").fetchone()[0] == 0


def test_budget_limits_the_passages_given_to_the_generator(loaded: Database) -> None:
    small = pgrag.ask(loaded, "refund", collection="docs", llm=None, budget_tokens=1, log=False)
    large = pgrag.ask(loaded, "refund", collection="docs", llm=None, log=False)
    assert len(small.sources) == 1 < len(large.sources)
    assert small.sources[0].result.rank == 1


def test_table_rows_answer_with_their_column_names(db: Database, tmp_path: Path) -> None:
    (tmp_path / "sla.md").write_text(
        "# Support\n\n## Response times\n\n"
        "| Plan | First response | Channels |\n"
        "|------|----------------|----------|\n"
        "| Starter | 2 business days | Email |\n"
        "| Team | 4 hours | Email, chat |\n"
    )
    pgrag.ingest(db, [tmp_path], collection="sla")
    answer = pgrag.ask(
        db, "What is the first response time on the Team plan?", collection="sla", llm=None
    )
    assert not answer.abstained, answer.reason
    assert "Plan: Team; First response: 4 hours; Channels: Email, chat" in answer.answer
    assert "|" not in answer.answer


def test_a_word_inside_a_compound_counts_as_mentioned(db: Database, tmp_path: Path) -> None:
    (tmp_path / "deploy.md").write_text(
        "# Deploy guide\n\n## Rollback\n\nUse make rollback within 10 minutes of a bad deploy.\n"
    )
    pgrag.ingest(db, [tmp_path], collection="ops")
    answer = pgrag.ask(db, "How do I roll back a deploy?", collection="ops", llm=None)
    assert not answer.abstained, answer.reason
    assert "make rollback" in answer.answer


def test_quantity_questions_prefer_sentences_with_numbers(db: Database, tmp_path: Path) -> None:
    (tmp_path / "refunds.md").write_text(
        "# Refunds\n\n## How the money is returned\n\n"
        "Approved refunds always go back to the original payment method. We cannot send a refund"
        " to a different card. Depending on your bank, the money arrives within 5–10 business"
        " days after we have confirmed the refund by email.\n"
    )
    pgrag.ingest(db, [tmp_path], collection="money")
    question = "How long does it take for an approved refund to reach the original payment method?"
    answer = pgrag.ask(db, question, collection="money", llm=None)
    first_sentence = answer.answer.split("]")[0]
    assert "5–10 business days" in first_sentence


def test_ask_takes_its_configuration_from_the_connection(
    loaded: Database,
    embedder: Embedder,
    completions_llm: LLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    question = "How many days do I have to get a refund on a monthly subscription?"
    completions_llm.reply = "Monthly plans: 14 days [1]."
    monkeypatch.setenv("PGRAG_LLM_BASE_URL", completions_llm.url)
    monkeypatch.setenv("PGRAG_MIN_CONFIDENCE", "0.01")
    db = pgrag.connect(loaded.dsn, embedder=embedder)  # the environment is read here, once
    try:
        monkeypatch.setenv("PGRAG_LLM_BASE_URL", "http://127.0.0.1:9/v1")  # too late to count
        monkeypatch.setenv("PGRAG_MIN_CONFIDENCE", "off")
        answer = pgrag.ask(db, question, collection="docs", log=False)
        assert answer.generator == "openai-compatible:default" and "14 days" in answer.answer
        assert completions_llm.paths == ["/v1/chat/completions"]
        assert (answer.threshold, answer.threshold_from) == (0.01, "PGRAG_MIN_CONFIDENCE")
        # llm=None still forces the offline reader; an explicit min_confidence wins.
        offline = pgrag.ask(
            db, question, collection="docs", log=False, llm=None, min_confidence=None
        )
        assert offline.generator == "extractive" and offline.threshold is None
        assert len(completions_llm.paths) == 1
    finally:
        db.close()


def test_ask_reports_settings_given_to_connect(loaded: Database, embedder: Embedder) -> None:
    settings = from_env({"PGRAG_LLM_BASE_URL": "http://127.0.0.1:9/v1", "PGRAG_LLM_TEMPLATE": "x"})
    db = pgrag.connect(loaded.dsn, embedder=embedder, settings=settings)
    try:
        with pytest.raises(ConfigError, match="PGRAG_LLM_TEMPLATE must be one of chat, base"):
            pgrag.ask(db, "refund", collection="docs", log=False)
        assert pgrag.ask(db, "refund", collection="docs", log=False, llm=None).answer
        with pytest.raises(InputError, match="llm must be an LLMConfig"):
            pgrag.ask(db, "refund", collection="docs", log=False, llm="offline")  # type: ignore[arg-type]
    finally:
        db.close()


REFUND = "How many days do I have to get a refund on a monthly subscription?"


def _numbers(body: dict[str, object]) -> dict[int, str]:
    """The numbered sources of a chat request's prompt, by number."""
    messages = body["messages"]
    assert isinstance(messages, list)
    prompt = next(m["content"] for m in messages if "Sources:" in m["content"])
    found = re.findall(r"^\[(\d+)\][^\n]*\n<<<\n(.*?)\n>>>", prompt, re.M | re.S)
    return {int(n): text for n, text in found}


def test_ask_cites_the_sentence_that_holds_the_short_answer(
    loaded: Database, completions_llm: LLMServer
) -> None:
    """A small model's habit, measured with the real one: the right short answer, a bare
    marker for an explanation, and the number of a source that does not hold it. The answer
    shows and cites the sentence that does."""
    wrong: list[int] = []

    def miscited(body: dict[str, object]) -> dict[str, object]:
        sources = _numbers(body)
        wrong.append(next(n for n, text in sources.items() if "14 days" not in text))
        return {"content": f"Answer: 14 days\nExplanation: [{wrong[0]}]"}

    completions_llm.script = [miscited]
    config = LLMConfig(base_url=completions_llm.url, model="test", max_retries=0)
    answer = pgrag.ask(loaded, REFUND, collection="docs", llm=config, min_confidence=None)
    assert not answer.abstained and answer.short_answer == "14 days"
    (cited,) = answer.citations
    assert cited.source.endswith("refunds.md") and cited.n != wrong[0]
    held = {s.n: s.result.text for s in answer.sources}[cited.n]
    sentence = answer.evidence["sentence"] if answer.evidence else ""
    assert "14 days" in sentence and sentence in held
    assert answer.answer.endswith(f"[{cited.n}].") and answer.evidence["model_cited"] == wrong
    assert answer.raw_answer == f"Answer: 14 days\nExplanation: [{wrong[0]}]"
    # The query log keeps what the model cited beside what the answer cites.
    checks = loaded.conn.execute(
        "SELECT checks FROM pgrag.queries WHERE id = %s", (answer.query_id,)
    ).fetchone()[0]
    assert checks["evidence"]["model_cited"] == wrong and checks["evidence"]["n"] == cited.n


def test_ask_refuses_a_short_answer_that_is_in_no_source(
    loaded: Database, completions_llm: LLMServer
) -> None:
    completions_llm.script = [
        {"content": "Answer: 90 days\nExplanation: Refunds take a month [1]."},
        {"content": "Answer: 90 days [1]"},
    ]
    config = LLMConfig(base_url=completions_llm.url, model="test", max_retries=0)
    answer = pgrag.ask(loaded, REFUND, collection="docs", llm=config, min_confidence=None)
    assert answer.abstained and answer.retried == "ungrounded" and answer.citations == []
    assert answer.reason == (
        "the model's short answer is not in any of the sources (also when asked again)"
    )
    # The second request carried the first reply and the correction.
    second = completions_llm.requests[-1].body["messages"]
    assert second[-2]["content"].startswith("Answer: 90 days")
    assert "Your answer is not in the sources" in second[-1]["content"]
    # Asked again, a grounded answer is taken.
    completions_llm.script = [
        {"content": "Answer: 90 days [1]"},
        {"content": "Answer: 14 days [1]"},
    ]
    again = pgrag.ask(loaded, REFUND, collection="docs", llm=config, min_confidence=None)
    assert not again.abstained and again.short_answer == "14 days"
    assert again.retried == "ungrounded" and again.citations[0].source.endswith("refunds.md")
