"""Contextual ingest's prompt order against a REAL llama.cpp (llama-cpp-python).

Marked ``local`` (scripts/test-local runs it): tests/tiny_gguf.py's model, real tokenizer and
forward pass, random weights. What it checks is the claim the prompt order rests on:
llama-cpp-python keeps the tokens of its last call and evaluates only what follows the longest
common prefix, so with the document first a document's later chunks cost only their own
tokens, and with the chunk first every call evaluates the whole document again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pgrag.ingest.contextual import messages
from pgrag.llm.local import LocalChatClient, LocalLLMConfig

pytestmark = pytest.mark.local

DOCUMENT = " ".join(
    f"Paragraph {i}: the refund policy says monthly plans are refunded within 14 days."
    for i in range(12)
)
CHUNKS = [
    "Monthly plans are refunded within 14 days.",
    "Annual plans are refunded within 30 days.",
    "Refunds go to the original payment method.",
]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_gguf import write

    return write(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def evaluated(client: LocalChatClient, order: str) -> list[int]:
    """Tokens llama.cpp evaluated for each chunk's prompt, asked one after the other."""
    model: Any = client.model
    counts: list[int] = []
    real = model.eval

    def counting(tokens: Any) -> None:
        counts[-1] += len(tokens)
        real(tokens)

    model.eval = counting
    try:
        for chunk in CHUNKS:
            counts.append(0)
            client.complete(messages(DOCUMENT, chunk, order))
    finally:
        model.eval = real
    return counts


def test_the_document_first_order_is_evaluated_once(tiny_gguf: Path) -> None:
    client = LocalChatClient(LocalLLMConfig(tiny_gguf, n_ctx=2048, n_threads=1, max_tokens=4))
    document = client.count_tokens(DOCUMENT)
    first, *later = evaluated(client, "document-first")
    assert first > document  # (the chat template and the prompt's words besides)
    for n in later:  # the chunk, the instruction and the reply's tokens: not the document
        assert 0 < n < document / 3, (first, later)
    chunk_first = evaluated(client, "chunk-first")
    assert all(n > document for n in chunk_first), chunk_first
