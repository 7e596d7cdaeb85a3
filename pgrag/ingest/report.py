"""What an ingest did, file by file: the report ``pgrag ingest`` prints and returns as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileResult:
    path: str
    # added | updated | unchanged | access (only who may read it changed) | duplicate (identical
    # to another document, recorded without chunks) | deleted | failed
    status: str
    chunks: int = 0
    reason: str | None = None
    embed: int = 0  # chunks whose text must be embedded (the others reuse stored vectors)


@dataclass
class IngestReport:
    collection: str
    files: list[FileResult] = field(default_factory=list)
    chunks_written: int = 0
    chunks_embedded: int = 0  # texts sent to the model (fewer than written when reused)
    chunks_deleted: int = 0  # of documents removed (--prune)
    dry_run: bool = False  # nothing was written: the counts say what an ingest would do
    # Contextual ingest (pgrag.ingest.contextual): chunks given a context line by the model
    # (dry run: at most this many would be asked), replies of no use, chunks left without one
    # because the model failed, lines kept from the stored document, seconds spent asking.
    contextual: bool = False
    contexts_written: int = 0
    contexts_empty: int = 0
    contexts_missing: int = 0
    contexts_reused: int = 0
    context_seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for f in self.files if f.status == status)

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "failed"]

    def summary(self) -> str:
        parts = [
            f"{self.count('added')} added",
            f"{self.count('updated')} updated",
            f"{self.count('unchanged')} unchanged",
        ]
        if self.count("access"):
            parts.append(f"{self.count('access')} with new access only")
        if self.count("duplicate"):
            parts.append(f"{self.count('duplicate')} identical to another, stored once")
        if self.count("deleted"):
            parts.append(f"{self.count('deleted')} deleted")
        if self.failed:
            parts.append(f"{len(self.failed)} failed")
        if self.count("skipped"):
            parts.append(f"{self.count('skipped')} skipped")
        deleted = f", {self.chunks_deleted} deleted" if self.chunks_deleted else ""
        if self.dry_run:
            asked = (
                f", asking the model for up to {self.contexts_written} context lines"
                if self.contextual
                else ""
            )
            return (
                f"dry run, nothing written: collection {self.collection!r}:"
                f" {len(self.files)} documents ({', '.join(parts)}); would write"
                f" {self.chunks_written} chunks and embed {self.chunks_embedded}{deleted}{asked}"
            )
        contexts = ""
        if self.contextual:
            contexts = f"; {self.contexts_written} context lines written"
            if self.contexts_written:
                contexts += f" in {self.context_seconds:.1f} s"
            if self.contexts_empty:
                contexts += f", {self.contexts_empty} replies of no use"
            if self.contexts_missing:
                contexts += f", {self.contexts_missing} chunks without (the model failed)"
        return (
            f"collection {self.collection!r}: {len(self.files)} documents ({', '.join(parts)});"
            f" {self.chunks_written} chunks written, {self.chunks_embedded} embedded{deleted}"
            f"{contexts}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "added": self.count("added"),
            "updated": self.count("updated"),
            "unchanged": self.count("unchanged"),
            "access_changed": self.count("access"),
            "deleted": self.count("deleted"),
            "duplicates": self.count("duplicate"),
            "failed": [{"path": f.path, "reason": f.reason} for f in self.failed],
            "skipped": [
                {"path": f.path, "reason": f.reason} for f in self.files if f.status == "skipped"
            ],
            "chunks_written": self.chunks_written,
            "chunks_embedded": self.chunks_embedded,
            "chunks_deleted": self.chunks_deleted,
            "dry_run": self.dry_run,
            "contextual": self.contextual,
            "contexts_written": self.contexts_written,
            "contexts_empty": self.contexts_empty,
            "contexts_missing": self.contexts_missing,
            "contexts_reused": self.contexts_reused,
            "context_seconds": self.context_seconds,
            "files": [vars(f) for f in self.files],
        }


@dataclass
class Seen:
    """What a walk met: the sources it loaded, and the files (absolute paths) it could not
    read whole. ``--prune`` deletes only documents of files that are neither."""

    sources: set[str] = field(default_factory=set)
    failed_files: set[str] = field(default_factory=set)
