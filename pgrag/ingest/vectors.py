"""Vectors an application brings with its documents (docs/ingest.md#bring-your-own-vectors).

A document given a vector (a JSON Lines record's ``embedding`` field, or ``from_text(...,
vector=...)``) is stored as one chunk, its whole text, with that vector for the collection's
active model; the encoder is never asked about it. :func:`check_vector` checks what does not
depend on the model (a non-empty list of finite numbers, not all zero) when the document is
made; :func:`fit` checks it against the model (its dimension) when the ingest plans it, and
makes it what the model's vectors are (unit length for a normalised model, such as the
bundled one; the direction, and so every cosine distance, is unchanged). Either refusal is an
:class:`~pgrag.errors.InputError` with a one-line reason: that document fails and the others
go in.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.collections import Collection
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder

Q = queries.load(__name__)

# A text given a vector is one chunk, never split; its stored tsvector must stay within
# PostgreSQL's 1 MB (100,000 characters of CJK text make about 420 kB of it).
MAX_TEXT_CHARS = 100_000
FLOAT4_MAX = 3.4028234663852886e38  # pgvector stores single-precision floats
HALFVEC_MAX = 65504.0  # and a halfvec index half-precision ones


def check_vector(value: object, what: str = "its vector") -> tuple[float, ...]:
    """``value`` as a vector: a non-empty list (or tuple, or 1-d numpy array) of finite
    numbers within single precision, not all zero. Refused with an InputError whose message
    starts with ``what``."""
    tolist = getattr(value, "tolist", None)  # a numpy array, or one of its rows
    if callable(tolist) and not isinstance(value, (str, bytes)):
        value = tolist()
    if not isinstance(value, (list, tuple)):
        raise InputError(
            f"{what} is {_kind(value)}, not a list of numbers; give the vector as an array"
            " such as [0.12, -0.03, ...], or leave it out to have the text embedded"
        )
    if not value:
        raise InputError(
            f"{what} is an empty list; give the model's vector, or leave it out to have the"
            " text embedded"
        )
    import numpy as np

    # The common case at numpy's speed (a Python loop over every element cost an ingest of
    # 2,000 precomputed 384-d vectors 1.7 s); anything it does not take plainly is refused
    # below with the position of the first bad element.
    array = None
    if set(map(type, value)) <= {float, int}:  # (type(True) is bool: booleans go below)
        try:
            array = np.asarray(value, dtype=np.float64)
        except OverflowError:
            array = None
    if (
        array is not None
        and bool(np.isfinite(array).all())
        and float(np.abs(array).max()) <= FLOAT4_MAX
    ):
        out = array.tolist()
    else:
        out = _checked_elements(value, what)
    if math.hypot(*out) == 0:
        raise InputError(
            f"{what} is all zeros: a vector with no direction cannot be searched; give the"
            " model's vector, or leave it out to have the text embedded"
        )
    return tuple(out)


def _checked_elements(value: list[Any] | tuple[Any, ...], what: str) -> list[float]:
    """Each element as a float, or an InputError naming the first that is not a finite number
    within single precision."""
    out: list[float] = []
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise InputError(
                f"{what} holds {_kind(x)} at position {i}; every element must be a number"
            )
        try:
            f = float(x)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            raise InputError(
                f"{what} holds {_short(x)} at position {i}; every element must be a finite number"
            )
        if abs(f) > FLOAT4_MAX:
            raise InputError(
                f"{what} holds {_short(x)} at position {i}, beyond the single-precision range"
                " (±3.4e38) that pgvector stores"
            )
        out.append(f)
    return out


def _short(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def vector_digest(vector: Sequence[float]) -> str:
    """SHA-256 of a checked vector (as doubles): part of its document's and its chunk's
    content hash, so that a new vector for the same text is a change."""
    return hashlib.sha256(struct.pack(f"<{len(vector)}d", *vector)).hexdigest()


@dataclass(frozen=True)
class VectorTarget:
    """What the vectors of a collection's model must be."""

    collection: str
    model: str
    dimension: int
    normalized: bool  # the model's vectors are unit length: a given one is scaled to it
    halfvec: bool  # the model's HNSW index holds half-precision floats


def target_for(
    db: Database, coll: Collection | None, embedder: Embedder, collection: str
) -> VectorTarget:
    """The target of an ingest into ``collection``: its active model (``embedder`` writes
    it), or for a new collection the model it will be created with (the configured one)."""
    with transaction(db) as conn:
        row = conn.execute(
            Q.model_index_type,
            {
                "model_id": None if coll is None else coll.model_id,
                "name": embedder.name,
                "dimension": embedder.dimension,
            },
        ).fetchone()
    return VectorTarget(
        collection=collection,
        model=embedder.name,
        dimension=embedder.dimension,
        normalized=bool(embedder.normalized),
        halfvec=row is not None and row[0] == "halfvec",
    )


def fit(vector: Sequence[float], target: VectorTarget) -> Any:
    """A checked vector (:func:`check_vector`) as it is stored for ``target``'s model: a
    numpy float32 array of its dimension, unit length for a normalised model. An
    InputError when it cannot be."""
    import numpy as np

    if len(vector) != target.dimension:
        raise InputError(
            f"has a vector of {len(vector)} numbers, but collection {target.collection!r} is"
            f" embedded with {target.model!r}, whose vectors have {target.dimension}; give"
            " that model's vectors, or leave the vector out to have the text embedded"
        )
    if target.normalized:
        norm = math.hypot(*vector)
        return np.asarray([x / norm for x in vector], dtype=np.float32)
    stored = np.asarray(vector, dtype=np.float32)
    # pgvector computes distances in single precision: the squared length must stay well
    # inside its range, as pgrag.search_v5 requires of a query vector.
    squared = math.fsum(float(x) * float(x) for x in stored)
    if not 1e-30 <= squared <= 1e30:
        raise InputError(
            f"has a vector of length (norm) {math.sqrt(squared):.3g}, which single-precision"
            " distances cannot use: its norm must be between 1e-15 and 1e15"
        )
    if target.halfvec and float(np.max(np.abs(stored))) > HALFVEC_MAX:
        raise InputError(
            f"has a vector with a value beyond ±{HALFVEC_MAX:g}, which the half-precision"
            f" index of model {target.model!r} cannot hold"
        )
    return stored
