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
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pgrag.errors import ConfigError, GenerationError

_OPENAI_NETLOCS = ("api.openai.com", "api.openai.com:443")
_BACKOFF_FIRST, _BACKOFF_CAP, _RETRY_AFTER_CAP = 0.5, 8.0, 10.0
_REFUSED_RETRIES = 1  # nobody listening on the port rarely fixes itself within seconds
_OFFLINE_HINT = "Set PGRAG_LLM_BASE_URL or unset it to use the offline extractive reader"
_KEY_HINT = "check PGRAG_LLM_API_KEY"
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


def _first_set(env: Mapping[str, str], *names: str) -> str | None:
    return next((env[n].strip() for n in names if env.get(n, "").strip()), None)


def _is_openai(base_url: str) -> bool:
    """True only for ``https://api.openai.com[:443]/…``: no look-alike host, userinfo or http."""
    parts = urllib.parse.urlsplit(normalize_base_url(base_url))
    return parts.scheme == "https" and parts.netloc.lower() in _OPENAI_NETLOCS


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask a language model; see :meth:`from_env`."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 3
    temperature: float = 0.0
    max_tokens: int = 512

    def __post_init__(self) -> None:
        normalize_base_url(self.base_url)
        if not 0 < self.timeout < math.inf or self.max_retries < 0:
            raise ConfigError("the LLM timeout must be positive and max_retries at least 0")

    @property
    def chat_url(self) -> str:
        """The full URL requests are POSTed to."""
        return normalize_base_url(self.base_url) + "/chat/completions"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LLMConfig | None:
        """The endpoint the environment names, or None: use the offline extractive reader.

        Text leaves the machine only for an explicitly configured base URL:

        * no ``PGRAG_LLM_BASE_URL`` and no ``OPENAI_BASE_URL`` gives None, even when
          ``OPENAI_API_KEY`` is set (it no longer implies api.openai.com);
        * ``PGRAG_LLM_BASE_URL`` (which wins) is sent ``PGRAG_LLM_API_KEY`` only, never
          ``OPENAI_API_KEY`` -- except when it is ``https://api.openai.com/…`` exactly, where
          ``OPENAI_API_KEY`` is the fallback;
        * ``OPENAI_BASE_URL`` is sent ``PGRAG_LLM_API_KEY``, else ``OPENAI_API_KEY``;
        * the model is ``PGRAG_LLM_MODEL``, else ``OPENAI_MODEL``, else ``gpt-4o-mini`` on
          api.openai.com and ``default`` elsewhere; ``PGRAG_LLM_TIMEOUT`` is in seconds (60).
        """
        env = os.environ if env is None else env
        base_url = _first_set(env, "PGRAG_LLM_BASE_URL")
        if base_url is not None:
            own_key_only = not _is_openai(base_url)
        else:
            base_url = _first_set(env, "OPENAI_BASE_URL")
            if base_url is None:
                return None
            own_key_only = False
        model = _first_set(env, "PGRAG_LLM_MODEL", "OPENAI_MODEL")
        if model is None:
            host = urllib.parse.urlsplit(normalize_base_url(base_url)).hostname
            model = "gpt-4o-mini" if host == "api.openai.com" else "default"
        raw_timeout = _first_set(env, "PGRAG_LLM_TIMEOUT") or "60"
        try:
            timeout = float(raw_timeout)
        except ValueError:
            timeout = math.nan
        if not 0 < timeout < math.inf:
            raise ConfigError(
                f"PGRAG_LLM_TIMEOUT must be a positive number of seconds, got {raw_timeout!r}"
            )
        key_names = (
            ("PGRAG_LLM_API_KEY",) if own_key_only else ("PGRAG_LLM_API_KEY", "OPENAI_API_KEY")
        )
        api_key = _first_set(env, *key_names)
        return cls(base_url=base_url, model=model, api_key=api_key, timeout=timeout)


class _Transient(Exception):
    """A failure worth retrying; the final message is ``problem; hint``."""

    def __init__(
        self, problem: str, hint: str, retry_after: float | None = None, *, refused: bool = False
    ) -> None:
        super().__init__(problem)
        self.problem, self.hint, self.retry_after = problem, hint, retry_after
        self.refused = refused


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _describe(reason: object) -> str:
    text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return _one_line(text or type(reason).__name__)


def _error_excerpt(raw: bytes) -> str:
    """The ``error.message`` of a JSON error body when there is one, else the body itself."""
    text = raw.decode("utf-8", errors="replace")
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return _one_line(error["message"])
    return _one_line(error if isinstance(error, str) else text)


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value or "")
    except ValueError:
        return None
    return min(seconds, _RETRY_AFTER_CAP) if seconds >= 0 else None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirected POST as a GET carrying the Authorization header to
    whatever host the redirect names; a redirect is reported instead."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects())


class ChatClient:
    """Sends chat requests to ``config.chat_url``; see :meth:`complete`."""

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.url = config.chat_url
        self._sleep = sleep

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
        refusals = 0
        for attempt in range(cfg.max_retries + 1):
            try:
                return self._attempt(data, headers, on_token)
            except _Transient as exc:
                refusals += exc.refused
                if attempt == cfg.max_retries or refusals > _REFUSED_RETRIES:
                    tries = f" (gave up after {attempt + 1} attempts)" if attempt else ""
                    raise GenerationError(f"{exc.problem}{tries}; {exc.hint}") from exc.__cause__
                backoff = min(_BACKOFF_FIRST * 2**attempt, _BACKOFF_CAP)
                self._sleep(backoff if exc.retry_after is None else exc.retry_after)
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(
        self, data: bytes, headers: dict[str, str], on_token: Callable[[str], None] | None
    ) -> str:
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            response = _OPENER.open(request, timeout=self.config.timeout)
        except urllib.error.HTTPError as exc:
            try:
                raise self._http_error(exc) from exc
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timeout() from exc
            raise self._unreachable(exc.reason) from exc
        except TimeoutError as exc:
            raise self._timeout() from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from exc
        with response:
            if on_token is not None and "event-stream" in response.headers.get("Content-Type", ""):
                return self._read_stream(response, on_token)
            raw = self._read(response.read)
        text = self._parse(raw, "message")
        if on_token is not None and text:  # the server ignored "stream": true
            on_token(text)
        return text

    def _read(self, read: Callable[[], bytes]) -> bytes:
        try:
            return read()
        except TimeoutError as exc:
            raise self._timeout() from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from exc

    def _read_stream(
        self, response: http.client.HTTPResponse, on_token: Callable[[str], None]
    ) -> str:
        """Server-sent events: ``data: {chunk}`` lines until ``data: [DONE]``."""
        pieces: list[str] = []
        buffer = b""
        while True:
            try:  # read1(), not readline(): only read1() reports a cut-off chunked stream
                data = self._read(lambda: response.read1(65536))
            except _Transient as exc:
                if not pieces:
                    raise  # nothing emitted yet, so a retry is invisible to the caller
                raise GenerationError(
                    f"the LLM endpoint {self.url} dropped the connection mid-answer "
                    f"({_describe(exc.__cause__)}); try again"
                ) from exc.__cause__
            lines = (buffer + data).split(b"\n")
            buffer = lines.pop() if data else b""
            for raw_line in lines:
                line = raw_line.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue  # blank separators, ": keep-alive" comments, event:/id: fields
                payload = line.removeprefix("data:").strip()
                if payload == "[DONE]":
                    return "".join(pieces)
                piece = self._parse(payload.encode("utf-8"), "delta")
                if piece:
                    pieces.append(piece)
                    on_token(piece)
            if not data:  # the stream ended without [DONE]: keep what arrived
                return "".join(pieces)

    def _parse(self, raw: bytes, field: str) -> str:
        """``choices[0][field].content`` of a body ("message") or stream chunk ("delta").

        Stream chunks without text (role-only, finish, usage) give ``""``."""
        try:
            payload = json.loads(raw)
        except ValueError:
            raise self._malformed("not JSON", raw) from None
        if isinstance(payload, dict) and "error" in payload:
            raise GenerationError(
                f"LLM endpoint {self.url} answered an error: {_error_excerpt(raw)}; "
                "check PGRAG_LLM_MODEL and the server's logs"
            )
        choices = payload.get("choices") if isinstance(payload, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        part = choice.get(field) if isinstance(choice, dict) else None
        content = part.get("content") if isinstance(part, dict) else None
        if isinstance(content, str):
            return content
        if field == "delta" and (choices == [] or (isinstance(choice, dict) and content is None)):
            return ""
        raise self._malformed(f"no choices[0].{field}.content", raw)

    def _http_error(self, exc: urllib.error.HTTPError) -> Exception:
        try:
            excerpt = _error_excerpt(exc.read(4096))
        except (OSError, http.client.HTTPException):
            excerpt = ""
        problem = f"LLM endpoint {self.url} answered HTTP {exc.code}"
        if 300 <= exc.code < 400:
            target = exc.headers.get("Location", "elsewhere")
            return GenerationError(
                f"{problem}, a redirect to {_one_line(target, 120)}; pgrag does not follow"
                " redirects (they would carry the API key along): set PGRAG_LLM_BASE_URL to"
                " the final address"
            )
        problem += f": {excerpt}" if excerpt else ""
        if exc.code == 429:
            hint = "the server is rate-limiting; wait a moment and try again"
            return _Transient(problem, hint, _retry_after(exc.headers.get("Retry-After")))
        if exc.code >= 500:
            return _Transient(problem, "check the LLM server's logs")
        hint = _HTTP_HINTS.get(exc.code, "check PGRAG_LLM_MODEL and the server's logs")
        return GenerationError(f"{problem}; {hint}")

    def _unreachable(self, reason: object) -> _Transient:
        return _Transient(
            f"cannot reach the LLM endpoint {self.url} ({_describe(reason)})",
            f"is the server running? {_OFFLINE_HINT}",
            refused=isinstance(reason, ConnectionRefusedError),
        )

    def _timeout(self) -> GenerationError:
        return GenerationError(
            f"the LLM endpoint {self.url} did not answer within {self.config.timeout:g}s; "
            "raise PGRAG_LLM_TIMEOUT or check that the server is not overloaded"
        )

    def _malformed(self, what: str, raw: bytes) -> GenerationError:
        excerpt = _one_line(raw.decode("utf-8", errors="replace"), 120)
        return GenerationError(
            f"LLM endpoint {self.url} answered something that is not a chat completion "
            f"({what}: {excerpt!r}); check that PGRAG_LLM_BASE_URL points at an OpenAI API"
        )
