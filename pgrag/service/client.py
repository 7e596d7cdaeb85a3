"""A client of a running ``pgrag serve``, for the CLI: with ``PGRAG_URL`` set, ``pgrag search``
and ``pgrag ask`` send their query here instead of loading the embedding model, so a terminal
query costs the service's retrieval time, not a model load.

The standard library only (urllib): importing this loads neither the model, nor torch, nor the
web framework, nor psycopg. Redirects are never followed (they would carry the API key
elsewhere); ``PGRAG_API_KEY`` is sent to ``PGRAG_URL`` and nowhere else. Every failure is one
line: the service's own message for what it refused (the same words as the local command's),
else what could not be reached and what to do.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from pgrag.errors import ConfigError, InputError, PgragError
from pgrag.http import OPENER, describe, one_line

SEARCH_TIMEOUT = 120.0
# An answer may wait for a slow generator (the service's own PGRAG_LLM_TIMEOUT bounds it).
ASK_TIMEOUT = 600.0
# The error types (pgrag.service.errors) of the service failing, not refusing the request.
FAILURES = ("server_error", "service_unavailable", "database_error")


class ServiceError(PgragError):
    """The service failed (5xx) or could not be reached."""


class ServiceClient:
    """Calls to one service, as one caller (its API key, if any)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"PGRAG_URL={url!r} is not an http(s) URL of a pgrag service; set it to e.g."
                " http://127.0.0.1:8000, or unset it to search locally"
            )
        if parts.username or parts.password:
            raise ConfigError(
                "PGRAG_URL must not hold credentials; put the API key in PGRAG_API_KEY"
            )
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):  # the OpenAI-style base URL names the same service
            path = path[: -len("/v1")]
        self.url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        if api_key is not None and any(c in api_key for c in "\r\n\x00"):
            raise ConfigError(
                "PGRAG_API_KEY holds a line break or NUL: set it to the key alone, as"
                " `pgrag keys create` printed it"
            )
        self.api_key = api_key

    def search(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/search`` with ``body``: its JSON answer."""
        with self._post("/v1/search", body, SEARCH_TIMEOUT) as response:
            return _json(self._read(response))

    def ask(
        self, body: dict[str, Any], on_token: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """``POST /v1/ask``: the answer's JSON. With ``on_token``, the answer is streamed
        (Server-Sent Events) and each piece the generator writes is passed to it as it comes."""
        if on_token is None:
            with self._post("/v1/ask", {**body, "stream": False}, ASK_TIMEOUT) as response:
                return _json(self._read(response))
        answer: dict[str, Any] | None = None
        with self._post("/v1/ask", {**body, "stream": True}, ASK_TIMEOUT) as response:
            for name, data in self._events(response):
                if name == "token":
                    on_token(str(_json(data).get("text", "")))
                elif name == "answer":
                    answer = _json(data)
                elif name == "error":
                    error = _json(data).get("error") or {}
                    message = " ".join(str(error.get("message") or "the service failed").split())
                    failed = error.get("type") in FAILURES
                    raise ServiceError(message) if failed else InputError(message)
                elif name == "done":
                    break
        if answer is None:
            raise ServiceError(
                f"the pgrag service at {self.url} ended the answer's stream before the answer;"
                " check its log, and ask again"
            )
        return answer

    # -- HTTP ------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], timeout: float) -> http.client.HTTPResponse:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            response: http.client.HTTPResponse = OPENER.open(request, timeout=timeout)
            return response
        except urllib.error.HTTPError as err:
            try:
                raise self._http_error(err) from None
            finally:
                err.close()
        except urllib.error.URLError as err:
            raise self._unreachable(err.reason) from None
        except (OSError, http.client.HTTPException) as err:
            raise self._unreachable(err) from None

    def _read(self, response: http.client.HTTPResponse) -> bytes:
        try:
            return response.read()
        except (OSError, http.client.HTTPException) as err:
            raise self._unreachable(err) from None

    def _events(self, response: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
        """(event, data) of a text/event-stream response, as they arrive."""
        name, data = "message", list[str]()
        try:
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data:
                        yield name, "\n".join(data)
                    name, data = "message", []
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
        except (OSError, http.client.HTTPException) as err:
            raise self._unreachable(err) from None
        if data:
            yield name, "\n".join(data)

    def _http_error(self, err: urllib.error.HTTPError) -> PgragError:
        if 300 <= err.code < 400:
            return ConfigError(
                f"the pgrag service at {self.url} answered HTTP {err.code}, a redirect; pgrag"
                " does not follow redirects (they would carry the API key along): set PGRAG_URL"
                " to where it points"
            )
        try:
            raw = err.read(65536)
        except (OSError, http.client.HTTPException):
            raw = b""
        message = _message(raw) or f"HTTP {err.code}"
        if err.code == 401:
            return InputError(f"{message} — the CLI sends the key in PGRAG_API_KEY")
        if err.code >= 500:
            return ServiceError(f"the pgrag service at {self.url} failed: {message}")
        return InputError(message)  # what it refused, in the library's own words

    def _unreachable(self, reason: object) -> ServiceError:
        return ServiceError(
            f"cannot reach the pgrag service at {self.url} ({describe(reason)}); start it"
            " (pgrag serve), or unset PGRAG_URL to run the command locally"
        )


def _message(raw: bytes) -> str:
    """The service's one-line ``error.message``, else the body."""
    text = raw.decode("utf-8", errors="replace")
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return " ".join(error["message"].split())
    return one_line(text)


def _json(raw: bytes | str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ServiceError(
            f"the pgrag service answered something that is not a JSON object: {one_line(str(raw))}"
        )
    return value
