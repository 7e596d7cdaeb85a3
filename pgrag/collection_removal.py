"""Deleting a collection: ``pgrag collections delete``.

One transaction removes the collection with everything in it (documents, chunks, vectors,
keyword statistics, model links, conversations); the question log keeps its entries, with no
collection. Then the collection's partition of the vectors (docs/scale.md#partitions), empty by
now, is dropped, which takes a moment's exclusive lock on ``pgrag.chunk_embeddings``: when
searches hold it longer than a second, or the session does not own the table, the partition is
left for ``pgrag db repair``, as a plain ``DELETE FROM pgrag.collections`` leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.collections import check_name, require_collection_id
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import DatabaseError, InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)


@dataclass
class DeleteReport:
    collection: str
    documents: int
    chunks: int
    dry_run: bool = False
    # The collection's partition of the vectors: "dropped" ("to drop" in a dry run), "absent"
    # (none: dropped already), or why it was left for `pgrag db repair`.
    partition: str = "absent"

    def summary(self) -> str:
        if self.dry_run:
            return (
                f"dry run, nothing written: would delete collection {self.collection!r} with"
                f" {self.documents} documents ({self.chunks} chunks)"
            )
        line = (
            f"deleted collection {self.collection!r} with {self.documents} documents"
            f" ({self.chunks} chunks)"
        )
        if self.partition not in ("dropped", "absent"):
            line += f"; its empty partition of the vectors is left: {self.partition}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "documents": self.documents,
            "chunks": self.chunks,
            "dry_run": self.dry_run,
            "partition": self.partition,
        }


def delete_collection(db: Database, name: str, *, dry_run: bool = False) -> DeleteReport:
    """Delete the collection called ``name`` and everything in it, in one transaction (a
    :class:`~pgrag.errors.CollectionNotFound` if there is none). ``dry_run`` counts what would
    go and changes nothing.

    A connection opened with principals is refused: its session sees only what they may read,
    but the collection's other documents would go with it."""
    check_name(name)
    if db.principals is not None:
        raise InputError(
            f"deleting collection {name!r} would delete documents that the principals"
            f" {', '.join(db.principals)} may not read; connect without principals to delete it"
        )
    with transaction(db) as conn:
        cid = require_collection_id(conn, name)
        # Locked first: an ingest into it now waits, and fails once it is gone, rather than
        # adding documents to a collection that is being deleted.
        conn.execute(Q.lock_collection, {"id": cid})
        documents, chunks = conn.execute(Q.contents, {"id": cid}).fetchone()
        report = DeleteReport(name, int(documents), int(chunks), dry_run=dry_run)
        if dry_run:
            (table,) = conn.execute(Q.partition, {"id": cid}).fetchone()
            report.partition = "absent" if table is None else "to drop"
            return report
        # Chunks in one statement (the keyword index's trigger runs once for all of them),
        # then documents, then the collection, whose foreign keys take the rest.
        conn.execute(Q.delete_chunks, {"id": cid})
        conn.execute(Q.delete_documents, {"id": cid})
        conn.execute(Q.delete_collection, {"id": cid})
    report.partition = _drop_partition(db, cid)
    return report


def _drop_partition(db: Database, cid: int) -> str:
    """Drop the deleted collection's partition if it may, within a second's wait for the lock."""
    import psycopg
    from psycopg import sql

    try:
        with transaction(db) as conn:
            (table,) = conn.execute(Q.partition, {"id": cid}).fetchone()
            if table is None:
                return "absent"
            conn.execute(Q.short_lock_timeout)
            conn.execute(sql.SQL(Q.drop_partition).format(table=sql.Identifier("pgrag", table)))
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.LockNotAvailable):
            return "searches held pgrag.chunk_embeddings; `pgrag db repair` drops it"
        if isinstance(err.__cause__, psycopg.errors.InsufficientPrivilege):
            return "only the owner of schema pgrag may drop it (`pgrag db repair`)"
        # (the collection is gone whatever happened here; repair finishes the job)
        return f"{err}; `pgrag db repair` drops it"
    return "dropped"
