"""Removing documents: ``pgrag rm`` (by path, directory or source) and ``ingest --prune``
(documents whose files are gone). One transaction per call: a document goes with all its
chunks, vectors and keyword postings, or stays whole."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.db.connect import Database, transaction
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.ingest.pipeline import IngestReport, Seen


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
    db: Database, targets: Sequence[str | Path], *, collection: str, dry_run: bool = False
) -> RemoveReport:
    """Remove the documents each target names from ``collection``: a stored source as given,
    or a path (made absolute) naming a file, the files under a directory, or a JSON Lines
    file's records. A target that names nothing is listed in ``unmatched``."""
    report = RemoveReport(collection=collection, dry_run=dry_run)
    with transaction(db) as conn:
        cid = _collection_id(conn, collection)
        found: dict[int, tuple[str, int]] = {}
        for target in targets:
            raw = str(target)
            if not raw.strip():
                raise InputError("an empty path or source names no document")
            absolute = str(Path(raw).expanduser().resolve())
            rows = conn.execute(
                "SELECT d.id, d.source, (SELECT count(*) FROM pgrag.chunks c"
                "                        WHERE c.document_id = d.id)"
                "  FROM pgrag.documents d"
                " WHERE d.collection_id = %(c)s"
                "   AND (d.source = ANY (%(exact)s)"
                "        OR left(d.source, length(%(under)s)) = %(under)s"
                "        OR (d.metadata ->> 'format' = 'jsonl'"
                "            AND d.source = %(records)s || (d.metadata ->> 'record')))",
                {
                    "c": cid,
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
        _fold_statistics(db, collection)
    return report


def prune_missing(
    db: Database, report: IngestReport, directories: list[str], seen: Seen, *, dry_run: bool
) -> None:
    """Delete the documents stored from files under ``directories`` that this ingest did not
    meet: the file is gone, or (JSON Lines) the record is. A file that is there but failed to
    load keeps every document it had, so a transient error never deletes anything."""
    from pgrag.ingest.pipeline import FileResult

    if not directories:
        return
    with transaction(db) as conn:
        row = conn.execute(
            "SELECT id FROM pgrag.collections WHERE name = %(n)s", {"n": report.collection}
        ).fetchone()
        if row is None:
            return
        rows = conn.execute(
            "SELECT d.id, d.source, d.metadata ->> 'format', d.metadata ->> 'record',"
            "       (SELECT count(*) FROM pgrag.chunks c WHERE c.document_id = d.id)"
            "  FROM pgrag.documents d"
            " WHERE d.collection_id = %(c)s"
            "   AND EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) p"
            "                WHERE left(d.source, length(p)) = p)",
            {"c": row[0], "prefixes": [d.rstrip(os.sep) + os.sep for d in directories]},
        ).fetchall()
        gone = []
        # A path that failed is a file, or a directory the walk could not read or found
        # empty (an unmounted share): nothing under it is judged gone.
        failed = tuple(seen.failed_files)
        failed_dirs = tuple(f.rstrip(os.sep) + os.sep for f in failed)
        for doc_id, source, fmt, record, chunks in rows:
            file = source[: -len(record) - 1] if fmt == "jsonl" and record else source
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
        _fold_statistics(db, report.collection)


def _walked(file: str, directories: list[str]) -> bool:
    """Whether a walk of ``directories`` would meet this file: no hidden part below the
    directory, and a suffix it reads. A document stored from a file named explicitly, that a
    walk skips, is never pruned by one."""
    from pgrag.ingest.formats import SUFFIXES

    for directory in directories:
        root = directory.rstrip(os.sep) + os.sep
        if file.startswith(root):
            parts = file[len(root) :].split(os.sep)
            return not any(p.startswith(".") for p in parts) and (
                Path(file).suffix.lower() in SUFFIXES
            )
    return False


def _collection_id(conn: Any, name: str) -> int:
    row = conn.execute(
        "SELECT id FROM pgrag.collections WHERE name = %(n)s", {"n": name}
    ).fetchone()
    if row is None:
        raise InputError(
            f"collection {name!r} does not exist; `pgrag collections` lists the collections"
        )
    return int(row[0])


def _delete(conn: Any, document_ids: list[int]) -> None:
    # An identical document that stays inherits the chunks (sql/functions/dedup_v1.sql).
    conn.execute(
        "SELECT pgrag.documents_hand_over(d.id, d.collection_id, d.source, %(ids)s)"
        "  FROM pgrag.documents d WHERE d.id = ANY (%(ids)s) ORDER BY d.source",
        {"ids": document_ids},
    )
    # Then chunks, in one statement, so the keyword index's statement trigger runs once
    # (a cascade from documents would run it once per document).
    conn.execute(
        "DELETE FROM pgrag.chunks WHERE document_id = ANY (%(ids)s)", {"ids": document_ids}
    )
    conn.execute("DELETE FROM pgrag.documents WHERE id = ANY (%(ids)s)", {"ids": document_ids})


def _fold_statistics(db: Database, collection: str) -> None:
    with transaction(db) as conn:
        conn.execute("SELECT * FROM pgrag.keyword_maintain_v2(%(c)s)", {"c": collection})
