"""Deleting a collection: ``pgrag collections delete``.

One transaction removes the collection with everything in it: documents, chunks, vectors,
keyword statistics, model links, conversations, and the question log's entries (they quote its
documents). Then what is left empty is dropped: the collection's partition of the vectors
(docs/scale.md#partitions), and the HNSW index of a model that no collection uses any more,
which takes a moment's exclusive lock on ``pgrag.chunk_embeddings``. When searches hold that
lock longer than a second, or the session does not own the table, they are left for
``pgrag db repair``, as a plain ``DELETE FROM pgrag.collections`` leaves them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.collections import check_name, require_collection_id
from pgrag.db import principals, queries
from pgrag.db.connect import transaction
from pgrag.errors import CollectionNotFound, DatabaseError, InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)


@dataclass
class DeleteReport:
    collection: str
    documents: int
    chunks: int
    questions: int = 0  # entries of the question log
    # Chunks of its documents that were moved to another collection (they go with their
    # document), and chunks of other collections' documents that were moved into it (they go
    # with the collection, and those documents are left without them).
    moved_out: int = 0
    moved_in: int = 0
    dry_run: bool = False
    # The collection's partition of the vectors: "dropped" ("to drop" in a dry run), "absent"
    # (none: dropped already), or why it was left for `pgrag db repair`.
    partition: str = "absent"
    indexes: list[str] = field(default_factory=list)  # model indexes dropped (or to drop)
    indexes_left: list[str] = field(default_factory=list)  # ones that could not be, for repair

    def summary(self) -> str:
        what = (
            f"collection {self.collection!r} with {self.documents} documents ({self.chunks}"
            f" chunks) and {self.questions} logged questions"
        )
        if self.moved_out:
            what += f"; {self.moved_out} chunks of its documents in other collections go too"
        if self.moved_in:
            what += (
                f"; {self.moved_in} chunks moved in from other collections' documents go too,"
                " leaving those documents without them"
            )
        if self.dry_run:
            return f"dry run, nothing written: would delete {what}"
        line = f"deleted {what}"
        if self.partition not in ("dropped", "absent"):
            line += f"; its empty partition of the vectors is left: {self.partition}"
        if self.indexes_left:
            line += (
                f"; the HNSW index{'es' if len(self.indexes_left) > 1 else ''} of models no"
                f" collection uses now {'are' if len(self.indexes_left) > 1 else 'is'} left"
                f" for `pgrag db repair`: {', '.join(self.indexes_left)}"
            )
        return line

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def delete_collection(db: Database, name: str, *, dry_run: bool = False) -> DeleteReport:
    """Delete the collection called ``name`` and everything in it, in one transaction (a
    :class:`~pgrag.errors.CollectionNotFound` if there is none). ``dry_run`` counts what would
    go and changes nothing.

    A session that reads as principals (``pgrag.connect(principals=...)``, the
    ``pgrag.principals`` setting, a role mapping) is refused: its view is theirs, but the
    collection's other documents would go with it."""
    check_name(name)
    with transaction(db) as conn:
        principals.apply(conn, db.principals)  # (the connection's, if any: PostgreSQL judges)
        if not conn.execute(Q.unrestricted).fetchone()[0]:
            raise InputError(
                f"this session reads as principals ({_principals(conn)}), so deleting"
                f" collection {name!r} would delete documents they may not read; delete it as"
                " a role that reads everything (the schema's owner, or a pgrag_writer member"
                " with no principals set)"
            )
        cid = require_collection_id(conn, name)
        if not dry_run and conn.execute(Q.lock_collection, {"id": cid}).fetchone() is None:
            # Locked first: an ingest into it waits for this, then fails; a delete of the same
            # collection that got there first leaves nothing to lock.
            raise CollectionNotFound(name)
        documents, chunks, questions, moved_out, moved_in = (
            int(n) for n in conn.execute(Q.contents, {"id": cid}).fetchone()
        )
        report = DeleteReport(
            name, documents, chunks, questions, moved_out, moved_in, dry_run=dry_run
        )
        if dry_run:
            (table,) = conn.execute(Q.partition, {"id": cid}).fetchone()
            report.partition = "absent" if table is None else "to drop"
            report.indexes = _unused_indexes(conn, cid)
            return report
        # The question log's entries, then chunks in one statement (the keyword index's
        # trigger runs once for all of them), documents, and the collection, whose foreign
        # keys take the rest.
        conn.execute(Q.delete_questions, {"id": cid})
        conn.execute(Q.delete_chunks, {"id": cid})
        conn.execute(Q.delete_documents, {"id": cid})
        conn.execute(Q.delete_collection, {"id": cid})
    report.partition, report.indexes, report.indexes_left = _tidy(db, cid)
    return report


def _unused_indexes(conn: Any, cid: int) -> list[str]:
    """The HNSW indexes of the models no collection but ``cid`` uses (not retired): strays to
    `pgrag db check` once it is gone. Names without the schema."""
    from pgrag.db import drift

    rows = conn.execute(drift.Q.stray_model_indexes, {"without": cid}).fetchall()
    return [name.removeprefix("pgrag.") for (name,) in rows]


def _principals(conn: Any) -> str:
    row = conn.execute(Q.session_principals).fetchone()
    return ", ".join(row[0] or []) if row else ""


def _tidy(db: Database, cid: int) -> tuple[str, list[str], list[str]]:
    """Drop the deleted collection's partition and the indexes of models no collection uses
    now, if this session may, waiting at most a second for the lock; what became of the
    partition, the indexes dropped, and those left (for `pgrag db repair`)."""
    import psycopg
    from psycopg import sql

    table: str | None = None
    indexes: list[str] = []
    try:
        with transaction(db) as conn:
            (table,) = conn.execute(Q.partition, {"id": cid}).fetchone()
            indexes = _unused_indexes(conn, cid)
            if table is None and not indexes:
                return "absent", [], []
            conn.execute(Q.short_lock_timeout)
            if table is not None:
                conn.execute(sql.SQL(Q.drop_partition).format(table=sql.Identifier("pgrag", table)))
            for index in indexes:
                conn.execute(sql.SQL(Q.drop_index).format(index=sql.Identifier("pgrag", index)))
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.LockNotAvailable):
            why = "searches held pgrag.chunk_embeddings; `pgrag db repair` drops it"
        elif isinstance(err.__cause__, psycopg.errors.InsufficientPrivilege):
            why = "only the owner of schema pgrag may drop it (`pgrag db repair`)"
        else:  # (the collection is gone whatever happened here; repair finishes the job)
            why = f"{err}; `pgrag db repair` drops it"
        return ("absent" if table is None else why), [], indexes
    return ("absent" if table is None else "dropped"), indexes, []
