"""Listing a collection's documents as the session may read them (``pgrag.documents_v1``,
which restricted roles may call), a page at a time in the order of their sources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgrag.collections import require_collection_id
from pgrag.db import principals, queries
from pgrag.db.replica import read
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)
MAX_PAGE = 1000


def list_documents(
    db: Database, collection: str, *, limit: int = 100, after: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """(up to ``limit`` documents whose source sorts after ``after``, the ``after`` of the
    next page or None when this one is the last), read as ``db.principals``. An unknown
    collection is :class:`pgrag.CollectionNotFound`."""
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be 1-{MAX_PAGE}, got {limit}")
    arguments = {"collection": collection, "after": after, "limit": limit + 1}

    def run(conn: Any) -> Any:
        principals.apply(conn, db.principals)
        require_collection_id(conn, collection)
        return conn.execute(Q.documents_page, arguments).fetchall()

    rows = read(db, run)  # (the read replica's, when there is one)
    page = [
        {
            "document_id": r[0],
            "source": r[1],
            "title": r[2],
            "metadata": r[3],
            "updated_at": r[4].isoformat() if r[4] is not None else None,
        }
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return page, (page[-1]["source"] if more and page else None)
