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
from pathlib import Path

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.ask import judge
from pgrag.answer.prompt import fit_budget
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
