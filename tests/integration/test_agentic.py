"""pgrag ask --agentic against a real local OpenAI-compatible server that calls tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.agentic import ask_agentic
from pgrag.answer.traces import get_trace
from pgrag.cli import cli
from pgrag.embeddings.local import configured_embedder
from pgrag.llm.chat import LLMConfig
from tests.fakes import LLMServer


def call(query: str, call_id: str = "c1", name: str = "pgrag_search") -> dict[str, Any]:
    arguments = json.dumps({"query": query, "k": 2})
    return {
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # Answers /v1/chat/completions with the next of ``script`` (a dict with content and/or
    # tool_calls; a callable gets the request body), and records every request.
    server = LLMServer(reply="I don't know.")
    yield server
    server.close()


@pytest.fixture
def loaded(db: Any, corpus: Path) -> Any:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def test_the_model_searches_again_and_cites_what_it_found(loaded: Any, llm: LLMServer) -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        # Cite the passage the tool returned about the office (numbered after the first ones).
        tool = next(m for m in body["messages"] if m["role"] == "tool")
        n = int(tool["content"].split("]", 1)[0].lstrip("["))
        return {"content": f"The Lisbon office opens at 8:00 [{n}]."}

    llm.script = [call("Lisbon office opening hours"), answer]
    config = LLMConfig(base_url=llm.url, model="tool-model")
    got = ask_agentic(
        loaded, "How long is the refund window?", config=config, collection="docs", k=2
    )
    assert len(llm.requests) == 2
    first, second = llm.requests
    assert first.body["tools"][0]["function"]["name"] == "pgrag_search"
    assert "pgrag_search" in first.body["messages"][0]["content"]
    tool = second.body["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "c1"
    assert "<<<" in tool["content"] and "Lisbon office opens at 8:00" in tool["content"]
    assert not got.abstained, got.reason
    [citation] = got.citations
    assert citation.source.endswith("office.txt") and citation.n > 2
    assert got.generator == "agentic:tool-model" and got.timings["searches"] == 1
    assert "(tool call pgrag_search:" in got.prompt
    trace = get_trace(loaded, got.query_id or 0)
    assert any(r["source"].endswith("office.txt") for r in trace["retrieved"])
    # The first search's confidence is recorded with the answer's checks.
    assert got.confidence is not None and 0 < got.confidence <= 1
    assert trace["checks"]["confidence"] == got.confidence
    assert trace["checks"]["sentences"][0]["citations"] == [citation.n]


def test_the_step_limit_forces_an_answer(loaded: Any, llm: LLMServer) -> None:
    llm.script = [call("refund", "a"), call("refund again", "b"), call("more"), {"content": "x"}]
    config = LLMConfig(base_url=llm.url, model="m")
    got = ask_agentic(
        loaded, "How long is the refund window?", config=config, collection="docs", max_steps=2
    )
    # Two searches, then one last request offered no tools.
    assert [("tools" in r.body) for r in llm.requests] == [True, True, False]
    assert got.timings["searches"] == 2
    # The forced answer ("x") cites nothing it was given: an abstention, with the reason.
    assert got.abstained and got.raw_answer is not None, got.raw_answer
    assert "cites no source" in (got.reason or "") or "no content" in (got.reason or ""), got.reason


def test_bad_calls_go_back_to_the_model(loaded: Any, llm: LLMServer) -> None:
    bad_args = {
        "content": None,
        "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "pgrag_search", "arguments": "{"}}
        ],
    }
    llm.script = [call("q", name="shell"), bad_args, {"content": "Refunds: 14 days [1]."}]
    config = LLMConfig(base_url=llm.url, model="m")
    got = ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs")
    tools = [m for m in llm.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "there is no tool 'shell'" in tools[0]["content"]
    assert "not a JSON object" in tools[1]["content"]
    assert not got.abstained and got.citations[0].n == 1


def test_a_short_answer_is_grounded_as_ask_grounds_it(loaded: Any, llm: LLMServer) -> None:
    # The model names the answer and cites nothing: as in ask, the sentence that holds it is
    # the answer, cited; a short answer in no source is refused (there is no second try here).
    llm.script = [{"content": "Answer: 14 days\nExplanation: Refunds take 14 days."}]
    config = LLMConfig(base_url=llm.url, model="m")
    got = ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs")
    assert not got.abstained and got.short_answer == "14 days", got.reason
    assert got.evidence is not None and got.evidence["model_cited"] == []
    [citation] = got.citations
    holding = next(s for s in got.sources if s.n == citation.n)
    assert "14 days" in holding.result.text and "14 days" in got.answer
    llm.script = [{"content": "Answer: 90 days\nExplanation: Refunds take 90 days [1]."}]
    refused = ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs")
    assert refused.abstained and refused.short_answer is None
    assert refused.reason == "the model's short answer is not in any of the sources"


def test_cli_agentic(loaded: Any, llm: LLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    llm.script = [{"content": "Monthly plans: 14 days [1]."}]
    monkeypatch.setenv("PGRAG_LLM_BASE_URL", llm.url)
    result = CliRunner().invoke(
        cli, ["--dsn", loaded.dsn, "ask", "Monthly refund window?", "-c", "docs", "--agentic"]
    )
    assert result.exit_code == 0, result.output
    assert "14 days [1]" in result.stdout and "Sources:" in result.stdout
    monkeypatch.delenv("PGRAG_LLM_BASE_URL")
    offline = CliRunner().invoke(
        cli, ["--dsn", loaded.dsn, "ask", "Monthly refund window?", "-c", "docs", "--agentic"]
    )
    assert offline.exit_code == 2 and "--agentic needs a tool-calling model" in offline.stderr
    monkeypatch.setenv("PGRAG_LLM_BASE_URL", llm.url)
    args = ["--dsn", loaded.dsn, "ask", "Monthly refund window?", "-c", "docs", "--agentic"]
    refused = CliRunner().invoke(cli, [*args, "--min-confidence", "0.9"])
    assert refused.exit_code == 2 and "does not take" in refused.stderr
    monkeypatch.setenv("PGRAG_LLM_TEMPLATE", "base")
    base = CliRunner().invoke(cli, args)
    assert base.exit_code == 1 and "unset PGRAG_LLM_TEMPLATE=base" in base.stderr


def test_tool_calls_go_back_with_an_id_and_string_arguments(loaded: Any, llm: LLMServer) -> None:
    # Some servers send arguments as an object and no id; the API wants both as strings.
    odd = {
        "content": None,
        "tool_calls": [{"function": {"name": "pgrag_search", "arguments": {"query": "office"}}}],
    }
    llm.script = [odd, {"content": "Refunds: 14 days [1]."}]
    config = LLMConfig(base_url=llm.url, model="m")
    ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs", log=False)
    sent = llm.requests[-1].body["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    (echoed,) = assistant["tool_calls"]
    assert echoed["id"] and json.loads(echoed["function"]["arguments"]) == {"query": "office"}
    tool = next(m for m in sent if m["role"] == "tool")
    assert tool["tool_call_id"] == echoed["id"] and "error" not in tool["content"]


def test_a_nul_in_the_models_turns_is_logged_as_a_replacement(loaded: Any, llm: LLMServer) -> None:
    first = call("office")
    first["content"] = "let me search\x00"
    llm.script = [first, {"content": "Refunds are issued within 14 days [1]."}]
    config = LLMConfig(base_url=llm.url, model="m")
    got = ask_agentic(loaded, "Monthly refund window?", config=config, collection="docs")
    trace = get_trace(loaded, got.query_id or 0)
    assert "let me search\ufffd" in trace["prompt"] and "\x00" not in trace["prompt"]


def test_searches_share_the_prompts_token_budget(loaded: Any, llm: LLMServer) -> None:
    llm.script = [call("Lisbon office opening hours"), {"content": "Refunds: 14 days [1]."}]
    config = LLMConfig(base_url=llm.url, model="m")
    # A budget the first passage alone overruns (the best passage is always kept).
    got = ask_agentic(
        loaded, "Monthly refund window?", config=config, collection="docs", budget_tokens=5
    )
    tool = next(m for m in llm.requests[-1].body["messages"] if m["role"] == "tool")
    assert "budget of 5 tokens is spent" in tool["content"] and "<<<" not in tool["content"]
    assert len(got.sources) == 1
    # With room, the search's passages are added, and the whole stays within the budget.
    llm.requests.clear()
    llm.script = [call("Lisbon office opening hours"), {"content": "Refunds: 14 days [1]."}]
    got = ask_agentic(
        loaded, "Monthly refund window?", config=config, collection="docs", k=1, budget_tokens=400
    )
    count = configured_embedder(loaded).tokens.count
    assert len(got.sources) > 1
    assert sum(count(s.result.text) + 16 for s in got.sources) <= 400
