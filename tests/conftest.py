"""Fixtures both kinds of test use: a clean environment, a small corpus, and the fake HTTP
servers at the edge of the system (tests/fakes.py). The database fixtures are in
tests/integration/conftest.py, so that tests/unit cannot ask for one.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import EmbeddingServer, LLMServer, StandInLlama, stand_in_logits_ith


@pytest.fixture(autouse=True)
def _no_ambient_database(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests say which database they use; nothing leaks in from the developer's shell.
    for name in (
        "PGRAG_DSN",
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGDATABASE",
        "PGUSER",
        "PGSERVICE",
        "PGRAG_LLM_BASE_URL",
        "PGRAG_LLM_MODEL",
        "PGRAG_LLM_API_KEY",
        "PGRAG_LLM_TEMPLATE",
        "PGRAG_LLM_TOKENIZER",
        "PGRAG_LLM_GGUF",
        "PGRAG_LLM_CTX",
        "PGRAG_LLM_THREADS",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "PGRAG_COLLECTION",
        "PGRAG_EMBEDDING_MODEL",
        "PGRAG_RERANKER",
        "PGRAG_RERANKER_MODEL",
        "PGRAG_RERANKER_API_KEY",
        "PGRAG_MIN_CONFIDENCE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A small corpus whose facts are distinct enough to check answers against."""
    root = tmp_path / "corpus"
    (root / "policies").mkdir(parents=True)
    (root / "policies" / "refunds.md").write_text(
        "# Refund policy\n\n"
        "## Annual plans\n\n"
        "Customers on annual plans can request a full refund within 30 days of purchase. "
        "After thirty days, refunds are prorated by the unused months.\n\n"
        "## Monthly plans\n\n"
        "Monthly subscriptions can be refunded within 14 days. "
        "Refunds go back to the original payment method within 5 to 10 business days.\n"
    )
    (root / "policies" / "security.md").write_text(
        "# Security\n\n"
        "## Passwords\n\n"
        "Passwords must be at least 14 characters long and are rotated every year. "
        "Two-factor authentication is required for every employee account.\n\n"
        "## Incidents\n\n"
        "Report a suspected breach to the security team within 24 hours.\n"
    )
    (root / "office.txt").write_text(
        "The Lisbon office opens at 8:00 and closes at 18:00 on weekdays.\n\n"
        "Guests sign in at reception and wear a visitor badge. "
        "Bicycles are parked in the inner courtyard.\n"
    )
    return root


# --- model servers at the edge (tests/fakes.py) ----------------------------------------------


@pytest.fixture
def hash_server() -> Iterator[EmbeddingServer]:
    """An OpenAI-compatible embedding server with 64-d feature-hashed bags of words."""
    server = EmbeddingServer(dimension=64)
    yield server
    server.close()


@pytest.fixture
def completions_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    """A model server for base models (``/v1/completions`` with log-probabilities); its chat
    endpoint answers ``reply`` as one JSON body even when asked to stream."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    server = LLMServer(stream_chat=False)
    yield server
    server.close()


# --- a local GGUF model: a file that looks like one, and a stand-in llama_cpp ---------------


@pytest.fixture
def gguf_file(tmp_path: Path) -> Path:
    """A file that passes the magic-bytes check (it is not a loadable model)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 64)
    return path


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[StandInLlama]]:
    module = types.ModuleType("llama_cpp")
    module.Llama = StandInLlama  # type: ignore[attr-defined]
    module.llama_get_logits_ith = stand_in_logits_ith  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    monkeypatch.setattr(StandInLlama, "loads", [])
    monkeypatch.setattr(StandInLlama, "replies", [])
    yield StandInLlama
