"""The question log: recording what ``ask`` did (:func:`record_answer`) and reading it back
(``pgrag trace ID``, :func:`get_trace`).

Every ``pgrag ask`` (unless ``--no-log``) records a row in ``pgrag.queries``: the question, the
principals it was asked as, the database role, the collection and model, every retrieved chunk
with its fused rank and its rank in each arm, the prompt, the generator, the answer, its
citations, whether and why it abstained, timings, and what checking the answer found
(retrieval confidence and threshold, invalid citations, support per sentence, faithfulness).
The table holds retrieved text, so only the owner of schema pgrag and pgrag_writer may read
it (restricted roles may only add rows).

A role that may not add rows, or a session that may not write at all (a read replica, or
``default_transaction_read_only``), still gets its answer: :func:`log_answer` returns it
unlogged with a warning. Each logged question also applies its collection's retention
(``pgrag.prune_queries``, a bounded batch; pgrag/answer/retention.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgrag.db import principals as access
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import DatabaseError, InputError, PgragError

if TYPE_CHECKING:
    from pgrag.answer.result import Answer
    from pgrag.db.connect import Database
    from pgrag.retrieval.search import SearchResult

Q = queries.load(__name__)

FIELDS = (
    "id",
    "created_at",
    "db_user",
    "collection",
    "model",
    "question",
    "principals",
    "retrieved",
    "prompt",
    "generator",
    "answer",
    "citations",
    "abstained",
    "abstain_reason",
    "timings",
    "checks",
)


def get_trace(db: Database, query_id: int) -> dict[str, Any]:
    """One recorded question and answer, with its retrieved chunks' sources; a one-line error
    when there is none or this role may not read the log."""
    import psycopg

    try:
        with transaction(db) as conn:
            row = conn.execute(Q.trace, {"id": query_id}).fetchone()
            if row is None:
                raise InputError(
                    f"no recorded question has id {query_id}; `pgrag ask --json` prints an"
                    " answer's query_id"
                )
            trace = dict(zip(FIELDS, row, strict=True))
            ids = [r["chunk_id"] for r in trace["retrieved"]]
            sources = dict(conn.execute(Q.chunk_sources, {"ids": ids}).fetchall())
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.InsufficientPrivilege):
            raise PgragError(
                "the question log holds retrieved text: only the owner of schema pgrag and"
                " pgrag_writer may read it"
            ) from err
        raise
    for r in trace["retrieved"]:  # (None: the chunk is gone since)
        r["source"] = sources.get(r["chunk_id"])
    return trace


# Entries the logging of one question may prune (each question adds one: it keeps up).
PRUNE_PER_QUESTION = 100


def log_answer(
    db: Database,
    collection: str,
    answer: Answer,
    results: Sequence[SearchResult],
    principals: Sequence[str] | None,
) -> None:
    """Record ``answer`` and set its ``query_id``; when this session may not write the log (a
    read-only transaction or replica, or a role without INSERT on pgrag.queries), leave it
    unlogged and add a warning to ``answer.warnings`` instead of losing the answer."""
    import psycopg

    try:
        answer.query_id = record_answer(db, collection, answer, results, principals)
    except DatabaseError as err:
        cause = err.__cause__
        if isinstance(cause, psycopg.errors.ReadOnlySqlTransaction):
            why = "this session is read-only (a read replica or default_transaction_read_only)"
        elif isinstance(cause, psycopg.errors.InsufficientPrivilege):
            if "row-level security" in str(cause):
                why = (
                    f"role {db.conn.info.user} may log questions only of a collection it may"
                    f" read some document of, and may read none of {collection!r}"
                )
            else:
                why = f"role {db.conn.info.user} may not add entries to pgrag.queries"
        else:
            raise
        answer.query_id = None
        answer.warnings.append(
            f"the question was not logged: {why}; pass --no-log (log=False) to skip logging"
        )


def record_answer(
    db: Database,
    collection: str,
    answer: Answer,
    results: Sequence[SearchResult],
    principals: Sequence[str] | None,
) -> int:
    """Record ``answer`` (and the ``results`` retrieved for it) in ``pgrag.queries``; its id."""
    from psycopg.types.json import Jsonb

    flags = {f["chunk_id"]: f["phrases"] for f in answer.flagged}
    # What the generator said; a model may emit a NUL (a byte token), which text cannot hold.
    logged = answer.raw_answer if answer.raw_answer is not None else answer.answer
    retrieved = [
        {
            "chunk_id": r.chunk_id,
            "rank": r.rank,
            "score": r.score,
            "vector_rank": r.vector_rank,
            "keyword_rank": r.keyword_rank,
            **({"instruction_like": flags[r.chunk_id]} if r.chunk_id in flags else {}),
        }
        for r in results
    ]
    with transaction(db) as conn:
        # Under the same principals as the search, and recording the ones in effect (None for
        # an unrestricted session): the log holds retrieved text, and is shown only to
        # sessions that may read all of what an entry was asked with.
        access.apply(conn, principals)
        row = conn.execute(
            Q.record_answer,
            {
                "collection": collection,
                # (a follow-up: the standalone query it was searched as; checks.rewrite keeps
                # the question as asked)
                "q": _no_nul(answer.standalone_query or answer.question),
                "retrieved": Jsonb(retrieved),
                "prompt": _no_nul(answer.prompt),  # an agentic prompt holds the model's turns
                "generator": answer.generator,
                "answer": logged.replace("\x00", "\ufffd"),
                "citations": Jsonb([c.to_dict() for c in answer.citations]),
                "abstained": answer.abstained,
                "reason": answer.reason,
                "timings": Jsonb(answer.timings),
                "checks": Jsonb(_no_nul(answer.checks())),
            },
        ).fetchone()
        if row:
            _prune(conn, collection, int(row[0]))
    return int(row[0]) if row else 0


def _prune(conn: Any, collection: str, logged: int) -> None:
    """Apply the collection's retention, a bounded batch (pgrag/answer/retention.py), in a
    savepoint: whatever goes wrong there, the question is still logged. Never the entry just
    ``logged``, so the query_id ``ask`` returns names an entry (even with a row limit of 0: a
    later prune removes it)."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute(
                Q.prune_after_logging,
                {"collection": collection, "batch": PRUNE_PER_QUESTION, "keep": logged},
            )
    except psycopg.Error:
        pass  # the next logged question, or `pgrag queries prune`, removes them


def _no_nul(value: Any) -> Any:
    """``value`` with NUL characters replaced in every string (jsonb cannot hold \u0000)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k: _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value
