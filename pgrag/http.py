"""POSTing to a model server (an LLM, a reranker): no redirects, retries, one-line errors.

What the OpenAI-compatible chat client and the HTTP reranker share. A redirect is never
followed: urllib would resend a redirected POST as a GET carrying the Authorization header to
whatever host the redirect names. 429, 5xx and dropped connections are retried with backoff
(``Retry-After`` honoured up to 10 s); a refused connection once, a timeout not at all. Every
failure ends as one line naming the server and what to do.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pgrag.errors import PgragError

T = TypeVar("T")

BACKOFF_FIRST, BACKOFF_CAP, RETRY_AFTER_CAP = 0.5, 8.0, 10.0
REFUSED_RETRIES = 1  # nobody listening on the port rarely fixes itself within seconds


class Transient(Exception):
    """A failure worth retrying; the final message is ``problem; hint``."""

    def __init__(
        self, problem: str, hint: str, retry_after: float | None = None, *, refused: bool = False
    ) -> None:
        super().__init__(problem)
        self.problem, self.hint, self.retry_after = problem, hint, retry_after
        self.refused = refused


def one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe(reason: object) -> str:
    text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return one_line(text or type(reason).__name__)


def error_excerpt(raw: bytes) -> str:
    """The ``error.message`` of a JSON error body when there is one, else the body itself."""
    text = raw.decode("utf-8", errors="replace")
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return one_line(error["message"])
    return one_line(error if isinstance(error, str) else text)


def retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value or "")
    except ValueError:
        return None
    return min(seconds, RETRY_AFTER_CAP) if seconds >= 0 else None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


OPENER = urllib.request.build_opener(_NoRedirects())


@dataclass(frozen=True)
class Endpoint:
    """One server, and how its failures are worded."""

    url: str
    label: str  # "LLM endpoint", "reranker"
    error: type[PgragError]  # what a final failure is raised as
    timeout: float
    retries: int
    setting: str  # where the user fixes the address, for the redirect message
    unreachable_hint: str
    timeout_hint: str
    logs_hint: str  # for a 5xx
    hints: Mapping[int, str] = field(default_factory=dict)  # other statuses
    default_hint: str = "check the server's logs"
    shown: str = ""  # the URL as messages show it (credentials masked); the URL itself if empty

    @property
    def name(self) -> str:
        return f"{self.label} {self.shown or self.url}"

    def post(
        self,
        data: bytes,
        headers: dict[str, str],
        read: Callable[[http.client.HTTPResponse], T],
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """``read(response)`` of a successful POST, retrying what is worth retrying; ``read``
        may raise :class:`Transient` itself (a stream cut off before anything was used)."""
        refusals = 0
        for attempt in range(self.retries + 1):
            try:
                with self._open(data, headers) as response:
                    return read(response)
            except Transient as exc:
                refusals += exc.refused
                if attempt == self.retries or refusals > REFUSED_RETRIES:
                    tries = f" (gave up after {attempt + 1} attempts)" if attempt else ""
                    raise self.error(f"{exc.problem}{tries}; {exc.hint}") from exc.__cause__
                backoff = min(BACKOFF_FIRST * 2**attempt, BACKOFF_CAP)
                sleep(backoff if exc.retry_after is None else exc.retry_after)
        raise AssertionError("unreachable")  # pragma: no cover

    def read(self, read: Callable[[], bytes]) -> bytes:
        """``read()`` of a response body, its failures worded as the server's."""
        try:
            return read()
        except TimeoutError as exc:
            raise self.timed_out() from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self.unreachable(exc) from exc

    def _open(self, data: bytes, headers: dict[str, str]) -> http.client.HTTPResponse:
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            response: http.client.HTTPResponse = OPENER.open(request, timeout=self.timeout)
            return response
        except urllib.error.HTTPError as exc:
            try:
                raise self._http_error(exc) from exc
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self.timed_out() from exc
            raise self.unreachable(exc.reason) from exc
        except TimeoutError as exc:
            raise self.timed_out() from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self.unreachable(exc) from exc

    def _http_error(self, exc: urllib.error.HTTPError) -> Exception:
        problem = f"{self.name} answered HTTP {exc.code}"
        if 300 <= exc.code < 400:
            target = exc.headers.get("Location", "elsewhere")
            return self.error(
                f"{problem}, a redirect to {one_line(target, 120)}; pgrag does not follow"
                f" redirects (they would carry the API key along): set {self.setting}"
            )
        try:
            excerpt = error_excerpt(exc.read(4096))
        except (OSError, http.client.HTTPException):
            excerpt = ""
        problem += f": {excerpt}" if excerpt else ""
        if exc.code == 429:
            hint = "the server is rate-limiting; wait a moment and try again"
            return Transient(problem, hint, retry_after(exc.headers.get("Retry-After")))
        if exc.code >= 500:
            return Transient(problem, self.logs_hint)
        return self.error(f"{problem}; {self.hints.get(exc.code, self.default_hint)}")

    def unreachable(self, reason: object) -> Transient:
        return Transient(
            f"cannot reach the {self.name} ({describe(reason)})",
            self.unreachable_hint,
            refused=isinstance(reason, ConnectionRefusedError),
        )

    def timed_out(self) -> PgragError:
        return self.error(
            f"the {self.name} did not answer within {self.timeout:g}s; {self.timeout_hint}"
        )
