"""A small client for OpenAI-compatible ``/v1/chat/completions`` endpoints.

Works with vLLM, llama.cpp's server, Ollama and OpenAI itself, using only the standard library.
Transient failures (HTTP 429, 5xx, a dropped connection) are retried with exponential backoff;
a refused connection is retried only once, a timeout not at all. Every failure ends as a
one-line :class:`GenerationError` naming the endpoint and the next step.
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pgrag.config import Settings
from pgrag.errors import ConfigError, GenerationError
from pgrag.http import Endpoint, Transient, describe, error_excerpt, one_line

_OPENAI_NETLOCS = ("api.openai.com", "api.openai.com:443")
_OFFLINE_HINT = "Set PGRAG_LLM_BASE_URL or unset it to use the offline extractive reader"
_KEY_HINT = "check PGRAG_LLM_API_KEY"
TEMPLATES = ("chat", "base")
_HTTP_HINTS = {401: _KEY_HINT, 403: _KEY_HINT, 404: "check PGRAG_LLM_BASE_URL and PGRAG_LLM_MODEL"}


def normalize_base_url(url: str) -> str:
    """``http://h:8080``, ``http://h:8080/`` and ``http://h:8080/v1/`` all give ``…/v1``.

    A URL with another path (``https://h/api/v1beta``) is kept; ``/chat/completions`` is dropped.
    """
    base = url.strip().rstrip("/").removesuffix("/chat/completions").rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"the LLM base URL must look like http://host:port/v1, got {url!r}; "
            "fix PGRAG_LLM_BASE_URL"
        )
    return base if parts.path else base + "/v1"


def _is_openai(base_url: str) -> bool:
    """True only for ``https://api.openai.com[:443]/…``: no look-alike host, userinfo or http."""
    parts = urllib.parse.urlsplit(normalize_base_url(base_url))
    return parts.scheme == "https" and parts.netloc.lower() in _OPENAI_NETLOCS


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask a language model; see :meth:`from_settings`."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 512
    # "chat": /v1/chat/completions with a system prompt; "base": a few-shot plain-text prompt
    # to /v1/completions, for base (not instruction-tuned) models.
    template: str = "chat"
    tokenizer: str | None = None  # the generator's tokenizer.json, to count the prompt budget

    def __post_init__(self) -> None:
        normalize_base_url(self.base_url)
        if not 0 < self.timeout < math.inf or self.max_retries < 0:
            raise ConfigError("the LLM timeout must be positive and max_retries at least 0")
        if self.template not in TEMPLATES:
            raise ConfigError(
                f"PGRAG_LLM_TEMPLATE must be one of {', '.join(TEMPLATES)}, got {self.template!r}"
            )

    @property
    def chat_url(self) -> str:
        """The full URL requests are POSTed to."""
        return normalize_base_url(self.base_url) + "/chat/completions"

    @property
    def completions_url(self) -> str:
        """Where plain-text prompts go (the base template, answer scoring)."""
        return normalize_base_url(self.base_url) + "/completions"

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMConfig | None:
        """The endpoint ``settings`` names (:mod:`pgrag.config`), or None: use the offline
        extractive reader.

        Text leaves the machine only for an explicitly configured base URL:

        * no ``PGRAG_LLM_BASE_URL`` and no ``OPENAI_BASE_URL`` gives None, even when
          ``OPENAI_API_KEY`` is set (it no longer implies api.openai.com);
        * ``PGRAG_LLM_BASE_URL`` (which wins) is sent ``PGRAG_LLM_API_KEY`` only, never
          ``OPENAI_API_KEY`` -- except when it is ``https://api.openai.com/…`` exactly, where
          ``OPENAI_API_KEY`` is the fallback;
        * ``OPENAI_BASE_URL`` is sent ``PGRAG_LLM_API_KEY``, else ``OPENAI_API_KEY``;
        * the model is ``PGRAG_LLM_MODEL``, else ``OPENAI_MODEL``, else ``gpt-4o-mini`` on
          api.openai.com and ``default`` elsewhere; ``PGRAG_LLM_TIMEOUT`` is in seconds (60);
        * ``PGRAG_LLM_TEMPLATE`` is ``chat`` (default) or ``base``; ``PGRAG_LLM_TOKENIZER`` is
          the generator's ``tokenizer.json``, to count the prompt's token budget with.
        """
        base_url = settings.llm_base_url
        if base_url is not None:
            own_key_only = not _is_openai(base_url)
        else:
            base_url = settings.openai_base_url
            if base_url is None:
                return None
            own_key_only = False
        model = settings.llm_model or settings.openai_model
        if model is None:
            host = urllib.parse.urlsplit(normalize_base_url(base_url)).hostname
            model = "gpt-4o-mini" if host == "api.openai.com" else "default"
        raw_timeout = settings.llm_timeout or "60"
        try:
            timeout = float(raw_timeout)
        except ValueError:
            timeout = math.nan
        if not 0 < timeout < math.inf:
            raise ConfigError(
                f"PGRAG_LLM_TIMEOUT must be a positive number of seconds, got {raw_timeout!r}"
            )
        api_key = settings.llm_api_key
        if api_key is None and not own_key_only:
            api_key = settings.openai_api_key
        return cls(
            base_url=base_url,
            model=model,
            api_key=api_key,
            timeout=timeout,
            template=(settings.llm_template or "chat").lower(),
            tokenizer=settings.llm_tokenizer,
        )


def json_payload(
    raw: bytes, url: str, bad: Callable[[str, bytes], GenerationError] | None = None
) -> Any:
    """The JSON of an endpoint's answer; an error object, or something not JSON (worded by
    ``bad``), is a one-line :class:`GenerationError`."""
    try:
        payload = json.loads(raw)
    except ValueError:
        raise (bad or (lambda what, b: malformed(url, what, b)))("not JSON", raw) from None
    if isinstance(payload, dict) and "error" in payload:
        raise GenerationError(
            f"LLM endpoint {url} answered an error: {error_excerpt(raw)}; "
            "check PGRAG_LLM_MODEL and the server's logs"
        )
    return payload


def malformed(url: str, what: str, raw: bytes) -> GenerationError:
    excerpt = one_line(raw.decode("utf-8", errors="replace"), 120)
    return GenerationError(
        f"LLM endpoint {url} answered something that is not a chat completion "
        f"({what}: {excerpt!r}); check that PGRAG_LLM_BASE_URL points at an OpenAI API"
    )


def read_stream(
    endpoint: Endpoint,
    response: http.client.HTTPResponse,
    parse: Callable[[bytes], str],
    on_token: Callable[[str], None],
) -> str:
    """Server-sent events: ``data: {chunk}`` lines until ``data: [DONE]``, each chunk's text
    (``parse``) passed to ``on_token``; the whole text."""
    pieces: list[str] = []
    buffer = b""
    while True:
        try:  # read1(), not readline(): only read1() reports a cut-off chunked stream
            data = endpoint.read(lambda: response.read1(65536))
        except Transient as exc:
            if not pieces:
                raise  # nothing emitted yet, so a retry is invisible to the caller
            raise GenerationError(
                f"the LLM endpoint {endpoint.url} dropped the connection mid-answer "
                f"({describe(exc.__cause__)}); try again"
            ) from exc.__cause__
        lines = (buffer + data).split(b"\n")
        buffer = lines.pop() if data else b""
        for raw_line in lines:
            line = raw_line.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue  # blank separators, ": keep-alive" comments, event:/id: fields
            chunk = line.removeprefix("data:").strip()
            if chunk == "[DONE]":
                return "".join(pieces)
            piece = parse(chunk.encode("utf-8"))
            if piece:
                pieces.append(piece)
                on_token(piece)
        if not data:  # the stream ended without [DONE]: keep what arrived
            return "".join(pieces)


class ChatClient:
    """Sends chat requests to ``config.chat_url``; see :meth:`complete`."""

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.url = config.chat_url
        self._sleep = sleep
        self.endpoint = Endpoint(
            url=self.url,
            label="LLM endpoint",
            error=GenerationError,
            timeout=config.timeout,
            retries=config.max_retries,
            setting="PGRAG_LLM_BASE_URL to the final address",
            unreachable_hint=f"is the server running? {_OFFLINE_HINT}",
            timeout_hint="raise PGRAG_LLM_TIMEOUT or check that the server is not overloaded",
            logs_hint="check the LLM server's logs",
            hints=_HTTP_HINTS,
            default_hint="check PGRAG_LLM_MODEL and the server's logs",
        )

    def complete(
        self, messages: list[dict[str, str]], *, on_token: Callable[[str], None] | None = None
    ) -> str:
        """The model's answer to ``messages``; streamed piece by piece to ``on_token`` if given."""
        cfg, stream = self.config, on_token is not None
        body = {"model": cfg.model, "messages": messages, "temperature": cfg.temperature}
        body |= {"max_tokens": cfg.max_tokens, "stream": stream}
        headers = {"Content-Type": "application/json", "User-Agent": "pgrag"}
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        data = json.dumps(body).encode("utf-8")

        def read(response: http.client.HTTPResponse) -> str:
            if on_token is not None and "event-stream" in response.headers.get("Content-Type", ""):
                return self._read_stream(response, on_token)
            text = self._parse(self.endpoint.read(response.read), "message")
            if on_token is not None and text:  # the server ignored "stream": true
                on_token(text)
            return text

        return self.endpoint.post(data, headers, read, sleep=self._sleep)

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The assistant's message for ``messages``, offered ``tools`` (OpenAI's function
        calling): ``{"content": str | None, "tool_calls": [...]}``, each call with an ``id``
        and ``function.name`` / ``function.arguments`` (a JSON string). Not streamed."""
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": messages, "stream": False}
        body |= {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens}
        if tools:
            body |= {"tools": tools, "tool_choice": "auto"}
        headers = {"Content-Type": "application/json", "User-Agent": "pgrag"}
        headers["Accept"] = "application/json"
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        data = json.dumps(body).encode("utf-8")

        def read(response: http.client.HTTPResponse) -> dict[str, Any]:
            return self._parse_message(self.endpoint.read(response.read))

        return self.endpoint.post(data, headers, read, sleep=self._sleep)

    def choice_logprobs(self, messages: list[dict[str, str]], options: list[str]) -> list[float]:
        """log p(the reply to ``messages`` begins with ``option``), for each of ``options``,
        estimated from the first token of a one-token reply with ``logprobs`` (OpenAI's
        ``top_logprobs``, which llama.cpp's server and vLLM also return): an option gets the
        probability of the listed first tokens it begins with; one that none of them begins
        gets at most the least listed one's. A server that returns no log-probabilities
        decides by its reply alone (0.0 for the option it begins, -inf for the others)."""
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": messages, "stream": False}
        body |= {"temperature": 0.0, "max_tokens": 1, "logprobs": True, "top_logprobs": 20}
        headers = {"Content-Type": "application/json", "User-Agent": "pgrag"}
        headers["Accept"] = "application/json"
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        data = json.dumps(body).encode("utf-8")

        def read(response: http.client.HTTPResponse) -> bytes:
            return self.endpoint.read(response.read)

        raw = self.endpoint.post(data, headers, read, sleep=self._sleep)
        return first_token_choices(raw, options, self._parse(raw, "message"))

    def _parse_message(self, raw: bytes) -> dict[str, Any]:
        payload = json_payload(raw, self.url)
        choices = payload.get("choices") if isinstance(payload, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise self._malformed("no choices[0].message", raw)
        content = message.get("content")
        calls = message.get("tool_calls") or []
        if content is not None and not isinstance(content, str) or not isinstance(calls, list):
            raise self._malformed("a message without text or tool calls", raw)
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not (
                isinstance(function, dict)
                and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments", ""), str | dict)
            ):
                raise self._malformed("a tool call without function.name", raw)
        return {"content": content, "tool_calls": calls}

    def _read_stream(
        self, response: http.client.HTTPResponse, on_token: Callable[[str], None]
    ) -> str:
        return read_stream(self.endpoint, response, lambda raw: self._parse(raw, "delta"), on_token)

    def _parse(self, raw: bytes, field: str) -> str:
        """``choices[0][field].content`` of a body ("message") or stream chunk ("delta").

        Stream chunks without text (role-only, finish, usage) give ``""``."""
        payload = json_payload(raw, self.url)
        choices = payload.get("choices") if isinstance(payload, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        part = choice.get(field) if isinstance(choice, dict) else None
        content = part.get("content") if isinstance(part, dict) else None
        if isinstance(content, str):
            return content
        if field == "delta" and (choices == [] or (isinstance(choice, dict) and content is None)):
            return ""
        raise self._malformed(f"no choices[0].{field}.content", raw)

    def _malformed(self, what: str, raw: bytes) -> GenerationError:
        return malformed(self.url, what, raw)


def first_token_choices(raw: bytes, options: list[str], reply: str) -> list[float]:
    """:meth:`ChatClient.choice_logprobs` from a one-token chat completion ``raw`` (whose
    text is ``reply``). An option gets the summed probability of the listed first tokens it
    begins with; one that none of them begins gets what the list leaves unclaimed (1 minus
    the listed tokens' sum), never more than the least listed one. Entries that are not a
    token and a log-probability <= 0 are ignored."""
    try:
        top = json.loads(raw)["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    except (ValueError, KeyError, IndexError, TypeError):
        top = None
    listed: list[tuple[str, float]] = []
    for entry in top if isinstance(top, list) else []:
        token = entry.get("token") if isinstance(entry, dict) else None
        value = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(token, str) or not token.strip():
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isnan(value) or value > 0.0:
            continue
        listed.append((token.strip().lower(), float(value)))
    if not listed:
        said = reply.strip().lower()

        def begins(option: str) -> bool:
            text = option.strip().lower()
            return bool(said) and bool(text) and (text.startswith(said) or said.startswith(text))

        return [0.0 if begins(option) else -math.inf for option in options]
    mass = math.fsum(math.exp(lp) for _, lp in listed)
    unclaimed = math.log(1.0 - mass) if mass < 1.0 else -math.inf
    floor = min(min(lp for _, lp in listed), unclaimed)
    out = []
    for option in options:
        text = option.strip().lower()
        found = [lp for token, lp in listed if text and text.startswith(token)]
        out.append(logsumexp(found) if found else floor)
    return out


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))), stable; -inf for no values or all -inf."""
    if not values:
        return -math.inf
    top = max(values)
    if top == -math.inf:
        return -math.inf
    if top == math.inf:
        return math.inf
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def normalized(logprobs: list[float]) -> list[float]:
    """Log-probabilities as probabilities that sum to 1 over the options; all -inf (or
    not numbers) gives them equal shares: no preference."""
    clean = [-math.inf if math.isnan(lp) else lp for lp in logprobs]
    top = max(clean, default=-math.inf)
    if top == -math.inf:
        return [1.0 / len(clean)] * len(clean) if clean else []
    if top == math.inf:
        return [1.0 if lp == math.inf else 0.0 for lp in clean]
    weights = [math.exp(lp - top) for lp in clean]
    total = math.fsum(weights)
    return [w / total for w in weights]
