"""A REAL llama.cpp (llama-cpp-python, the pgrag[local] extra) running a real GGUF model.

Marked ``local`` and deselected by default (pyproject's addopts): they need llama-cpp-python,
which builds llama.cpp from source, and ``gguf``, llama.cpp's writer, to make the model.
``scripts/test-local`` installs both and runs them (``pytest -m local``).

The model is tests/tiny_gguf.py's: real file format, real tokenizer, real forward pass, but
random weights, so the text it generates is noise. The tests therefore check the wiring, not
the quality: the model loads once, its own tokenizer spends the passage budget, its tokens
stream through ``on_token`` into the answer, and that answer goes through the citation check.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.agentic import ask_agentic
from pgrag.answer.ask import judge
from pgrag.answer.marginals import rag_marginals
from pgrag.answer.prompt import fit_budget
from pgrag.answer.scoring import score_answers
from pgrag.answer.verdict import check_reply, ground
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError, GenerationError
from pgrag.llm import local as local_llm
from pgrag.llm.local import LocalChatClient, LocalLLMConfig

pytestmark = pytest.mark.local

QUESTION = "How many days do monthly subscriptions have for a refund?"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_gguf import write

    return write(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def test_the_real_model_loads_once_and_counts_with_its_own_tokenizer(tiny_gguf: Path) -> None:
    import llama_cpp

    config = LocalLLMConfig(tiny_gguf, n_ctx=1024, n_threads=1)
    client = LocalChatClient(config)
    assert isinstance(client.model, llama_cpp.Llama)
    assert LocalChatClient(config).model is client.model  # cached for the process
    text = "Monthly subscriptions can be refunded within 14 days."
    tokens = client.model.tokenize(text.encode("utf-8"), add_bos=False)
    assert client.count_tokens(text) == len(tokens) > 0
    assert client.model.tokenize(text.encode("utf-8"), add_bos=True)[0] == 1  # <s> in the vocab
    assert client.model.n_vocab() > 256


def test_ask_streams_real_tokens_and_spends_the_budget_in_gguf_tokens(
    loaded: Database, tiny_gguf: Path
) -> None:
    config = LocalLLMConfig(tiny_gguf, n_ctx=2048, n_threads=1)
    budget = 300
    pieces: list[str] = []
    answer = pgrag.ask(
        loaded,
        QUESTION,
        collection="docs",
        budget_tokens=budget,
        llm=config,
        on_token=pieces.append,
    )
    assert answer.generator == "llama-cpp:tiny.gguf"
    assert pieces and "".join(pieces) == answer.raw_answer
    # The answer is what the citation check makes of the raw text.
    text, abstained, reason, citations, invalid = judge(answer.raw_answer, answer.sources)
    assert (answer.answer, answer.abstained, answer.reason) == (text, abstained, reason)
    assert answer.invalid_citations == invalid
    if not answer.citations:  # noise from random weights cites nothing
        assert answer.abstained
        assert reason in (
            "the model's answer cites no source that was in the prompt",
            "the model said it does not know",
        )
    # Which passages went in was decided by the GGUF tokenizer, not the embedding model's.
    client = LocalChatClient(config)
    results = pgrag.search(loaded, QUESTION, collection="docs", k=8)
    by_gguf = fit_budget(results, budget, client.count_tokens)
    by_embedder = fit_budget(results, budget, configured_embedder(loaded).tokens.count)
    assert len(by_gguf) < len(by_embedder)
    assert sorted(s.result.chunk_id for s in answer.sources) == sorted(r.chunk_id for r in by_gguf)
    assert sum(client.count_tokens(r.text) + 16 for r in by_gguf) <= budget or len(by_gguf) == 1


def test_the_same_question_gives_the_same_answer_streamed_or_not(
    loaded: Database, tiny_gguf: Path
) -> None:
    config = LocalLLMConfig(tiny_gguf, n_ctx=2048, n_threads=1)
    streamed = pgrag.ask(loaded, QUESTION, collection="docs", llm=config, on_token=lambda _: None)
    whole = pgrag.ask(loaded, QUESTION, collection="docs", llm=config)
    assert whole.raw_answer == streamed.raw_answer  # temperature 0
    assert whole.prompt == streamed.prompt


def test_pgrag_ask_streams_to_the_terminal(
    loaded: Database, dsn: str, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_llm, "_loaded", {})
    env = {"PGRAG_LLM_GGUF": str(tiny_gguf), "PGRAG_LLM_THREADS": "1", "PGRAG_LLM_CTX": "2048"}
    result = CliRunner().invoke(
        cli, ["--dsn", dsn, "ask", QUESTION, "-c", "docs", "--json"], env=env
    )
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["generator"] == "llama-cpp:tiny.gguf"
    assert out["timings"]["load_model_ms"] > 0
    streamed = CliRunner().invoke(cli, ["--dsn", dsn, "ask", QUESTION, "-c", "docs"], env=env)
    assert streamed.exit_code == 0, streamed.stderr
    row = loaded.conn.execute(
        "SELECT answer FROM pgrag.queries WHERE generator = 'llama-cpp:tiny.gguf'"
        " ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert row is not None and row[0]
    # the terminal got the raw tokens; the log has U+FFFD for any NUL among them
    assert streamed.stdout.replace("\x00", "\ufffd").startswith(row[0])


def test_a_prompt_longer_than_the_context_is_one_line(loaded: Database, tiny_gguf: Path) -> None:
    config = LocalLLMConfig(tiny_gguf, n_ctx=64, n_threads=1)
    with pytest.raises(GenerationError) as err:
        pgrag.ask(loaded, QUESTION, collection="docs", llm=config, on_token=lambda _: None)
    message = str(err.value)
    assert message.startswith("llama.cpp failed on tiny.gguf (") and "\n" not in message
    assert "raise PGRAG_LLM_CTX or lower --budget" in message


def test_a_truncated_gguf_fails_to_load_in_one_line(tiny_gguf: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:4096])  # right magic, missing tensors
    with pytest.raises(ConfigError) as err:
        LocalChatClient(LocalLLMConfig(cut, n_threads=1))
    message = str(err.value)
    assert message.startswith(f"llama.cpp could not load PGRAG_LLM_GGUF={cut} (")
    assert "\n" not in message


# --- pgrag score: log-probabilities in-process ------------------------------------------------


def _log_softmax_rows(model: Any, tokens: list[int]) -> Any:
    """Every position's next-token log-probabilities, from one evaluation with
    ``logits_all=True`` (affordable for the tiny model's vocabulary): the reference."""
    import numpy as np

    model.reset()
    model.eval(tokens)
    logits = np.asarray(model.scores[: len(tokens)], dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)
    return logits - (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))


def test_logprobs_from_the_prompts_state_equal_a_whole_evaluation(tiny_gguf: Path) -> None:
    import llama_cpp

    client = LocalChatClient(LocalLLMConfig(tiny_gguf, n_ctx=1024, n_threads=1))
    prompt = "Source: monthly subscriptions can be refunded within 14 days.\nAnswer:"
    candidates = [" 14 days", " 14 weeks", " no"]
    rows = client.continuation_logprobs(prompt, candidates)
    # Real numbers, <= 0; a shared prefix (" 14") gets the same values under both.
    assert all(math.isfinite(v) and v <= 0 for row in rows for v in row)
    days, weeks, _ = rows
    shared = len(client.model.tokenize(prompt.encode() + b" 14", add_bos=True)) - len(
        client.model.tokenize(prompt.encode(), add_bos=True)
    )
    assert shared >= 1 and days[:shared] == pytest.approx(weeks[:shared], abs=1e-4)
    assert days != pytest.approx(weeks, abs=1e-4)
    # The order of the candidates changes nothing: each starts from the prompt's state.
    again = client.continuation_logprobs(prompt, candidates[::-1])[::-1]
    for a, b in zip(again, rows, strict=True):
        assert a == pytest.approx(b, abs=1e-4)
    # And each equals what one evaluation of prompt + candidate with all logits kept gives.
    reference = llama_cpp.Llama(
        model_path=str(tiny_gguf), n_ctx=1024, n_threads=1, logits_all=True, verbose=False
    )
    head = reference.tokenize(prompt.encode(), add_bos=True)
    for candidate, row in zip(candidates, rows, strict=True):
        full = reference.tokenize((prompt + candidate).encode(), add_bos=True)
        start = len(head)
        while full[:start] != head[:start]:  # a token merged across the boundary
            start -= 1
        table = _log_softmax_rows(reference, full)
        expected = [float(table[i - 1][full[i]]) for i in range(start, len(full))]
        assert row == pytest.approx(expected, abs=1e-3)


def test_score_answers_with_the_real_model(loaded: Database, tiny_gguf: Path) -> None:
    config = LocalLLMConfig(tiny_gguf, n_ctx=2048, n_threads=1)
    scores = score_answers(
        loaded, QUESTION, ["Yes", "No", "14 days"], collection="docs", k=3, llm=config
    )
    assert scores.generator == "llama-cpp:tiny.gguf" and len(scores.passages) == 3
    assert math.isclose(sum(c.probability for c in scores.candidates), 1.0)
    log_prior = [math.log(p.prior) for p in scores.passages]
    for c in scores.candidates:
        rows = [p.token_logprobs[c.text] for p in scores.passages]
        assert all(math.isfinite(v) and v <= 0 for row in rows for v in row)
        assert math.isclose(c.rag_sequence, rag_marginals(log_prior, rows)[0], rel_tol=1e-9)
    # The state scoring leaves (the KV cache ask then re-uses a prefix of) does not change the
    # next answer: it is the one the model gives from a reset state.
    after_scoring = pgrag.ask(loaded, QUESTION, collection="docs", llm=config, log=False)
    LocalChatClient(config).model.reset()  # (the same, cached model)
    from_reset = pgrag.ask(loaded, QUESTION, collection="docs", llm=config, log=False)
    assert after_scoring.raw_answer == from_reset.raw_answer


# --- ask --agentic: tool calls as text ---------------------------------------------------------


def test_the_agentic_loop_ends_within_max_steps_with_a_random_model(
    loaded: Database, tiny_gguf: Path
) -> None:
    # Each turn of noise may run to max_tokens. The tool's description alone is ~930 tokens
    # of this model's letter-by-letter vocabulary (~300 of Qwen2.5's).
    config = LocalLLMConfig(tiny_gguf, n_ctx=4096, n_threads=1, max_tokens=128)
    got = ask_agentic(
        loaded, QUESTION, config=config, collection="docs", k=2, budget_tokens=400, max_steps=2
    )
    assert got.generator == "agentic:llama-cpp:tiny.gguf"
    assert 0 <= got.timings["searches"] <= 2
    assert got.prompt.count("(tool call pgrag_search:") <= 2
    # Whatever the noise said is what the checks made of it.
    verdict = ground(check_reply(got.raw_answer or "", got.sources), QUESTION, got.sources)
    assert (got.answer, got.abstained, got.reason) == (
        verdict.text,
        verdict.abstained,
        verdict.reason,
    )
    assert got.short_answer == verdict.short


def test_the_text_protocol_renders_as_qwen25s_template_renders_tools(tiny_gguf: Path) -> None:
    # llama-cpp-python's own Jinja formatter, with the chat template of the Qwen2.5 GGUF: the
    # plain turns pgrag sends equal what the template writes for OpenAI tool messages.
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from pgrag.answer.tools import search_tool
    from pgrag.llm.local_tools import plain_messages

    template = (Path(__file__).parents[1] / "qwen25_chat_template.jinja").read_text()
    render = Jinja2ChatFormatter(template, eos_token="<|im_end|>", bos_token="")
    tool = search_tool("docs")
    calls = [
        {"id": "a", "function": {"name": "pgrag_search", "arguments": {"query": "Lisbon"}}},
        {"id": "b", "function": {"name": "pgrag_search", "arguments": {"query": "café", "k": 2}}},
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Answer from the sources."},
        {"role": "user", "content": "Sources:\n\n[1] x\n<<<\ny\n>>>\n\nQuestion: When?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "[2] Office\n<<<\nopens at 8\n>>>"},
        {"role": "tool", "tool_call_id": "b", "content": "(no new sources were found)"},
        {"role": "assistant", "content": "Once more.", "tool_calls": calls[:1]},
        {"role": "tool", "tool_call_id": "c", "content": "(no new sources were found)"},
    ]
    native = render(messages=messages, tools=[tool]).prompt
    ours = render(messages=plain_messages(messages, [tool])).prompt
    assert "<tools>" in native and "<tool_response>" in native
    assert ours == native  # byte for byte
    # Without tools (the last, forced answer) they agree too.
    assert (
        render(messages=plain_messages(messages, None)).prompt == render(messages=messages).prompt
    )


def test_choice_logprobs_read_the_prompt_the_chat_handler_reads(tiny_gguf: Path) -> None:
    """The judge's Yes/No (and any choice between replies) is read from the logits after the
    prompt llama-cpp-python's chat handler itself evaluates: the GGUF's chat template, its
    control tokens as tokens."""
    from pgrag.evaluation.judge import Judge
    from pgrag.llm.local_logprobs import continuation_logprobs

    client = LocalChatClient(LocalLLMConfig(tiny_gguf, n_ctx=1024, n_threads=1))
    messages = [
        {"role": "system", "content": "Answer Yes or No."},
        {"role": "user", "content": "Is 14 days the refund window?"},
    ]
    text = client.prompt_text(messages)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>system" in text
    tokens = client.model.tokenize(text.encode(), add_bos=False, special=True)
    client.model.create_chat_completion(messages=messages, max_tokens=1, temperature=0.0)
    assert list(client.model.input_ids[: len(tokens)]) == tokens
    yes, no = client.choice_logprobs(messages, ["Yes", "No"])
    assert math.isfinite(yes) and math.isfinite(no) and yes <= 0 and no <= 0
    rows = continuation_logprobs(client.model, text, ["Yes", "No"], special=True, add_bos=False)
    assert [yes, no] == pytest.approx([math.fsum(r) for r in rows], abs=1e-4)
    p = Judge(client).yes("Passage: refunds within 14 days.\nIs 14 days the window?")
    assert 0.0 <= p <= 1.0
