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

from pgrag.errors import (
    ConfigError,
    DatabaseError,
    GenerationError,
    InputError,
    PgragError,
    SchemaError,
    ServerError,
)

__version__ = "0.2.0"

__all__ = [
    "Answer",
    "ConfigError",
    "DatabaseError",
    "Database",
    "GenerationError",
    "InputError",
    "PgragError",
    "SchemaError",
    "SearchResult",
    "SearchSettings",
    "ServerError",
    "ask",
    "connect",
    "access",
    "ingest",
    "ingest_documents",
    "rag_marginals",
    "search",
]

# The functions share their names with their modules (pgrag.search is the function; the module
# is pgrag.search's home). Importing them here, eagerly, binds the names to the functions;
# these modules import nothing heavy at import time.
from pgrag import access  # noqa: E402
from pgrag.answer.ask import Answer, ask  # noqa: E402
from pgrag.answer.marginals import rag_marginals  # noqa: E402
from pgrag.db.connect import Database, connect  # noqa: E402
from pgrag.ingest.pipeline import ingest, ingest_documents  # noqa: E402
from pgrag.retrieval.search import SearchResult, SearchSettings, search  # noqa: E402
