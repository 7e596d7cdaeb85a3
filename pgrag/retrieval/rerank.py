"""Reordering retrieved passages: a second opinion on relevance, and diversity among them.

A :class:`Reranker` scores (query, passage) pairs jointly, which is slower but sharper than the
bi-encoder behind the vector arm. None is used by default. Two kinds plug in:

* :class:`CrossEncoderReranker`: a sentence-transformers ``CrossEncoder`` in a local
  directory. No cross-encoder ships in a package, so pgrag never fetches one: the directory is
  one the user copied or saved (``CrossEncoder.save_pretrained``), see docs/reranking.md.
* :class:`HTTPReranker`: a ``/rerank`` endpoint, as served by Text Embeddings Inference, Cohere,
  Jina and vLLM.

:func:`mmr` (Maximal Marginal Relevance) picks relevant passages that are not near-duplicates of
ones already picked. torch, sentence-transformers and numpy are imported only when used.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

from pgrag.config import Settings
from pgrag.errors import ConfigError, InputError, RerankError
from pgrag.http import Endpoint, error_excerpt, one_line

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "CrossEncoderReranker",
    "HTTPReranker",
    "Reranker",
    "mmr",
    "rerank",
    "reranker_from_settings",
]

_DOCS = "see docs/reranking.md"


class Reranker(Protocol):
    """Anything that scores passages against a query; higher means more relevant."""

    name: str

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One finite score per passage, in the order given."""
        ...


class _HasText(Protocol):
    @property
    def text(self) -> str: ...


T = TypeVar("T")
TextT = TypeVar("TextT", bound=_HasText)


# --- a local cross-encoder -----------------------------------------------------------------


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` loaded from a local directory, never a hub.

    The directory is checked when the reranker is made; the model is loaded (seconds: torch)
    on the first :meth:`score`. The score is the model's raw output (its logit, no sigmoid),
    which orders passages exactly as the sigmoid would without saturating to ties. A model
    with two outputs is read as (not relevant, relevant) and scored ``logit[1] - logit[0]``;
    other shapes are refused. Pairs longer than ``max_length`` tokens are truncated.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 32,
        max_length: int = 512,
        device: str = "cpu",
        name: str | None = None,
    ) -> None:
        given = Path(path).expanduser()
        if not given.is_dir():
            raise ConfigError(
                f"reranker model directory {str(path)!r} does not exist; pgrag never downloads"
                f" models: copy a cross-encoder directory there or fix PGRAG_RERANKER ({_DOCS})"
            )
        if not (given / "config.json").is_file():
            raise ConfigError(
                f"{str(path)!r} is not a cross-encoder model directory (no config.json); point"
                f" PGRAG_RERANKER at a directory saved with CrossEncoder.save_pretrained ({_DOCS})"
            )
        if batch_size < 1 or max_length < 1:
            raise ConfigError("the reranker's batch_size and max_length must be at least 1")
        self.path = given.resolve()
        self.name = name or self.path.name
        self.batch_size, self.max_length, self.device = batch_size, max_length, device
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                # The directory is local; make sure no library reaches for a hub regardless.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                import torch
                from sentence_transformers import CrossEncoder
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
                try:
                    model = CrossEncoder(
                        str(self.path),
                        device=self.device,
                        max_length=self.max_length,
                        local_files_only=True,
                        activation_fn=torch.nn.Identity(),
                    )
                except (OSError, ValueError, KeyError) as exc:
                    raise ConfigError(
                        f"cannot load a cross-encoder from {str(self.path)!r}"
                        f" ({one_line(str(exc), 160)}); {_DOCS}"
                    ) from exc
                if model.num_labels not in (1, 2):
                    raise ConfigError(
                        f"{str(self.path)!r} has {model.num_labels} outputs; a reranker needs"
                        " one relevance score (or two: not relevant, relevant)"
                    )
                self._model = model
        return self._model

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        model = self._load()
        logits = model.predict(
            [(query, passage) for passage in passages],
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        if model.num_labels == 2:
            return [float(row[1] - row[0]) for row in logits]
        return [float(value) for value in logits.reshape(-1)]


# --- an HTTP rerank endpoint ---------------------------------------------------------------


def rerank_url(url: str) -> str:
    """The URL requests go to: ``url`` itself, with ``/rerank`` appended when its path is
    empty or ends in ``/v1`` or ``/v2`` (``http://h:8080`` -> ``http://h:8080/rerank``)."""
    cleaned = url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(cleaned)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"the reranker URL must look like http://host:port/rerank, got {url!r};"
            " fix PGRAG_RERANKER"
        )
    if parts.path == "" or parts.path.endswith(("/v1", "/v2")):
        return urllib.parse.urlunsplit(parts._replace(path=parts.path + "/rerank"))
    return cleaned


def _shown(url: str) -> str:
    """The URL for messages: any user:password@ is masked."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.split("@")[-1]))


class HTTPReranker:
    """Scores passages with a rerank endpoint; see docs/reranking.md.

    ``style`` chooses the request body: ``'tei'`` (Text Embeddings Inference)
    ``{"query", "texts", "raw_scores": false, "truncate": true}``, or ``'cohere'`` (Cohere,
    Jina, vLLM) ``{"model", "query", "documents", "top_n"}``. By default it is ``'cohere'``
    when a ``model`` is given, else ``'tei'``. Either response is accepted: TEI's list of
    ``{"index", "score"}`` or Cohere's ``{"results": [{"index", "relevance_score"}]}``.

    Passages go in batches of ``batch_size`` (TEI refuses more than 32 by default). HTTP 429,
    5xx and dropped connections are retried ``retries`` times with exponential backoff (a
    refused connection once, a timeout not at all); redirects are not followed. ``api_key``
    is sent as ``Authorization: Bearer ...`` to this URL only.
    """

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        style: Literal["tei", "cohere"] | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        batch_size: int = 32,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = rerank_url(url)
        if style not in (None, "tei", "cohere"):
            raise ConfigError(f"the reranker style must be 'tei' or 'cohere', got {style!r}")
        if not 0 < timeout < math.inf or retries < 0 or batch_size < 1:
            raise ConfigError(
                "the reranker timeout must be positive, retries at least 0, batch_size at least 1"
            )
        self.model, self.api_key = model or None, api_key or None
        self.style: Literal["tei", "cohere"] = style or ("cohere" if self.model else "tei")
        self.name = self.model or _shown(self.url)
        self.timeout, self.retries, self.batch_size = timeout, retries, batch_size
        self._sleep = sleep
        self.endpoint = Endpoint(
            url=self.url,
            label="reranker",
            error=RerankError,
            timeout=timeout,
            retries=retries,
            setting="PGRAG_RERANKER to the final URL",
            unreachable_hint="is the server running? Fix PGRAG_RERANKER or unset it to search"
            " without reranking",
            timeout_hint="check that the server is not overloaded, or rerank fewer passages",
            logs_hint="check the rerank server's logs",
            hints={
                401: "check PGRAG_RERANKER_API_KEY",
                403: "check PGRAG_RERANKER_API_KEY",
                404: "check the URL: TEI serves POST /rerank, Cohere and Jina POST /v1/rerank",
                413: "the request is too large for the server; lower the batch size",
            },
            default_hint="check PGRAG_RERANKER_MODEL: set it for Cohere, Jina or vLLM, leave it"
            " unset for Text Embeddings Inference",
            shown=_shown(self.url),
        )

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(passages), self.batch_size):
            scores.extend(self._score_batch(query, list(passages[start : start + self.batch_size])))
        return scores

    def _score_batch(self, query: str, passages: list[str]) -> list[float]:
        body: dict[str, Any]
        if self.style == "tei":
            body = {"query": query, "texts": passages, "raw_scores": False, "truncate": True}
        else:
            body = {"query": query, "documents": passages, "top_n": len(passages)}
            if self.model:
                body = {"model": self.model} | body
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "pgrag",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        raw = self.endpoint.post(
            json.dumps(body).encode("utf-8"),
            headers,
            lambda response: self.endpoint.read(response.read),
            sleep=self._sleep,
        )
        return self._parse(raw, len(passages))

    def _parse(self, raw: bytes, count: int) -> list[float]:
        """Scores in passage order from either response shape; every index exactly once."""
        try:
            payload = json.loads(raw)
        except ValueError:
            raise self._malformed("not JSON", raw) from None
        if isinstance(payload, dict) and "results" in payload:
            items, key = payload["results"], "relevance_score"
        elif isinstance(payload, list):
            items, key = payload, "score"
        elif isinstance(payload, dict) and ("error" in payload or "message" in payload):
            raise RerankError(
                f"reranker {_shown(self.url)} answered an error: {error_excerpt(raw)};"
                " check the server's logs"
            )
        else:
            raise self._malformed("neither a list nor an object with results", raw)
        if not isinstance(items, list):
            raise self._malformed("results is not a list", raw)
        scores: list[float | None] = [None] * count
        for item in items:
            index = item.get("index") if isinstance(item, dict) else None
            value = item.get(key, item.get("score")) if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise self._malformed(f"an index outside 0..{count - 1}", raw)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise self._malformed(f"no numeric {key} for index {index}", raw)
            if scores[index] is not None or not math.isfinite(value):
                raise self._malformed(f"a repeated index or non-finite score at {index}", raw)
            scores[index] = float(value)
        found = [s for s in scores if s is not None]
        if len(found) != count:
            raise self._malformed(f"{len(found)} scores for {count} passages", raw)
        return found

    def _malformed(self, what: str, raw: bytes) -> RerankError:
        excerpt = one_line(raw.decode("utf-8", errors="replace"), 120)
        return RerankError(
            f"reranker {_shown(self.url)} answered something that is not a rerank response"
            f" ({what}: {excerpt!r}); check that PGRAG_RERANKER points at a /rerank endpoint"
        )


# --- choosing one --------------------------------------------------------------------------


def reranker_from_settings(settings: Settings, spec: str | None = None) -> Reranker | None:
    """The reranker ``spec`` names, or None for no reranking.

    ``spec`` is ``None`` (``PGRAG_RERANKER`` in ``settings``), ``""`` or ``"none"`` (no
    reranker), an ``http(s)://`` URL (:class:`HTTPReranker`), or else a local directory
    (:class:`CrossEncoderReranker`). For a URL, ``PGRAG_RERANKER_MODEL`` names the model (and
    so selects the Cohere/Jina request style) and ``PGRAG_RERANKER_API_KEY`` is sent to that URL
    only; no other variable (``COHERE_API_KEY``, ``OPENAI_API_KEY``...) is ever used.
    """
    if spec is None:
        spec = settings.reranker or ""
    spec = spec.strip()
    if spec.lower() in ("", "none"):
        return None
    scheme = urllib.parse.urlsplit(spec).scheme.lower()
    if scheme in ("http", "https"):
        return HTTPReranker(spec, model=settings.reranker_model, api_key=settings.reranker_api_key)
    if "://" in spec:
        raise ConfigError(
            f"the reranker {spec!r} is neither an http(s) URL nor a local directory;"
            f" fix PGRAG_RERANKER ({_DOCS})"
        )
    return CrossEncoderReranker(spec)


# --- applying one --------------------------------------------------------------------------


@overload
def rerank(
    query: str, items: Sequence[TextT], reranker: Reranker, *, top_k: int | None = None
) -> list[tuple[TextT, float]]: ...


@overload
def rerank(
    query: str,
    items: Sequence[T],
    reranker: Reranker,
    *,
    text: Callable[[T], str],
    top_k: int | None = None,
) -> list[tuple[T, float]]: ...


def rerank(
    query: str,
    items: Sequence[Any],
    reranker: Reranker,
    *,
    text: Callable[[Any], str] | None = None,
    top_k: int | None = None,
) -> list[tuple[Any, float]]:
    """``items`` with their scores, most relevant first; ties keep their input order.

    ``text(item)`` is what the reranker reads (``item.text`` by default: a ``SearchResult``
    works as is). ``top_k`` keeps only the best ones.
    """
    if top_k is not None and top_k < 1:
        raise InputError(f"top_k must be at least 1, got {top_k}")
    if not items:
        return []
    read = text if text is not None else (lambda item: item.text)
    scores = reranker.score(query, [read(item) for item in items])
    if len(scores) != len(items):
        raise RerankError(
            f"reranker {reranker.name} returned {len(scores)} scores for {len(items)} passages"
        )
    try:
        values = [float(s) for s in scores]
    except (TypeError, ValueError):
        values = [math.nan]
    if not all(math.isfinite(v) for v in values):
        raise RerankError(f"reranker {reranker.name} returned a score that is not a finite number")
    order = sorted(range(len(items)), key=lambda i: -values[i])  # sorted() is stable
    return [(items[i], values[i]) for i in order[:top_k]]


def mmr(
    query_vector: npt.ArrayLike, vectors: npt.ArrayLike, *, k: int, lambda_: float = 0.5
) -> list[int]:
    """Maximal Marginal Relevance: indices of up to ``k`` rows of ``vectors``, in pick order.

    Each pick maximises ``lambda_ * sim(query, v) - (1 - lambda_) * max sim(v, picked)`` with
    cosine similarity. The first pick is the most relevant row; ``lambda_=1`` is plain
    relevance order and smaller values push near-duplicates of earlier picks down
    (``lambda_=0`` is diversity alone). Ties go to the earlier row. A zero vector has
    similarity 0 to everything.
    """
    import numpy as np

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"mmr needs k >= 1, got {k!r}")
    if not 0.0 <= lambda_ <= 1.0:
        raise InputError(f"mmr needs 0 <= lambda_ <= 1, got {lambda_!r}")
    query = np.asarray(query_vector, dtype=np.float64)
    matrix = np.asarray(vectors, dtype=np.float64)
    if matrix.size == 0 and matrix.ndim <= 2:
        return []
    if query.ndim != 1 or matrix.ndim != 2 or matrix.shape[1] != query.shape[0]:
        raise InputError(
            f"mmr needs a query vector of dimension d and an (n, d) matrix, got shapes"
            f" {query.shape} and {matrix.shape}"
        )
    if not (np.isfinite(query).all() and np.isfinite(matrix).all()):
        raise InputError("mmr got a vector with NaN or infinite values")

    def unit(array: Any) -> Any:
        norms = np.linalg.norm(array, axis=-1, keepdims=True)
        return np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)

    matrix = unit(matrix)
    relevance = matrix @ unit(query)
    redundancy = np.full(len(matrix), -1.0)  # max similarity to anything picked so far
    available = np.ones(len(matrix), dtype=bool)
    picked: list[int] = []
    for _ in range(min(k, len(matrix))):
        if picked:
            gain = lambda_ * relevance - (1.0 - lambda_) * redundancy
        else:
            gain = relevance.copy()
        gain[~available] = -np.inf
        best = int(np.argmax(gain))
        picked.append(best)
        available[best] = False
        redundancy = np.maximum(redundancy, matrix @ matrix[best])
    return picked
