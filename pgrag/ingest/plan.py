"""Planning an ingest: which documents changed, which are copies of another, and the chunks of
each one to write (with the heading context each chunk is embedded with). A contextual ingest
(:mod:`pgrag.ingest.contextual`) also rewrites an unchanged document whose chunks lack the
context lines of its current version. A document that brings its own vector
(:mod:`pgrag.ingest.vectors`) is one chunk, checked against the collection's model here."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.collections import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_TOKENS, Collection
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import InputError, SkippedInput
from pgrag.ingest import budget
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.report import FileResult, IngestReport
from pgrag.ingest.vectors import VectorTarget, fit, target_for, vector_digest
from pgrag.text.chunking import CONTEXT_TOKENS, Chunk, chunk_text, markdown_headings
from pgrag.text.semantic import semantic_chunk_text
from pgrag.text.tokens import count_all
from pgrag.text.vector_text import CONTEXT_LINE_TOKENS, vector_text

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder
    from pgrag.text.tokens import TokenCounter

Q = queries.load(__name__)


@dataclass
class PreparedChunk:
    text: str
    section: str | None
    token_count: int
    content_hash: str  # of the embedded text: heading context (+ context line) + chunk text
    embed_text: str
    page: int | None = None  # PDF: the page the chunk is on (chunks never span pages)
    heading: str = ""  # the heading context as embedded (the section, cut short)
    # Contextual ingest: the model's line situating the chunk in its document, and the content
    # hash of the document version it was asked for (None: never asked).
    context: str | None = None
    context_for: str | None = None
    # The vector the document brought (a float32 array as stored): written as it is, never
    # embedded, and part of the content hash (a vector from the encoder is never reused for
    # it, nor it for a chunk of the same text without one).
    vector: Any = None

    def set_context(
        self, context: str | None, asked_for: str, counter: TokenCounter, max_tokens: int
    ) -> None:
        """Give the chunk its context line (None: the model gave none of use) for the document
        version ``asked_for``; its embedded text and content hash follow."""
        self.context, self.context_for = context, asked_for
        self.embed_text = vector_text(
            self.heading, self.text, context, counter, max_tokens, self.token_count
        )
        self.content_hash = hashlib.sha256(self.embed_text.encode()).hexdigest()


@dataclass
class PreparedDoc:
    file: LoadedFile
    result: FileResult
    chunks: list[PreparedChunk]
    duplicate_of: str | None = None  # the source of an identical document holding the chunks
    replaces: int | None = None  # the stored document (id) this one rewrites
    streamed: tuple[int, int] | None = None  # a large file's (chunk limit, overlap)
    chunking: str = "fixed"  # how a streamed file is chunked (pgrag.text.semantic.STRATEGIES)


def plan(
    db: Database,
    coll: Collection | None,
    embedder: Embedder,
    items: Iterable[tuple[str, LoadedFile | InputError]],
    report: IngestReport,
    on_error: Callable[[str, str], None] | None,
    principals: list[str] | None = None,
    on_warning: Callable[[str, str], None] | None = None,
    contextual: bool = False,
    chunking: str = "fixed",
    rechunk: bool = False,
) -> tuple[list[PreparedDoc], list[int]]:
    """The documents to write, and the ids of stored ones whose access alone changes. A file
    the walk skipped with a reason (:class:`~pgrag.errors.SkippedInput`) is reported as
    "skipped" through ``on_warning``; one that cannot be used as "failed" through
    ``on_error``. ``contextual``: chunked with room for a context line, and an unchanged
    document some of whose chunks have no context for its current version is rewritten
    (status "updated"); without it, a changed document that had contexts is warned about
    (its new chunks have none). ``chunking``: "fixed" or "semantic" (:mod:`pgrag.text.semantic`);
    ``rechunk``: an unchanged document is chunked and written again too (status "updated")."""
    docs: list[PreparedDoc] = []
    access: list[int] = []
    seen: dict[str, str] = {}  # source -> content hash, of the files planned
    # Identical content planned in this run: (content hash, principals) -> its source.
    planned: dict[tuple[str, frozenset[str]], str] = {}
    readers = frozenset(principals or ["public"])

    target: VectorTarget | None = None
    # Documents that bring their own vectors: their headings' capped forms (titles repeat
    # across documents), and their chunks, counted in one batch when the plan is made.
    titles: dict[str, str] = {}
    uncounted: list[PreparedChunk] = []

    def prepare(file: LoadedFile, label: str, replaces: int | None) -> PreparedDoc:
        nonlocal target
        if file.vector is not None:
            if target is None:
                target = target_for(db, coll, embedder, report.collection)
            chunks = [vector_chunk(file, embedder.tokens, fit(file.vector, target), titles)]
            uncounted.extend(chunks)
        else:
            with budget.file_budget():
                chunks = prepare_chunks(file, embedder, limit, overlap, chunking)
        if not chunks:
            raise InputError("has no text to index")
        doc = PreparedDoc(
            file=file,
            result=FileResult(label, "updated" if replaces else "added", len(chunks)),
            chunks=chunks,
            replaces=replaces,
        )
        return doc

    limit, overlap = chunk_limits(coll, embedder, contextual)
    stored = StoredLookup(db, coll, contextual)
    for label, item in stored.windows(items):
        if isinstance(item, SkippedInput):
            report.files.append(FileResult(label, "skipped", reason=str(item)))
            if on_warning:
                on_warning(label, str(item))
            continue
        try:
            if isinstance(item, InputError):
                raise item
            file = item
            if file.source in seen:
                # The same file named twice (a directory and a file in it) is read once,
                # silently; the same source given again with other content is said to be left.
                if seen[file.source] != file.content_hash:
                    why = f"repeats source {file.source!r} with other content; the first was used"
                    report.files.append(FileResult(label, "skipped", reason=why))
                    if on_warning:
                        on_warning(label, why)
                continue
            seen[file.source] = file.content_hash
            if on_warning:
                for note in file.notes:
                    on_warning(label, note)
            row = stored.document(file.source)
            # Unchanged, but chunked again (a switch of the collection's chunking): chunks
            # whose text is the same keep their vectors. (A copy stored once becomes a document
            # of its own, as the copy of a rewritten original does.)
            rechunked = (
                rechunk and row is not None and row[1] == file.content_hash and file.vector is None
            )
            if rechunked and file.stream is None:
                assert row is not None
                doc = prepare(file, label, row[0])
                doc.result.reason = "re-chunked"
                docs.append(doc)
                continue
            # (A document with its own vector has no context lines: its text is the vector's.)
            if (
                row is not None
                and row[1] == file.content_hash
                and row[3]
                and file.stream is None
                and file.vector is None
            ):
                # Unchanged, but some of its chunks have no context for this version yet (a
                # plain ingest wrote them, or the model failed): rewritten with contexts; those
                # it has are kept (pgrag.ingest.contextual reads them back).
                doc = prepare(file, label, row[0])
                doc.result.reason = "contexts to write"
                docs.append(doc)
                continue
            if row is not None and row[1] == file.content_hash and not rechunked:
                if principals is not None and set(principals) != set(row[2]):
                    access.append(row[0])
                    report.files.append(FileResult(label, "access"))
                else:
                    report.files.append(FileResult(label, "unchanged"))
                continue
            if row is not None and row[4] and on_warning:
                on_warning(
                    label,
                    "changed: its chunks had context lines, and are rewritten without them"
                    " (ingest with --contextual to write them again)",
                )
            original = None
            if row is None:
                # A new location of content the collection holds (or this run writes) with the
                # same readers: recorded, stored once.
                original = planned.get((file.content_hash, readers)) or stored.original(
                    file.content_hash, readers
                )
            if original is not None:
                docs.append(
                    PreparedDoc(
                        file=file,
                        result=FileResult(label, "duplicate", reason=f"same as {original}"),
                        chunks=[],
                        duplicate_of=original,
                    )
                )
                continue
            if file.stream is not None:
                # Too large to hold: chunked, embedded and written group by group, in one
                # transaction, after the other documents (writer.write_streamed).
                docs.append(
                    PreparedDoc(
                        file=file,
                        result=FileResult(
                            label,
                            "updated" if row else "added",
                            reason="a large file, streamed: its chunks are counted as written",
                        ),
                        chunks=[],
                        replaces=None if row is None else row[0],
                        streamed=(limit, overlap),
                        chunking=chunking,
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
            if isinstance(item, LoadedFile) and seen.get(item.source) == item.content_hash:
                del seen[item.source]  # (a later file of the source is planned, not skipped)
    # A copy of an original that this run rewrites holds the old content itself: the
    # original's hand-over happens before the copy's row exists.
    rewritten = {d.file.source for d in docs if d.replaces is not None}
    for i, doc in enumerate(docs):
        if doc.duplicate_of in rewritten:
            try:
                docs[i] = prepare(doc.file, doc.result.path, None)
            except InputError as err:
                docs[i] = PreparedDoc(
                    doc.file, FileResult(doc.result.path, "failed", reason=str(err)), []
                )
                if on_error:
                    on_error(doc.result.path, str(err))
    for chunk, n in zip(
        uncounted, count_all(embedder.tokens, [c.text for c in uncounted]), strict=True
    ):
        chunk.token_count = n
    failed = [d for d in docs if d.result.status == "failed"]
    report.files.extend(d.result for d in failed)
    docs = [d for d in docs if d.result.status != "failed"]
    # Written in a stable order, so concurrent ingests of overlapping paths lock documents in
    # the same order and cannot deadlock; duplicates last, so that one is never committed
    # before the original it points to.
    docs.sort(key=lambda d: (d.duplicate_of is not None, d.file.source))
    return docs, access


def chunk_limits(
    coll: Collection | None, embedder: Embedder, contextual: bool = False
) -> tuple[int, int]:
    """(chunk size, overlap) in the model's tokens: the collection's, within what the model
    reads once the heading context (and, ``contextual``, room for a context line:
    :data:`~pgrag.text.vector_text.CONTEXT_LINE_TOKENS`) is put in front."""
    chunk_tokens = coll.chunk_tokens if coll else DEFAULT_CHUNK_TOKENS
    chunk_overlap = coll.chunk_overlap if coll else DEFAULT_CHUNK_OVERLAP
    room = CONTEXT_TOKENS + (CONTEXT_LINE_TOKENS if contextual else 0)
    limit = max(8, min(chunk_tokens, embedder.max_tokens - 2 - room))
    return limit, min(chunk_overlap, limit - 1)


class StoredLookup:
    """What the collection already holds for the files being planned, read for a window of
    files at a time (two statements in one transaction) rather than two round trips a file:
    each source's stored document, and the documents a new file's content could be a copy of.
    (It was a second of 2,067 SQuAD paragraphs' five added to a collection.)"""

    WINDOW = 256  # files
    WINDOW_CHARS = 16 << 20  # or this much text held, whichever comes first

    def __init__(self, db: Database, coll: Collection | None, contextual: bool) -> None:
        self.db, self.coll, self.contextual = db, coll, contextual
        self._documents: dict[str, tuple[Any, ...]] = {}
        self._originals: dict[str, list[tuple[str, list[str]]]] = {}

    def windows(self, items: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        """``items`` as they come, each window's lookups made before its first is handed on."""
        window: list[tuple[str, Any]] = []
        chars = 0
        for item in items:
            window.append(item)
            if isinstance(item[1], LoadedFile):
                chars += len(item[1].text)
            if len(window) >= self.WINDOW or chars >= self.WINDOW_CHARS:
                yield from self._ready(window)
                window, chars = [], 0
        yield from self._ready(window)

    def _ready(self, window: list[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        files = [f for _, f in window if isinstance(f, LoadedFile)]
        self._documents, self._originals = {}, {}
        if self.coll is not None and files:
            with transaction(self.db) as conn:
                for row in conn.execute(
                    Q.documents_by_source,
                    {
                        "collection_id": self.coll.id,
                        "sources": list(dict.fromkeys(f.source for f in files)),
                        "contextual": self.contextual,
                    },
                ).fetchall():
                    self._documents[row[0]] = tuple(row[1:])
                hashes = {f.content_hash for f in files if f.source not in self._documents}
                for content_hash, source, principals in conn.execute(
                    Q.originals,
                    {"collection_id": self.coll.id, "content_hashes": sorted(hashes)},
                ).fetchall():
                    self._originals.setdefault(content_hash, []).append((source, principals))
        yield from window

    def document(self, source: str) -> tuple[Any, ...] | None:
        """The stored document of ``source``: (id, content hash, readers, contexts missing,
        contexts present), or None."""
        return self._documents.get(source)

    def original(self, content_hash: str, readers: frozenset[str]) -> str | None:
        """The source of a stored document with this content and these readers, if any."""
        return next(
            (s for s, p in self._originals.get(content_hash, ()) if frozenset(p) == readers), None
        )


def prepare_chunks(
    file: LoadedFile, embedder: Embedder, limit: int, overlap: int, chunking: str = "fixed"
) -> list[PreparedChunk]:
    """The chunks of a document held whole; ``chunking`` "semantic" cuts them where the
    subject changes (:mod:`pgrag.text.semantic`: its sentences are embedded first)."""
    counter = embedder.tokens

    def chunked(text: str) -> list[Chunk]:
        if chunking == "semantic":
            return semantic_chunk_text(
                text, counter, embed_units(embedder), limit=limit, overlap=overlap,
                markdown=file.markdown, check=_check,
            )  # fmt: skip
        return chunk_text(
            text, counter, limit=limit, overlap=overlap, markdown=file.markdown, check=_check
        )

    out = []
    headings: dict[str, str] = {}  # context -> its capped form; chunks of a section share it
    # A PDF is chunked page by page, so that every chunk has one page to cite.
    parts = (
        [(n, text) for n, text in enumerate(file.pages, start=1) if text.strip()]
        if file.pages is not None
        else [(None, file.text)]
    )
    paged = ((page, chunk) for page, text in parts for chunk in chunked(text))
    for page, chunk in paged:
        out.append(prepare_chunk(chunk, file, counter, headings, page))
    if not out and file.markdown and file.pages is None:
        # Only headings (a title page, a stub): its headings are its text, so that it can
        # be found at all.
        text = "\n\n".join(markdown_headings(file.text))
        for chunk in chunk_text(text, counter, limit=limit, overlap=overlap, markdown=False):
            out.append(prepare_chunk(chunk, file, counter, headings))
    return out


def vector_chunk(
    file: LoadedFile, counter: TokenCounter, vector: Any, headings: dict[str, str]
) -> PreparedChunk:
    """The one chunk of a document that brings its own vector: its whole text (never split: the
    vector is that text's), its title as the section, and the vector. Its token count is left
    at -1 for the caller to count in a batch (:func:`pgrag.text.tokens.count_all`);
    ``headings`` as :func:`prepare_chunk` takes it, shared by the documents of a plan."""
    chunk = prepare_chunk(
        Chunk(text=file.text.strip(), section=(), token_count=-1), file, counter, headings
    )
    # The vector is the chunk's content: the same text with another vector is another chunk.
    chunk.content_hash = hashlib.sha256(
        f"{chunk.content_hash}\nvector {vector_digest(file.vector or ())}".encode()
    ).hexdigest()
    chunk.vector = vector
    return chunk


def _check() -> None:
    budget.check("chunking")


def embed_units(embedder: Embedder) -> Callable[[list[str]], Any]:
    """``embedder.embed`` for semantic chunking: the time it takes is embedding, not counted
    against the file's chunking budget (:mod:`pgrag.ingest.budget`)."""

    def embed(texts: list[str]) -> Any:
        with budget.paused():
            return embedder.embed(texts)

    return embed


def prepare_chunk(
    chunk: Chunk,
    file: LoadedFile,
    counter: TokenCounter,
    headings: dict[str, str],
    page: int | None = None,
) -> PreparedChunk:
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
    return PreparedChunk(
        text=chunk.text,
        section=section,
        token_count=chunk.token_count,
        content_hash=hashlib.sha256(embed_text.encode()).hexdigest(),
        embed_text=embed_text,
        page=page,
        heading=heading,
    )
