"""Base models (a few-shot prompt to /v1/completions) and the generator's tokenizer for the
budget: real database and model, a real local OpenAI-compatible server (tests/fakes.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

import pgrag
from pgrag.answer.prompt import ABSTAIN_TEXT, FEW_SHOT, build_messages, fenced
from pgrag.answer.traces import get_trace
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError
from pgrag.llm.chat import LLMConfig
from tests.fakes import LLMServer

MONTHLY = "How many days do monthly subscriptions have for a refund?"


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def base(server: LLMServer, **kw: object) -> LLMConfig:
    return LLMConfig(base_url=server.url, model="base-model", template="base", **kw)  # type: ignore[arg-type]


def tokenizer_json(path: Path, pre_tokenizer: object) -> str:
    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizer  # type: ignore[assignment]
    tok.save(str(path))
    return str(path)


# --- the base template ----------------------------------------------------------------------


def test_base_template_prompt_and_citation_check(
    loaded: Database, completions_llm: LLMServer
) -> None:
    completions_llm.reply = " Monthly subscriptions can be refunded within 14 days [1]. See [7]."
    answer = pgrag.ask(loaded, MONTHLY, collection="docs", llm=base(completions_llm))

    (request,) = completions_llm.requests
    assert completions_llm.paths == ["/v1/completions"]
    assert request.body["stream"] is False and request.body["stop"] == ["\nQuestion:", "\nSources:"]
    prompt = request.body["prompt"]
    assert isinstance(prompt, str) and prompt == answer.prompt
    # Two worked examples: one answered with a citation, one abstaining.
    assert FEW_SHOT[0] in prompt and "Answer: At 9:00 [1]." in prompt
    assert FEW_SHOT[1] in prompt and f"Answer: {ABSTAIN_TEXT}" in prompt
    # Then the sources fenced exactly as the chat prompt fences them, and the question.
    assert f"Sources:\n\n{fenced(answer.sources)}\n\nQuestion: {MONTHLY}\nAnswer:" in prompt
    assert fenced(answer.sources) in build_messages(MONTHLY, answer.sources)[1]["content"]
    assert prompt.endswith(f"Question: {MONTHLY}\nAnswer:")
    assert prompt.index(FEW_SHOT[1]) < prompt.index(fenced(answer.sources))

    assert not answer.abstained, answer.reason
    assert [c.n for c in answer.citations] == [1]
    assert answer.invalid_citations == [7]
    assert "[7]" not in answer.answer and "14 days [1]" in answer.answer
    assert "base template" in answer.generator
    trace = get_trace(loaded, answer.query_id or 0)
    assert trace["prompt"] == prompt and "base template" in trace["generator"]


def test_base_template_streams(loaded: Database, completions_llm: LLMServer) -> None:
    completions_llm.reply = " Within 14 days [1]."
    pieces: list[str] = []
    answer = pgrag.ask(
        loaded, MONTHLY, collection="docs", llm=base(completions_llm), on_token=pieces.append
    )
    assert completions_llm.requests[0].body["stream"] is True
    assert len(pieces) > 1 and "".join(pieces) == completions_llm.reply
    assert answer.raw_answer == completions_llm.reply
    assert [c.n for c in answer.citations] == [1]


def test_a_server_that_ignores_stop_is_cut_at_the_stop(
    loaded: Database, completions_llm: LLMServer
) -> None:
    # The server streams on past "\nQuestion:" into a made-up next example.
    completions_llm.reply = " Within 14 days [1].\nQuestion: And pets?\nAnswer: No [2]."
    pieces: list[str] = []
    answer = pgrag.ask(
        loaded, MONTHLY, collection="docs", llm=base(completions_llm), on_token=pieces.append
    )
    assert "".join(pieces) == answer.raw_answer == " Within 14 days [1]."
    assert [c.n for c in answer.citations] == [1]
    answer = pgrag.ask(loaded, MONTHLY, collection="docs", llm=base(completions_llm))
    assert answer.raw_answer == " Within 14 days [1]."


def test_base_template_abstention(loaded: Database, completions_llm: LLMServer) -> None:
    completions_llm.reply = f" {ABSTAIN_TEXT}"
    answer = pgrag.ask(loaded, MONTHLY, collection="docs", llm=base(completions_llm))
    assert answer.abstained and answer.answer == ABSTAIN_TEXT
    assert "does not know" in (answer.reason or "")


def test_base_template_from_the_environment_in_the_cli(
    loaded: Database, dsn: str, completions_llm: LLMServer
) -> None:
    completions_llm.reply = " Within 14 days [1]."
    env = {
        "PGRAG_LLM_BASE_URL": completions_llm.url,
        "PGRAG_LLM_MODEL": "base-model",
        "PGRAG_LLM_TEMPLATE": "base",
    }
    result = CliRunner().invoke(
        cli, ["--dsn", dsn, "ask", MONTHLY, "-c", "docs", "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    assert completions_llm.paths == ["/v1/completions"]
    bad = CliRunner().invoke(
        cli, ["--dsn", dsn, "ask", MONTHLY, "-c", "docs"], env={**env, "PGRAG_LLM_TEMPLATE": "x"}
    )
    assert bad.exit_code == 1
    assert bad.stderr.startswith("error: PGRAG_LLM_TEMPLATE must be one of chat, base, got 'x'")


# --- the generator's tokenizer for the budget -----------------------------------------------


def greedy(hits: list[pgrag.SearchResult], budget: int, count: Callable[[str], int]) -> list[int]:
    """The passages a budget keeps, in rank order: each that still fits (the first always)."""
    used, kept = 0, []
    for h in hits:
        cost = count(h.text) + 16
        if kept and used + cost > budget:
            continue
        kept.append(h.chunk_id)
        used += cost
    return kept


def test_budget_counted_with_the_generators_tokenizer(
    loaded: Database, completions_llm: LLMServer, tmp_path: Path
) -> None:
    chars = tokenizer_json(tmp_path / "c.json", pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated"))
    words = tokenizer_json(tmp_path / "w.json", pre_tokenizers.WhitespaceSplit())
    question = "refund"
    hits = pgrag.search(loaded, question, collection="docs", k=8)
    # A budget that fits the first four passages counted in whitespace-separated words.
    budget = sum(len(h.text.split()) + 16 for h in hits[:4])

    def ask(tokenizer: str | None) -> list[int]:
        completions_llm.reply = "Refunds [1]."
        llm = LLMConfig(base_url=completions_llm.url, model="m", tokenizer=tokenizer)
        answer = pgrag.ask(
            loaded, question, collection="docs", llm=llm, budget_tokens=budget, log=False
        )
        assert answer.tokenizer == (
            tokenizer or f"embedding model {configured_embedder(loaded).name}"
        )
        assert answer.to_dict()["tokenizer"] == answer.tokenizer
        assert answer.checks()["tokenizer"] == answer.tokenizer  # recorded with the answer
        return [s.result.chunk_id for s in sorted(answer.sources, key=lambda s: s.result.rank)]

    by_embedding, by_chars, by_words = ask(None), ask(chars), ask(words)
    # Each tokenizer's counts, checked independently: characters, words, word pieces.
    assert by_chars == greedy(hits, budget, len)
    assert (
        by_words == greedy(hits, budget, lambda t: len(t.split())) == [h.chunk_id for h in hits[:4]]
    )
    assert by_embedding == greedy(hits, budget, configured_embedder(loaded).tokens.count)
    assert len(by_chars) < len(by_embedding) < len(by_words)


@pytest.mark.parametrize("content", [None, "not a tokenizer", ""])
def test_an_unusable_tokenizer_file_is_a_config_error(
    loaded: Database, completions_llm: LLMServer, tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_text(content)
    llm = LLMConfig(base_url=completions_llm.url, model="m", tokenizer=str(path))
    with pytest.raises(ConfigError) as exc:
        pgrag.ask(loaded, MONTHLY, collection="docs", llm=llm, log=False)
    message = str(exc.value)
    assert "\n" not in message and message.startswith("PGRAG_LLM_TOKENIZER")
    assert str(path) in message
    assert completions_llm.requests == []  # nothing was generated with a wrong budget
