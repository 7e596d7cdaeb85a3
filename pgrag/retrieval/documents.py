"""A whole document, as a search result or a citation names it: by its source in a
collection, or by the id of any of its chunks. Read through ``pgrag.document_chunks_v1``,
which returns only a document the session may read (one it may not is the same as one that
does not exist), and joined like a section (:func:`pgrag.retrieval.sections.join_chunks`:
the overlap between neighbouring chunks said once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgrag.db import principals as access
from pgrag.db import queries
from pgrag.db.replica import read
from pgrag.errors import InputError
from pgrag.retrieval.search import check_text, collection_model
from pgrag.retrieval.sections import join_chunks

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)
MAX_CHUNKS = 10_000  # the function's own default and the most one call returns


class DocumentNotFound(InputError):
    """No such document, or none the session may read (the two are not told apart)."""


@dataclass(frozen=True)
class Part:
    """One chunk of a document: where a passage of :attr:`Document.text` came from."""

    chunk_id: int
    ordinal: int
    section: str | None
    page: int | None


@dataclass(frozen=True)
class Document:
    collection: str
    document_id: int
    source: str
    title: str | None
    metadata: dict[str, Any]
    updated_at: datetime | None
    text: str
    parts: list[Part] = field(default_factory=list)
    chunks: int = 0  # how many the document has; more than len(parts) when truncated

    @property
    def truncated(self) -> bool:
        return self.chunks > len(self.parts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["updated_at"] = self.updated_at.isoformat() if self.updated_at else None
        out["truncated"] = self.truncated
        return out


def fetch_document(
    db: Database,
    source: str | None = None,
    *,
    collection: str | None = "default",
    chunk_id: int | None = None,
    max_chunks: int = MAX_CHUNKS,
    principals: Sequence[str] | None = None,
) -> Document:
    """The document ``source`` of ``collection``, or (with ``chunk_id``) the document that
    chunk belongs to (in ``collection`` unless that is None). ``principals`` overrides the
    connection's, as in :func:`pgrag.search`. Raises :class:`DocumentNotFound` when there is
    no such document the session may read, :class:`~pgrag.errors.CollectionNotFound` for a
    collection that does not exist."""
    if chunk_id is None and not (source and source.strip()):
        raise InputError(
            "name the document: its source (as search results show it) or a chunk_id from"
            " a search result"
        )
    if chunk_id is not None and chunk_id < 1:
        raise InputError(f"chunk_id must be a positive chunk id from a search, got {chunk_id}")
    if source is not None:
        check_text(source, "the document's source")
    if not 1 <= max_chunks <= MAX_CHUNKS:
        raise InputError(f"max_chunks must be between 1 and {MAX_CHUNKS}, got {max_chunks}")
    if collection is not None:
        collection_model(db, collection)  # CollectionNotFound, said as such
    readers = db.principals if principals is None else principals
    arguments = {
        "collection": collection,
        "source": None if chunk_id is not None else source,
        "chunk_id": chunk_id,
        "n": max_chunks,
    }

    def run(conn: Any) -> Any:
        access.apply(conn, readers)
        return conn.execute(Q.document_chunks, arguments).fetchall()

    rows = read(db, run)  # (the read replica's, when there is one)
    if not rows:
        where = f" in collection {collection!r}" if collection is not None else ""
        what = f"no chunk {chunk_id}" if chunk_id is not None else f"no document {source!r}"
        raise DocumentNotFound(
            f"{what}{where} that you may read: search for it and pass a result's source or chunk_id"
        )
    first = rows[0]
    return Document(
        collection=first[0],
        document_id=first[1],
        source=first[2],
        title=first[3],
        metadata=first[4] or {},
        updated_at=first[5],
        chunks=int(first[6]),
        text=join_chunks([(r[8], r[11]) for r in rows]),
        parts=[Part(chunk_id=r[7], ordinal=r[8], section=r[9], page=r[10]) for r in rows],
    )
