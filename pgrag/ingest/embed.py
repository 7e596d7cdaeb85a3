"""Embedding an ingest's chunks in batches: each distinct new text once, and none that the
collection already has a vector for (in any document the session may read), nor any that
brought its own (:mod:`pgrag.ingest.vectors`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pgrag.collections import Collection
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import PgragError
from pgrag.ingest.plan import PreparedDoc
from pgrag.ingest.report import IngestReport

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder

Q = queries.load(__name__)


# A chunk that brings its own vector weighs this much less in a batch than one to embed: the
# batch size bounds how much is embedded between commits, and writing alone is cheap. (2,067
# SQuAD paragraphs with vectors: 2.7 s in batches of 64 chunks, 2.3 s of 512; the keyword
# trigger and the staging statements run once per batch.)
OWN_VECTOR_SHARE = 8


def batches(docs: list[PreparedDoc], size: int) -> Iterable[list[PreparedDoc]]:
    """Whole documents, in batches of about ``size`` chunks to embed (a document with its own
    vector counts for 1/:data:`OWN_VECTOR_SHARE` of a chunk)."""
    batch: list[PreparedDoc] = []
    n = 0.0
    for doc in docs:
        batch.append(doc)
        n += len(doc.chunks) / (1 if doc.file.vector is None else OWN_VECTOR_SHARE)
        if n >= size:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


def embed_batch(
    batch: list[PreparedDoc],
    embedder: Embedder,
    report: IngestReport,
    db: Database | None = None,
    coll: Collection | None = None,
    *,
    size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> list[list[Any]]:
    """Vectors for every chunk of the batch, embedding each distinct new text once: a text
    the collection already has a vector for (in any document the session may read, never
    another tenant's: embed.sql) is not embedded again. Texts go to the model ``size`` at a
    time, and ``progress(n)`` hears of each ``n`` embedded (a batch that is one large
    document moves the progress bar as it is embedded). A chunk that brought its own vector
    gets it, and is never embedded."""
    todo: dict[str, str] = {}
    given: dict[str, Any] = {}
    for doc in batch:
        for chunk in doc.chunks:
            if chunk.vector is not None:
                given[chunk.content_hash] = chunk.vector
            else:
                todo.setdefault(chunk.content_hash, chunk.embed_text)
    fresh: dict[str, Any] = {}
    if todo and db is not None and coll is not None:
        fresh = stored_vectors(db, coll, list(todo))
        todo = {h: t for h, t in todo.items() if h not in fresh}
    fresh.update(given)
    hashes, texts = list(todo), list(todo.values())
    for start in range(0, len(texts), max(1, size)):
        part = texts[start : start + max(1, size)]
        matrix = embedder.embed(part)
        if matrix.shape != (len(part), embedder.dimension):
            raise PgragError(
                f"embedding model {embedder.name!r} returned vectors of shape {matrix.shape},"
                f" expected ({len(part)}, {embedder.dimension})"
            )
        fresh.update(zip(hashes[start : start + len(part)], matrix, strict=True))
        report.chunks_embedded += len(part)
        if progress:
            progress(len(part))
    return [[fresh[c.content_hash] for c in doc.chunks] for doc in batch]


def stored_vectors(
    db: Database, coll: Collection, hashes: list[str], *, vectors: bool = True
) -> dict[str, Any]:
    """Stored vectors of the collection's model for chunks with these content hashes
    (chunks_collection_hash_idx, migration 0005); with ``vectors=False`` only which hashes
    have one (the values are None)."""
    with transaction(db) as conn:
        return vectors_by_hash(conn, coll, hashes, vectors=vectors)


def vectors_by_hash(
    conn: Any, coll: Collection, hashes: list[str], *, vectors: bool = True
) -> dict[str, Any]:
    """:func:`stored_vectors`, in the caller's transaction."""
    rows = conn.execute(
        Q.vectors_by_hash,
        {
            "vectors": vectors,
            "model_id": coll.model_id,
            "collection_id": coll.id,
            "prefixes": [h[:16] for h in hashes],
            "hashes": hashes,
        },
    ).fetchall()
    return dict(rows)
