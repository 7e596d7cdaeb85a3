"""The /v1/completions client for base models, against a real local OpenAI-compatible server
(tests/fakes.py), and the generator's tokenizer settings. Asking a base model over the real
database and model: tests/integration/test_base_template.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag import http as http_post
from pgrag.config import from_env
from pgrag.errors import GenerationError
from pgrag.llm.chat import LLMConfig
from pgrag.llm.completions import CompletionClient
from tests.fakes import LLMServer


def base(server: LLMServer, **kw: object) -> LLMConfig:
    return LLMConfig(base_url=server.url, model="base-model", template="base", **kw)  # type: ignore[arg-type]


# --- the /v1/completions client -------------------------------------------------------------


def test_completion_client_retries_a_5xx(
    completions_llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_post, "BACKOFF_FIRST", 0.0)
    completions_llm.fail_next = 1
    completions_llm.reply = "ok"
    client = CompletionClient(LLMConfig(base_url=completions_llm.url, model="m", max_retries=1))
    assert client.complete("Say ok.") == "ok"
    assert len(completions_llm.requests) == 2
    completions_llm.fail_next = 2
    with pytest.raises(GenerationError) as exc:
        client.complete("Say ok.")
    message = str(exc.value)
    assert "\n" not in message and "HTTP 503" in message and "/v1/completions" in message


def test_completion_client_rejects_a_chat_shaped_answer(
    completions_llm: LLMServer,
) -> None:
    # A base URL whose /completions path answers like a chat endpoint: one line, what to check.
    client = CompletionClient(LLMConfig(base_url=completions_llm.url, model="m"))
    client.url = client.endpoint.url.replace("/completions", "/chat/completions")
    import dataclasses

    client.endpoint = dataclasses.replace(client.endpoint, url=client.url)
    with pytest.raises(GenerationError) as exc:
        client.complete("Hi")
    assert "not a text completion (no choices[0].text" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_tokenizer_and_template_from_the_environment(tmp_path: Path) -> None:
    env = {
        "PGRAG_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "PGRAG_LLM_TEMPLATE": "Base",
        "PGRAG_LLM_TOKENIZER": str(tmp_path / "t.json"),
    }
    config = LLMConfig.from_settings(from_env(env))
    assert config is not None and config.template == "base"
    assert config.tokenizer == str(tmp_path / "t.json")
    assert config.completions_url == "http://127.0.0.1:9/v1/completions"
    default = LLMConfig.from_settings(from_env({"PGRAG_LLM_BASE_URL": "http://127.0.0.1:9/v1"}))
    assert default is not None and default.template == "chat" and default.tokenizer is None
