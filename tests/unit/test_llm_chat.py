"""ChatClient against a real local HTTP server that speaks /v1/chat/completions."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pgrag import http as http_post
from pgrag.config import from_env
from pgrag.errors import ConfigError, GenerationError
from pgrag.llm.chat import ChatClient, LLMConfig, normalize_base_url
from tests.fakes import LLMServer, Reply

MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is pgvector?"},
]


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }


def chunk(text: str | None, *, role: bool = False) -> str:
    delta: dict[str, Any] = {"role": "assistant"} if role else {}
    if text is not None:
        delta["content"] = text
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]})


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    """Answers each request with the next of ``llm.replies``, else the completion "hello"."""
    fake = LLMServer(reply="hello")
    yield fake
    fake.close()


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def client_for(fake: LLMServer, **overrides: Any) -> tuple[ChatClient, Sleeps]:
    settings: dict[str, Any] = {"base_url": fake.base_url + "/v1", "model": "test-model"}
    settings.update(overrides)
    sleeps = Sleeps()
    return ChatClient(LLMConfig(**settings), sleep=sleeps), sleeps


def assert_one_line(exc: pytest.ExceptionInfo[GenerationError]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "\r" not in message
    assert len(message) < 500
    return message


# --- non-streaming --------------------------------------------------------------------------


def test_non_streaming_answer_and_request_body(llm: LLMServer) -> None:
    llm.replies = [Reply(body=completion("pgvector adds vector search."))]
    client, sleeps = client_for(llm, temperature=0.2, max_tokens=64)

    assert client.complete(MESSAGES) == "pgvector adds vector search."

    (request,) = llm.requests
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "test-model",
        "messages": MESSAGES,
        "temperature": 0.2,
        "max_tokens": 64,
        "stream": False,
    }
    assert request.headers["Content-Type"] == "application/json"
    assert "Authorization" not in request.headers
    assert sleeps.calls == []


def test_authorization_header_sent_when_api_key_set(llm: LLMServer) -> None:
    client, _ = client_for(llm, api_key="sk-test-123")
    client.complete(MESSAGES)
    assert llm.requests[0].headers["Authorization"] == "Bearer sk-test-123"


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/chat/completions"])
def test_base_url_normalisation_reaches_the_endpoint(llm: LLMServer, suffix: str) -> None:
    client, _ = client_for(llm, base_url=llm.base_url + suffix)
    assert client.url == llm.chat_url
    assert client.complete(MESSAGES) == "hello"
    assert llm.requests[0].path == "/v1/chat/completions"


def test_normalize_base_url_keeps_other_paths_and_rejects_non_http() -> None:
    assert normalize_base_url("https://api.openai.com/v1/") == "https://api.openai.com/v1"
    assert normalize_base_url("http://gw:8000/openai/v1beta") == "http://gw:8000/openai/v1beta"
    for bad in ("localhost:8080", "file:///etc/passwd", "127.0.0.1:8080/v1", ""):
        with pytest.raises(ConfigError, match="PGRAG_LLM_BASE_URL"):
            normalize_base_url(bad)
    with pytest.raises(ConfigError):
        LLMConfig(base_url="ftp://x/v1", model="m")


def test_malformed_json_response(llm: LLMServer) -> None:
    llm.replies = [Reply(body=b"<html>\n<body>Welcome to nginx!</body>\n</html>")]
    client, sleeps = client_for(llm)
    with pytest.raises(GenerationError) as exc:
        client.complete(MESSAGES)
    message = assert_one_line(exc)
    assert llm.chat_url in message and "not JSON" in message and "nginx" in message
    assert sleeps.calls == []


@pytest.mark.parametrize(
    "body",
    [{"choices": []}, {"object": "list", "data": []}, {"choices": [{"message": {}}]}, [1, 2]],
)
def test_json_that_is_not_a_completion(llm: LLMServer, body: Any) -> None:
    llm.replies = [Reply(body=json.dumps(body).encode())]
    client, _ = client_for(llm)
    with pytest.raises(GenerationError, match="not a chat completion") as exc:
        client.complete(MESSAGES)
    assert llm.chat_url in assert_one_line(exc)


def test_error_object_with_status_200(llm: LLMServer) -> None:
    llm.replies = [Reply(body={"error": {"message": "model 'x' not found", "code": 404}})]
    client, _ = client_for(llm)
    with pytest.raises(GenerationError, match="model 'x' not found") as exc:
        client.complete(MESSAGES)
    assert "PGRAG_LLM_MODEL" in assert_one_line(exc)


# --- streaming ------------------------------------------------------------------------------


def test_streaming_tokens_in_order(llm: LLMServer) -> None:
    llm.replies = [
        Reply(
            sse=[
                ": keep-alive",
                chunk("", role=True),
                chunk("Post"),
                ":",
                chunk("greSQL "),
                'data: {"choices": []}',
                chunk(None),
                "event: ping",
                chunk("rocks ✓"),
                "data: [DONE]",
                chunk("never seen"),
            ]
        )
    ]
    client, _ = client_for(llm)
    tokens: list[str] = []

    assert client.complete(MESSAGES, on_token=tokens.append) == "PostgreSQL rocks ✓"
    assert tokens == ["Post", "greSQL ", "rocks ✓"]
    assert llm.requests[0].body["stream"] is True
    assert llm.requests[0].headers["Accept"] == "text/event-stream"


def test_streaming_without_space_after_data_and_without_done(llm: LLMServer) -> None:
    line = 'data:{"choices":[{"delta":{"content":"x"}}]}'
    llm.replies = [Reply(sse=[line, line])]
    client, _ = client_for(llm)
    tokens: list[str] = []
    assert client.complete(MESSAGES, on_token=tokens.append) == "xx"
    assert tokens == ["x", "x"]


def test_streaming_request_answered_with_plain_json(llm: LLMServer) -> None:
    llm.replies = [Reply(body=completion("whole answer"))]
    client, _ = client_for(llm)
    tokens: list[str] = []
    assert client.complete(MESSAGES, on_token=tokens.append) == "whole answer"
    assert tokens == ["whole answer"]


def test_streaming_malformed_chunk(llm: LLMServer) -> None:
    llm.replies = [Reply(sse=[chunk("ok"), "data: {not json", "data: [DONE]"])]
    client, _ = client_for(llm)
    with pytest.raises(GenerationError, match="not JSON") as exc:
        client.complete(MESSAGES, on_token=lambda _: None)
    assert llm.chat_url in assert_one_line(exc)


def test_streaming_error_chunk(llm: LLMServer) -> None:
    llm.replies = [Reply(sse=['data: {"error": {"message": "out of\\nmemory"}}'])]
    client, _ = client_for(llm)
    with pytest.raises(GenerationError, match="out of memory") as exc:
        client.complete(MESSAGES, on_token=lambda _: None)
    assert_one_line(exc)


def test_stream_dropped_before_any_token_is_retried(llm: LLMServer) -> None:
    llm.replies = [
        Reply(sse=[chunk("", role=True), chunk("lost")], drop_after=1),
        Reply(sse=[chunk("fine"), "data: [DONE]"]),
    ]
    client, sleeps = client_for(llm)
    tokens: list[str] = []
    assert client.complete(MESSAGES, on_token=tokens.append) == "fine"
    assert tokens == ["fine"]
    assert len(llm.requests) == 2
    assert sleeps.calls == [0.5]


def test_stream_dropped_after_a_token_is_not_retried(llm: LLMServer) -> None:
    llm.replies = [Reply(sse=[chunk("half"), chunk("lost")], drop_after=1)]
    client, sleeps = client_for(llm)
    tokens: list[str] = []
    with pytest.raises(GenerationError, match="mid-answer") as exc:
        client.complete(MESSAGES, on_token=tokens.append)
    assert llm.chat_url in assert_one_line(exc)
    assert tokens == ["half"]
    assert len(llm.requests) == 1
    assert sleeps.calls == []


def test_stream_stalling_mid_answer_times_out(llm: LLMServer) -> None:
    llm.replies = [Reply(sse=[chunk("a"), chunk("b")], sse_delay_after=1, delay=5)]
    client, _ = client_for(llm, timeout=0.3)
    tokens: list[str] = []
    with pytest.raises(GenerationError, match=r"did not answer within 0\.3s"):
        client.complete(MESSAGES, on_token=tokens.append)
    assert tokens == ["a"]


# --- retries and HTTP errors ----------------------------------------------------------------


def test_429_then_200_retries_once_with_backoff(llm: LLMServer) -> None:
    llm.replies = [Reply(status=429, body={"error": {"message": "slow down"}}), Reply()]
    client, sleeps = client_for(llm)
    assert client.complete(MESSAGES) == "hello"
    assert len(llm.requests) == 2
    assert sleeps.calls == [0.5]


@pytest.mark.parametrize(("header", "expected"), [("3", 3.0), ("120", 10.0), ("soon", 0.5)])
def test_retry_after_is_honoured_up_to_10s(llm: LLMServer, header: str, expected: float) -> None:
    llm.replies = [Reply(status=429, headers={"Retry-After": header}), Reply()]
    client, sleeps = client_for(llm)
    assert client.complete(MESSAGES) == "hello"
    assert sleeps.calls == [expected]


def test_5xx_exhausts_retries(llm: LLMServer) -> None:
    llm.replies = [
        Reply(status=500, body=b"Internal\nServer\nError " + b"x" * 1000) for _ in range(4)
    ]
    client, sleeps = client_for(llm, max_retries=3)
    with pytest.raises(GenerationError) as exc:
        client.complete(MESSAGES)
    message = assert_one_line(exc)
    assert llm.chat_url in message
    assert "HTTP 500" in message and "Internal Server Error" in message
    assert "4 attempts" in message
    assert len(llm.requests) == 4
    assert sleeps.calls == [0.5, 1.0, 2.0]


def test_backoff_is_capped(llm: LLMServer) -> None:
    llm.replies = [Reply(status=503) for _ in range(7)]
    client, sleeps = client_for(llm, max_retries=6)
    with pytest.raises(GenerationError, match="HTTP 503"):
        client.complete(MESSAGES)
    assert sleeps.calls == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_401_is_not_retried_and_mentions_api_key(llm: LLMServer) -> None:
    llm.replies = [Reply(status=401, body={"error": {"message": "Incorrect API key provided"}})]
    client, sleeps = client_for(llm, api_key="sk-wrong")
    with pytest.raises(GenerationError) as exc:
        client.complete(MESSAGES)
    message = assert_one_line(exc)
    assert llm.chat_url in message and "HTTP 401" in message
    assert "Incorrect API key provided" in message and "PGRAG_LLM_API_KEY" in message
    assert "sk-wrong" not in message
    assert len(llm.requests) == 1
    assert sleeps.calls == []


def test_404_points_at_base_url_and_model(llm: LLMServer) -> None:
    llm.replies = [Reply(status=404, body=b"404 page not found")]
    client, sleeps = client_for(llm)
    with pytest.raises(GenerationError, match="PGRAG_LLM_BASE_URL") as exc:
        client.complete(MESSAGES)
    assert "404 page not found" in assert_one_line(exc)
    assert sleeps.calls == []


# --- connection failures --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_refused_connection_is_retried_only_once(llm: LLMServer) -> None:
    port = free_port()
    client, sleeps = client_for(llm, base_url=f"http://127.0.0.1:{port}", max_retries=3)
    with pytest.raises(GenerationError) as exc:
        client.complete(MESSAGES)
    message = assert_one_line(exc)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in message
    assert message.startswith("cannot reach the LLM endpoint")
    assert "(gave up after 2 attempts)" in message
    assert "PGRAG_LLM_BASE_URL" in message
    assert sleeps.calls == [0.5]


def test_refused_connection_without_retries(llm: LLMServer) -> None:
    client, sleeps = client_for(llm, base_url=f"http://127.0.0.1:{free_port()}", max_retries=0)
    with pytest.raises(GenerationError, match="cannot reach") as exc:
        client.complete(MESSAGES)
    assert "attempts" not in assert_one_line(exc)
    assert sleeps.calls == []


def test_refusals_are_counted_apart_from_other_failures(
    llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 503, then the server goes away: the 503 does not use up the refusal's one retry.
    real_open = http_post.OPENER.open
    calls: list[int] = []

    def urlopen(request: urllib.request.Request, timeout: float) -> Any:
        calls.append(1)
        if len(calls) == 1:
            return real_open(request, timeout=timeout)
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    monkeypatch.setattr(http_post.OPENER, "open", urlopen)
    llm.replies = [Reply(status=503)]
    client, sleeps = client_for(llm, max_retries=5)
    with pytest.raises(GenerationError, match=r"Connection refused\) \(gave up after 3 attempts"):
        client.complete(MESSAGES)
    assert len(llm.requests) == 1 and len(calls) == 3
    assert sleeps.calls == [0.5, 1.0]


def test_connection_reset_is_still_retried_with_backoff(llm: LLMServer) -> None:
    # Takes the request, then closes without answering: a reset / remote disconnect, worth
    # retrying.
    llm.replies = [Reply(hang_up=True) for _ in range(4)]
    client, sleeps = client_for(llm, max_retries=3)
    with pytest.raises(GenerationError, match="cannot reach") as exc:
        client.complete(MESSAGES)
    assert "(gave up after 4 attempts)" in assert_one_line(exc)
    assert sleeps.calls == [0.5, 1.0, 2.0]
    assert len(llm.requests) == 4


def test_timeout(llm: LLMServer) -> None:
    llm.replies = [Reply(delay=5)]
    client, sleeps = client_for(llm, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(GenerationError) as exc:
        client.complete(MESSAGES)
    assert time.monotonic() - started < 2
    message = assert_one_line(exc)
    assert llm.chat_url in message
    assert "did not answer within 0.3s" in message and "PGRAG_LLM_TIMEOUT" in message
    assert sleeps.calls == []


# --- configuration from the settings (pgrag.config) --------------------------------------


def test_from_env_nothing_configured() -> None:
    assert LLMConfig.from_settings(from_env({})) is None
    assert (
        LLMConfig.from_settings(from_env({"PGRAG_LLM_MODEL": "m", "PGRAG_LLM_API_KEY": "k"}))
        is None
    )
    assert LLMConfig.from_settings(from_env({"PGRAG_LLM_BASE_URL": "  "})) is None


def test_from_env_api_key_alone_stays_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A laptop with only OPENAI_API_KEY set must not ship documents to api.openai.com.
    assert LLMConfig.from_settings(from_env({"OPENAI_API_KEY": "sk-secret"})) is None
    everything_but_a_url = {
        "OPENAI_API_KEY": "sk-secret",
        "OPENAI_MODEL": "gpt-4o",
        "PGRAG_LLM_API_KEY": "k",
        "PGRAG_LLM_MODEL": "m",
        "PGRAG_LLM_TIMEOUT": "5",
    }
    assert LLMConfig.from_settings(from_env(everything_but_a_url)) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    assert LLMConfig.from_settings(from_env()) is None  # os.environ, as the CLI reads it


def test_openai_key_is_not_sent_to_a_pgrag_base_url(
    llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_LLM_BASE_URL", llm.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    config = LLMConfig.from_settings(from_env())
    assert config is not None and config.api_key is None
    assert ChatClient(config).complete(MESSAGES) == "hello"
    (request,) = llm.requests
    assert "authorization" not in {name.lower() for name in request.headers}
    assert "sk-secret" not in json.dumps(request.headers)


def test_from_env_pgrag_variables_win() -> None:
    config = LLMConfig.from_settings(
        from_env(
            {
                "PGRAG_LLM_BASE_URL": "http://127.0.0.1:8080",
                "PGRAG_LLM_MODEL": "qwen2.5",
                "PGRAG_LLM_API_KEY": "local-key",
                "PGRAG_LLM_TIMEOUT": "12.5",
                "OPENAI_BASE_URL": "https://api.openai.com/v1",
                "OPENAI_MODEL": "gpt-4o",
                "OPENAI_API_KEY": "sk-openai",
            }
        )
    )
    assert config == LLMConfig(
        base_url="http://127.0.0.1:8080", model="qwen2.5", api_key="local-key", timeout=12.5
    )
    assert config.chat_url == "http://127.0.0.1:8080/v1/chat/completions"


def test_from_env_pgrag_base_url_pairs_with_pgrag_key_only() -> None:
    env = {
        "PGRAG_LLM_BASE_URL": "http://ollama:11434",
        "OPENAI_BASE_URL": "https://api.openai.com/v1",
        "OPENAI_API_KEY": "sk-openai",
    }
    config = LLMConfig.from_settings(from_env(env))
    assert config is not None
    assert (config.base_url, config.model, config.api_key) == (
        "http://ollama:11434",
        "default",
        None,
    )

    config = LLMConfig.from_settings(from_env({"PGRAG_LLM_BASE_URL": "http://ollama:11434"}))
    assert config is not None
    assert (config.model, config.api_key) == ("default", None)


@pytest.mark.parametrize(
    "url", ["https://api.openai.com/v1", "https://API.OpenAI.com:443/v1/", "https://api.openai.com"]
)
def test_from_env_pgrag_base_url_at_openai_may_use_openai_key(url: str) -> None:
    config = LLMConfig.from_settings(
        from_env({"PGRAG_LLM_BASE_URL": url, "OPENAI_API_KEY": "sk-openai"})
    )
    assert config is not None
    assert (config.model, config.api_key) == ("gpt-4o-mini", "sk-openai")

    config = LLMConfig.from_settings(
        from_env(
            {"PGRAG_LLM_BASE_URL": url, "OPENAI_API_KEY": "sk-openai", "PGRAG_LLM_API_KEY": "sk-pg"}
        )
    )
    assert config is not None and config.api_key == "sk-pg"


@pytest.mark.parametrize(
    "url",
    [
        "http://api.openai.com/v1",  # the key would cross the network in clear text
        "https://api.openai.com.evil.example/v1",
        "https://xapi.openai.com/v1",
        "https://api.openai.com@evil.example/v1",
        "https://evil.example\\@api.openai.com/v1",
        "https://evil.example/api.openai.com/v1",
        "https://api.openai.com:8443/v1",
        "http://127.0.0.1:8080/v1",
    ],
)
def test_from_env_openai_key_not_sent_to_look_alikes(url: str) -> None:
    config = LLMConfig.from_settings(
        from_env({"PGRAG_LLM_BASE_URL": url, "OPENAI_API_KEY": "sk-openai"})
    )
    assert config is not None and config.api_key is None


def test_from_env_openai_family() -> None:
    config = LLMConfig.from_settings(
        from_env({"OPENAI_BASE_URL": "http://vllm:8000/v1", "OPENAI_API_KEY": "k"})
    )
    assert config is not None
    assert (config.base_url, config.model, config.api_key) == (
        "http://vllm:8000/v1",
        "default",
        "k",
    )
    assert config.timeout == 60.0

    config = LLMConfig.from_settings(
        from_env({"OPENAI_BASE_URL": "https://api.openai.com/v1", "OPENAI_API_KEY": "sk-only"})
    )
    assert config is not None
    assert config.chat_url == "https://api.openai.com/v1/chat/completions"
    assert (config.model, config.api_key) == ("gpt-4o-mini", "sk-only")

    config = LLMConfig.from_settings(
        from_env(
            {
                "OPENAI_BASE_URL": "http://vllm:8000/v1",
                "OPENAI_API_KEY": "k",
                "OPENAI_MODEL": "llama",
                "PGRAG_LLM_API_KEY": "pg-k",
            }
        )
    )
    assert config is not None
    assert (config.model, config.api_key) == ("llama", "pg-k")

    config = LLMConfig.from_settings(from_env({"OPENAI_BASE_URL": "http://vllm:8000/v1"}))
    assert config is not None and config.api_key is None


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan"])
def test_from_env_bad_timeout(value: str) -> None:
    with pytest.raises(ConfigError, match="timeout|TIMEOUT"):
        LLMConfig.from_settings(
            from_env({"PGRAG_LLM_BASE_URL": "http://x", "PGRAG_LLM_TIMEOUT": value})
        )


def test_redirects_are_not_followed_so_the_key_stays_home(llm: LLMServer) -> None:
    elsewhere = LLMServer()
    try:
        llm.replies = [Reply(302, b"", headers={"Location": elsewhere.chat_url})]
        client, _ = client_for(llm, api_key="sk-secret")
        with pytest.raises(GenerationError) as exc:
            client.complete([{"role": "user", "content": "hi"}])
        message = assert_one_line(exc)
        assert "does not follow redirects" in message and "sk-secret" not in message
        assert elsewhere.requests == []  # neither the question nor the key went there
    finally:
        elsewhere.stop()
