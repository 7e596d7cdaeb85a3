"""Uploaded files (``POST /v1/documents``): each is read by the same formats as ``pgrag
ingest`` (its content decides), stored under a source its uploader names rather than where the
server saved it, and ingested on its own, in transactions of whole documents, so that one
file's problem (its format, its per-file time budget, PostgreSQL refusing it) leaves the
others as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.errors import DatabaseError, InputError
from pgrag.ingest.document import LoadedFile, from_text
from pgrag.ingest.loaders import load_path
from pgrag.ingest.pipeline import ingest_documents

if TYPE_CHECKING:
    from pgrag.db.connect import Database

UPLOAD_PREFIX = "upload"
MAX_SOURCE_CHARS = 1000
# The SQLSTATE of PostgreSQL refusing a write (row-level security, pgrag.write_principals).
REFUSED = "42501"


@dataclass(frozen=True)
class Upload:
    """One uploaded file: where the server saved it, the name it was uploaded as, and the
    source its documents are stored under."""

    path: Path
    filename: str
    source: str


@dataclass
class UploadResult:
    filename: str
    source: str
    # added | updated | unchanged | access (only its readers changed) | duplicate (identical
    # to another document, stored once) | failed
    status: str
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    reason: str | None = None  # why it failed (one line)
    refused: bool = False  # PostgreSQL refused the write (who may write what)
    errors: list[dict[str, str]] = field(default_factory=list)  # records of it that failed

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if not self.errors:
            del out["errors"]
        return out


def safe_name(name: str, what: str = "filename") -> list[str]:
    """The segments of an uploaded name as a relative path: separators ``/`` or ``\\``, empty
    and ``.`` segments dropped; ``..``, control characters and names of nothing refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InputError(f"{what} {name!r} holds control characters; rename the file")
    parts = [p.strip() for p in name.replace("\\", "/").split("/")]
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        raise InputError(f"{what} {name!r} names no file; give the upload a file name")
    if ".." in parts:
        raise InputError(
            f"{what} {name!r} has a '..' segment; name the document without one, such as"
            " handbook/refunds.md"
        )
    return parts


def upload_source(filename: str, source: str | None = None) -> str:
    """The source an upload is stored under: ``source`` as given (a relative name, such as
    ``handbook/refunds.md``), else ``upload/<filename>``. Never a path of the server's."""
    if source is None:
        joined = "/".join([UPLOAD_PREFIX, *safe_name(filename)])
    else:
        if source.startswith(("/", "\\")) or (len(source) > 1 and source[1] == ":"):
            raise InputError(
                f"source {source!r} is an absolute path; give a relative name such as"
                " handbook/refunds.md"
            )
        joined = "/".join(safe_name(source, "source"))
    if len(joined) > MAX_SOURCE_CHARS:
        raise InputError(
            f"source {joined[:60]!r}... is {len(joined)} characters, over {MAX_SOURCE_CHARS};"
            " give a shorter name"
        )
    return joined


def disk_name(filename: str) -> str:
    """The name an upload is saved under in its private directory: its last segment (what its
    title is made of), cut to what a file system takes, suffix kept."""
    name = safe_name(filename)[-1]
    if len(name.encode()) <= 200:
        return name
    suffix = Path(name).suffix if len(Path(name).suffix) <= 16 else ""
    stem = name[: len(name) - len(suffix)]
    while len((stem + suffix).encode()) > 200:
        stem = stem[:-1]
    return stem + suffix


def ingest_uploads(
    db: Database,
    uploads: Sequence[Upload],
    *,
    collection: str,
    allow: Sequence[str] | None,
    write_for: Sequence[str] | None,
    on_wait: Callable[[str], None] | None = None,
    check: Callable[[], None] | None = None,
) -> list[UploadResult]:
    """Ingest each upload on its own (:func:`pgrag.ingest.pipeline.ingest_documents`) with
    ``allow`` as its readers, planned and written for ``write_for`` (the caller's principals:
    PostgreSQL refuses a document readable by others, and changes to documents others may
    read). One result per upload, in order.

    ``check()`` (``pgrag serve``: whether the client is still there) is called before each
    file and after each batch of texts a file embeds and each batch it writes; what it raises
    stops the uploads there and comes out of this call. The transaction being written then
    rolls back, so no document is left half-written; the files (and the whole documents of a
    JSON Lines file) already committed stay."""
    results = []
    for upload in uploads:
        if check is not None:
            check()
        results.append(_ingest_one(db, upload, collection, allow, write_for, on_wait, check))
    return results


def _ingest_one(
    db: Database,
    upload: Upload,
    collection: str,
    allow: Sequence[str] | None,
    write_for: Sequence[str] | None,
    on_wait: Callable[[str], None] | None,
    check: Callable[[], None] | None = None,
) -> UploadResult:
    result = UploadResult(upload.filename, upload.source, "failed")
    documents: list[LoadedFile] = []
    errors: list[dict[str, str]] = []
    for label, item in load_path(upload.path):
        shown = _renamed(label, upload)
        if isinstance(item, InputError):
            errors.append({"label": shown, "reason": str(item)})
        else:
            documents.append(as_uploaded(item, upload))
    statuses: list[str] = []
    if documents:
        try:
            report = ingest_documents(
                db,
                documents,
                collection=collection,
                allow=allow,
                write_for=write_for,
                on_wait=on_wait,
                # (Called between the model's batches and between written batches, and within
                # a streamed file's transaction, which what they raise rolls back.)
                progress=None if check is None else lambda _n: check(),
                on_batch=None if check is None else lambda _done, _total: check(),
            )
        except DatabaseError as err:
            state = getattr(err.__cause__, "sqlstate", None)
            if state != REFUSED and not (state or "").startswith("23"):
                raise  # the database itself failing is not this file's problem
            result.refused = state == REFUSED
            result.reason = _refusal(str(err), upload.source) if result.refused else str(err)
            return result
        for f in report.files:
            if f.status == "failed":
                errors.append({"label": f.path, "reason": f.reason or "failed"})
            else:
                statuses.append(f.status)
                result.chunks += f.chunks
        result.embedded = report.chunks_embedded
    result.documents = len(statuses)
    result.errors = errors
    for status in ("added", "updated", "access", "duplicate", "unchanged"):
        if status in statuses:
            result.status = status
            break
    else:
        result.reason = errors[0]["reason"] if errors else "holds no document"
        if len(errors) == 1 and errors[0]["label"] == upload.source:
            result.errors = []  # (said once, as the reason)
    return result


def _refusal(message: str, source: str) -> str:
    """The reason for a refused write. A refusal to change a stored document of this source
    (hidden by row-level security, or one others may read, which the owner's session sees)
    says only that the source is taken, the same whoever the document is readable by and
    whatever role the service runs as: a source is unique in its collection, so that much an
    uploader learns in any case, and nothing more."""
    taken = (
        "row-level security" in message and '"documents"' in message
    ) or "may not change document" in message
    if taken:
        return (
            f"refused by the database: the source {source!r} is taken by a document this"
            " credential may not change; upload it under another source (such as one that"
            " starts with your own name)"
        )
    return f"refused by the database: {message}"


def _renamed(text: str, upload: Upload) -> str:
    """A label or source of the saved file, with its saved path made the upload's source."""
    for saved in (str(upload.path.resolve()), str(upload.path)):
        if text == saved or text.startswith((saved + "#", saved + ":")):
            return upload.source + text[len(saved) :]
    return text


def as_uploaded(doc: LoadedFile, upload: Upload) -> LoadedFile:
    """A document read from the saved file, as if the file were its source: no path of the
    server's in its source, label or metadata (a JSON Lines record's content hash, which
    covers its metadata, made again so that the same upload is unchanged)."""
    metadata = {
        k: _renamed(v, upload) if isinstance(v, str) else v for k, v in doc.metadata.items()
    }
    metadata["path"] = upload.source
    renamed = dataclasses.replace(
        doc,
        label=_renamed(doc.label, upload),
        source=_renamed(doc.source, upload),
        metadata=metadata,
    )
    if doc.format == "jsonl":
        meta = {k: v for k, v in metadata.items() if k != "format"}
        made = from_text(
            renamed.source, doc.text, title=doc.title, metadata=meta, vector=doc.vector
        )
        renamed = dataclasses.replace(
            made, label=renamed.label, format=doc.format, metadata=metadata
        )
    return renamed
