"""A local GGUF model (PGRAG_LLM_GGUF, pgrag[local]) where llama-cpp-python is NOT installed:
configuration, precedence, lazy import, and pgrag's adapter against a STAND-IN ``llama_cpp``
module injected into ``sys.modules`` (``tests.fakes.StandInLlama``). The CLI and ask() with
the real database and embedding model: tests/integration/test_local_llm.py; the real
llama.cpp: tests/integration/test_local_llm_real.py, which ``scripts/test-local`` runs.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pgrag.config import from_env
from pgrag.errors import ConfigError, GenerationError
from pgrag.llm import local as local_llm
from pgrag.llm.chat import LLMConfig
from pgrag.llm.local import LocalChatClient, LocalLLMConfig, config_from_settings
from tests.fakes import StandInLlama

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_model_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_llm, "_loaded", {})


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
