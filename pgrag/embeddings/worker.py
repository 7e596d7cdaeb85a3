"""``pgrag worker``: embeds what ``pgrag.embedding_queue`` holds.

Chunks land in the queue when a document is written with SQL (``documents.body``, or an
application table's ``pgrag.sync_row_v1`` trigger), or when ``pgrag ingest`` writes to a
collection that has more than one model. A worker claims a batch of due items ``FOR UPDATE SKIP
LOCKED`` (so any number of workers share the queue without taking the same item) by moving
their ``not_before`` a lease ahead, and commits. It embeds them holding no lock, so writers never
wait for a model, then writes the vectors and deletes the items in one short transaction. A
worker killed half-way leaves its items to be taken again when the lease ends. An item that
fails (the model's server is down, a model cannot be loaded, a chunk the server refuses) stays
queued with its error and is retried after a backoff that doubles with each attempt, up to an
hour. A batch that fails is retried an item at a time, so one bad chunk does not hold the
others back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.db import queries
from pgrag.db.connect import describe_error, transaction
from pgrag.embeddings.models import embedder_for, models_by_id
from pgrag.errors import DatabaseError, PgragError
from pgrag.text.chunking import CONTEXT_TOKENS
from pgrag.text.vector_text import vector_text

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder
    from pgrag.embeddings.models import Model

Q = queries.load(__name__)

BACKOFF_FIRST, BACKOFF_CAP = 5.0, 3600.0  # seconds
LEASE = 300.0  # seconds a claimed item is a worker's before another may take it


@dataclass
class WorkReport:
    embedded: int = 0  # (chunk, model) pairs given a vector
    failed: int = 0  # items that failed this time (kept queued)
    removed: int = 0  # items of a model their collection retired
    batches: int = 0
    collections: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def embed_text(
    section: str | None, content: str, embedder: Embedder, context: str | None = None
) -> str:
    """What a chunk's vector is made from, as ingest makes it: its section (cut short), its
    context line (contextual ingest: cut to what is left of the model's input) and its text
    (:func:`pgrag.text.vector_text.vector_text`)."""
    pieces = embedder.tokens.cut(section, CONTEXT_TOKENS) if section else []
    heading = pieces[0] if pieces else ""
    return vector_text(heading, content, context, embedder.tokens, embedder.max_tokens)


Chunk = tuple[str | None, str] | tuple[str | None, str, str | None]


def embed_chunks(embedder: Embedder, chunks: Sequence[Chunk]) -> Any:
    """Vectors of (section, text) or (section, text, context line) chunks. A chunk longer than
    the model's input (one written with SQL, chunked in words) is embedded as the mean of its
    pieces' vectors, each piece within the input, normalised as the model's are: none of its
    text is left out."""
    import numpy as np

    budget = max(8, embedder.max_tokens - 2)  # [CLS] and [SEP], or their like
    counter = embedder.tokens
    texts: list[str] = []
    spans: list[tuple[int, int]] = []
    for section, content, *context in chunks:
        text = embed_text(section, content, embedder, context[0] if context else None)
        pieces = [text] if counter.count(text) <= budget else counter.cut(text, budget) or [text]
        spans.append((len(texts), len(pieces)))
        texts.extend(pieces)
    matrix = np.asarray(embedder.embed(texts), dtype=np.float32)
    if matrix.shape != (len(texts), embedder.dimension):
        raise PgragError(
            f"embedding model {embedder.name!r} returned vectors of shape {matrix.shape},"
            f" expected ({len(texts)}, {embedder.dimension})"
        )
    out = np.empty((len(chunks), embedder.dimension), dtype=np.float32)
    for i, (start, n) in enumerate(spans):
        vector = matrix[start : start + n].mean(axis=0)
        if n > 1 and embedder.normalized:
            vector /= np.linalg.norm(vector) or 1.0
        out[i] = vector
    return out


def store_vectors(conn: Any, model_id: int, pairs: Sequence[tuple[int, Any]]) -> None:
    """Write (chunk id, vector) pairs of one model, replacing any there are, and take the
    chunks off the queue for that model: one transaction with the caller's. A chunk deleted
    meanwhile is skipped."""
    if not pairs:
        return
    with conn.cursor() as cur:
        cur.executemany(
            Q.store_vector,
            [
                {"model_id": model_id, "embedding": vector, "chunk_id": chunk_id}
                for chunk_id, vector in pairs
            ],
        )
    conn.execute(
        Q.dequeue, {"model_id": model_id, "chunk_ids": [chunk_id for chunk_id, _ in pairs]}
    )


def _message(err: Exception) -> str:
    import psycopg

    if isinstance(err, psycopg.Error):
        return describe_error(err)
    if isinstance(err, PgragError):
        return str(err)
    return f"{type(err).__name__}: {err}"


def _item_error(err: Exception) -> bool:
    """Whether an error may be one chunk's doing (a server refusing an input with a 4xx, a
    local model failing on a text), rather than the model's or the network's, which retrying
    item by item would only multiply."""
    if isinstance(err, PgragError):
        return re.search(r"\bHTTP 4\d\d\b", str(err)) is not None
    return not isinstance(err, (OSError, MemoryError))


def _renew(db: Database, model_id: int, chunk_ids: list[int], lease: float) -> None:
    """Extend the lease of claimed items before working on them one at a time."""
    with transaction(db) as conn:
        conn.execute(Q.renew_lease, {"lease": lease, "model_id": model_id, "chunk_ids": chunk_ids})


def run_once(
    db: Database,
    *,
    batch_size: int = 64,
    lease: float = LEASE,
    embedders: Callable[[Model], Embedder] | None = None,
) -> WorkReport:
    """One batch: claim up to ``batch_size`` due items, embed them, write their vectors.
    Returns what was done (nothing: the queue has no due item this worker could take).

    Items are claimed by moving their ``not_before`` ``lease`` seconds on, in a transaction of
    their own; no lock is held while embedding, so writers never wait for the model. A worker
    killed half-way leaves its items to be taken again when the lease ends.

    ``embedders`` builds a model's embedder (by default from the model's row and the
    connection's settings, :func:`pgrag.embeddings.models.embedder_for`)."""

    def build(model: Model) -> Embedder:
        return embedders(model) if embedders else embedder_for(model, db.settings)

    report = WorkReport()
    with transaction(db) as conn:
        claimed = conn.execute(Q.claim, {"limit": batch_size, "lease": lease}).fetchall()
    if not claimed:
        return report
    report.batches = 1
    with transaction(db) as conn:
        rows = conn.execute(
            Q.claimed_chunks,
            {"chunk_ids": [r[0] for r in claimed], "model_ids": [r[1] for r in claimed]},
        ).fetchall()
        # Items of a model the collection retired (or dropped) are simply removed.
        gone = [(r[0], r[1]) for r in rows if r[5] in (None, "retired")]
        for chunk_id, model_id in gone:
            conn.execute(Q.drop_item, {"chunk_id": chunk_id, "model_id": model_id})
        report.removed = len(gone)
    live = [r for r in rows if r[5] not in (None, "retired")]
    models = models_by_id(db, {r[1] for r in live})
    by_model: dict[int, list[Any]] = {}
    for r in live:
        by_model.setdefault(r[1], []).append(r)
    for model_id, items in by_model.items():
        model = models[model_id]
        done: list[tuple[int, Any]] = []
        failed: dict[str, list[int]] = {}
        embedder: Embedder | None = None  # this model's, once built and checked
        try:
            built = build(model)
            if built.dimension != model.dimension:
                raise PgragError(
                    f"embedding model {model.name!r} gives {built.dimension} dimensions,"
                    f" {model.dimension} are recorded"
                )
            embedder = built
            matrix = embed_chunks(embedder, [(r[3], r[4], r[6]) for r in items])
            done = [(r[0], v) for r, v in zip(items, matrix, strict=True)]
        except Exception as err:  # noqa: BLE001 - whatever it is, keep the items and go on
            if embedder is None or len(items) == 1 or not _item_error(err):
                # The model, its server or the machine: every item alike, no retries here.
                failed[_message(err)] = [r[0] for r in items]
            else:  # a chunk the model refuses must not hold the others back: one at a time
                _renew(db, model_id, [r[0] for r in items], lease)
                for i, r in enumerate(items):
                    try:
                        done.append((r[0], embed_chunks(embedder, [(r[3], r[4], r[6])])[0]))
                    except Exception as one:  # noqa: BLE001
                        failed.setdefault(_message(one), []).append(r[0])
                        if not _item_error(one):  # the server went away: leave the rest
                            failed[_message(one)] += [x[0] for x in items[i + 1 :]]
                            break
        with transaction(db) as conn:
            store_vectors(conn, model_id, done)
            for message, ids in failed.items():
                conn.execute(
                    Q.item_failed,
                    {
                        "error": message[:2000],
                        "cap": BACKOFF_CAP,
                        "first": BACKOFF_FIRST,
                        "model_id": model_id,
                        "chunk_ids": ids,
                    },
                )
        report.embedded += len(done)
        report.failed += sum(len(ids) for ids in failed.values())
        report.errors += [f"{model.name}: {message}" for message in failed]
        report.collections.update(r[2] for r in items)
    return report


def run(
    db: Database,
    *,
    batch_size: int = 64,
    once: bool = False,
    poll: float = 1.0,
    lease: float = LEASE,
    should_stop: Callable[[], bool] = lambda: False,
    on_batch: Callable[[WorkReport], None] | None = None,
    embedders: Callable[[Model], Embedder] | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> WorkReport:
    """Drain the queue; with ``once``, return when no due item is left, else keep polling
    every ``poll`` seconds until ``should_stop()``. After a quiet spell the keyword statistics
    of the collections it touched are folded (``keyword_maintain_v2``). ``on_wait(line)`` hears
    what an index build waits for, and a ``warning: ...`` line when it gives one up."""
    from pgrag.embeddings import index

    total = WorkReport()
    touched: set[int] = set()
    # The vectors it writes go into each model's HNSW index: one left missing or invalid (a
    # killed build) is built first.
    # (It does not wait for long on another session's transaction: a build it gives up is
    # left to the next run, and the vectors go in meanwhile.)
    index.ensure_all(
        db,
        on_wait=on_wait,
        on_warning=None
        if on_wait is None
        else lambda what, why: on_wait(f"warning: {what}: {why}"),
    )
    if not once:  # woken by new items (embedding_enqueue notifies), else every `poll` s
        with db.conn.transaction():
            db.conn.execute(Q.listen_queue)
    while not should_stop():
        report = run_once(db, batch_size=batch_size, lease=lease, embedders=embedders)
        total.embedded += report.embedded
        total.failed += report.failed
        total.batches += report.batches
        total.errors += report.errors
        touched |= report.collections
        total.collections |= report.collections
        if on_batch and report.batches:
            on_batch(report)
        if report.batches:  # something was claimed: there may be more (failed ones wait)
            continue
        if touched:
            _maintain(db, touched)
            touched = set()
        if once:
            break
        _wait(db, poll, should_stop)
    return total


def _wait(db: Database, seconds: float, should_stop: Callable[[], bool]) -> None:
    """Until a notification on pgrag_embedding_queue, ``seconds``, or ``should_stop()``
    (checked every second: a signal does not interrupt the wait itself)."""
    deadline = time.monotonic() + seconds
    while not should_stop():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if any(True for _ in db.conn.notifies(timeout=min(left, 1.0), stop_after=1)):
            return


def _maintain(db: Database, collections: set[int]) -> None:
    with transaction(db) as conn:
        names = [
            r[0] for r in conn.execute(Q.collection_names, {"ids": list(collections)}).fetchall()
        ]
        for name in names:
            conn.execute(Q.keyword_maintain, {"collection": name})


def status(db: Database) -> list[dict[str, Any]]:
    """Per collection: documents, chunks, pending and failed queue items, models; ``estimated``
    is true when a count is the planner's estimate (above ``pgrag.exact_count_limit`` rows,
    for a session that sees everything; sql/functions/status.sql). A restricted session counts
    what it may read, and gets None for pending and failed (the whole collection's queue)."""
    import psycopg

    try:
        with transaction(db) as conn:
            rows = conn.execute(Q.status).fetchall()
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.InsufficientPrivilege):
            raise PgragError(
                f"role {db.conn.info.user} may not run pgrag.status(): it is for the owner of"
                " schema pgrag and pgrag's roles (pgrag_reader, pgrag_app, pgrag_writer);"
                " grant it one of them"
            ) from err
        raise
    keys = (
        "collection",
        "documents",
        "chunks",
        "pending",
        "failed",
        "active_model",
        "others",
        "estimated",
    )
    out = [dict(zip(keys, r, strict=True)) for r in rows]
    # The state of the active model's HNSW index (pgrag.embeddings.index; per model:
    # index_status), so that a missing or invalid one shows beside the collections it slows.
    states: dict[str, str] = {}
    for h in index_status(db):
        if states.get(h["model"], "ok") == "ok":  # (one name, several dimensions: the worst)
            states[h["model"]] = h["state"]
    for r in out:
        r["index"] = states.get(r["active_model"] or "")
    return out


def index_status(db: Database) -> list[dict[str, Any]]:
    """Per model a collection uses: its HNSW index's name and state (ok, building, missing,
    invalid, or none for a model searched exactly)."""
    from pgrag.embeddings import index

    return [
        {"model_id": h.model_id, "model": h.model, "index": h.index, "state": h.state}
        for h in index.health(db)
    ]
