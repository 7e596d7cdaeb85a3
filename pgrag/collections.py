"""Collections: named corpora, each with its chunking settings and its active embedding model.

Every family works in a collection: ingest creates one on first use (:func:`ensure_collection`),
search and answers read from one, ``pgrag acl`` and ``pgrag rm`` change one. A collection that
does not exist is :class:`~pgrag.errors.CollectionNotFound`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pgrag.db import principals, queries
from pgrag.db.connect import transaction
from pgrag.db.replica import read
from pgrag.embeddings.local import configured_embedder, require_model
from pgrag.embeddings.models import describe
from pgrag.errors import CollectionNotFound, InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder

Q = queries.load(__name__)

DEFAULT_CHUNK_TOKENS = 200  # a new collection's chunk size and overlap (the schema's defaults)
DEFAULT_CHUNK_OVERLAP = 40
COLLECTION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    text_config: str  # text search configuration, e.g. 'english'
    model_id: int
    chunk_tokens: int
    chunk_overlap: int
    # How its documents are chunked: "fixed" or "semantic" (collections.settings ->> 'chunking';
    # pgrag.text.semantic, docs/ingest.md#semantic-chunking).
    chunking: str = "fixed"


def check_name(name: str) -> None:
    """Refuse a name that is not a collection's (before anything is read or written)."""
    if not COLLECTION_NAME.match(name):
        raise InputError(
            f"invalid collection name {name!r}: use letters, digits and _ . : - (max 128),"
            " starting with a letter or digit"
        )


def ensure_collection(db: Database, name: str, embedder: Embedder | None = None) -> Collection:
    """Get a collection, creating it (and registering its embedding model) on first use."""
    check_name(name)
    embedder = embedder or configured_embedder(db)
    with transaction(db) as conn:
        conn.execute(
            Q.create_collection,
            {
                "name": name,
                "model": embedder.name,
                "provider": embedder.provider,
                "dim": embedder.dimension,
                "distance": embedder.distance,
                "normalized": embedder.normalized,
                "max_tokens": embedder.max_tokens,
            },
        )
    collection = get_collection(db, name)
    assert collection is not None
    check_model(db, collection, embedder)
    from psycopg.types.json import Jsonb

    with transaction(db) as conn:
        conn.execute(
            Q.record_model_source,
            {"settings": Jsonb(describe(embedder)), "model_id": collection.model_id},
        )
    return collection


def check_model(db: Database, collection: Collection, embedder: Embedder) -> None:
    """Refuse to write a collection with a model other than the one it is embedded with."""
    with transaction(db) as conn:
        row = conn.execute(Q.model_name_dimension, {"model_id": collection.model_id}).fetchone()
    require_model(collection.name, None if row is None else (row[0], row[1]), embedder)


def get_collection(db: Database, name: str) -> Collection | None:
    """The collection called ``name``, or None if there is none."""
    with transaction(db) as conn:
        row = conn.execute(Q.collection_by_name, {"name": name}).fetchone()
    return None if row is None else Collection(*row)


def check_chunking(chunking: str) -> None:
    """Refuse a chunking strategy pgrag does not know (before anything is read or written)."""
    from pgrag.text.semantic import STRATEGIES

    if chunking not in STRATEGIES:
        raise InputError(
            f"unknown chunking {chunking!r}: use {' or '.join(repr(s) for s in STRATEGIES)}"
        )


def chunking_for(collection: Collection | None, chunking: str | None, rechunk: bool) -> str:
    """How an ingest chunks: ``chunking`` if given, else the collection's (a new one's:
    "fixed"). A collection is chunked one way: asking for another is refused unless
    ``rechunk`` (which re-chunks every document the ingest reads, and records the new way)."""
    if chunking is not None:
        check_chunking(chunking)
    if collection is None:
        return chunking or "fixed"
    check_chunking(collection.chunking)
    if chunking is None or chunking == collection.chunking:
        return collection.chunking
    if not rechunk:
        raise InputError(
            f"collection {collection.name!r} is chunked {collection.chunking!r}, not"
            f" {chunking!r}: re-chunk its documents with --rechunk (rechunk=True), or use"
            " another collection"
        )
    return chunking


def record_chunking(db: Database, collection: Collection, chunking: str) -> Collection:
    """Record ``chunking`` as the collection's (when it is another): the collection as it is
    now."""
    check_chunking(chunking)
    if collection.chunking == chunking:
        return collection
    with transaction(db) as conn:
        conn.execute(Q.record_chunking, {"chunking": chunking, "collection_id": collection.id})
    return replace(collection, chunking=chunking)


def collection_id(conn: Any, name: str) -> int | None:
    """The id of the collection called ``name`` (in the caller's transaction), or None."""
    row = conn.execute(Q.collection_id, {"name": name}).fetchone()
    return None if row is None else int(row[0])


def require_collection_id(conn: Any, name: str) -> int:
    """The id of the collection called ``name``; :class:`CollectionNotFound` if there is none."""
    found = collection_id(conn, name)
    if found is None:
        raise CollectionNotFound(name)
    return found


def list_collections(db: Database) -> list[dict[str, Any]]:
    """Every collection with its model and the number of documents and chunks the session may
    read (``pgrag.collections_v2``, which restricted roles may call). ``estimated`` is true when
    ``documents`` is the planner's estimate (only for a session that sees everything, and only
    above ``pgrag.exact_count_limit`` documents; sql/functions/status.sql)."""

    def run(conn: Any) -> Any:
        principals.apply(conn, db.principals)  # a connection opened with principals counts theirs
        return conn.execute(Q.list_collections).fetchall()

    rows = read(db, run)  # (the read replica's, when there is one)
    keys = ("name", "model", "dimension", "documents", "chunks", "estimated")
    return [dict(zip(keys, r, strict=True)) for r in rows]
