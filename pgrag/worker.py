"""``pgrag worker``: embeds what ``pgrag.embedding_queue`` holds.

Chunks land in the queue when a document is written with SQL (``documents.body``, or an
application table's ``pgrag.sync_row_v1`` trigger), or when ``pgrag ingest`` writes to a
collection that has more than one model. A worker takes a batch ``FOR UPDATE SKIP LOCKED`` (so
any number of workers share the queue without taking the same item), embeds it with each
item's model, and writes the vectors and deletes the items in the same transaction: a worker
killed half-way leaves its batch queued, and nothing is embedded twice. A batch that fails (the
model's server is down, a model cannot be loaded) stays queued with its error and is retried
after a backoff that doubles with each attempt, up to an hour.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import PgragError

if TYPE_CHECKING:
    from .db import Database
    from .embeddings import Embedder
    from .models import Model

BACKOFF_FIRST, BACKOFF_CAP = 5.0, 3600.0  # seconds


@dataclass
class WorkReport:
    embedded: int = 0  # (chunk, model) pairs given a vector
    failed: int = 0  # items that failed this time (kept queued)
    removed: int = 0  # items of a model their collection retired
    batches: int = 0
    collections: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def embed_text(section: str | None, content: str, embedder: Embedder) -> str:
    """What a chunk's vector is made from: its section (cut short) and its text, as ingest."""
    from .ingest import CONTEXT_TOKENS

    if not section:
        return content
    pieces = embedder.tokens.cut(section, CONTEXT_TOKENS)
    return f"{pieces[0]}\n{content}" if pieces else content


def store_vectors(conn: Any, model_id: int, pairs: Sequence[tuple[int, Any]]) -> None:
    """Write (chunk id, vector) pairs of one model, replacing any there are, and take the
    chunks off the queue for that model: one transaction with the caller's."""
    if not pairs:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding)"
            " VALUES (%s, %s, %s) ON CONFLICT (model_id, chunk_id)"
            " DO UPDATE SET embedding = EXCLUDED.embedding",
            [(model_id, chunk_id, vector) for chunk_id, vector in pairs],
        )
    conn.execute(
        "DELETE FROM pgrag.embedding_queue WHERE model_id = %(m)s AND chunk_id = ANY (%(ids)s)",
        {"m": model_id, "ids": [chunk_id for chunk_id, _ in pairs]},
    )


def _models(db: Database, ids: set[int]) -> dict[int, Model]:
    from .db import transaction
    from .models import _COLUMNS, _model

    with transaction(db) as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM pgrag.embedding_models m WHERE m.id = ANY (%(ids)s)",  # noqa: S608
            {"ids": list(ids)},
        ).fetchall()
    return {r[0]: _model(r) for r in rows}


def run_once(
    db: Database,
    *,
    batch_size: int = 64,
    embedders: Callable[[Model], Embedder] | None = None,
) -> WorkReport:
    """One batch: take up to ``batch_size`` due items, embed them, write their vectors.
    Returns what was done (nothing: the queue has no due item this worker could take)."""
    import psycopg

    from .db import describe_error
    from .models import embedder_for

    build = embedders or embedder_for
    report = WorkReport()
    with db.conn.transaction():
        rows = db.conn.execute(
            "SELECT q.chunk_id, q.model_id, q.collection_id, q.attempts, c.section, c.content,"
            " cm.status"
            " FROM pgrag.embedding_queue q"
            " JOIN pgrag.chunks c ON c.id = q.chunk_id"
            " LEFT JOIN pgrag.collection_models cm"
            "   ON cm.collection_id = q.collection_id AND cm.model_id = q.model_id"
            " WHERE q.not_before <= now()"
            " ORDER BY q.not_before, q.chunk_id"
            # The chunk too (lightly: writes to it go on), so that a chunk pgrag models
            # reembed holds FOR UPDATE is left to it, and the reverse: embedded once.
            " LIMIT %(n)s FOR UPDATE OF q SKIP LOCKED FOR KEY SHARE OF c SKIP LOCKED",
            {"n": batch_size},
        ).fetchall()
        if not rows:
            return report
        report.batches = 1
        # Items of a model the collection retired (or dropped) are simply removed.
        gone = [(r[0], r[1]) for r in rows if r[6] in (None, "retired")]
        report.removed = len(gone)
        for chunk_id, model_id in gone:
            db.conn.execute(
                "DELETE FROM pgrag.embedding_queue WHERE chunk_id = %s AND model_id = %s",
                (chunk_id, model_id),
            )
        live = [r for r in rows if r[6] not in (None, "retired")]
        models = _models(db, {r[1] for r in live})
        by_model: dict[int, list[Any]] = {}
        for r in live:
            by_model.setdefault(r[1], []).append(r)
        for model_id, items in by_model.items():
            model = models[model_id]
            try:
                with db.conn.transaction():  # a savepoint: one model failing keeps the rest
                    embedder = build(model)
                    texts = [embed_text(r[4], r[5], embedder) for r in items]
                    matrix = embedder.embed(texts)
                    if matrix.shape != (len(items), model.dimension):
                        raise PgragError(
                            f"embedding model {model.name!r} returned vectors of shape"
                            f" {matrix.shape}, expected ({len(items)}, {model.dimension})"
                        )
                    store_vectors(
                        db.conn, model_id, [(r[0], v) for r, v in zip(items, matrix, strict=True)]
                    )
                report.embedded += len(items)
                report.collections.update(r[2] for r in items)
            except Exception as err:  # noqa: BLE001 - whatever it is, keep the items and go on
                if isinstance(err, psycopg.Error):
                    message = describe_error(err)
                elif isinstance(err, PgragError):
                    message = str(err)
                else:
                    message = f"{type(err).__name__}: {err}"
                report.failed += len(items)
                report.errors.append(f"{model.name}: {message}")
                db.conn.execute(
                    "UPDATE pgrag.embedding_queue SET attempts = attempts + 1,"
                    " last_error = %(e)s,"
                    " not_before = now() + make_interval(secs => least(%(cap)s,"
                    "     %(first)s * power(2, attempts)))"
                    " WHERE model_id = %(m)s AND chunk_id = ANY (%(ids)s)",
                    {
                        "e": message[:2000],
                        "cap": BACKOFF_CAP,
                        "first": BACKOFF_FIRST,
                        "m": model_id,
                        "ids": [r[0] for r in items],
                    },
                )
    return report


def run(
    db: Database,
    *,
    batch_size: int = 64,
    once: bool = False,
    poll: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    on_batch: Callable[[WorkReport], None] | None = None,
    embedders: Callable[[Model], Embedder] | None = None,
) -> WorkReport:
    """Drain the queue; with ``once``, return when no due item is left, else keep polling
    every ``poll`` seconds until ``should_stop()``. After a quiet spell the keyword statistics
    of the collections it touched are folded (``keyword_maintain_v2``)."""
    total = WorkReport()
    touched: set[int] = set()
    while not should_stop():
        report = run_once(db, batch_size=batch_size, embedders=embedders)
        total.embedded += report.embedded
        total.failed += report.failed
        total.batches += report.batches
        total.errors += report.errors
        touched |= report.collections
        total.collections |= report.collections
        if on_batch and report.batches:
            on_batch(report)
        if report.embedded or report.removed:
            continue
        if touched:
            _maintain(db, touched)
            touched = set()
        if once:
            break
        time.sleep(poll)
    return total


def _maintain(db: Database, collections: set[int]) -> None:
    from .db import transaction

    with transaction(db) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM pgrag.collections WHERE id = ANY (%(ids)s)",
                {"ids": list(collections)},
            ).fetchall()
        ]
        for name in names:
            conn.execute("SELECT * FROM pgrag.keyword_maintain_v2(%(c)s)", {"c": name})


def status(db: Database) -> list[dict[str, Any]]:
    """Per collection: documents, chunks, pending and failed queue items, models."""
    from .db import transaction

    with transaction(db) as conn:
        rows = conn.execute("SELECT * FROM pgrag.status_v1()").fetchall()
    keys = ("collection", "documents", "chunks", "pending", "failed", "active_model", "others")
    return [dict(zip(keys, r, strict=True)) for r in rows]
