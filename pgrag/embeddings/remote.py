"""Embedding with a remote server: any OpenAI-compatible ``POST /v1/embeddings``.

Text Embeddings Inference, vLLM, Ollama and OpenAI itself all serve it. Only the standard
library speaks HTTP here (numpy is imported when vectors arrive), and importing this module
is cheap.

* Texts go in batches of ``batch_size`` (``{"model", "input", "encoding_format": "float"}``);
  at most ``concurrency`` batches are in flight at once, and the vectors come back in the
  order of the texts whatever order the server lists them in (``data[i].index``).
* HTTP 429, 5xx and dropped connections are retried with exponential backoff (``Retry-After``
  honoured), a refused connection once, a timeout not at all; redirects are never followed.
  Every failure ends as one line naming the server and what to do (:class:`EmbeddingError`).
* The dimension is given, or learned from the first vectors the server returns (reading
  :attr:`RemoteEmbedder.dimension` embeds one probe text); every later vector must match it.
* ``normalized=True`` (the default) scales every vector to unit length on this side: OpenAI
  returns unit vectors, TEI and Ollama need not.
* The API key is sent as ``Authorization: Bearer ...`` to this URL only and never appears in a
  message. :meth:`RemoteEmbedder.settings` is JSON without it: only the name of the
  environment variable it is read from (by :mod:`pgrag.config`) is stored.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.config import Settings, from_env
from pgrag.errors import ConfigError, PgragError
from pgrag.http import Endpoint, error_excerpt, one_line
from pgrag.text.tokens import TokenCounter, counter_for

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["EmbeddingError", "HeuristicTokenCounter", "RemoteEmbedder", "embeddings_url"]

DEFAULT_API_KEY_ENV = "PGRAG_EMBEDDING_API_KEY"
DISTANCES = ("cosine", "l2", "inner_product")
PROBE_TEXT = "pgrag dimension probe"
_FIX_URL = "check that the URL points at an OpenAI-compatible /v1/embeddings endpoint"


class EmbeddingError(PgragError):
    """The embedding server failed or answered something unusable."""


def embeddings_url(url: str) -> str:
    """The URL requests are POSTed to: ``http://h:8080``, ``http://h:8080/v1/`` and
    ``http://h:8080/v1/embeddings`` all give ``http://h:8080/v1/embeddings``.

    A base with another path (``https://h/openai/v1beta``) is kept and ``/embeddings`` added.
    """
    base = url.strip().rstrip("/").removesuffix("/embeddings").rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ConfigError(
            f"the embedding server URL must look like http://host:port/v1, got {_shown(url)!r};"
            " fix the embedding URL"
        )
    return (base if parts.path else base + "/v1") + "/embeddings"


def _shown(url: str) -> str:
    """The URL for messages: any user:password@ is masked."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.split("@")[-1]))


# --- counting tokens without the model's tokenizer -------------------------------------------

_UNITS = re.compile(r"[A-Za-z]+|[0-9]+|\s+|.", re.DOTALL)
_LETTERS_PER_TOKEN, _DIGITS_PER_TOKEN = 3, 1


def _cost(unit: str) -> int:
    first = unit[0]
    if first.isascii() and first.isalpha():
        return -(-len(unit) // _LETTERS_PER_TOKEN)
    if first.isascii() and first.isdigit():
        return -(-len(unit) // _DIGITS_PER_TOKEN)
    if first.isspace():
        return 0 if unit == " " else 1
    return max(1, len(unit.encode("utf-8", errors="surrogatepass")) - 1)


class HeuristicTokenCounter:
    """A :class:`~pgrag.text.tokens.TokenCounter` for a model whose tokenizer is not at hand.

    It over-counts on purpose: a chunk it passes must fit the server's real limit, whatever the
    tokenizer (WordPiece, byte-level BPE, SentencePiece). The text is read as units, each
    costing:

    * a run of ASCII letters: one token per 3 letters, rounded up (English averages about 4.5
      letters per token, so ordinary prose is over-counted by roughly half);
    * a digit: one each (Llama- and Mistral-based tokenizers split numbers into digits);
    * any other character: its UTF-8 length less one, at least 1 (punctuation 1, accented
      Latin, Greek or Cyrillic 1, CJK 2, emoji 3: byte-level BPE can spend a token per byte);
    * whitespace: nothing for a single space (merged into the next word), else 1 (newlines
      and indentation are tokens for BPE).

    :meth:`cut` cuts between units, and inside a run too long for one piece, so every piece
    counts at most ``max_tokens`` -- except a lone character that costs more on its own, which
    only happens when ``max_tokens`` is below 3.
    """

    def count(self, text: str) -> int:
        return sum(_cost(m.group()) for m in _UNITS.finditer(text))

    def cut(self, text: str, max_tokens: int) -> list[str]:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        pieces: list[str] = []
        start = end = used = 0
        empty = True
        for begin, stop, cost in self._units(text, max_tokens):
            if empty:
                if cost == 0 or text[begin:stop].isspace():
                    continue  # no piece starts with whitespace
                start, end, used, empty = begin, stop, cost, False
            elif used + cost <= max_tokens:
                end, used = stop, used + cost
            else:
                pieces.append(text[start:end].strip())
                if text[begin:stop].isspace():
                    empty = True
                else:
                    start, end, used = begin, stop, cost
        if not empty:
            pieces.append(text[start:end].strip())
        return [piece for piece in pieces if piece]

    @staticmethod
    def _units(text: str, max_tokens: int) -> list[tuple[int, int, int]]:
        """(start, end, cost) of each unit, runs too long for one piece split into pieces."""
        units: list[tuple[int, int, int]] = []
        for m in _UNITS.finditer(text):
            unit, begin = m.group(), m.start()
            cost = _cost(unit)
            if cost > max_tokens and (unit[0].isascii() and unit[0].isalnum()):
                per = _LETTERS_PER_TOKEN if unit[0].isalpha() else _DIGITS_PER_TOKEN
                step = per * max_tokens
                for i in range(0, len(unit), step):
                    part = unit[i : i + step]
                    units.append((begin + i, begin + i + len(part), _cost(part)))
            else:
                units.append((begin, m.end(), cost))
        return units


_HEURISTIC = HeuristicTokenCounter()


# --- the embedder ------------------------------------------------------------------------------


class RemoteEmbedder:
    """An :class:`~pgrag.embeddings.local.Embedder` backed by an OpenAI-compatible embeddings
    server.

    ``url`` is the server's base (``http://host:8080``, ``http://host:8080/v1``) or the full
    ``.../v1/embeddings``. ``name`` (recorded with every collection) defaults to ``model``.
    ``dimension`` is learned from the server when not given; constructing never touches the
    network. ``tokenizer`` is the path of the model's Hugging Face ``tokenizer.json`` for exact
    token counts; without it :class:`HeuristicTokenCounter` over-counts. ``max_tokens`` is the
    model's input limit. ``api_key_env`` names the variable the key came from, for messages and
    :meth:`settings`.
    """

    provider = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        name: str | None = None,
        dimension: int | None = None,
        api_key: str | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        batch_size: int = 32,
        timeout: float = 60.0,
        retries: int = 4,
        concurrency: int = 4,
        max_tokens: int = 512,
        distance: str = "cosine",
        normalized: bool = True,
        tokenizer: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = url.strip()
        self.url = embeddings_url(url)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("the embedding model name must not be empty; set the model")
        if dimension is not None and dimension < 1:
            raise ConfigError(f"the embedding dimension must be at least 1, got {dimension}")
        if not 0 < timeout < math.inf or retries < 0:
            raise ConfigError("the embedding timeout must be positive and retries at least 0")
        if batch_size < 1 or concurrency < 1 or max_tokens < 1:
            raise ConfigError("embedding batch_size, concurrency and max_tokens must be at least 1")
        if distance not in DISTANCES:
            raise ConfigError(
                f"the distance must be one of {', '.join(DISTANCES)}, not {distance!r}"
            )
        self.model = model.strip()
        self.name = name or self.model
        self.api_key = api_key or None
        self.api_key_env = api_key_env
        self.batch_size, self.concurrency = batch_size, concurrency
        self.timeout, self.retries = timeout, retries
        self.max_tokens = max_tokens
        self.distance = distance
        self.normalized = normalized
        self.tokenizer = tokenizer or None
        self._dimension = dimension
        self._configured_dimension = dimension is not None
        self._sleep = sleep
        self._learn_lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self.shown = _shown(self.url)
        key_hint = f"check {api_key_env}"
        self.endpoint = Endpoint(
            url=self.url,
            label="embedding server",
            error=EmbeddingError,
            timeout=timeout,
            retries=retries,
            setting="the embedding URL to the final address",
            unreachable_hint="is the server running? Check the embedding URL",
            timeout_hint="raise the embedding timeout, lower batch_size, or check that the"
            " server is not overloaded",
            logs_hint="check the embedding server's logs",
            hints={
                401: key_hint,
                403: key_hint,
                404: f"check the model name ({self.model!r}) and URL: the server must answer"
                " POST /v1/embeddings",
                413: "the request is too large for the server; lower batch_size (TEI accepts"
                " 32 texts by default) or max_tokens",
            },
            default_hint=f"check the model name ({self.model!r}) and the server's logs",
            shown=self.shown,
        )

    # -- configuration ------------------------------------------------------------------------

    @classmethod
    def from_settings(
        cls,
        settings: Mapping[str, Any],
        config: Settings | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> RemoteEmbedder:
        """The embedder :meth:`settings` describes. The API key is the value of the variable
        ``api_key_env`` names (``PGRAG_EMBEDDING_API_KEY`` by default) in ``config``, pgrag's
        configuration (:func:`pgrag.config.from_env` when not given), never in ``settings``;
        an unknown key is an error (a typo would otherwise be ignored)."""
        config = from_env() if config is None else config
        unknown = sorted(set(settings) - set(_SETTINGS))
        if unknown:
            raise ConfigError(
                f"unknown embedding setting(s) {', '.join(map(repr, unknown))}; the settings"
                f" are {', '.join(_SETTINGS)} (the API key is read from the variable"
                " api_key_env names)"
            )
        kwargs: dict[str, Any] = {}
        for key, (kind, required) in _SETTINGS.items():
            value = settings.get(key)
            if value is None:
                if required:
                    raise ConfigError(f"the embedding settings need {key!r}")
                continue
            kwargs[key] = _typed(key, value, kind)
        key_env = kwargs.pop("api_key_env", DEFAULT_API_KEY_ENV)
        api_key = config.secret(key_env)
        return cls(**kwargs, api_key=api_key, api_key_env=key_env, sleep=sleep)

    def settings(self) -> dict[str, Any]:
        """JSON to store and rebuild this embedder with :meth:`from_settings`: no API key,
        only the name of its variable. ``dimension`` is None until given or learned."""
        return {
            "url": self.base_url,
            "model": self.model,
            "name": self.name,
            "dimension": self._dimension,
            "batch_size": self.batch_size,
            "timeout": self.timeout,
            "retries": self.retries,
            "concurrency": self.concurrency,
            "max_tokens": self.max_tokens,
            "distance": self.distance,
            "normalized": self.normalized,
            "tokenizer": self.tokenizer,
            "api_key_env": self.api_key_env,
        }

    # -- the Embedder protocol ----------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The vectors' length; the first read without a configured one asks the server."""
        if self._dimension is None:
            with self._probe_lock:
                if self._dimension is None:
                    self._embed_batch([PROBE_TEXT])
        assert self._dimension is not None
        return self._dimension

    @dimension.setter
    def dimension(self, value: int) -> None:
        self._dimension = int(value)
        self._configured_dimension = True

    @property
    def tokens(self) -> TokenCounter:
        if self.tokenizer is None:
            return _HEURISTIC
        if not Path(self.tokenizer).is_file():
            raise ConfigError(
                f"the embedding tokenizer {self.tokenizer} is not a file; point it at the"
                " model's tokenizer.json, or leave it unset to estimate token counts"
            )
        return counter_for(self.tokenizer)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One float32 row per text, in order."""
        import numpy as np

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        size = self.batch_size
        batches = [texts[i : i + size] for i in range(0, len(texts), size)]
        results: list[npt.NDArray[np.float32]] = []
        if self._dimension is None:  # learn it from the first batch before fanning out
            results.append(self._embed_batch(batches.pop(0)))
        workers = min(self.concurrency, len(batches))
        if workers <= 1:
            results.extend(self._embed_batch(batch) for batch in batches)
        else:
            results.extend(self._run_concurrently(batches, workers))
        return results[0] if len(results) == 1 else np.concatenate(results)

    # -- requests -----------------------------------------------------------------------------

    def _run_concurrently(
        self, batches: list[list[str]], workers: int
    ) -> list[npt.NDArray[np.float32]]:
        from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pgrag-embed") as pool:
            futures = [pool.submit(self._embed_batch, batch) for batch in batches]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for future in pending:
                future.cancel()  # the first failure ends the call; don't start the rest
            for future in futures:
                error = future.exception() if future in done else None
                if error is not None:
                    raise error
        return [future.result() for future in futures]

    def _embed_batch(self, texts: list[str]) -> npt.NDArray[np.float32]:
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "pgrag",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            raw = self.endpoint.post(
                json.dumps(body).encode("utf-8"),
                headers,
                lambda response: self.endpoint.read(response.read),
                sleep=self._sleep,
            )
        except EmbeddingError as exc:
            if self.api_key and self.api_key in str(exc):  # a server echoing the key back
                raise EmbeddingError(str(exc).replace(self.api_key, "***")) from None
            raise
        return self._parse(raw, len(texts))

    def _parse(self, raw: bytes, count: int) -> npt.NDArray[np.float32]:
        """The vectors of a response in input order: each index in 0..count-1 exactly once."""
        import numpy as np

        try:
            payload = json.loads(raw)
        except ValueError:
            raise self._malformed("not JSON", raw) from None
        if isinstance(payload, dict) and "error" in payload:
            raise EmbeddingError(
                f"{self.endpoint.name} answered an error: {self._scrub(error_excerpt(raw))};"
                f" check the model name ({self.model!r}) and the server's logs"
            )
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise self._malformed("no data list", raw)
        if len(data) != count:
            raise EmbeddingError(
                f"{self.endpoint.name} returned {len(data)} embeddings for {count} texts;"
                " check the server's logs (it may have dropped or split inputs)"
            )
        rows: list[npt.NDArray[np.float32] | None] = [None] * count
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise self._malformed(f"an embedding without an index in 0..{count - 1}", raw)
            if rows[index] is not None:
                raise self._malformed(f"index {index} twice", raw)
            assert isinstance(item, dict)
            rows[index] = vector = self._vector(item.get("embedding"), index, raw)
            self._check_dimension(vector.size)
        matrix = np.stack([row for row in rows if row is not None])
        if self.normalized:
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix /= np.where(norms > 0, norms, 1).astype(np.float32)
        return matrix

    def _vector(self, value: object, index: int, raw: bytes) -> npt.NDArray[np.float32]:
        import numpy as np

        if isinstance(value, str):  # encoding_format "base64": little-endian float32s
            import base64
            import binascii

            try:
                decoded = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                decoded = b"?"
            if len(decoded) % 4:
                raise self._malformed(f"embedding {index} is neither numbers nor base64", raw)
            vector = np.frombuffer(decoded, dtype="<f4").astype(np.float32)
        else:
            array = np.asarray(value) if isinstance(value, list) else np.asarray(None)
            if array.ndim != 1 or array.dtype.kind not in "iuf":
                raise self._malformed(f"embedding {index} is not a list of numbers", raw)
            vector = array.astype(np.float32)
        if vector.size == 0 or not np.isfinite(vector).all():
            raise self._malformed(f"embedding {index} is empty or not finite", raw)
        return vector

    def _check_dimension(self, got: int) -> None:
        with self._learn_lock:
            if self._dimension is None:
                self._dimension = got
                return
            expected = self._dimension
        if got != expected:
            source = "configured" if self._configured_dimension else "returned before"
            raise EmbeddingError(
                f"{self.endpoint.name} returned {got}-dimensional vectors for model"
                f" {self.model!r}, expected {expected} ({source}); check that the model name"
                " is right and the dimension matches it"
            )

    def _scrub(self, text: str) -> str:
        return text.replace(self.api_key, "***") if self.api_key else text

    def _malformed(self, what: str, raw: bytes) -> EmbeddingError:
        excerpt = self._scrub(one_line(raw.decode("utf-8", errors="replace"), 120))
        return EmbeddingError(
            f"{self.endpoint.name} answered something that is not an embeddings response"
            f" ({what}: {excerpt!r}); {_FIX_URL}"
        )

    def __repr__(self) -> str:
        return f"RemoteEmbedder({self.shown!r}, model={self.model!r})"


# name -> (type, required); the order is the order messages list them in.
_SETTINGS: dict[str, tuple[type, bool]] = {
    "url": (str, True),
    "model": (str, True),
    "name": (str, False),
    "dimension": (int, False),
    "batch_size": (int, False),
    "timeout": (float, False),
    "retries": (int, False),
    "concurrency": (int, False),
    "max_tokens": (int, False),
    "distance": (str, False),
    "normalized": (bool, False),
    "tokenizer": (str, False),
    "api_key_env": (str, False),
}


def _typed(key: str, value: object, kind: type) -> object:
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ConfigError(f"the embedding setting {key!r} must be {kind.__name__}, got {value!r}")
    return value
