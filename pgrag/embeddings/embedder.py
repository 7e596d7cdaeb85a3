"""What an embedder is: a name, a dimension, a token counter and ``embed``.

Implemented by the local sentence-transformers model (:mod:`pgrag.embeddings.local`) and any
OpenAI-compatible ``/v1/embeddings`` server (:mod:`pgrag.embeddings.remote`). This module
imports nothing of pgrag's but the token counter, so any family may name the type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from pgrag.text.tokens import TokenCounter

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


class Embedder(Protocol):
    name: str  # recorded in pgrag.embedding_models and checked on every write and query
    provider: str
    dimension: int
    max_tokens: int  # the model's maximum input length, special tokens included
    distance: str  # 'cosine', 'l2' or 'inner_product'
    normalized: bool

    @property
    def tokens(self) -> TokenCounter: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...
