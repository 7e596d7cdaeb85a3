"""Retrieval confidence: how likely the retrieved passages are to hold the answer.

An answer can only be as good as the passages it is built from. When they are off the point,
the collection most likely does not hold the answer, and the honest reply is "I don't know"
without asking the generator at all. The confidence is the mean of two numbers in [0, 1]:

- **similarity**: the question's embedding similarity to its nearest retrieved chunk, read from
  the vector arm's distance under the collection's active model (cosine similarity for cosine
  distance, the inner product for inner-product distance, 1 - d²/2 for L2 over normalised
  vectors);
- **coverage**: the share of the question's content words (words in any script, English stop
  words dropped, light stemming) that the top-ranked passage (its title, section and text)
  contains; 0 for a question with none ("Who is he?").

Similarity alone tells a question on the collection's subject from one off it; coverage also
catches a question on the subject whose particular fact is missing. On SQuAD with half of the
paragraphs withheld, the mean separates answerable from unanswerable questions better than
either alone (docs/benchmarks.md). No vector hit (the model's vectors are still being built)
gives ``None``, and then no threshold applies.

The threshold below which ``ask`` abstains is calibrated by ``pgrag eval answers`` (the
confidence below which a chosen share of answerable questions falls) and is read, in order,
from the ``min_confidence`` argument, ``PGRAG_MIN_CONFIDENCE``, and the collection's active
model (``pgrag.embedding_models.min_confidence``, written by ``pgrag eval answers --save``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgrag.config import Settings
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.embeddings.local import DEFAULT_MODEL_NAME
from pgrag.embeddings.models import BUNDLED
from pgrag.errors import ConfigError
from pgrag.text.stemming import content_stems

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.retrieval.search import SearchResult

Q = queries.load(__name__)

ENV = "PGRAG_MIN_CONFIDENCE"
# The bundled model's threshold until one is calibrated for it: what `pgrag eval answers
# --max-false-refusal 0.02` calibrated on SQuAD v1.1 dev (docs/benchmarks.md). Questions off
# the collection's subject score near 0; answerable ones rarely below this.
BUNDLED_DEFAULT = 0.36


def similarity(distance: float, kind: str) -> float:
    """The similarity a pgvector distance of the given kind stands for."""
    if kind == "cosine":
        return 1.0 - distance
    if kind == "inner_product":
        return -distance  # pgvector's <#> is the negative inner product
    return 1.0 - distance * distance / 2.0  # l2 over normalised vectors


@dataclass(frozen=True)
class Confidence:
    value: float  # the mean of the two below
    similarity: float
    coverage: float

    def to_dict(self) -> dict[str, float]:
        return {"similarity": self.similarity, "coverage": self.coverage}


def retrieval_confidence(
    question: str, results: Sequence[SearchResult], kind: str
) -> Confidence | None:
    """The confidence of ``results`` (in rank order) for ``question``; None without a vector
    hit. ``kind`` is the distance of the model that searched."""
    distances = [r.vector_distance for r in results if r.vector_distance is not None]
    if not distances:
        return None
    near = max(0.0, min(1.0, similarity(min(distances), kind)))
    asked = content_stems(question)
    top = min(results, key=lambda r: r.rank)
    held = content_stems(f"{top.title or ''} {top.section or ''} {top.text}")
    # A question of stop words only ("Who is he?") names nothing a passage could hold.
    coverage = len(asked & held) / len(asked) if asked else 0.0
    return Confidence(round((near + coverage) / 2, 4), round(near, 4), round(coverage, 4))


OFF = ("off", "none")  # what a threshold setting says for "no threshold"


def parse_setting(value: str, where: str) -> float | None:
    """A threshold as a user writes it (``PGRAG_MIN_CONFIDENCE``, ``--min-confidence``): a
    number between 0 and 1, or ``off`` / ``none`` (None: no threshold)."""
    return None if value.strip().lower() in OFF else parse_threshold(value, where)


def parse_threshold(value: str | float, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 <= number <= 1:  # (NaN too)
        raise ConfigError(
            f"{where} must be a number between 0 and 1 (a confidence such as 0.36), got"
            f" {value!r}; `pgrag eval answers` calibrates one"
        )
    return number


Model = tuple[str, str, float | None, str | None]


def collection_model(db: Database, collection: str) -> Model | None:
    """(name, distance, threshold, where the threshold comes from) of ``collection``'s active
    model, or None. The threshold is the calibrated one, else :data:`BUNDLED_DEFAULT` for the
    bundled model, else None."""
    with transaction(db) as conn:
        row = conn.execute(Q.active_model, {"c": collection}).fetchone()
    if row is None:
        return None
    name, distance, calibrated, provider, package, has_path = row
    if calibrated is not None:
        return name, distance, float(calibrated), f"calibrated for model {name}"
    # Rows registered before migration 0008 record no package: the bundled model is then the
    # one with its name and no path, as pgrag.models builds it.
    bundled = package == BUNDLED or (
        package is None
        and not has_path
        and provider == "sentence-transformers"
        and name == DEFAULT_MODEL_NAME
    )
    if bundled:
        return name, distance, BUNDLED_DEFAULT, "the bundled model's default"
    return name, distance, None, None


def threshold_for(model: Model | None, settings: Settings) -> tuple[float | None, str | None]:
    """The abstention threshold in effect and where it comes from: ``PGRAG_MIN_CONFIDENCE``
    in ``settings`` (``off`` or ``none``: no threshold), else the value calibrated for
    ``model`` (see :func:`collection_model`), else (None, None)."""
    raw = settings.min_confidence
    if raw is not None:
        value = parse_setting(raw, ENV)
        return (None, None) if value is None else (value, ENV)
    if model is None:
        return None, None
    return model[2], model[3]


def describe(confidence: float | None, threshold: float | None, origin: str | None) -> str:
    shown = "none" if confidence is None else f"{confidence:.3f}"
    return (
        f"retrieval confidence {shown} is below the threshold {threshold:.3f} ({origin});"
        " the sources most likely do not hold the answer"
    )
