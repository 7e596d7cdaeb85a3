"""pgrag ask --agentic with a local GGUF model (PGRAG_LLM_GGUF): the real database, embedding
model and agentic loop, with the STAND-IN llama_cpp (tests.fakes.StandInLlama) scripted to
reply as a model writes tool calls in text (``<tool_call>`` JSON, pgrag/llm/local_tools.py).
The same loop against a tool-calling endpoint: test_agentic.py; with the real llama.cpp and
a tiny random model: test_local_llm_real.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.agentic import ask_agentic
from pgrag.answer.traces import get_trace
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.llm import local as local_llm
from pgrag.llm.local import LocalChatClient, LocalLLMConfig
from tests.fakes import StandInLlama

QUESTION = "How long is the refund window?"


def call(query: str) -> str:
    arguments = json.dumps({"query": query, "k": 2})
    return f'<tool_call>\n{{"name": "pgrag_search", "arguments": {arguments}}}\n</tool_call>'


@pytest.fixture(autouse=True)
def _fresh_model_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_llm, "_loaded", {})


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def sent(config: LocalLLMConfig) -> list[list[dict[str, str]]]:
    """The messages of each request the model got."""
    model = LocalChatClient(config).model
    return [c["messages"] for c in model.calls]


def test_the_local_model_searches_again_and_cites_what_it_found(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    def answer(messages: list[dict[str, str]]) -> str:
        # Cite the passage the search returned about the office (numbered after the first).
        result = messages[-1]["content"]
        n = re.search(r"^\[(\d+)\][^\n]*\n<<<\nThe Lisbon office", result, re.M)
        assert n is not None, result
        return f"The Lisbon office opens at 8:00 [{n.group(1)}]."

    stand_in.replies = [call("Lisbon office opening hours"), answer]
    config = LocalLLMConfig(gguf_file, n_ctx=4096)
    got = ask_agentic(loaded, QUESTION, config=config, collection="docs", k=2)
    first, second = sent(config)
    # The tool is described in the system message, in the model's own prompt format.
    assert first[0]["role"] == "system" and "# Tools" in first[0]["content"]
    assert '"name": "pgrag_search"' in first[0]["content"]
    assert "Search at most 3 times" in first[0]["content"]
    # The call went back as the model's text, the results as a user turn, fenced as data.
    assert second[:2] == first[:2]  # the same prefix: llama.cpp re-reads only what was added
    assert second[2] == {"role": "assistant", "content": call("Lisbon office opening hours")}
    assert second[3]["role"] == "user" and second[3]["content"].startswith("<tool_response>\n")
    assert "<<<" in second[3]["content"] and "Lisbon office opens at 8:00" in second[3]["content"]
    assert all(set(m) == {"role", "content"} for m in second)  # plain turns, any template
    # Not streamed, at temperature 0, and no "tools" for llama-cpp-python to mishandle.
    calls = LocalChatClient(config).model.calls
    assert {(c["stream"], c["temperature"], "tools" in c) for c in calls} == {(False, 0.0, False)}
    assert not got.abstained, got.reason
    [citation] = got.citations
    assert citation.source.endswith("office.txt") and citation.n > 2
    assert got.generator == "agentic:llama-cpp:model.gguf"
    assert got.timings["searches"] == 1 and got.timings["load_model_ms"] >= 0
    # The budget was counted with the model's tokenizer (the stand-in's: bytes).
    assert got.tokenizer == "llama-cpp:model.gguf (its own tokenizer)"
    assert sum(len(s.result.text.encode()) + 16 for s in got.sources) <= 1500
    trace = get_trace(loaded, got.query_id or 0)
    assert any(r["source"].endswith("office.txt") for r in trace["retrieved"])
    assert "(tool call pgrag_search:" in trace["prompt"]


def test_the_step_limit_forces_a_local_answer(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    stand_in.replies = [call("refund"), call("refund again"), call("more")]
    config = LocalLLMConfig(gguf_file)
    got = ask_agentic(loaded, QUESTION, config=config, collection="docs", max_steps=2)
    requests = sent(config)
    # Two searches offered the tool; the last request describes no tool, so it must answer.
    assert ["# Tools" in r[0]["content"] for r in requests] == [True, True, False]
    assert got.timings["searches"] == 2
    # What it said then is the answer, checked: a call it was not offered cites nothing, so
    # it is an abstention, not a fourth search.
    assert got.raw_answer == call("more") and got.abstained
    assert "cites no source" in (got.reason or "")


def test_calls_the_local_model_got_wrong_go_back_to_it(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    stand_in.replies = [
        '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>',
        '<tool_call>\n{"name": "pgrag_search", "arguments": {"query": "x"}\n</tool_call>',
        '<tool_call>\n{"name": "pgrag_search", "arguments": {"query": "x", "limit": 3}}'
        "\n</tool_call>",
        "Answer: 14 days\nExplanation: Monthly subscriptions can be refunded within 14 days [1].",
    ]
    config = LocalLLMConfig(gguf_file)
    got = ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs")
    last = sent(config)[-1]
    results = [m["content"] for m in last if m["content"].startswith("<tool_response>")]
    assert len(results) == 3
    assert "there is no tool 'shell'" in results[0]
    assert "not a JSON object" in results[1]
    assert "unknown arguments ['limit']" in results[2]
    assert got.timings["searches"] == 3 and not got.abstained
    assert got.citations[0].n == 1


def test_a_local_answer_that_does_not_search_is_checked_as_asks_are(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    stand_in.replies = ["Monthly subscriptions can be refunded within 14 days [1] [7]."]
    config = LocalLLMConfig(gguf_file)
    got = ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs", k=2)
    assert len(sent(config)) == 1 and got.timings["searches"] == 0
    assert not got.abstained and [c.n for c in got.citations] == [1]
    assert got.invalid_citations == [7]  # [7] was never in the prompt


def test_cli_agentic_with_a_local_model(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    stand_in.replies = [call("Lisbon office"), "Monthly plans: 14 days [1]."]
    env: dict[str, Any] = {"PGRAG_LLM_GGUF": str(gguf_file), "PGRAG_LLM_THREADS": "1"}
    args = ["--dsn", loaded.dsn, "ask", "Monthly refund window?", "-c", "docs", "--agentic"]
    result = CliRunner().invoke(cli, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["generator"] == "agentic:llama-cpp:model.gguf"
    assert out["timings"]["searches"] == 1 and "14 days [1]" in out["answer"]
    assert stand_in.loads[0]["n_threads"] == 1
    # Both a local model and an endpoint: one line saying to choose.
    env["PGRAG_LLM_BASE_URL"] = "http://127.0.0.1:9/v1"
    both = CliRunner().invoke(cli, args, env=env)
    assert both.exit_code == 1 and "unset the one you do not mean to use" in both.stderr
