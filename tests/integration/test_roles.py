"""pgrag as a production database would run it: not a superuser, pgvector in its own schema.

Managed services (RDS, Cloud SQL, Supabase, Neon) give the application a database it owns but
no superuser, and often keep extensions in a separate schema that is not on the app's
search_path. Everything must work there: migrations, ingest, every kind of search.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.db import schema as migrate
from pgrag.embeddings.local import SentenceTransformerEmbedder

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version


@pytest.fixture
def app_dsn(admin_dsn: str) -> Iterator[str]:
    suffix = uuid.uuid4().hex[:8]
    role, database = f"app_{suffix}", f"appdb_{suffix}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(database), sql.Identifier(role)
            )
        )
    # What a provider's administrator does once: the extension in its own schema.
    with psycopg.connect(make_conninfo(admin_dsn, dbname=database), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA extensions")
        conn.execute("GRANT USAGE ON SCHEMA extensions TO PUBLIC")
        conn.execute("CREATE EXTENSION vector SCHEMA extensions")
        # The app's own schema comes first on its search_path ("$user", public).
        conn.execute(
            sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                sql.Identifier(role), sql.Identifier(role)
            )
        )
    yield make_conninfo(admin_dsn, dbname=database, user=role)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_non_superuser_owner_with_extension_elsewhere(
    app_dsn: str, corpus: Path, embedder: SentenceTransformerEmbedder
) -> None:
    with psycopg.connect(app_dsn) as conn:
        assert (
            conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
            is False
        )
        assert "extensions" not in conn.execute("SHOW search_path").fetchone()[0]

    migrate.upgrade(app_dsn)
    assert migrate.current(app_dsn) == migrate.head()
    assert migrate.state(app_dsn).up_to_date

    db = pgrag.connect(app_dsn, embedder=embedder)
    try:
        report = pgrag.ingest(db, [corpus])
        assert report.chunks_written > 0 and not report.failed
        hybrid = pgrag.search(db, "how long must passwords be")
        assert hybrid and hybrid[0].source.endswith("security.md")
        assert any(r.vector_rank for r in hybrid) and any(r.keyword_rank for r in hybrid)
        answer = pgrag.ask(db, "How long must passwords be?", llm=None)
        assert not answer.abstained and "14 characters" in answer.answer
    finally:
        db.close()

    # A fresh session that never loaded pgvector's library, keyword only, from plain SQL.
    with psycopg.connect(app_dsn) as conn:
        rows = conn.execute("SELECT source FROM pgrag.search_v5('default', 'bicycles')").fetchall()
    assert rows and rows[0][0].endswith("office.txt")

    migrate.downgrade(app_dsn, "base", confirm=True)
    assert migrate.current(app_dsn) is None
    migrate.upgrade(app_dsn)
    assert migrate.current(app_dsn) == migrate.head()
