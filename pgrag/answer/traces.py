"""The question log: recording what ``ask`` did (:func:`record_answer`) and reading it back
(``pgrag trace ID``, :func:`get_trace`).

Every ``pgrag ask`` (unless ``--no-log``) records a row in ``pgrag.queries``: the question, the
principals it was asked as, the database role, the collection and model, every retrieved chunk
with its fused rank and its rank in each arm, the prompt, the generator, the answer, its
citations, whether and why it abstained, timings, and what checking the answer found
(retrieval confidence and threshold, invalid citations, support per sentence, faithfulness).
The table holds retrieved text, so only the owner of schema pgrag and pgrag_writer may read
it (restricted roles may only add rows).
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
                "q": _no_nul(answer.question),
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
    return int(row[0]) if row else 0


def _no_nul(value: Any) -> Any:
    """``value`` with NUL characters replaced in every string (jsonb cannot hold \u0000)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k: _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value
