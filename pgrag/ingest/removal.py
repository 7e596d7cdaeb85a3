"""Removing documents: ``pgrag rm`` (by path, directory or source) and ``ingest --prune``
(documents whose files are gone). One transaction per call: a document goes with all its
chunks, vectors and keyword postings, or stays whole."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.collections import collection_id, require_collection_id
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.db.principals import acting_for
from pgrag.errors import InputError
from pgrag.ingest import formats
from pgrag.ingest.document import source_of
from pgrag.ingest.indexes import maintain_keyword_index
from pgrag.ingest.report import FileResult, IngestReport, Seen

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)


@dataclass
class RemoveReport:
    collection: str
    documents: list[tuple[str, int]] = field(default_factory=list)  # (source, chunks)
    unmatched: list[str] = field(default_factory=list)  # targets that named no document
    dry_run: bool = False

    @property
    def chunks(self) -> int:
        return sum(n for _, n in self.documents)

    def summary(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        prefix = "dry run, nothing written: " if self.dry_run else ""
        return (
            f"{prefix}collection {self.collection!r}: {verb} {len(self.documents)} documents"
            f" ({self.chunks} chunks)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "removed": [{"source": s, "chunks": n} for s, n in self.documents],
            "unmatched": self.unmatched,
            "chunks": self.chunks,
            "dry_run": self.dry_run,
        }


def remove(
    db: Database,
    targets: Sequence[str | Path],
    *,
    collection: str,
    dry_run: bool = False,
    sources_only: bool = False,
    write_for: Sequence[str] | None = None,
) -> RemoveReport:
    """Remove the documents each target names from ``collection``: a stored source as given,
    or a path (made absolute) naming a file, the files under a directory, or a JSON Lines
    file's records. A target that names nothing is listed in ``unmatched``.

    ``sources_only`` takes each target as a stored source only (and a JSON Lines source's
    records), never as a path on this machine. ``write_for`` (``pgrag serve``: the caller's
    principals) finds the documents reading as them and deletes as a session writing for
    them only: PostgreSQL refuses to delete a document others may read
    (sql/functions/access.sql), as a :class:`pgrag.DatabaseError`, and nothing is removed."""
    report = RemoveReport(collection=collection, dry_run=dry_run)
    with acting_for(db.conn, write_for), transaction(db) as conn:
        cid = require_collection_id(conn, collection)
        found: dict[int, tuple[str, int]] = {}
        for target in targets:
            raw = str(target)
            if not raw.strip():
                raise InputError("an empty path or source names no document")
            if sources_only:
                rows = conn.execute(
                    Q.documents_of_source,
                    {"collection_id": cid, "source": raw, "records": raw + "#"},
                ).fetchall()
            else:
                absolute = source_of(Path(raw).expanduser())
                rows = conn.execute(
                    Q.documents_named,
                    {
                        "collection_id": cid,
                        "exact": [raw, absolute],
                        "under": absolute.rstrip(os.sep) + os.sep,
                        "records": absolute + "#",
                    },
                ).fetchall()
            if not rows:
                report.unmatched.append(raw)
            for doc_id, source, chunks in rows:
                found[doc_id] = (source, chunks)
        if found and not dry_run:
            _delete(conn, list(found))
    report.documents = sorted(found.values())
    if found and not dry_run:
        maintain_keyword_index(db, collection)
    return report


def prune_missing(
    db: Database, report: IngestReport, directories: list[str], seen: Seen, *, dry_run: bool
) -> None:
    """Delete the documents stored from files under ``directories`` that this ingest did not
    meet: the file is gone, or (JSON Lines) the record is. A file that is there but failed to
    load keeps every document it had, so a transient error never deletes anything."""
    if not directories:
        return
    with transaction(db) as conn:
        cid = collection_id(conn, report.collection)
        if cid is None:
            return
        rows = conn.execute(
            Q.documents_under,
            {
                "collection_id": cid,
                "prefixes": [d.rstrip(os.sep) + os.sep for d in directories],
            },
        ).fetchall()
        gone = []
        # A path that failed is a file, or a directory the walk could not read or found
        # empty (an unmounted share): nothing under it is judged gone.
        failed = tuple(seen.failed_files)
        failed_dirs = tuple(f.rstrip(os.sep) + os.sep for f in failed)
        for doc_id, source, _fmt, record, chunks in rows:
            # (a record of a file of many documents, JSON Lines, Parquet or mail: FILE#ID)
            many = record and source.endswith("#" + record)
            file = source[: -len(record) - 1] if many else source
            if source in seen.sources or file in failed or file.startswith(failed_dirs):
                continue
            if not _walked(file, directories):
                continue  # the walk never looks there (hidden, or a kind it does not read)
            gone.append(doc_id)
            report.files.append(FileResult(source, "deleted", chunks))
            report.chunks_deleted += chunks
        if gone and not dry_run:
            _delete(conn, gone)
    if gone and not dry_run:
        maintain_keyword_index(db, report.collection)


def _walked(file: str, directories: list[str]) -> bool:
    """Whether a walk of ``directories`` would meet this file: no hidden part below the
    directory, and a suffix it reads. A document stored from a file named explicitly, that a
    walk skips, is never pruned by one."""
    suffixes = formats.suffixes()
    for directory in directories:
        root = directory.rstrip(os.sep) + os.sep
        if file.startswith(root):
            parts = file[len(root) :].split(os.sep)
            return not any(p.startswith(".") for p in parts) and (
                Path(file).suffix.lower() in suffixes
            )
    return False


def _delete(conn: Any, document_ids: list[int]) -> None:
    # An identical document that stays inherits the chunks, then chunks go in one statement.
    conn.execute(Q.hand_over_all, {"ids": document_ids})
    conn.execute(Q.delete_chunks, {"ids": document_ids})
    conn.execute(Q.delete_documents, {"ids": document_ids})
