"""Ingest: files → chunks → embeddings → PostgreSQL.

1. Plan: read each file, skip it when its bytes are unchanged since the last ingest, chunk it.
   A file that cannot be used is reported (one line) and the others go on.
2. Embed the new chunks in batches (identical chunk texts once; a changed file reuses the
   vectors of its chunks that did not change).
3. Write each batch of documents in one transaction with binary COPY: a document is replaced
   whole or not at all, so search never sees it half-written, and a killed ingest leaves only
   whole documents behind (running it again finishes the rest).

A load that adds more vectors than a model already has drops that model's HNSW index first
and rebuilds it at the end: building an HNSW index once is several times faster than
inserting into a live one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.db.connect import transaction
from pgrag.db.principals import check_principals
from pgrag.errors import InputError, PgragError
from pgrag.ingest.formats import JsonlFields
from pgrag.ingest.loaders import LoadedFile, find_files, load_path
from pgrag.text.chunking import chunk_text

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.local import Embedder
    from pgrag.text.chunking import Chunk
    from pgrag.text.tokens import TokenCounter

CONTEXT_TOKENS = 32  # at most this much heading context is embedded in front of a chunk
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
        deleted = f", {self.chunks_deleted} deleted" if self.chunks_deleted else ""
        if self.dry_run:
            return (
                f"dry run, nothing written: collection {self.collection!r}:"
                f" {len(self.files)} documents ({', '.join(parts)}); would write"
                f" {self.chunks_written} chunks and embed {self.chunks_embedded}{deleted}"
            )
        return (
            f"collection {self.collection!r}: {len(self.files)} documents ({', '.join(parts)});"
            f" {self.chunks_written} chunks written, {self.chunks_embedded} embedded{deleted}"
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
            "chunks_written": self.chunks_written,
            "chunks_embedded": self.chunks_embedded,
            "chunks_deleted": self.chunks_deleted,
            "dry_run": self.dry_run,
            "files": [vars(f) for f in self.files],
        }


@dataclass
class _PreparedChunk:
    text: str
    section: str | None
    token_count: int
    content_hash: str  # of the embedded text: heading context + chunk text
    embed_text: str
    page: int | None = None  # PDF: the page the chunk is on (chunks never span pages)


@dataclass
class _PreparedDoc:
    file: LoadedFile
    result: FileResult
    chunks: list[_PreparedChunk]
    duplicate_of: str | None = None  # the source of an identical document holding the chunks
    replaces: int | None = None  # the stored document (id) this one rewrites
    streamed: tuple[int, int] | None = None  # a large file's (chunk limit, overlap)


def _check_name(name: str) -> None:
    if not COLLECTION_NAME.match(name):
        raise InputError(
            f"invalid collection name {name!r}: use letters, digits and _ . : - (max 128),"
            " starting with a letter or digit"
        )


def ensure_collection(db: Database, name: str, embedder: Embedder | None = None) -> Collection:
    """Get a collection, creating it (and registering its embedding model) on first use."""
    _check_name(name)
    embedder = embedder or db.embedder
    with transaction(db) as conn:
        conn.execute(
            "INSERT INTO pgrag.collections (name, model_id)"
            " VALUES (%(name)s, pgrag.register_model(%(model)s, %(provider)s, %(dim)s,"
            " %(distance)s, %(normalized)s, %(max_tokens)s))"
            " ON CONFLICT (name) DO NOTHING",
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
    _check_model(db, collection, embedder)
    from psycopg.types.json import Jsonb

    from pgrag.embeddings.models import describe

    with transaction(db) as conn:  # where the model comes from, for queries and pgrag worker
        conn.execute(
            "UPDATE pgrag.embedding_models SET settings = %(s)s"
            " WHERE id = %(id)s AND settings = '{}'",
            {"s": Jsonb(describe(embedder)), "id": collection.model_id},
        )
    return collection


def _check_model(db: Database, collection: Collection, embedder: Embedder) -> None:
    from pgrag.embeddings.local import require_model

    with transaction(db) as conn:
        row = conn.execute(
            "SELECT name, dimension FROM pgrag.embedding_models WHERE id = %(id)s",
            {"id": collection.model_id},
        ).fetchone()
    require_model(collection.name, None if row is None else (row[0], row[1]), embedder)


def get_collection(db: Database, name: str) -> Collection | None:
    with transaction(db) as conn:
        row = conn.execute(
            "SELECT id, name, text_config, model_id, chunk_tokens, chunk_overlap"
            " FROM pgrag.collections WHERE name = %(name)s",
            {"name": name},
        ).fetchone()
    return None if row is None else Collection(*row)


def list_collections(db: Database) -> list[dict[str, Any]]:
    """Every collection with its model and the number of documents and chunks the session may
    read (``pgrag.collections_v1``, which restricted roles may call)."""
    with transaction(db) as conn:
        rows = conn.execute(
            "SELECT name, model, dimension, documents, chunks FROM pgrag.collections_v1()"
        ).fetchall()
    keys = ("name", "model", "dimension", "documents", "chunks")
    return [dict(zip(keys, r, strict=True)) for r in rows]


def ingest(
    db: Database,
    paths: Sequence[str | Path],
    *,
    collection: str = "default",
    on_error: Callable[[str, str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    batch_chunks: int = 64,
    bulk_threshold: int = 1000,
    allow: Sequence[str] | None = None,
    jsonl: JsonlFields | None = None,
    dry_run: bool = False,
    prune: bool = False,
) -> IngestReport:
    """Ingest files and directories (recursively) into ``collection``.

    Markdown, plain text, HTML, PDF and JSON Lines are read (the content decides which; see
    :mod:`pgrag.formats`); ``jsonl`` names a JSON Lines file's fields. A changed document is
    re-chunked, and only chunks whose text changed are embedded again. ``dry_run`` writes
    nothing and reports what would be added, updated, deleted and left alone. ``prune``
    removes the documents of files under the given directories that are gone (a file that
    exists but failed to load keeps its documents).

    ``allow`` lists the principals who may read the documents (such as ``["alice",
    "group:billing"]``; ``["public"]`` is everyone). None gives new documents ``public`` and
    leaves the access of documents already stored as it is. Given, it is set on every document
    ingested, unchanged ones included (without re-embedding them).

    ``on_error(path, reason)`` is called for each file that cannot be ingested; the others
    continue. ``on_plan(total)`` receives the number of chunks to write, then
    ``progress(n)`` is called as chunks are embedded and written, and ``on_batch(done,
    total)`` with the documents written so far. The collection is created
    when the first document is written (not by an ingest that writes nothing).
    """
    roots = [Path(p) for p in paths]
    seen = Seen()
    report = _ingest(
        db,
        _load_files(roots, jsonl, seen),
        collection=collection,
        on_error=on_error,
        progress=progress,
        on_plan=on_plan,
        on_batch=on_batch,
        batch_chunks=batch_chunks,
        bulk_threshold=bulk_threshold,
        allow=allow,
        dry_run=dry_run,
    )
    if prune:
        from pgrag.ingest.removal import prune_missing

        directories = [str(p.resolve()) for p in roots if p.is_dir()]
        prune_missing(db, report, directories, seen, dry_run=dry_run)
        report.files.sort(key=lambda f: f.path)
    return report


def ingest_documents(
    db: Database,
    documents: Iterable[LoadedFile],
    *,
    collection: str = "default",
    on_error: Callable[[str, str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    batch_chunks: int = 64,
    bulk_threshold: int = 1000,
    allow: Sequence[str] | None = None,
    dry_run: bool = False,
) -> IngestReport:
    """Ingest documents given as text (build them with :func:`pgrag.loaders.from_text`),
    with the same guarantees as :func:`ingest`: unchanged ones are skipped, changed ones
    replaced whole, in transactions of whole documents; ``allow`` as for :func:`ingest`."""
    return _ingest(
        db,
        ((d.label, d) for d in documents),
        collection=collection,
        on_error=on_error,
        progress=progress,
        on_plan=on_plan,
        on_batch=on_batch,
        batch_chunks=batch_chunks,
        bulk_threshold=bulk_threshold,
        allow=allow,
        dry_run=dry_run,
    )


def _ingest(
    db: Database,
    items: Iterable[tuple[str, LoadedFile | InputError]],
    *,
    collection: str,
    on_error: Callable[[str, str], None] | None,
    progress: Callable[[int], None] | None,
    on_plan: Callable[[int], None] | None,
    batch_chunks: int,
    on_batch: Callable[[int, int], None] | None = None,
    bulk_threshold: int,
    allow: Sequence[str] | None,
    dry_run: bool = False,
) -> IngestReport:
    _check_name(collection)
    principals = None if allow is None else check_principals(allow, "--allow principal")
    embedder = db.embedder
    coll = get_collection(db, collection)
    if coll is not None:
        from pgrag.embeddings.models import active_embedder

        # An existing collection is written with its active model (pgrag models).
        active = active_embedder(db, collection)
        if active is not None:
            embedder = active[1]
        _check_model(db, coll, embedder)
        # A bulk load killed between dropping and rebuilding the index left it missing.
        _build_model_index(db, coll.model_id)
    report = IngestReport(collection=collection, dry_run=dry_run)
    docs, access = _plan(db, coll, embedder, items, report, on_error, principals)
    if dry_run:
        # What would be embedded: texts the collection has no vector for (at most: copies
        # within this run are counted once each).
        hashes = list({c.content_hash for d in docs for c in d.chunks})
        stored = set(_stored_vectors(db, coll, hashes, vectors=False)) if coll and hashes else set()
        for doc in docs:
            doc.result.embed = len({c.content_hash for c in doc.chunks} - stored)
            report.files.append(doc.result)
            report.chunks_written += len(doc.chunks)
            report.chunks_embedded += doc.result.embed
        report.files.sort(key=lambda f: f.path)
        return report
    for document_id in access:
        _set_access(db, document_id, principals or [])
    # (A streamed file's chunks are counted as they are made; estimated here for the ETA.)
    total = sum(
        len(d.chunks) if d.streamed is None else max(1, d.file.metadata.get("bytes", 0) // 900)
        for d in docs
    )
    if on_plan:
        on_plan(total)
    if not docs:
        return report
    files_done = 0
    if on_batch:
        on_batch(files_done, len(docs))
    new_collection = coll is None
    if coll is None:
        coll = ensure_collection(db, collection, embedder)

    # (Dropping and rebuilding the index takes the table's owner; other writers insert into it.)
    bulk = (
        total >= bulk_threshold
        and total > _vector_count(db, coll.model_id, total)
        and _owns_vectors(db)
    )
    dropped = False
    streamed = [d for d in docs if d.streamed is not None]
    try:
        for batch in _batches([d for d in docs if d.streamed is None], batch_chunks):
            vectors = _embed(batch, embedder, report, db, coll)
            if bulk and not dropped:
                # Dropped only now, just before the first write, so searches keep the index
                # while the first batch is being embedded.
                _drop_model_index(db, coll.model_id)
                dropped = True
            _write(db, coll, batch, vectors, principals)
            for doc in batch:
                report.files.append(doc.result)
                if doc.result.status == "failed":
                    if on_error:
                        on_error(doc.result.path, doc.result.reason or "")
                    continue
                report.chunks_written += len(doc.chunks)
            files_done += len(batch)
            if on_batch:
                on_batch(files_done, len(docs))
            if progress:
                progress(sum(len(d.chunks) for d in batch))
        for doc in streamed:
            if bulk and not dropped:
                _drop_model_index(db, coll.model_id)
                dropped = True
            counts = (report.chunks_written, report.chunks_embedded)
            try:
                _write_streamed(db, coll, doc, embedder, report, principals, batch_chunks, progress)
            except InputError as err:  # nothing of it was written: its transaction rolled back
                report.chunks_written, report.chunks_embedded = counts
                doc.result = FileResult(doc.result.path, "failed", reason=str(err))
                if on_error:
                    on_error(doc.result.path, str(err))
            report.files.append(doc.result)
            files_done += 1
            if on_batch:
                on_batch(files_done, len(docs))
    finally:
        if dropped:
            _build_model_index(db, coll.model_id, analyze=True)
    # Planner statistics for a new collection or a bulk load now, not when autovacuum comes
    # round: search_v4 plans once per session, and a plan made without them can scan whole
    # postings lists where it should probe one posting.
    _maintain_keyword_index(db, collection, analyze=bulk or new_collection)
    report.files.sort(key=lambda f: f.path)
    return report


def _maintain_keyword_index(db: Database, collection: str, analyze: bool) -> None:
    """Fold the keyword statistics the batches appended (one row per term again) and refresh
    BM25 impacts if the collection's average chunk length moved (keyword_maintain_v2)."""
    with transaction(db) as conn:
        conn.execute("SELECT * FROM pgrag.keyword_maintain_v2(%(c)s)", {"c": collection})
        if analyze:
            conn.execute("ANALYZE pgrag.keyword_postings")
            conn.execute("ANALYZE pgrag.keyword_df")


@dataclass
class Seen:
    """What a walk met: the sources it loaded, and the files (absolute paths) it could not
    read whole. ``--prune`` deletes only documents of files that are neither."""

    sources: set[str] = field(default_factory=set)
    failed_files: set[str] = field(default_factory=set)


def _load_files(
    paths: list[Path], jsonl: JsonlFields | None = None, seen: Seen | None = None
) -> Iterator[tuple[str, LoadedFile | InputError]]:
    seen = seen if seen is not None else Seen()
    for path, problem in find_files(paths):
        if problem is not None:
            seen.failed_files.add(str(path.resolve()))
            yield str(path), problem
            continue
        for label, item in load_path(path, jsonl):
            if isinstance(item, InputError):
                seen.failed_files.add(str(path.resolve()))
            else:
                seen.sources.add(item.source)
            yield label, item


def _plan(
    db: Database,
    coll: Collection | None,
    embedder: Embedder,
    items: Iterable[tuple[str, LoadedFile | InputError]],
    report: IngestReport,
    on_error: Callable[[str, str], None] | None,
    principals: list[str] | None = None,
) -> tuple[list[_PreparedDoc], list[int]]:
    """The documents to write, and the ids of stored ones whose access alone changes."""
    docs: list[_PreparedDoc] = []
    access: list[int] = []
    seen: set[str] = set()
    # Identical content planned in this run: (content hash, principals) -> its source.
    planned: dict[tuple[str, frozenset[str]], str] = {}
    readers = frozenset(principals or ["public"])

    def prepare(file: LoadedFile, label: str, replaces: int | None) -> _PreparedDoc:
        chunks = _prepare_chunks(file, embedder, limit, overlap)
        if not chunks:
            raise InputError("has no text to index")
        doc = _PreparedDoc(
            file=file,
            result=FileResult(label, "updated" if replaces else "added", len(chunks)),
            chunks=chunks,
            replaces=replaces,
        )
        return doc

    chunk_tokens = coll.chunk_tokens if coll else DEFAULT_CHUNK_TOKENS
    chunk_overlap = coll.chunk_overlap if coll else DEFAULT_CHUNK_OVERLAP
    limit = min(chunk_tokens, embedder.max_tokens - 2 - CONTEXT_TOKENS)
    overlap = min(chunk_overlap, limit - 1)
    for label, item in items:
        try:
            if isinstance(item, InputError):
                raise item
            file = item
            if file.source in seen:
                continue
            seen.add(file.source)
            row = None
            if coll is not None:
                with transaction(db) as conn:
                    row = conn.execute(
                        "SELECT id, content_hash, principals FROM pgrag.documents"
                        " WHERE collection_id = %(c)s AND source = %(s)s",
                        {"c": coll.id, "s": file.source},
                    ).fetchone()
            if row is not None and row[1] == file.content_hash:
                if principals is not None and set(principals) != set(row[2]):
                    access.append(row[0])
                    report.files.append(FileResult(label, "access"))
                else:
                    report.files.append(FileResult(label, "unchanged"))
                continue
            original = None
            if row is None:
                # A new location of content the collection holds (or this run writes) with the
                # same readers: recorded, stored once.
                original = planned.get((file.content_hash, readers)) or _original(
                    db, coll, file.content_hash, readers
                )
            if original is not None:
                docs.append(
                    _PreparedDoc(
                        file=file,
                        result=FileResult(label, "duplicate", reason=f"same as {original}"),
                        chunks=[],
                        duplicate_of=original,
                    )
                )
                continue
            if file.stream is not None:
                # Too large to hold: chunked, embedded and written group by group, in one
                # transaction, after the other documents (_write_streamed).
                docs.append(
                    _PreparedDoc(
                        file=file,
                        result=FileResult(
                            label,
                            "updated" if row else "added",
                            reason="a large file, streamed: its chunks are counted as written",
                        ),
                        chunks=[],
                        replaces=None if row is None else row[0],
                        streamed=(limit, overlap),
                    )
                )
                # (Never an original for a copy planned in this run: it is written after
                # them all and may still fail.)
                continue
            docs.append(prepare(file, label, None if row is None else row[0]))
            if row is None:
                planned[(file.content_hash, readers)] = file.source
        except InputError as err:
            report.files.append(FileResult(label, "failed", reason=str(err)))
            if on_error:
                on_error(label, str(err))
    # A copy of an original that this run rewrites holds the old content itself: the
    # original's hand-over happens before the copy's row exists.
    rewritten = {d.file.source for d in docs if d.replaces is not None}
    for i, doc in enumerate(docs):
        if doc.duplicate_of in rewritten:
            try:
                docs[i] = prepare(doc.file, doc.result.path, None)
            except InputError as err:
                docs[i] = _PreparedDoc(
                    doc.file, FileResult(doc.result.path, "failed", reason=str(err)), []
                )
                if on_error:
                    on_error(doc.result.path, str(err))
    failed = [d for d in docs if d.result.status == "failed"]
    report.files.extend(d.result for d in failed)
    docs = [d for d in docs if d.result.status != "failed"]
    # Written in a stable order, so concurrent ingests of overlapping paths lock documents in
    # the same order and cannot deadlock; duplicates last, so that one is never committed
    # before the original it points to.
    docs.sort(key=lambda d: (d.duplicate_of is not None, d.file.source))
    return docs, access


def _original(
    db: Database, coll: Collection | None, content_hash: str, readers: frozenset[str]
) -> str | None:
    """The source of a stored document with this content and these readers, if any."""
    if coll is None:
        return None
    with transaction(db) as conn:
        rows = conn.execute(
            "SELECT source, principals FROM pgrag.documents"
            " WHERE collection_id = %(c)s AND content_hash = %(h)s"
            # (A document written with SQL is chunked from its body, which SQL may change
            # under a copy: never an original.)
            " AND NOT metadata ? 'duplicate_of' AND body IS NULL ORDER BY id",
            {"c": coll.id, "h": content_hash},
        ).fetchall()
    return next((source for source, p in rows if frozenset(p) == readers), None)


def _prepare_chunks(
    file: LoadedFile, embedder: Embedder, limit: int, overlap: int
) -> list[_PreparedChunk]:
    counter = embedder.tokens
    out = []
    headings: dict[str, str] = {}  # context -> its capped form; chunks of a section share it
    # A PDF is chunked page by page, so that every chunk has one page to cite.
    parts = (
        [(n, text) for n, text in enumerate(file.pages, start=1) if text.strip()]
        if file.pages is not None
        else [(None, file.text)]
    )
    paged = (
        (page, chunk)
        for page, text in parts
        for chunk in chunk_text(text, counter, limit=limit, overlap=overlap, markdown=file.markdown)
    )
    for page, chunk in paged:
        out.append(_prepared(chunk, file, counter, headings, page))
    return out


def _prepared(
    chunk: Chunk,
    file: LoadedFile,
    counter: TokenCounter,
    headings: dict[str, str],
    page: int | None = None,
) -> _PreparedChunk:
    # The heading path (or, without one, the title) is the chunk's section: embedded with
    # it and keyword-indexed with it, so a passage keeps its context. On SQuAD v1.1 dev the
    # title in the keyword index lifts BM25 nDCG@10 from 0.868 to 0.876 (docs/search.md).
    # Capped for embedding so the model never truncates the chunk itself.
    section = " > ".join(chunk.section) or file.title or None
    context = section or ""
    if context not in headings:
        if len(headings) > 10_000:  # a streamed file with very many sections
            headings.clear()
        pieces = counter.cut(context, CONTEXT_TOKENS) if context else []
        headings[context] = pieces[0] if pieces else ""
    heading = headings[context]
    embed_text = f"{heading}\n{chunk.text}" if heading else chunk.text
    return _PreparedChunk(
        text=chunk.text,
        section=section,
        token_count=chunk.token_count,
        content_hash=hashlib.sha256(embed_text.encode()).hexdigest(),
        embed_text=embed_text,
        page=page,
    )


def _batches(docs: list[_PreparedDoc], size: int) -> Iterable[list[_PreparedDoc]]:
    batch: list[_PreparedDoc] = []
    n = 0
    for doc in docs:
        batch.append(doc)
        n += len(doc.chunks)
        if n >= size:
            yield batch
            batch, n = [], 0
    if batch:
        yield batch


def _embed(
    batch: list[_PreparedDoc],
    embedder: Embedder,
    report: IngestReport,
    db: Database | None = None,
    coll: Collection | None = None,
) -> list[list[Any]]:
    """Vectors for every chunk of the batch, embedding each distinct new text once: a text
    the collection already has a vector for (in any document) is not embedded again."""
    todo: dict[str, str] = {}
    for doc in batch:
        for chunk in doc.chunks:
            todo.setdefault(chunk.content_hash, chunk.embed_text)
    fresh: dict[str, Any] = {}
    if todo and db is not None and coll is not None:
        fresh = _stored_vectors(db, coll, list(todo))
        todo = {h: t for h, t in todo.items() if h not in fresh}
    if todo:
        matrix = embedder.embed(list(todo.values()))
        if matrix.shape != (len(todo), embedder.dimension):
            raise PgragError(
                f"embedding model {embedder.name!r} returned vectors of shape {matrix.shape},"
                f" expected ({len(todo)}, {embedder.dimension})"
            )
        fresh.update(zip(todo, matrix, strict=True))
        report.chunks_embedded += len(todo)
    return [[fresh[c.content_hash] for c in doc.chunks] for doc in batch]


def _stored_vectors(
    db: Database, coll: Collection, hashes: list[str], *, vectors: bool = True
) -> dict[str, Any]:
    """Stored vectors of the collection's model for chunks with these content hashes
    (chunks_collection_hash_idx, migration 0005); with ``vectors=False`` only which hashes
    have one (the values are None)."""
    with transaction(db) as conn:
        return _vectors_by_hash(conn, coll, hashes, vectors=vectors)


def _vectors_by_hash(
    conn: Any, coll: Collection, hashes: list[str], *, vectors: bool = True
) -> dict[str, Any]:
    # (Only fixed text is chosen between: no value is spliced in.)
    column = "e.embedding" if vectors else "NULL"
    rows = conn.execute(
        f"SELECT DISTINCT ON (c.content_hash) c.content_hash, {column}"  # noqa: S608
        "  FROM pgrag.chunks c"
        "  JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id AND e.model_id = %(m)s"
        " WHERE c.collection_id = %(c)s AND left(c.content_hash, 16) = ANY (%(p)s)"
        "   AND c.content_hash = ANY (%(h)s)",
        {"m": coll.model_id, "c": coll.id, "p": [h[:16] for h in hashes], "h": hashes},
    ).fetchall()
    return dict(rows)


def _set_access(db: Database, document_id: int, principals: list[str]) -> None:
    """New principals for a stored document; its chunks, vectors and postings follow (trigger),
    nothing is re-embedded."""
    with transaction(db) as conn:
        conn.execute(
            "UPDATE pgrag.documents SET principals = %(p)s, updated_at = now() WHERE id = %(d)s",
            {"p": principals, "d": document_id},
        )


def _write(
    db: Database,
    coll: Collection,
    batch: list[_PreparedDoc],
    vectors: list[list[Any]],
    principals: list[str] | None = None,
) -> None:
    with transaction(db) as conn:
        others = _lock_collection(conn, coll)
        new: list[tuple[int, int, _PreparedChunk, Any, list[str]]] = []
        for doc, doc_vectors in zip(batch, vectors, strict=True):
            if doc.duplicate_of is not None and not _original_unchanged(
                conn, coll, doc, principals
            ):
                doc.result = FileResult(
                    doc.result.path,
                    "failed",
                    reason=f"{doc.duplicate_of}, the identical document it would point to, changed"
                    " during this ingest; run the ingest again",
                )
                continue
            # (Not `principals`: that is what this ingest was asked to set, None to keep each
            # document's own. Reusing the name once made the next document of the batch take
            # this one's readers.)
            doc_id, doc_principals, kept = _replace_document(conn, coll, doc, principals)
            for ordinal, (chunk, vector) in enumerate(zip(doc.chunks, doc_vectors, strict=True)):
                if ordinal not in kept:
                    new.append((doc_id, ordinal, chunk, vector, doc_principals))
        ids = _chunk_ids(conn, len(new))
        chunk_rows = [
            _chunk_row(i, doc_id, coll, ordinal, chunk, readers)
            for i, (doc_id, ordinal, chunk, _, readers) in zip(ids, new, strict=True)
        ]
        vector_rows = [(coll.model_id, i, v[3]) for i, v in zip(ids, new, strict=True)]
        _copy_chunks(conn, chunk_rows, vector_rows)
        if others and ids:
            _enqueue(conn, coll, ids)


def _write_streamed(
    db: Database,
    coll: Collection,
    doc: _PreparedDoc,
    embedder: Embedder,
    report: IngestReport,
    principals: list[str] | None,
    group: int,
    progress: Callable[[int], None] | None,
) -> None:
    """A file too large to hold, in one transaction: read a line at a time, chunked section by
    section, embedded and copied ``group`` chunks at a time. Old vectors are kept in a
    temporary table in the database (not here) for the chunks whose text did not change."""
    from pgrag.text.chunking import chunk_lines

    assert doc.streamed is not None and doc.file.stream is not None
    limit, overlap = doc.streamed
    counter = embedder.tokens
    headings: dict[str, str] = {}
    with transaction(db) as conn:
        conn.execute(
            "CREATE TEMP TABLE pgrag_old_vectors ON COMMIT DROP AS"
            " SELECT c.content_hash, e.embedding FROM pgrag.chunks c"
            " JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id AND e.model_id = %(m)s"
            " JOIN pgrag.documents d ON d.id = c.document_id"
            " WHERE d.collection_id = %(c)s AND d.source = %(s)s",
            {"m": coll.model_id, "c": coll.id, "s": doc.file.source},
        )
        others = _lock_collection(conn, coll)
        doc_id, doc_principals, _ = _replace_document(conn, coll, doc, principals)
        ordinal = 0
        pending: list[_PreparedChunk] = []

        def flush() -> None:
            nonlocal ordinal
            hashes = list(dict.fromkeys(c.content_hash for c in pending))
            known = dict(
                conn.execute(
                    "SELECT DISTINCT ON (content_hash) content_hash, embedding"
                    " FROM pgrag_old_vectors WHERE content_hash = ANY (%(h)s)",
                    {"h": hashes},
                ).fetchall()
            )
            missing = [h for h in hashes if h not in known]
            if missing:  # in any other document of the collection
                known.update(_vectors_by_hash(conn, coll, missing))
            todo = {c.content_hash: c.embed_text for c in pending if c.content_hash not in known}
            if todo:
                matrix = embedder.embed(list(todo.values()))
                known.update(zip(todo, matrix, strict=True))
                report.chunks_embedded += len(todo)
            ids = _chunk_ids(conn, len(pending))
            rows = [
                _chunk_row(i, doc_id, coll, ordinal + k, c, doc_principals)
                for k, (i, c) in enumerate(zip(ids, pending, strict=True))
            ]
            vectors = [
                (coll.model_id, i, known[c.content_hash]) for i, c in zip(ids, pending, strict=True)
            ]
            _copy_chunks(conn, rows, vectors)
            if others:
                _enqueue(conn, coll, ids)
            ordinal += len(pending)
            report.chunks_written += len(pending)
            if progress:
                progress(len(pending))
            pending.clear()

        try:
            with doc.file.stream.open(encoding="utf-8-sig", newline=None) as fh:
                lines = _without_nul(fh)
                for chunk in chunk_lines(
                    lines, counter, limit=limit, overlap=overlap, markdown=doc.file.markdown
                ):
                    pending.append(_prepared(chunk, doc.file, counter, headings))
                    if len(pending) >= group:
                        flush()
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"changed or became unreadable while it was read ({err})") from err
        if pending:
            flush()
        if ordinal == 0:
            raise InputError("has no text to index")
    doc.result.chunks = ordinal


def _lock_collection(conn: Any, coll: Collection) -> bool:
    """Holds the collection row FOR SHARE until the write commits, so that no model is
    activated or retired in between (pgrag.activate_model_v1 takes it FOR UPDATE). True when
    the collection has models besides the one this ingest embeds with: they get its new
    chunks through the embedding queue (pgrag worker)."""
    row = conn.execute(
        "SELECT c.model_id,"
        " EXISTS (SELECT 1 FROM pgrag.collection_models m WHERE m.collection_id = c.id"
        "         AND m.status <> 'retired' AND m.model_id <> %(m)s)"
        " FROM pgrag.collections c WHERE c.id = %(c)s FOR SHARE OF c",
        {"c": coll.id, "m": coll.model_id},
    ).fetchone()
    if row is None or row[0] != coll.model_id:
        raise PgragError(
            f"collection {coll.name!r} was switched to another embedding model during this"
            " ingest (pgrag models activate); run the ingest again"
        )
    return bool(row[1])


def _enqueue(conn: Any, coll: Collection, chunk_ids: list[int]) -> None:
    conn.execute("SELECT pgrag.embedding_enqueue(%(c)s, %(ids)s)", {"c": coll.id, "ids": chunk_ids})


def _without_nul(lines: Iterable[str]) -> Iterator[str]:
    """The lines of a streamed file, which was checked when planned but may have changed."""
    for line in lines:
        if "\x00" in line:
            raise InputError("changed while it was read: it now contains NUL bytes")
        yield line


def _original_unchanged(
    conn: Any, coll: Collection, doc: _PreparedDoc, principals: list[str] | None
) -> bool:
    """Whether a copy's original still holds its content for its readers (another process
    may have rewritten it since this ingest planned); locked until this batch commits."""
    row = conn.execute(
        "SELECT content_hash, principals FROM pgrag.documents"
        " WHERE collection_id = %(c)s AND source = %(s)s AND NOT metadata ? 'duplicate_of'"
        " AND body IS NULL FOR SHARE",
        {"c": coll.id, "s": doc.duplicate_of},
    ).fetchone()
    readers = set(principals or ["public"])
    return row is not None and row[0] == doc.file.content_hash and set(row[1]) == readers


def _chunk_ids(conn: Any, n: int) -> list[int]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT nextval(pg_get_serial_sequence('pgrag.chunks', 'id'))"
            " FROM generate_series(1, %(n)s)",
            {"n": n},
        ).fetchall()
    ]


def _chunk_row(
    chunk_id: int,
    doc_id: int,
    coll: Collection,
    ordinal: int,
    chunk: _PreparedChunk,
    principals: list[str],
) -> tuple[Any, ...]:
    return (
        chunk_id,
        doc_id,
        coll.id,
        ordinal,
        chunk.text,
        chunk.section,
        chunk.page,
        chunk.token_count,
        chunk.content_hash,
        principals,
        coll.text_config,
    )


def _replace_document(
    conn: Any, coll: Collection, doc: _PreparedDoc, principals: list[str] | None
) -> tuple[int, list[str], set[int]]:
    """Insert or update the document's row, and make its stored chunks the prepared ones: a
    chunk whose embedded text and page are unchanged keeps its row (and id, and vector), moved
    to its new position; the others are deleted (an identical document elsewhere inherits them
    all first). Returns the document's id, its stored readers and the ordinals kept."""
    f = doc.file
    row = conn.execute(
        "INSERT INTO pgrag.documents"
        " (collection_id, source, title, metadata, content_hash, principals)"
        " VALUES (%(c)s, %(source)s, %(title)s, %(meta)s, %(hash)s,"
        " coalesce(%(allow)s::text[], '{public}'))"
        " ON CONFLICT (collection_id, source) DO UPDATE SET title = EXCLUDED.title,"
        " metadata = EXCLUDED.metadata, content_hash = EXCLUDED.content_hash,"
        " principals = coalesce(%(allow)s::text[], pgrag.documents.principals),"
        # The file is its source now, not a body once written with SQL (migration 0008).
        " body = NULL, updated_at = now()"
        " RETURNING id, principals",
        {
            "allow": principals,
            "c": coll.id,
            "source": f.source,
            "title": f.title,
            "meta": _jsonb(
                f.metadata
                if doc.duplicate_of is None
                else {**f.metadata, "duplicate_of": doc.duplicate_of}
            ),
            "hash": f.content_hash,
        },
    ).fetchone()
    assert row is not None
    doc_id, doc_principals = row
    if doc.replaces is not None:
        # Identical documents elsewhere keep the old content (sql/functions/dedup_v1.sql).
        conn.execute(
            "SELECT pgrag.documents_hand_over(%(d)s, %(c)s, %(s)s)",
            {"d": doc_id, "c": coll.id, "s": f.source},
        )
    keep: dict[int, int] = {}  # chunk id -> its new ordinal
    if doc.replaces is not None and doc.streamed is None:
        # (The section too: the embedded text holds only its first 32 tokens.)
        stored: dict[tuple[str, int | None, str | None], list[int]] = {}
        for chunk_id, content_hash, page, section in conn.execute(
            "SELECT id, content_hash, page, section FROM pgrag.chunks"
            " WHERE document_id = %(d)s ORDER BY ordinal",
            {"d": doc_id},
        ).fetchall():
            stored.setdefault((content_hash, page, section), []).append(chunk_id)
        for ordinal, chunk in enumerate(doc.chunks):
            same = stored.get((chunk.content_hash, chunk.page, chunk.section))
            if same:
                keep[same.pop(0)] = ordinal
    conn.execute(
        "DELETE FROM pgrag.chunks WHERE document_id = %(d)s AND id <> ALL (%(keep)s)",
        {"d": doc_id, "keep": list(keep)},
    )
    if keep:
        # In two steps, as (document, ordinal) is unique: out of the way, then into place.
        conn.execute(
            "UPDATE pgrag.chunks SET ordinal = -1 - ordinal WHERE id = ANY (%(ids)s)",
            {"ids": list(keep)},
        )
        conn.execute(
            "UPDATE pgrag.chunks c SET ordinal = m.ordinal"
            "  FROM unnest(%(ids)s::bigint[], %(ords)s::int[]) AS m(id, ordinal)"
            " WHERE c.id = m.id",
            {"ids": list(keep), "ords": list(keep.values())},
        )
    return int(doc_id), list(doc_principals), set(keep.values())


def _copy_chunks(
    conn: Any, chunk_rows: list[tuple[Any, ...]], vector_rows: list[tuple[Any, ...]]
) -> None:
    # Binary COPY into session-private staging tables, then one INSERT ... SELECT each:
    # PostgreSQL refuses COPY FROM into a table under row-level security (the chunk tables'
    # policies apply to every role but superusers), and the INSERT goes through them.
    _staging_tables(conn)
    with conn.cursor() as cur:
        with cur.copy(
            "COPY pgrag_staging_chunks (id, document_id, collection_id, ordinal, content,"
            " section, page, token_count, content_hash, principals, text_config)"
            " FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(
                [
                    "int8",
                    "int8",
                    "int4",
                    "int4",
                    "text",
                    "text",
                    "int4",
                    "int4",
                    "text",
                    "text[]",
                    "text",
                ]  # fmt: skip
            )
            for r in chunk_rows:
                copy.write_row(r)
        with cur.copy(
            "COPY pgrag_staging_vectors (model_id, chunk_id, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["int4", "int8", "vector"])
            for r in vector_rows:
                copy.write_row(r)
    conn.execute(
        "INSERT INTO pgrag.chunks (id, document_id, collection_id, ordinal, content, section,"
        " page, token_count, content_hash, principals, text_config)"
        " SELECT id, document_id, collection_id, ordinal, content, section, page, token_count,"
        " content_hash, principals, text_config FROM pgrag_staging_chunks"
    )
    conn.execute(
        "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding)"
        " SELECT model_id, chunk_id, embedding FROM pgrag_staging_vectors"
    )
    # Emptied now, not only at commit: a streamed document copies many groups in one
    # transaction.
    conn.execute("DELETE FROM pgrag_staging_chunks")
    conn.execute("DELETE FROM pgrag_staging_vectors")


def _staging_tables(conn: Any) -> None:
    """Temporary tables shaped like the chunk columns ingest writes, emptied at each commit."""
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS pgrag_staging_chunks ON COMMIT DELETE ROWS AS"
        " SELECT id, document_id, collection_id, ordinal, content, section, page, token_count,"
        " content_hash, principals, text_config FROM pgrag.chunks WITH NO DATA"
    )
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS pgrag_staging_vectors ON COMMIT DELETE ROWS AS"
        " SELECT model_id, chunk_id, embedding FROM pgrag.chunk_embeddings WITH NO DATA"
    )


def _jsonb(value: dict[str, Any]) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(value)


def _vector_count(db: Database, model_id: int, enough: int) -> int:
    """How many vectors the model has, counting no further than ``enough`` (a load is "bulk"
    when it adds more than there are; an exact count of a huge table is not needed)."""
    with transaction(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM pgrag.chunk_embeddings"
            " WHERE model_id = %(m)s LIMIT %(n)s) AS sample",
            {"m": model_id, "n": enough + 1},
        ).fetchone()
    return int(row[0]) if row else 0


def _owns_vectors(db: Database) -> bool:
    with transaction(db) as conn:
        row = conn.execute(
            "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class"
            " WHERE oid = 'pgrag.chunk_embeddings'::regclass"
        ).fetchone()
    return bool(row and row[0])


def _drop_model_index(db: Database, model_id: int) -> None:
    from psycopg import sql

    with transaction(db) as conn:
        conn.execute(
            sql.SQL("DROP INDEX IF EXISTS pgrag.{}").format(
                sql.Identifier(f"chunk_embeddings_hnsw_{model_id}")
            )
        )


def _build_model_index(db: Database, model_id: int, analyze: bool = False) -> None:
    """Create the model's HNSW index if it is missing (a no-op when it exists)."""
    with transaction(db) as conn:
        conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
        conn.execute("SELECT pgrag.ensure_model_index(%(m)s)", {"m": model_id})
    if analyze:
        with transaction(db) as conn:
            conn.execute("ANALYZE pgrag.chunks")
            conn.execute("ANALYZE pgrag.chunk_embeddings")
