"""Ingest: files → chunks → embeddings → PostgreSQL.

1. Plan (:mod:`~pgrag.ingest.plan`): read each file, skip it when its bytes are unchanged
   since the last ingest, chunk it. A file that cannot be used is reported (one line) and the
   others go on.
   (Contextual: :mod:`~pgrag.ingest.contextual` asks the configured language model for each
   new chunk's context line, a batch at a time before it is embedded, holding no lock.)
2. Embed (:mod:`~pgrag.ingest.embed`) the new chunks in batches (identical chunk texts once; a
   changed file reuses the vectors of its chunks that did not change). A document that brings
   its own vector (:mod:`~pgrag.ingest.vectors`) is one chunk with that vector, not embedded.
3. Write (:mod:`~pgrag.ingest.writer`) each batch of documents in one transaction with binary
   COPY: a document is replaced whole or not at all, so search never sees it half-written, and
   a killed ingest leaves only whole documents behind (running it again finishes the rest).
4. Maintain (:mod:`~pgrag.ingest.indexes`): the model's HNSW index stays in place throughout
   (every collection of the model searches with it); one found missing, invalid or wrong is
   built after a load that wrote something (never by a no-op ingest), and given up with a
   warning rather than wait for another session's transaction. Keyword statistics are folded.

Ingests into different collections do not wait for each other; ingests into one collection
wait only for the documents they both write (each document's row is locked while its batch
commits). A statement that waits for a lock longer than a moment is reported through
``on_wait`` (``pgrag ingest`` prints it on stderr), naming the session it waits for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgrag.collections import (
    Collection,
    check_chunking,
    check_model,
    check_name,
    chunking_for,
    ensure_collection,
    get_collection,
    record_chunking,
)
from pgrag.db.principals import acting_for, check_principals
from pgrag.db.waits import reporting_waits
from pgrag.embeddings.local import configured_embedder
from pgrag.embeddings.models import active_embedder
from pgrag.errors import InputError
from pgrag.ingest.contextual import Contextualizer, check_configured, stored_contexts
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.embed import batches, embed_batch, stored_vectors
from pgrag.ingest.formats.jsonl import JsonlFields
from pgrag.ingest.indexes import (
    analyze,
    ensure_model_index,
    maintain_keyword_index,
    set_aside_empty,
)
from pgrag.ingest.loaders import load_files
from pgrag.ingest.plan import PreparedDoc, plan
from pgrag.ingest.removal import prune_missing
from pgrag.ingest.report import FileResult, IngestReport, Seen
from pgrag.ingest.writer import ensure_acl, set_access, write_batch, write_streamed

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder

__all__ = ["ingest", "ingest_documents"]


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
    on_wait: Callable[[str], None] | None = None,
    on_warning: Callable[[str, str], None] | None = None,
    contextual: bool = False,
    context_window: int | None = None,
    on_context: Callable[[int, int], None] | None = None,
    chunking: str | None = None,
    rechunk: bool = False,
) -> IngestReport:
    """Ingest files and directories (recursively) into ``collection``.

    Markdown, plain text, HTML, PDF and JSON Lines are read (the content decides which; see
    :mod:`pgrag.ingest.formats`); ``jsonl`` names a JSON Lines file's fields (a record with
    an ``embedding`` field brings its own vector: see :func:`ingest_documents`). A changed
    document is re-chunked, and only chunks whose text changed are embedded again.
    ``dry_run`` writes nothing and reports what would be added, updated, deleted and left
    alone. ``prune`` removes the documents of files under the given directories that are gone
    (a file that exists but failed to load keeps its documents).

    ``allow`` lists the principals who may read the documents (such as ``["alice",
    "group:billing"]``; ``["public"]`` is everyone). None gives new documents ``public`` and
    leaves the access of documents already stored as it is. Given, it is set on every document
    ingested, unchanged ones included (without re-embedding them).

    ``on_error(path, reason)`` is called for each file that cannot be ingested; the others
    continue. ``on_warning(path, reason)`` for each file a directory walk leaves out with a
    reason (a dangling symbolic link: status "skipped", not a failure), and with
    ``("index chunk_embeddings_hnsw_N", reason)`` for a missing model index whose build
    it gave up (it would have waited for another session's transaction). ``on_wait(message)``
    is called when a statement (or the index build) has waited a moment for a lock another
    session holds (once per holder), saying who holds it and on what. ``on_plan(total)``
    receives the number of chunks to write, then ``progress(n)`` is called as chunks are
    embedded and written (within a large file too, a batch at a time), and ``on_batch(done,
    total)`` with the documents written so far. The collection is created when the first
    document is written (not by an ingest that writes nothing).

    ``contextual`` (:mod:`pgrag.ingest.contextual`, docs/ingest.md#contextual-retrieval) has
    the configured language model write a line situating each new chunk in its document,
    embedded and keyword-indexed with the chunk (a :class:`pgrag.errors.ConfigError` when no
    model is configured); ``context_window`` is how many tokens of each document the model
    is shown (default 2,000: its beginning), and ``on_context(done, total)`` hears of each
    chunk given its line. An unchanged document is not asked about again, unless some of its
    chunks have no line for its current version yet.

    ``chunking`` is how documents are cut into chunks: ``"fixed"`` (whole sentences packed up to
    the collection's chunk size) or ``"semantic"`` (cut where adjacent sentences stop
    resembling each other: :mod:`pgrag.text.semantic`, docs/ingest.md#semantic-chunking).
    None is the collection's, recorded when it was first written (``"fixed"`` for a new one);
    another than the collection's is an :class:`~pgrag.errors.InputError` unless ``rechunk``,
    which records it and chunks every document read again, unchanged ones included (chunks
    whose text is unchanged keep their vectors).
    """
    roots = [Path(p) for p in paths]
    seen = Seen()
    report = _ingest(
        db,
        load_files(roots, jsonl, seen),
        collection=collection,
        on_error=on_error,
        progress=progress,
        on_plan=on_plan,
        on_batch=on_batch,
        batch_chunks=batch_chunks,
        bulk_threshold=bulk_threshold,
        allow=allow,
        dry_run=dry_run,
        on_wait=on_wait,
        on_warning=on_warning,
        contextual=contextual,
        context_window=context_window,
        on_context=on_context,
        chunking=chunking,
        rechunk=rechunk,
    )
    if prune:
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
    on_wait: Callable[[str], None] | None = None,
    on_warning: Callable[[str, str], None] | None = None,
    write_for: Sequence[str] | None = None,
    contextual: bool = False,
    context_window: int | None = None,
    on_context: Callable[[int, int], None] | None = None,
    chunking: str | None = None,
    rechunk: bool = False,
) -> IngestReport:
    """Ingest documents given as text (build them with :func:`pgrag.ingest.loaders.from_text`),
    or read from files (:func:`pgrag.ingest.loaders.load_path`), with the same guarantees as
    :func:`ingest`: unchanged ones are skipped, changed ones replaced whole, in transactions of
    whole documents; ``allow``, ``on_wait``, ``on_warning``, ``contextual``,
    ``context_window``, ``on_context``, ``chunking`` and ``rechunk`` as for :func:`ingest`.

    A document made with ``from_text(..., vector=...)`` brings its own embedding: it is stored
    as one chunk, its whole text, with that vector for the collection's active model (for a new
    collection, the configured model), and the encoder is not asked about it. A vector of
    another dimension fails that document (``on_error``) and the others go in; a new vector for
    the same text is a change (docs/ingest.md#bring-your-own-vectors).

    ``write_for`` (``pgrag serve``: the caller's principals) plans and writes the documents
    reading as those principals and writing for them only: PostgreSQL refuses a document
    readable by anyone else, and any change to a document others may read
    (``pgrag.write_principals``, sql/functions/access.sql), as a :class:`pgrag.DatabaseError`.
    The keyword statistics and the indexes are then maintained as the connection's role."""
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
        on_wait=on_wait,
        on_warning=on_warning,
        write_for=write_for,
        contextual=contextual,
        context_window=context_window,
        on_context=on_context,
        chunking=chunking,
        rechunk=rechunk,
    )


def _ingest(
    db: Database,
    items: Iterable[tuple[str, LoadedFile | InputError]],
    *,
    on_wait: Callable[[str], None] | None = None,
    **options: Any,
) -> IngestReport:
    """:func:`_run` (whose arguments ``options`` are) with its lock waits reported."""
    with reporting_waits(db, on_wait):
        return _run(db, items, on_wait=on_wait, **options)


def _run(
    db: Database,
    items: Iterable[tuple[str, LoadedFile | InputError]],
    *,
    collection: str,
    on_error: Callable[[str, str], None] | None,
    progress: Callable[[int], None] | None,
    on_plan: Callable[[int], None] | None,
    batch_chunks: int,
    on_batch: Callable[[int, int], None] | None,
    bulk_threshold: int,
    allow: Sequence[str] | None,
    dry_run: bool,
    on_warning: Callable[[str, str], None] | None,
    on_wait: Callable[[str], None] | None = None,
    write_for: Sequence[str] | None = None,
    contextual: bool = False,
    context_window: int | None = None,
    on_context: Callable[[int, int], None] | None = None,
    chunking: str | None = None,
    rechunk: bool = False,
) -> IngestReport:
    check_name(collection)
    if chunking is not None:
        check_chunking(chunking)  # before anything is read
    principals = None if allow is None else check_principals(allow, "--allow principal")
    if contextual:
        check_configured(db)  # before anything is read (nothing is loaded yet)
    report = IngestReport(collection=collection, dry_run=dry_run, contextual=contextual)
    aside: list[int] = []  # the model whose empty index this load dropped (set_aside_empty)
    built = False
    try:
        with acting_for(db.conn, write_for):
            written = _plan_and_write(
                db,
                items,
                report,
                collection=collection,
                principals=principals,
                on_error=on_error,
                progress=progress,
                on_plan=on_plan,
                on_batch=on_batch,
                batch_chunks=batch_chunks,
                bulk_threshold=bulk_threshold,
                dry_run=dry_run,
                on_warning=on_warning,
                contextual=contextual,
                context_window=context_window,
                on_context=on_context,
                chunking=chunking,
                rechunk=rechunk,
                aside=aside,
            )
        if written is None:
            return report
        coll, new_collection, bulk = written
        # Planner statistics for a new collection or a bulk load now, not when autovacuum
        # comes round: the search plans once per session, and a plan made without them can
        # scan whole postings lists where it should probe one posting.
        if bulk:
            analyze(db, coll.id)
        maintain_keyword_index(db, collection, analyze=bulk or new_collection)
        # A missing index (a bulk load killed before it built the empty one it dropped), an
        # invalid one (an interrupted CREATE INDEX CONCURRENTLY) or a wrong one is built after
        # the load (loading into a table without it is faster), only by an ingest that wrote
        # something: a no-op ingest never waits for a build. The build gives up, with a
        # warning, rather than wait for another session's transaction (searches read every
        # vector meanwhile) -- unless this load dropped it, when one in a transaction follows.
        ensure_model_index(
            db,
            coll.model_id,
            on_wait=on_wait,
            on_warning=on_warning,
            set_aside=bool(aside),
        )
        built = True
    finally:
        # The load stopped (an error; SIGTERM, which the CLI makes SystemExit; Ctrl-C) after
        # the model's empty index was dropped for it: built now, for what the load wrote
        # (nothing else would, until the next ingest that writes). A second Ctrl-C stops the
        # build too; the index is then left for the next ingest, worker or repair.
        if aside and not built:
            with contextlib.suppress(Exception):  # (the load's own error is the one to report)
                _build_set_aside(db, aside[0], on_warning)
    report.files.sort(key=lambda f: f.path)
    return report


def _build_set_aside(
    db: Database, model_id: int, on_warning: Callable[[str, str], None] | None
) -> None:
    """The index a stopped load dropped, built on a connection of its own: a signal that
    lands mid-statement (a COPY) can leave the ingest's connection with a command in progress,
    its transaction open, holding the locks a build waits for. Such a connection, of no use
    to anyone any more, is closed first, which ends its transaction."""
    import dataclasses

    from psycopg import pq

    from pgrag.db.dsn import open_connection

    if db.conn.info.transaction_status == pq.TransactionStatus.ACTIVE:
        db.conn.close()
    with open_connection(db.dsn) as conn:
        fresh = dataclasses.replace(db, conn=conn)
        ensure_model_index(fresh, model_id, on_warning=on_warning, set_aside=True)


def _plan_and_write(
    db: Database,
    items: Iterable[tuple[str, LoadedFile | InputError]],
    report: IngestReport,
    *,
    collection: str,
    principals: list[str] | None,
    on_error: Callable[[str, str], None] | None,
    progress: Callable[[int], None] | None,
    on_plan: Callable[[int], None] | None,
    batch_chunks: int,
    on_batch: Callable[[int, int], None] | None,
    bulk_threshold: int,
    dry_run: bool,
    on_warning: Callable[[str, str], None] | None,
    contextual: bool = False,
    context_window: int | None = None,
    on_context: Callable[[int, int], None] | None = None,
    chunking: str | None = None,
    rechunk: bool = False,
    aside: list[int] | None = None,
) -> tuple[Collection, bool, bool] | None:
    """Plan and write the documents into ``report``: (the collection, whether it is new,
    whether the load was a bulk one), or None when nothing was written. ``aside`` gets the
    model whose empty index was dropped for the load, to be built after it."""
    embedder = configured_embedder(db)
    coll = get_collection(db, collection)
    if coll is not None:
        # An existing collection is written with its active model (pgrag models).
        active = active_embedder(db, collection)
        if active is not None:
            embedder = active[1]
        check_model(db, coll, embedder)
    strategy = chunking_for(coll, chunking, rechunk)
    docs, access = plan(
        db, coll, embedder, items, report, on_error, principals, on_warning, contextual,
        chunking=strategy, rechunk=rechunk,
    )  # fmt: skip
    if dry_run:
        _dry_run(db, coll, docs, report)
        return None
    if principals is not None and (docs or access):
        ensure_acl(db, principals)
    for document_id in access:
        set_access(db, document_id, principals or [])
    # (A streamed file's chunks are counted as they are made; estimated here for the ETA.)
    total = sum(
        len(d.chunks) if d.streamed is None else max(1, d.file.metadata.get("bytes", 0) // 900)
        for d in docs
    )
    if on_plan:
        on_plan(total)
    if not docs:
        return None
    if on_batch:
        on_batch(0, len(docs))
    new_collection = coll is None
    if coll is None:
        coll = ensure_collection(db, collection, embedder)
    if chunking is not None:  # (a new collection's, or one re-chunked; absent is "fixed")
        coll = record_chunking(db, coll, strategy)
    # A bulk load refreshes the planner's statistics afterwards. The model's index is dropped
    # for it only while it is empty (no collection of the model has a vector, so no search
    # uses it), and built once after the load; one that holds vectors stays live.
    bulk = total >= bulk_threshold
    if bulk and aside is not None and set_aside_empty(db, coll.model_id):
        aside.append(coll.model_id)
    contexts = None
    if contextual:
        contexts = _Contexts(
            Contextualizer(db, embedder, window=context_window),
            total=sum(len(d.chunks) for d in docs if d.streamed is None and d.file.vector is None),
            on_context=on_context,
            on_warning=on_warning,
        )
        for d in docs:
            if d.streamed is not None and on_warning:
                on_warning(
                    d.result.path,
                    "a large file, streamed: written without context lines (a contextual"
                    " ingest holds a document whole)",
                )
    _write(
        db,
        coll,
        docs,
        embedder,
        report,
        principals,
        batch_chunks=batch_chunks,
        on_error=on_error,
        progress=progress,
        on_batch=on_batch,
        contexts=contexts,
    )
    if contexts is not None:
        contexts.report(report)
    return coll, new_collection, bulk


def _dry_run(
    db: Database, coll: Collection | None, docs: list[PreparedDoc], report: IngestReport
) -> IngestReport:
    """What an ingest would write and embed: texts the collection has no vector for (at most:
    copies within this run are counted once each)."""
    # (A chunk that brought its own vector is never embedded.)
    hashes = list({c.content_hash for d in docs for c in d.chunks if c.vector is None})
    stored = set(stored_vectors(db, coll, hashes, vectors=False)) if coll and hashes else set()
    for doc in docs:
        doc.result.embed = len({c.content_hash for c in doc.chunks if c.vector is None} - stored)
        if report.contextual and doc.streamed is None and doc.file.vector is None:
            # (At most: every chunk's text changes with its line; those an unchanged document
            # has for this version are kept.)
            doc.result.embed = len(doc.chunks)
            report.contexts_written += len(doc.chunks)
        report.files.append(doc.result)
        report.chunks_written += len(doc.chunks)
        report.chunks_embedded += doc.result.embed
    report.files.sort(key=lambda f: f.path)
    return report


def _write(
    db: Database,
    coll: Collection,
    docs: list[PreparedDoc],
    embedder: Embedder,
    report: IngestReport,
    principals: list[str] | None,
    *,
    batch_chunks: int,
    on_error: Callable[[str, str], None] | None,
    progress: Callable[[int], None] | None,
    on_batch: Callable[[int, int], None] | None,
    contexts: _Contexts | None = None,
) -> None:
    """Embed and write the planned documents: batches of whole documents, then the streamed
    ones, each in a transaction of its own, into the live indexes. ``contexts``: each batch's
    chunks are given their context lines first."""
    files_done = 0
    streamed = [d for d in docs if d.streamed is not None]
    for batch in batches([d for d in docs if d.streamed is None], batch_chunks):
        if contexts is not None:
            contexts.write(batch)
        embedded = report.chunks_embedded
        vectors = embed_batch(
            batch, embedder, report, db, coll, size=batch_chunks, progress=progress
        )
        embedded = report.chunks_embedded - embedded  # (progress has heard of these)
        write_batch(db, coll, batch, vectors, principals)
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
        rest = sum(len(d.chunks) for d in batch) - embedded
        if progress and rest > 0:  # the chunks written without embedding (reused vectors)
            progress(rest)
    for doc in streamed:
        counts = (report.chunks_written, report.chunks_embedded)
        try:
            write_streamed(db, coll, doc, embedder, report, principals, batch_chunks, progress)
        except InputError as err:  # nothing of it was written: its transaction rolled back
            report.chunks_written, report.chunks_embedded = counts
            doc.result = FileResult(doc.result.path, "failed", reason=str(err))
            if on_error:
                on_error(doc.result.path, str(err))
        report.files.append(doc.result)
        files_done += 1
        if on_batch:
            on_batch(files_done, len(docs))


class _Contexts:
    """An ingest's context lines: each batch's documents asked in order (so a document's
    prompts follow each other and share their prefix), progress and warnings reported."""

    def __init__(
        self,
        contextualizer: Contextualizer,
        *,
        total: int,
        on_context: Callable[[int, int], None] | None,
        on_warning: Callable[[str, str], None] | None,
    ) -> None:
        self.contextualizer = contextualizer
        self.total = total
        self.done = 0
        self.on_context = on_context
        self.on_warning = on_warning
        if on_context:
            on_context(0, total)

    def write(self, batch: list[PreparedDoc]) -> None:
        for doc in batch:
            # (A document with its own vector gets no context line: its vector is its text's.)
            if doc.duplicate_of is not None or doc.file.vector is not None:
                continue
            note = self.contextualizer.write(
                doc, stored_contexts(self.contextualizer.db, doc), self._chunk_done
            )
            if note and self.on_warning:
                self.on_warning(doc.result.path, note)

    def _chunk_done(self) -> None:
        self.done += 1
        if self.on_context:
            self.on_context(self.done, self.total)

    def report(self, report: IngestReport) -> None:
        stats = self.contextualizer.stats
        report.contexts_written += stats.written
        report.contexts_empty += stats.empty
        report.contexts_missing += stats.missing
        report.contexts_reused += stats.reused
        report.context_seconds += round(stats.seconds, 3)
