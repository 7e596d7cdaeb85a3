"""Reading back what ``ask`` recorded: ``pgrag trace ID``.

Every ``pgrag ask`` (unless ``--no-log``) records a row in ``pgrag.queries``: the question, the
principals it was asked as, the database role, the collection and model, every retrieved chunk
with its fused rank and its rank in each arm, the prompt, the generator, the answer, its
citations, whether and why it abstained, timings, and what checking the answer found
(retrieval confidence and threshold, invalid citations, support per sentence, faithfulness).
The table holds retrieved text, so only the owner of schema pgrag and pgrag_writer may read
it (restricted roles may only add rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgrag.errors import InputError, PgragError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

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

    from pgrag.db.connect import transaction
    from pgrag.errors import DatabaseError

    try:
        with transaction(db) as conn:
            row = conn.execute(
                "SELECT q.id, q.created_at, q.db_user, c.name, m.name, q.question, q.principals,"
                " q.retrieved, q.prompt, q.generator, q.answer, q.citations, q.abstained,"
                " q.abstain_reason, q.timings, q.checks"
                " FROM pgrag.queries q"
                " LEFT JOIN pgrag.collections c ON c.id = q.collection_id"
                " LEFT JOIN pgrag.embedding_models m ON m.id = q.model_id"
                " WHERE q.id = %(id)s",
                {"id": query_id},
            ).fetchone()
            if row is None:
                raise InputError(
                    f"no recorded question has id {query_id}; `pgrag ask --json` prints an"
                    " answer's query_id"
                )
            trace = dict(zip(FIELDS, row, strict=True))
            ids = [r["chunk_id"] for r in trace["retrieved"]]
            sources = dict(
                conn.execute(
                    "SELECT c.id, d.source FROM pgrag.chunks c"
                    " JOIN pgrag.documents d ON d.id = c.document_id WHERE c.id = ANY (%(ids)s)",
                    {"ids": ids},
                ).fetchall()
            )
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
