"""Writing documents whole: each batch in one transaction, chunks and vectors by binary COPY
through staging tables, so that search never sees a document half-written and a killed ingest
leaves only whole documents behind. A changed document keeps the rows of its unchanged chunks;
a file too large to hold is written group by group in one transaction of its own; the
collection's other models get the new chunks through the embedding queue."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pgrag.collections import Collection
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import CollectionNotFound, DatabaseError, InputError, PgragError
from pgrag.ingest.embed import vectors_by_hash
from pgrag.ingest.plan import PreparedChunk, PreparedDoc, prepare_chunk
from pgrag.ingest.report import FileResult, IngestReport
from pgrag.text.chunking import chunk_lines
from pgrag.text.semantic import semantic_chunk_lines

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder

Q = queries.load(__name__)

# The types of copy_chunks' columns, in order.
_CHUNK_TYPES = [
    "int8", "int8", "int4", "int4", "text", "text", "int4", "int4", "text", "text[]", "text",
    "text", "text",
]  # fmt: skip


def write_batch(
    db: Database,
    coll: Collection,
    batch: list[PreparedDoc],
    vectors: list[list[Any]],
    principals: list[str] | None = None,
) -> None:
    """Write a batch of documents with their chunks' vectors, in one transaction."""
    with transaction(db) as conn:
        others = lock_collection(conn, coll)
        lock_documents(conn, coll, batch)
        new: list[tuple[int, int, PreparedChunk, Any, list[str]]] = []
        # Documents are written in the batch's order (by source), so that concurrent ingests
        # insert them in the same order; a run of new ones goes in one statement, before the
        # next document that is not new.
        run: list[tuple[PreparedDoc, list[Any]]] = []

        def insert_run() -> None:
            inserted = insert_documents(conn, coll, [d for d, _ in run], principals)
            for doc, doc_vectors in run:
                doc_id, doc_principals = inserted[doc.file.source]
                for ordinal, (chunk, vector) in enumerate(
                    zip(doc.chunks, doc_vectors, strict=True)
                ):
                    new.append((doc_id, ordinal, chunk, vector, doc_principals))
            run.clear()

        for doc, doc_vectors in zip(batch, vectors, strict=True):
            if is_new(doc):
                run.append((doc, doc_vectors))
                continue
            if run:
                insert_run()
            if doc.duplicate_of is not None and not original_unchanged(conn, coll, doc, principals):
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
            doc_id, doc_principals, kept = replace_document(conn, coll, doc, principals)
            for ordinal, (chunk, vector) in enumerate(zip(doc.chunks, doc_vectors, strict=True)):
                if ordinal not in kept:
                    new.append((doc_id, ordinal, chunk, vector, doc_principals))
        if run:
            insert_run()
        ids = chunk_ids(conn, len(new))
        chunk_rows = [
            chunk_row(i, doc_id, coll, ordinal, chunk, readers)
            for i, (doc_id, ordinal, chunk, _, readers) in zip(ids, new, strict=True)
        ]
        vector_rows = [(coll.model_id, i, v[3]) for i, v in zip(ids, new, strict=True)]
        copy_chunks(conn, chunk_rows, vector_rows)
        if others and ids:
            enqueue(conn, coll, ids)


def write_streamed(
    db: Database,
    coll: Collection,
    doc: PreparedDoc,
    embedder: Embedder,
    report: IngestReport,
    principals: list[str] | None,
    group: int,
    progress: Callable[[int], None] | None,
) -> None:
    """A file too large to hold, in one transaction: read a line at a time, chunked section by
    section, embedded and copied ``group`` chunks at a time. Old vectors are kept in a
    temporary table in the database (not here) for the chunks whose text did not change."""
    assert doc.streamed is not None and doc.file.stream is not None
    limit, overlap = doc.streamed
    counter = embedder.tokens
    headings: dict[str, str] = {}
    with transaction(db) as conn:
        conn.execute(
            Q.keep_old_vectors,
            {"model_id": coll.model_id, "collection_id": coll.id, "source": doc.file.source},
        )
        conn.execute(Q.index_old_vectors)
        others = lock_collection(conn, coll)
        lock_documents(conn, coll, [doc])
        doc_id, doc_principals, _ = replace_document(conn, coll, doc, principals)
        ordinal = 0
        pending: list[PreparedChunk] = []

        def flush() -> None:
            nonlocal ordinal
            hashes = list(dict.fromkeys(c.content_hash for c in pending))
            known = dict(conn.execute(Q.old_vectors, {"hashes": hashes}).fetchall())
            missing = [h for h in hashes if h not in known]
            if missing:  # in any other document of the collection
                known.update(vectors_by_hash(conn, coll, missing))
            todo = {c.content_hash: c.embed_text for c in pending if c.content_hash not in known}
            if todo:
                matrix = embedder.embed(list(todo.values()))
                known.update(zip(todo, matrix, strict=True))
                report.chunks_embedded += len(todo)
            ids = chunk_ids(conn, len(pending))
            rows = [
                chunk_row(i, doc_id, coll, ordinal + k, c, doc_principals)
                for k, (i, c) in enumerate(zip(ids, pending, strict=True))
            ]
            vectors = [
                (coll.model_id, i, known[c.content_hash]) for i, c in zip(ids, pending, strict=True)
            ]
            copy_chunks(conn, rows, vectors)
            if others:
                enqueue(conn, coll, ids)
            ordinal += len(pending)
            report.chunks_written += len(pending)
            if progress:
                progress(len(pending))
            pending.clear()

        try:
            with doc.file.stream.open(encoding="utf-8-sig", newline=None) as fh:
                lines = _without_nul(fh)
                chunks = (
                    semantic_chunk_lines(
                        lines,
                        counter,
                        embedder.embed,
                        limit=limit,
                        overlap=overlap,
                        markdown=doc.file.markdown,
                    )  # fmt: skip
                    if doc.chunking == "semantic"
                    else chunk_lines(
                        lines, counter, limit=limit, overlap=overlap, markdown=doc.file.markdown
                    )
                )
                for chunk in chunks:
                    pending.append(prepare_chunk(chunk, doc.file, counter, headings))
                    if len(pending) >= group:
                        flush()
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"changed or became unreadable while it was read ({err})") from err
        if pending:
            flush()
        if ordinal == 0:
            raise InputError("has no text to index")
    doc.result.chunks = ordinal


def set_access(db: Database, document_id: int, principals: list[str]) -> None:
    """New principals for a stored document; its chunks, vectors and postings follow (trigger),
    nothing is re-embedded."""
    with transaction(db) as conn:
        conn.execute(Q.set_access, {"principals": principals, "document_id": document_id})


def ensure_acl(db: Database, principals: list[str]) -> None:
    """Create the access list of ``principals`` now, in a statement (and transaction) of its
    own, if it is new. A row-level security check reads the access lists as they were when its
    statement began, so a session it filters (a writer naming principals) would find a list that
    the same INSERT's trigger created missing, and be refused its own document. One the
    session may not create (row-level security on the access lists) is left to the documents'
    own writes, which PostgreSQL then refuses saying why."""
    try:
        with transaction(db) as conn:
            conn.execute(Q.ensure_acl, {"principals": principals})
    except DatabaseError as err:
        if getattr(err.__cause__, "sqlstate", None) != "42501":
            raise


def lock_collection(conn: Any, coll: Collection) -> bool:
    """Holds the collection row FOR SHARE until the write commits, so that no model is
    activated or retired in between (pgrag.activate_model_v1 takes it FOR UPDATE). True when
    the collection has models besides the one this ingest embeds with: they get its new
    chunks through the embedding queue (pgrag worker)."""
    row = conn.execute(
        Q.lock_collection, {"collection_id": coll.id, "model_id": coll.model_id}
    ).fetchone()
    if row is None:
        raise CollectionNotFound(
            coll.name,
            f"collection {coll.name!r} was deleted during this ingest (pgrag collections"
            " delete); what it had written went with it",
        )
    if row[0] != coll.model_id:
        raise PgragError(
            f"collection {coll.name!r} was switched to another embedding model during this"
            " ingest (pgrag models activate); run the ingest again"
        )
    return bool(row[1])


def enqueue(conn: Any, coll: Collection, ids: list[int]) -> None:
    conn.execute(Q.enqueue_chunks, {"collection_id": coll.id, "chunk_ids": ids})


def _without_nul(lines: Iterable[str]) -> Iterator[str]:
    """The lines of a streamed file, which was checked when planned but may have changed."""
    for line in lines:
        if "\x00" in line:
            raise InputError("changed while it was read: it now contains NUL bytes")
        yield line


def original_unchanged(
    conn: Any, coll: Collection, doc: PreparedDoc, principals: list[str] | None
) -> bool:
    """Whether a copy's original still holds its content for its readers (another process
    may have rewritten it since this ingest planned); locked until this batch commits."""
    row = conn.execute(
        Q.lock_original, {"collection_id": coll.id, "source": doc.duplicate_of}
    ).fetchone()
    readers = set(principals or ["public"])
    return row is not None and row[0] == doc.file.content_hash and set(row[1]) == readers


def chunk_ids(conn: Any, n: int) -> list[int]:
    return [r[0] for r in conn.execute(Q.new_chunk_ids, {"n": n}).fetchall()]


def chunk_row(
    chunk_id: int,
    doc_id: int,
    coll: Collection,
    ordinal: int,
    chunk: PreparedChunk,
    principals: list[str],
) -> tuple[Any, ...]:
    """A chunk's row as copy_chunks takes it."""
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
        chunk.context,
        chunk.context_for,
    )


def lock_documents(conn: Any, coll: Collection, docs: list[PreparedDoc]) -> None:
    """Lock the stored documents that writing ``docs`` will lock, all at once, in source
    order (writer.sql, lock_documents): two ingests then never hold one each of two rows
    they both need (a copy's original, a rewritten document's copies included)."""
    sources = [d.file.source for d in docs]
    sources += [d.duplicate_of for d in docs if d.duplicate_of is not None]
    rewritten = [d.file.source for d in docs if d.replaces is not None]
    conn.execute(
        Q.lock_documents,
        {"collection_id": coll.id, "sources": sources, "rewritten": rewritten},
    ).fetchall()


def is_new(doc: PreparedDoc) -> bool:
    """Planned as a new document: not a copy, not a rewrite, not streamed."""
    return doc.duplicate_of is None and doc.replaces is None and not doc.streamed


def insert_documents(
    conn: Any, coll: Collection, docs: list[PreparedDoc], principals: list[str] | None
) -> dict[str, tuple[int, list[str]]]:
    """The rows of documents planned as new (:func:`is_new`), written in one statement, in
    their order, instead of two round trips each: source -> (id, readers). One a concurrent
    writer stored after this ingest planned is updated as replace_document would, and its
    chunks are deleted (all of them: none was planned to be kept)."""
    import json

    fresh = [d.file for d in docs]
    if not fresh:
        return {}
    rows = conn.execute(
        Q.insert_documents,
        {
            "collection_id": coll.id,
            "allow": principals,
            "sources": [f.source for f in fresh],
            "titles": [f.title for f in fresh],
            "metadata": [json.dumps(f.metadata) for f in fresh],
            "hashes": [f.content_hash for f in fresh],
        },
    ).fetchall()
    stored_first = [r[1] for r in rows if r[3]]
    if stored_first:
        conn.execute(Q.delete_documents_chunks, {"document_ids": stored_first})
    return {r[0]: (int(r[1]), list(r[2])) for r in rows}


def replace_document(
    conn: Any, coll: Collection, doc: PreparedDoc, principals: list[str] | None
) -> tuple[int, list[str], set[int]]:
    """Insert or update the document's row, and make its stored chunks the prepared ones: a
    chunk whose embedded text, page and context line are unchanged keeps its row (and id, and
    vector), moved to its new position (a context line asked again for this version says so:
    context_for); the others are deleted (an identical document elsewhere inherits them all
    first). Returns the document's id, its stored readers and the ordinals kept."""
    from psycopg.types.json import Jsonb

    f = doc.file
    metadata = (
        f.metadata if doc.duplicate_of is None else {**f.metadata, "duplicate_of": doc.duplicate_of}
    )
    row = conn.execute(
        Q.upsert_document,
        {
            "allow": principals,
            "collection_id": coll.id,
            "source": f.source,
            "title": f.title,
            "metadata": Jsonb(metadata),
            "content_hash": f.content_hash,
        },
    ).fetchone()
    assert row is not None
    doc_id, doc_principals = row
    if doc.replaces is not None:
        conn.execute(
            Q.hand_over, {"document_id": doc_id, "collection_id": coll.id, "source": f.source}
        )
    keep: dict[int, int] = {}  # chunk id -> its new ordinal
    asked: list[int] = []  # kept chunks whose context line was asked for this version
    if doc.replaces is not None and doc.streamed is None:
        # (The section too: the embedded text holds only its first 32 tokens; and the context
        # line, which the embedded text may hold only part of.)
        stored: dict[tuple[str, int | None, str | None, str | None], list[int]] = {}
        for chunk_id, content_hash, page, section, context in conn.execute(
            Q.stored_chunks, {"document_id": doc_id}
        ).fetchall():
            stored.setdefault((content_hash, page, section, context), []).append(chunk_id)
        for ordinal, chunk in enumerate(doc.chunks):
            same = stored.get((chunk.content_hash, chunk.page, chunk.section, chunk.context))
            if same:
                kept_id = same.pop(0)
                keep[kept_id] = ordinal
                if chunk.context_for is not None:
                    asked.append(kept_id)
    conn.execute(Q.delete_chunks_except, {"document_id": doc_id, "keep": list(keep)})
    if asked:
        conn.execute(Q.contexts_asked_for, {"ids": asked, "content_hash": f.content_hash})
    if keep:
        # In two steps, as (document, ordinal) is unique: out of the way, then into place.
        conn.execute(Q.park_ordinals, {"ids": list(keep)})
        conn.execute(Q.place_ordinals, {"ids": list(keep), "ordinals": list(keep.values())})
    return int(doc_id), list(doc_principals), set(keep.values())


def copy_chunks(
    conn: Any, chunk_rows: list[tuple[Any, ...]], vector_rows: list[tuple[Any, ...]]
) -> None:
    # Binary COPY into session-private staging tables, then one INSERT ... SELECT each:
    # PostgreSQL refuses COPY FROM into a table under row-level security (the chunk tables'
    # policies apply to every role but superusers), and the INSERT goes through them.
    conn.execute(Q.staging_chunks_table)
    conn.execute(Q.staging_vectors_table)
    with conn.cursor() as cur:
        with cur.copy(Q.copy_chunks) as copy:
            copy.set_types(_CHUNK_TYPES)
            for r in chunk_rows:
                copy.write_row(r)
        with cur.copy(Q.copy_vectors) as copy:
            copy.set_types(["int4", "int8", "vector"])
            for r in vector_rows:
                copy.write_row(r)
    conn.execute(Q.insert_staged_chunks)
    conn.execute(Q.insert_staged_vectors)
    # Emptied now, not only at commit: a streamed document copies many groups in one
    # transaction.
    conn.execute(Q.empty_staged_chunks)
    conn.execute(Q.empty_staged_vectors)
