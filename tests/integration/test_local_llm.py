"""A local GGUF model (PGRAG_LLM_GGUF, pgrag[local]) in the default test run, where
llama-cpp-python is NOT installed: configuration, precedence, file checks, the not-installed
error, lazy import.

The ask() wiring is also checked here against a STAND-IN ``llama_cpp`` module injected into
``sys.modules`` (``tests.fakes.StandInLlama``), with the real database and embedding model. The
stand-in only exercises pgrag's adapter (streaming, the token budget, the cache, error
translation); the real llama.cpp is exercised by tests/integration/test_local_llm_real.py, which
``scripts/test-local`` runs with a real build and a real (tiny) GGUF model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import pgrag
from pgrag.answer.prompt import fit_budget
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.llm import local as local_llm
from pgrag.llm.local import LocalLLMConfig
from tests.fakes import StandInLlama

QUESTION = "How many days do monthly subscriptions have for a refund?"


@pytest.fixture(autouse=True)
def _fresh_model_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_llm, "_loaded", {})


def one_error_line(result: Result) -> str:
    assert result.exit_code == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def ask_cli(dsn: str, env: dict[str, str | None], *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--dsn", dsn, "ask", QUESTION, *args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_conflicting_settings_are_one_line_from_pgrag_ask(dsn: str, gguf_file: Path) -> None:
    env = {"PGRAG_LLM_GGUF": str(gguf_file), "PGRAG_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    line = one_error_line(ask_cli(dsn, env))
    assert "unset the one you do not mean to use" in line


# --- the file -------------------------------------------------------------------------------


def test_a_missing_file_is_named(dsn: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    line = one_error_line(ask_cli(dsn, {"PGRAG_LLM_GGUF": str(missing)}))
    assert line == (
        f"error: PGRAG_LLM_GGUF={missing}: no such file; set it to a downloaded .gguf model"
        " (see docs/local.md)"
    )


def test_a_file_that_is_not_gguf_is_named_before_anything_loads(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # safetensors, as downloaded from a model hub, is the usual mistake
    wrong = tmp_path / "model.safetensors"
    wrong.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # not even needed to say so
    line = one_error_line(ask_cli(dsn, {"PGRAG_LLM_GGUF": str(wrong)}))
    assert line.startswith(f"error: PGRAG_LLM_GGUF={wrong} is not a GGUF model file")
    assert "convert_hf_to_gguf.py" in line
    line = one_error_line(ask_cli(dsn, {"PGRAG_LLM_GGUF": str(tmp_path)}))
    assert line == (
        f"error: PGRAG_LLM_GGUF={tmp_path} is a directory; set it to the .gguf model file inside it"
    )


# --- llama-cpp-python not installed ---------------------------------------------------------


def test_without_llama_cpp_pgrag_ask_says_how_to_install_it(
    dsn: str, gguf_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import llama_cpp` fail, installed or not.
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    line = one_error_line(ask_cli(dsn, {"PGRAG_LLM_GGUF": str(gguf_file)}))
    assert line.startswith("error: PGRAG_LLM_GGUF is set but llama-cpp-python is not installed")
    assert line.endswith("pip install 'pgrag[local]', or unset PGRAG_LLM_GGUF")


def test_agentic_without_llama_cpp_says_how_to_install_it(
    dsn: str, gguf_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --agentic takes the local model (tests/integration/test_local_agentic.py), so it needs
    # the extra as ask does.
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    line = one_error_line(ask_cli(dsn, {"PGRAG_LLM_GGUF": str(gguf_file)}, "--agentic"))
    assert line.startswith("error: PGRAG_LLM_GGUF is set but llama-cpp-python is not installed")


# --- ask() through a STAND-IN llama_cpp module (adapter logic only) --------------------------


@pytest.fixture
def loaded(db: Database, corpus: Path) -> Database:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def test_stand_in_ask_streams_counts_with_the_model_tokenizer_and_caches_the_model(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    config = LocalLLMConfig(model_path=gguf_file, n_ctx=2048, n_threads=1)
    pieces: list[str] = []
    budget = 300
    answer = pgrag.ask(
        loaded,
        QUESTION,
        collection="docs",
        budget_tokens=budget,
        llm=config,
        on_token=pieces.append,
    )
    assert len(pieces) > 1 and "".join(pieces) == answer.raw_answer == stand_in.reply
    assert answer.generator == "llama-cpp:model.gguf"
    assert not answer.abstained and [c.n for c in answer.citations] == [1]
    # The budget was spent in the stand-in's tokens (bytes), not the embedding model's.
    results = pgrag.search(loaded, QUESTION, collection="docs", k=8)
    by_bytes = fit_budget(results, budget, lambda t: len(t.encode("utf-8")))
    by_embedder = fit_budget(results, budget, configured_embedder(loaded).tokens.count)
    assert len(by_bytes) < len(by_embedder)  # the two counts lead to different prompts
    assert sorted(s.result.chunk_id for s in answer.sources) == sorted(r.chunk_id for r in by_bytes)
    assert stand_in.loads == [
        {"model_path": str(gguf_file.resolve()), "n_ctx": 2048, "n_threads": 1, "verbose": False}
    ]
    # A second question reuses the loaded model, and without on_token does not stream.
    again = pgrag.ask(loaded, QUESTION, collection="docs", llm=config, log=False)
    assert again.raw_answer == stand_in.reply and len(stand_in.loads) == 1
    model, _ = local_llm.load_model(config)
    assert [c["stream"] for c in model.calls] == [True, False]
    assert {(c["temperature"], c["max_tokens"]) for c in model.calls} == {(0.0, 512)}


def test_stand_in_uncited_reply_goes_through_the_citation_check(
    loaded: Database, gguf_file: Path, stand_in: type[StandInLlama], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StandInLlama, "reply", "Refunds take two weeks.")
    answer = pgrag.ask(loaded, QUESTION, collection="docs", llm=LocalLLMConfig(gguf_file))
    assert answer.abstained and answer.retried
    # The stand-in gives the same uncited reply when asked again, so the fault stands.
    assert answer.reason == (
        "the model's answer cites no source that was in the prompt (also when asked again)"
    )
    row = loaded.conn.execute(
        "SELECT generator, answer FROM pgrag.queries WHERE id = %s", (answer.query_id,)
    ).fetchone()
    assert row == ("llama-cpp:model.gguf", "Refunds take two weeks.")
