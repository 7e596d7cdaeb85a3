"""The query-embedding cache: a question asked again is not embedded again.

Two levels, both keyed by the model and the exact question text, and both scoped to who asks
(the login role and the principals searched as), so that nobody can tell from a fast answer
whether someone else asked the same thing:

- in this process, the last :data:`MEMORY_ENTRIES` vectors;
- in the database, ``pgrag.query_embedding_cache`` (migration 0008), through the SECURITY
  DEFINER functions ``query_cache_get`` / ``query_cache_put``, which scope entries to the
  session themselves. This one serves separate processes too: a second ``pgrag ask`` of the
  same question does not load the embedding model at all.

``Database.query_cache = False`` (``--no-query-cache``), or ``PGRAG_QUERY_CACHE=off`` in the
connection's settings, turns the database level off; the cache table is readable by its owner
only.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgrag.db import principals as access
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import DatabaseError, InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder
    from pgrag.embeddings.models import Model

Q = queries.load(__name__)

MEMORY_ENTRIES = 1024
_memory: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_lock = threading.Lock()
stats = {"memory": 0, "database": 0, "encoded": 0}  # where vectors came from, for tests


def enabled(db: Database) -> bool:
    """Whether the database level is on for this connection: ``db.query_cache`` and its
    settings' ``PGRAG_QUERY_CACHE``."""
    return db.query_cache and db.settings.query_cache_enabled


def embed_query(
    db: Database,
    model: Model,
    embedder: Embedder,
    text: str,
    principals: Sequence[str] | None,
) -> Any:
    """The vector of ``text`` under ``model``, from a cache when it was asked before."""
    import numpy as np

    digest = hashlib.sha256(text.encode("utf-8")).digest()
    scope = (db.conn.info.user, tuple(principals) if principals is not None else None)
    key = (db.dsn, model.id, model.dimension, scope, digest)
    with _lock:
        if key in _memory:
            _memory.move_to_end(key)
            stats["memory"] += 1
            return _memory[key]
    use_db = enabled(db)
    vector = None
    if use_db:
        with transaction(db) as conn:
            access.apply(conn, principals)
            row = conn.execute(Q.cached_vector, {"model_id": model.id, "digest": digest}).fetchone()
        if row is not None and row[0] is not None:
            vector = np.asarray(json.loads(row[0]), dtype=np.float32)
            if vector.shape != (model.dimension,) or not _searchable(vector):
                vector = None
            else:
                stats["database"] += 1
    if vector is None:
        vector = np.asarray(embedder.embed([text])[0], dtype=np.float32)
        stats["encoded"] += 1
        check_query_vector(vector, embedder.name)
        if use_db:
            _store(db, model, digest, vector, principals)
    with _lock:
        _memory[key] = vector
        while len(_memory) > MEMORY_ENTRIES:
            _memory.popitem(last=False)
    return vector


def _store(
    db: Database, model: Model, digest: bytes, vector: Any, principals: Sequence[str] | None
) -> None:
    """Cache ``vector`` in the database, unless this session may not write (a read replica,
    ``default_transaction_read_only``): the cache is an optimisation, never a reason to fail."""
    import psycopg

    try:
        with transaction(db) as conn:
            access.apply(conn, principals)
            conn.execute(
                Q.cache_vector, {"model_id": model.id, "digest": digest, "vector": _text(vector)}
            )
    except DatabaseError as err:
        if not isinstance(err.__cause__, psycopg.errors.ReadOnlySqlTransaction):
            raise


def _searchable(vector: Any) -> bool:
    """Whether pgvector's distances to ``vector`` mean anything: it computes them in single
    precision, so the squared length in float32 must be well inside that range (a vector of
    1e-23s has a fine double-precision norm but a float32 squared length of 0, and 1e38s one
    of infinity: NaN or constant distances). The bounds are sql/functions/search.sql's."""
    import numpy as np

    v32 = np.asarray(vector, dtype=np.float32)
    with np.errstate(all="ignore"):
        squared = float(np.sum(v32 * v32, dtype=np.float32))
    return bool(np.isfinite(squared)) and SQUARED_MIN <= squared <= SQUARED_MAX


SQUARED_MIN, SQUARED_MAX = 1e-30, 1e30  # a norm between 1e-15 and 1e15


def check_query_vector(vector: Any, model: str) -> None:
    """Refuse a query vector with no direction (all zeros), a non-finite length, or one whose
    single-precision squared length under- or overflows: every distance to it would be NaN or
    the same, so a search would rank by chunk id and sound confident."""
    if not _searchable(vector):
        raise InputError(
            f"embedding model {model!r} returned a zero, non-finite or unusable vector for the"
            " query (a search vector's norm must be between 1e-15 and 1e15, in single"
            " precision); it cannot be searched with (check the embedder, or search with"
            " mode='keyword')"
        )


def _text(vector: Any) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def clear_memory() -> None:
    with _lock:
        _memory.clear()
