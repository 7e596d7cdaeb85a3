"""A local GGUF model (PGRAG_LLM_GGUF, pgrag[local]) in the default test run, where
llama-cpp-python is NOT installed: configuration, precedence, file checks, the not-installed
error, lazy import.

The ask() wiring is also checked here against a STAND-IN ``llama_cpp`` module injected into
``sys.modules`` (``StandInLlama`` below), with the real database and embedding model. The
stand-in only exercises pgrag's adapter (streaming, the token budget, the cache, error
translation); the real llama.cpp is exercised by tests/test_local_llm_real.py, which
``scripts/test-local`` runs with a real build and a real (tiny) GGUF model.
"""

from __future__ import annotations

import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import pgrag
from pgrag.answer.prompt import fit_budget
from pgrag.cli import cli
from pgrag.config import from_env
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError, GenerationError
from pgrag.llm import local as local_llm
from pgrag.llm.chat import LLMConfig
from pgrag.llm.local import LocalChatClient, LocalLLMConfig, config_from_settings

REPO = Path(__file__).resolve().parents[1]
QUESTION = "How many days do monthly subscriptions have for a refund?"


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    """A file that passes the magic-bytes check (it is not a loadable model)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 64)
    return path


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


# --- configuration and precedence ------------------------------------------------------------


def test_gguf_alone_selects_the_local_model(gguf_file: Path) -> None:
    config = config_from_settings(from_env({"PGRAG_LLM_GGUF": str(gguf_file)}))
    assert isinstance(config, LocalLLMConfig)
    assert config.model_path == gguf_file
    assert (config.n_ctx, config.n_threads, config.temperature, config.max_tokens) == (
        4096,
        None,
        0.0,
        512,
    )
    assert config.label == "llama-cpp:model.gguf"


def test_ctx_and_threads_come_from_the_environment(gguf_file: Path) -> None:
    env = {"PGRAG_LLM_GGUF": str(gguf_file), "PGRAG_LLM_CTX": "2048", "PGRAG_LLM_THREADS": "3"}
    config = config_from_settings(from_env(env))
    assert isinstance(config, LocalLLMConfig)
    assert (config.n_ctx, config.n_threads) == (2048, 3)
    for name, bad in (("PGRAG_LLM_CTX", "0"), ("PGRAG_LLM_THREADS", "many")):
        with pytest.raises(ConfigError, match=f"^{name} must be a positive whole number"):
            config_from_settings(from_env({"PGRAG_LLM_GGUF": str(gguf_file), name: bad}))


def test_gguf_and_pgrag_base_url_together_are_an_error(gguf_file: Path) -> None:
    env = {"PGRAG_LLM_GGUF": str(gguf_file), "PGRAG_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    with pytest.raises(ConfigError, match="both PGRAG_LLM_GGUF .* and PGRAG_LLM_BASE_URL"):
        config_from_settings(from_env(env))


@pytest.mark.parametrize(
    ("name", "value"), [("PGRAG_LLM_TEMPLATE", "base"), ("PGRAG_LLM_TOKENIZER", "/x.json")]
)
def test_endpoint_only_settings_with_a_gguf_are_an_error(
    gguf_file: Path, name: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=f"{name} does not apply to PGRAG_LLM_GGUF"):
        config_from_settings(from_env({"PGRAG_LLM_GGUF": str(gguf_file), name: value}))


def test_gguf_wins_over_the_generic_openai_base_url(gguf_file: Path) -> None:
    env = {"PGRAG_LLM_GGUF": str(gguf_file), "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    assert isinstance(config_from_settings(from_env(env)), LocalLLMConfig)
    # and without the GGUF the endpoints behave as before
    assert isinstance(
        config_from_settings(from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})), LLMConfig
    )
    assert config_from_settings(from_env({})) is None
    assert config_from_settings(from_env({"PGRAG_LLM_GGUF": "  "})) is None


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


def test_agentic_says_it_does_not_take_a_local_model(dsn: str, gguf_file: Path) -> None:
    result = ask_cli(dsn, {"PGRAG_LLM_GGUF": str(gguf_file)}, "--agentic")
    assert result.exit_code == 2, result.stderr
    assert "--agentic does not support a local model (PGRAG_LLM_GGUF)" in result.stderr


def test_help_does_not_import_llama_cpp(tmp_path: Path) -> None:
    # A llama_cpp on the path that fails loudly when imported: help must never touch it.
    package = tmp_path / "site" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('llama_cpp was imported')\n")
    path = f"{tmp_path / 'site'}:{REPO}"
    guard = subprocess.run(
        [sys.executable, "-c", "import llama_cpp"],
        env={"PYTHONPATH": path},
        capture_output=True,
        text=True,
    )
    assert "llama_cpp was imported" in guard.stderr  # the trap works
    for argv in (["--help"], ["ask", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "pgrag.cli", *argv],
            env={"PYTHONPATH": path, "PGRAG_LLM_GGUF": str(tmp_path / "x.gguf")},
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert "llama_cpp was imported" not in out.stderr
    assert "PGRAG_LLM_GGUF" in out.stdout  # ask --help documents it


# --- ask() through a STAND-IN llama_cpp module (adapter logic only) --------------------------


class StandInLlama:
    """Stands in for ``llama_cpp.Llama``: one token per UTF-8 byte, a canned reply streamed
    in 3-character pieces the way llama-cpp-python yields chunks."""

    loads: list[dict[str, Any]] = []
    reply = "Monthly subscriptions can be refunded within 14 days [1]."
    fail_with: Exception | None = None

    def __init__(self, **kwargs: Any) -> None:
        if str(kwargs["model_path"]).endswith("broken.gguf"):
            raise ValueError("Failed to load model from file: broken.gguf")
        StandInLlama.loads.append(kwargs)
        self.calls: list[dict[str, Any]] = []

    def tokenize(self, text: bytes, add_bos: bool = True) -> list[int]:
        assert isinstance(text, bytes) and add_bos is False
        return list(text)

    def create_chat_completion(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if not kwargs["stream"]:
            if StandInLlama.fail_with is not None:
                raise StandInLlama.fail_with
            return {"choices": [{"message": {"role": "assistant", "content": self.reply}}]}
        return self._chunks()

    def _chunks(self) -> Iterator[dict[str, Any]]:
        # A generator, like llama-cpp-python's: errors surface while it is iterated.
        yield {"choices": [{"delta": {"role": "assistant"}}]}
        for i in range(0, len(self.reply), 3):
            if StandInLlama.fail_with is not None and i == 6:
                raise StandInLlama.fail_with
            yield {"choices": [{"delta": {"content": self.reply[i : i + 3]}}]}
        yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[StandInLlama]]:
    module = types.ModuleType("llama_cpp")
    module.Llama = StandInLlama  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    monkeypatch.setattr(StandInLlama, "loads", [])
    yield StandInLlama


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
    assert answer.abstained
    assert answer.reason == "the model's answer cites no source that was in the prompt"
    row = loaded.conn.execute(
        "SELECT generator, answer FROM pgrag.queries WHERE id = %s", (answer.query_id,)
    ).fetchone()
    assert row == ("llama-cpp:model.gguf", "Refunds take two weeks.")


def test_stand_in_load_and_generation_failures_are_one_line(
    tmp_path: Path, stand_in: type[StandInLlama], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF\x03")
    with pytest.raises(ConfigError) as err:
        LocalChatClient(LocalLLMConfig(broken))
    assert str(err.value).startswith(f"llama.cpp could not load PGRAG_LLM_GGUF={broken} (")
    assert "\n" not in str(err.value)
    good = tmp_path / "good.gguf"
    good.write_bytes(b"GGUF\x03")
    client = LocalChatClient(LocalLLMConfig(good))
    monkeypatch.setattr(
        StandInLlama, "fail_with", ValueError("Requested tokens (5000) exceed context window")
    )
    with pytest.raises(GenerationError, match=r"^llama.cpp failed on good.gguf \(Requested"):
        client.complete([{"role": "user", "content": "hi"}])
    seen: list[str] = []
    with pytest.raises(GenerationError, match=r"^llama.cpp failed on good.gguf mid-answer \("):
        client.complete([{"role": "user", "content": "hi"}], on_token=seen.append)
    assert seen == ["Mon", "thl"]


def test_stand_in_on_token_errors_propagate_and_only_the_last_model_is_kept(
    tmp_path: Path, stand_in: type[StandInLlama]
) -> None:
    first, second = tmp_path / "a.gguf", tmp_path / "b.gguf"
    for path in (first, second):
        path.write_bytes(b"GGUF\x03")
    client = LocalChatClient(LocalLLMConfig(first))

    def hang_up(piece: str) -> None:
        raise BrokenPipeError("the terminal went away")

    with pytest.raises(BrokenPipeError):
        client.complete([{"role": "user", "content": "hi"}], on_token=hang_up)
    LocalChatClient(LocalLLMConfig(second))
    assert [Path(load["model_path"]).name for load in stand_in.loads] == ["a.gguf", "b.gguf"]
    assert list(local_llm._loaded) == [(str(second.resolve()), 4096, None)]
    LocalChatClient(LocalLLMConfig(first))  # loaded again: it was let go
    assert len(stand_in.loads) == 3


def test_stand_in_llama_cpp_that_cannot_load_its_library_is_one_line(
    gguf_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What an installed llama_cpp does when its shared library does not load (e.g. built for
    # another CPU): a RuntimeError, not an ImportError.
    def fail(name: str) -> Any:
        raise RuntimeError("Failed to load shared library 'libllama.so': illegal instruction")

    module = types.ModuleType("llama_cpp")
    module.__getattr__ = fail  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    with pytest.raises(ConfigError) as err:
        LocalChatClient(LocalLLMConfig(gguf_file))
    assert str(err.value).startswith(
        "llama-cpp-python is installed but cannot be imported (Failed to load shared library"
    )
    assert str(err.value).endswith("pip install --force-reinstall --no-cache-dir llama-cpp-python")
