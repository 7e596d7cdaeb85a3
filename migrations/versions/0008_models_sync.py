"""Models as data per collection, half-precision indexes, SQL-first sync and its queue, the
query-embedding cache, and search_v5.

- collection_models: each collection's models with their status (building, active, standby,
  retired); collections.model_id stays the active one, and a trigger keeps the two in step.
- embedding_models.index_type: 'vector' or 'halfvec' (an HNSW index at half precision);
  ensure_model_index_v3 builds either and is SECURITY DEFINER, for pgrag_writer.
- activate_model_v1, retire_model_v1, retire_model_vectors_v1: zero-downtime switching.
- documents.body: a document written with SQL is chunked in the database (chunk_text_v1), its
  chunks are keyword-searchable at commit and queued in embedding_queue for `pgrag worker`;
  sync_row_v1 is a trigger function for an application's own table.
- query_embedding_cache, behind query_cache_get_v1 / query_cache_put_v1.
- search_v5: search_v4 with a `model` argument; grant_roles_v4.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# The function files this migration ran, kept unchanged in migrations/history/.
HISTORY = Path(__file__).resolve().parents[1] / "history"


def sql_file(name: str) -> str:
    return (HISTORY / name.removeprefix("functions/")).read_text(encoding="utf-8")


TABLES = """
ALTER TABLE pgrag.embedding_models
    ADD COLUMN index_type text NOT NULL DEFAULT 'vector'
        CHECK (index_type IN ('vector', 'halfvec'));

CREATE TABLE pgrag.collection_models (
    collection_id integer NOT NULL REFERENCES pgrag.collections (id) ON DELETE CASCADE,
    model_id      integer NOT NULL REFERENCES pgrag.embedding_models (id),
    status        text NOT NULL DEFAULT 'building'
                  CHECK (status IN ('building', 'active', 'standby', 'retired')),
    added_at      timestamptz NOT NULL DEFAULT now(),
    activated_at  timestamptz,
    retired_at    timestamptz,
    PRIMARY KEY (collection_id, model_id)
);
CREATE UNIQUE INDEX collection_models_active_idx ON pgrag.collection_models (collection_id)
    WHERE status = 'active';
CREATE INDEX collection_models_model_idx ON pgrag.collection_models (model_id);
INSERT INTO pgrag.collection_models (collection_id, model_id, status, added_at, activated_at)
SELECT id, model_id, 'active', created_at, created_at FROM pgrag.collections
 WHERE model_id IS NOT NULL;

-- Chunks waiting for a model's vector: pgrag worker takes them FOR UPDATE SKIP LOCKED. A failed
-- attempt keeps the row with its error and a later not_before (backoff).
CREATE TABLE pgrag.embedding_queue (
    chunk_id      bigint NOT NULL REFERENCES pgrag.chunks (id) ON DELETE CASCADE,
    model_id      integer NOT NULL REFERENCES pgrag.embedding_models (id),
    collection_id integer NOT NULL REFERENCES pgrag.collections (id) ON DELETE CASCADE,
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    not_before    timestamptz NOT NULL DEFAULT now(),
    enqueued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chunk_id, model_id)
);
-- (chunk_id too: a bulk insert queues thousands with one not_before, and the worker's
-- ORDER BY not_before, chunk_id LIMIT n FOR UPDATE must not sort them all.)
CREATE INDEX embedding_queue_due_idx ON pgrag.embedding_queue (not_before, chunk_id);
CREATE INDEX embedding_queue_collection_idx ON pgrag.embedding_queue (collection_id, model_id);

-- The text of a document written with SQL (NULL for documents pgrag ingest chunked itself).
ALTER TABLE pgrag.documents ADD COLUMN body text;

CREATE TABLE pgrag.query_embedding_cache (
    model_id   integer NOT NULL REFERENCES pgrag.embedding_models (id) ON DELETE CASCADE,
    db_user    text NOT NULL,     -- the login role that asked
    scope      text NOT NULL,     -- the login role and the principals it read as
    key        bytea NOT NULL,    -- sha256 of the query text
    embedding  vector NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, scope, key)
);
CREATE INDEX query_embedding_cache_user_idx ON pgrag.query_embedding_cache (db_user, created_at);
CREATE INDEX query_embedding_cache_created_idx ON pgrag.query_embedding_cache (created_at);
"""

TRIGGERS = """
CREATE TRIGGER collections_model AFTER INSERT OR UPDATE OF model_id ON pgrag.collections
    FOR EACH ROW EXECUTE FUNCTION pgrag.collection_model_changed_v1();
CREATE TRIGGER documents_body BEFORE INSERT OR UPDATE OF body ON pgrag.documents
    FOR EACH ROW WHEN (NEW.body IS NOT NULL)
    EXECUTE FUNCTION pgrag.documents_body_v1();
CREATE TRIGGER documents_sync AFTER INSERT OR UPDATE OF body, title ON pgrag.documents
    FOR EACH ROW EXECUTE FUNCTION pgrag.documents_sync_v1();
"""

DEFINERS = (
    "pgrag.search_v5(text, text, vector, integer, jsonb, integer, integer, integer,"
    " double precision, double precision, double precision, integer, integer, text)",
    "pgrag.query_cache_get_v1(integer, bytea)",
    "pgrag.query_cache_put_v1(integer, bytea, text)",
    "pgrag.sync_row_v1()",
    "pgrag.ensure_model_index_v3(integer)",
)


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters, as in 0001: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def _vector_on_search_path() -> None:
    # As 0001: pgvector's types resolvable wherever the extension lives.
    _sql(
        "SELECT set_config('search_path', format('%I, ', n.nspname)"
        " || current_setting('search_path'), true)"
        " FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        " WHERE e.extname = 'vector'"
    )


def upgrade() -> None:
    _vector_on_search_path()
    _sql(TABLES)
    _sql(sql_file("functions/models_v1.sql"))
    _sql(sql_file("functions/sync_v1.sql"))
    _sql(sql_file("functions/search_with_model_v1.sql"))
    _sql(sql_file("functions/search_v5.sql"))
    _sql(TRIGGERS)
    # SECURITY DEFINER entry points: granted to pgrag's roles (grant_roles_v4), not to PUBLIC;
    # search_with_model_v1 runs only inside search_v5.
    _sql(
        "".join(f"REVOKE EXECUTE ON FUNCTION {fn} FROM PUBLIC; " for fn in DEFINERS)
        + "REVOKE EXECUTE ON FUNCTION pgrag.search_with_model_v1(text, text, vector, integer,"
        " jsonb, integer, integer, integer, double precision, double precision,"
        " double precision, integer, integer) FROM PUBLIC;"
        " SELECT pgrag.grant_roles_v4();"
    )


def downgrade() -> None:
    _vector_on_search_path()
    _sql(
        """
        DROP FUNCTION pgrag.grant_roles_v4();
        DROP FUNCTION pgrag.search_v5(text, text, vector, integer, jsonb, integer, integer,
                                      integer, double precision, double precision,
                                      double precision, integer, integer, text);
        DROP FUNCTION pgrag.search_with_model_v1(text, text, vector, integer, jsonb, integer,
                                                 integer, integer, double precision,
                                                 double precision, double precision, integer,
                                                 integer);
        DROP TRIGGER collections_model ON pgrag.collections;
        DROP TRIGGER documents_body ON pgrag.documents;
        DROP TRIGGER documents_sync ON pgrag.documents;
        DROP FUNCTION pgrag.query_cache_put_v1(integer, bytea, text);
        DROP FUNCTION pgrag.query_cache_get_v1(integer, bytea);
        DROP FUNCTION pgrag.query_cache_scope_v1();
        DROP FUNCTION pgrag.status_v1();
        DROP FUNCTION pgrag.sync_row_v1();
        DROP FUNCTION pgrag.documents_sync_v1();
        DROP FUNCTION pgrag.embedding_enqueue_v1(integer, bigint[]);
        DROP FUNCTION pgrag.documents_body_v1();
        DROP FUNCTION pgrag.chunk_text_v1(text, integer, integer);
        DROP FUNCTION pgrag.retire_model_vectors_v1(integer, integer, integer);
        DROP FUNCTION pgrag.retire_model_v1(text, integer);
        DROP FUNCTION pgrag.activate_model_v1(text, integer);
        DROP FUNCTION pgrag.model_missing_v1(integer, integer, bigint);
        DROP FUNCTION pgrag.ensure_model_index_v3(integer);
        DROP FUNCTION pgrag.model_index_ddl_v1(integer, boolean);
        DROP FUNCTION pgrag.collection_model_changed_v1();
        DROP TABLE pgrag.query_embedding_cache, pgrag.embedding_queue, pgrag.collection_models;
        ALTER TABLE pgrag.documents DROP COLUMN body;
        ALTER TABLE pgrag.embedding_models DROP COLUMN index_type;
        """
    )
