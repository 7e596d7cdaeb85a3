"""pgrag: retrieval-augmented generation with PostgreSQL as the system of record.

    import pgrag

    db = pgrag.connect()                      # PGRAG_DSN, PG* variables, or the embedded server
    pgrag.ingest(db, ["docs/"], collection="handbook")
    for hit in pgrag.search(db, "refund window", collection="handbook", k=5):
        print(hit.rank, hit.title, hit.text[:80])
    answer = pgrag.ask(db, "How long is the refund window?", collection="handbook")
    print(answer.answer, [c.source for c in answer.citations])

    pgrag.ingest(db, ["billing/"], collection="handbook", allow=["group:billing"])
    alice = pgrag.connect(principals=["alice", "group:billing"])  # the database enforces it

Heavy dependencies (torch, sentence-transformers, psycopg) load on first use, so ``import pgrag``
and ``pgrag --help`` stay fast.
"""

from __future__ import annotations

from pgrag.errors import CollectionNotFound, InputError, PgragError, SchemaError
from pgrag.version import __version__ as __version__

# The public face: everything else is reached through its module (pgrag.errors for the rest of
# the error tree, pgrag.access for access lists, pgrag.evaluation for the metrics, ...).
__all__ = [
    "Answer",
    "CollectionNotFound",
    "Database",
    "InputError",
    "PgragError",
    "SchemaError",
    "SearchResult",
    "SearchSettings",
    "Settings",
    "ask",
    "connect",
    "ingest",
    "ingest_documents",
    "rag_marginals",
    "search",
]

# ingest, search and ask share their names with the packages and modules they live in;
# importing them here binds the names to the functions. None of these modules imports anything
# heavy at import time.
from pgrag.answer.ask import ask  # noqa: E402
from pgrag.answer.marginals import rag_marginals  # noqa: E402
from pgrag.answer.result import Answer  # noqa: E402
from pgrag.config import Settings  # noqa: E402
from pgrag.db.connect import Database, connect  # noqa: E402
from pgrag.ingest.pipeline import ingest, ingest_documents  # noqa: E402
from pgrag.retrieval.search import SearchResult, SearchSettings, search  # noqa: E402
