"""Retrieval confidence: how close the question came to anything in the collection.

An answer can only be as good as the passages it is built from. When the closest passage is
far from the question, the collection most likely does not hold the answer, and the honest
reply is "I don't know" without asking the generator at all. The confidence is the embedding
similarity of the question to its nearest retrieved chunk, read from the vector arm's distance
(cosine similarity for cosine distance, the inner product for inner-product distance, and
1 - d²/2 for L2 distance over normalised vectors). No vector hit gives ``None``.

The threshold below which ``ask`` abstains is calibrated by ``pgrag eval answers`` (the
confidence that the chosen share of answerable questions falls below) and is read, in order,
from the ``min_confidence`` argument, ``PGRAG_MIN_CONFIDENCE``, and the collection's active
model (``pgrag.embedding_models.min_confidence``, written by ``pgrag eval answers --save``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    from .db import Database
    from .search import SearchResult

ENV = "PGRAG_MIN_CONFIDENCE"


def similarity(distance: float, kind: str) -> float:
    """The similarity a pgvector distance of the given kind stands for."""
    if kind == "cosine":
        return 1.0 - distance
    if kind == "inner_product":
        return -distance  # pgvector's <#> is the negative inner product
    return 1.0 - distance * distance / 2.0  # l2 over normalised vectors


def retrieval_confidence(results: Sequence[SearchResult], kind: str) -> float | None:
    """The similarity of the question to its nearest retrieved chunk, or None."""
    distances = [r.vector_distance for r in results if r.vector_distance is not None]
    if not distances:
        return None
    return round(similarity(min(distances), kind), 4)


def parse_threshold(value: str | float, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ConfigError(
            f"{where} must be a number (a similarity such as 0.35), got {value!r};"
            " `pgrag eval answers` suggests one"
        )
    return number


def threshold_for(
    db: Database, collection: str, env: Mapping[str, str] | None = None
) -> tuple[float | None, str | None]:
    """The abstention threshold in effect for ``collection`` and where it comes from:
    ``PGRAG_MIN_CONFIDENCE``, else the active model's calibrated value, else (None, None)."""
    env = os.environ if env is None else env
    raw = env.get(ENV, "").strip()
    if raw:
        if raw.lower() in ("off", "none"):
            return None, None
        return parse_threshold(raw, ENV), ENV
    from .db import transaction

    with transaction(db) as conn:
        row = conn.execute(
            "SELECT m.min_confidence, m.name FROM pgrag.collections c"
            " JOIN pgrag.embedding_models m ON m.id = c.model_id WHERE c.name = %(c)s",
            {"c": collection},
        ).fetchone()
    if row is None or row[0] is None:
        return None, None
    return float(row[0]), f"calibrated for model {row[1]}"


def describe(confidence: float | None, threshold: float | None, origin: str | None) -> str:
    shown = "none" if confidence is None else f"{confidence:.2f}"
    return (
        f"retrieval confidence {shown} is below the threshold {threshold:.2f} ({origin});"
        " the sources most likely do not hold the answer"
    )
