"""Listing that costs what the caller may see, and a retention for the question log.

- documents (collection_id, acl_id): documents_v1 and collections_v2 find a restricted
  session's documents through it (sql/functions/access.sql), instead of reading every
  document of the collection.
- collections.query_log_max_age / query_log_max_rows: how long, and how many, of a
  collection's questions pgrag.queries keeps (NULL: no limit); pgrag.prune_queries removes
  the rest (sql/functions/query_log.sql), and queries (collection_id, created_at) finds them.
- pgrag.status() gains an ``estimated`` column (its counts are estimates above
  pgrag.exact_count_limit rows for sessions that see everything): the old function is dropped
  here, and the function files, re-applied after the migrations, create the new one.

The downgrade drops what this revision added and puts back revision 0010's status(),
documents_v1 and collections_v1.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# Revision 0010's bodies (sql/functions/access.sql and status.sql as 0010 shipped them).
OLD_LISTING = r"""
CREATE OR REPLACE FUNCTION pgrag.documents_v1(collection text)
RETURNS TABLE (document_id bigint, source text, title text, metadata jsonb, updated_at timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT d.id, d.source, d.title, d.metadata, d.updated_at
      FROM pgrag.documents d
      JOIN pgrag.collections c ON c.id = d.collection_id
      CROSS JOIN (SELECT pgrag.visible_acls() AS acls) v
     WHERE c.name = collection AND (v.acls IS NULL OR d.acl_id = ANY (v.acls))
     ORDER BY d.source
$fn$;

CREATE OR REPLACE FUNCTION pgrag.collections_v1()
RETURNS TABLE (name text, model text, dimension integer, documents bigint, chunks bigint)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT c.name, m.name, m.dimension,
           (SELECT count(*) FROM pgrag.documents d
             WHERE d.collection_id = c.id AND (v.acls IS NULL OR d.acl_id = ANY (v.acls))),
           (SELECT coalesce(sum(t.chunks), 0)::bigint FROM pgrag.keyword_totals t
             WHERE t.collection_id = c.id AND (v.acls IS NULL OR t.acl_id = ANY (v.acls)))
      FROM pgrag.collections c
      LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id
     CROSS JOIN (SELECT pgrag.visible_acls() AS acls) v
     ORDER BY c.name
$fn$;
"""

OLD_STATUS = r"""
CREATE OR REPLACE FUNCTION pgrag.status()
RETURNS TABLE (collection text, documents bigint, chunks bigint, pending bigint,
               failed bigint, active_model text, other_models text[])
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT c.name,
           (SELECT count(*) FROM pgrag.documents d WHERE d.collection_id = c.id),
           (SELECT count(*) FROM pgrag.chunks k WHERE k.collection_id = c.id),
           (SELECT count(*) FROM pgrag.embedding_queue q
             WHERE q.collection_id = c.id AND q.last_error IS NULL),
           (SELECT count(*) FROM pgrag.embedding_queue q
             WHERE q.collection_id = c.id AND q.last_error IS NOT NULL),
           m.name,
           ARRAY(SELECT o.name || ' (' || cm.status || ')'
                   FROM pgrag.collection_models cm
                   JOIN pgrag.embedding_models o ON o.id = cm.model_id
                  WHERE cm.collection_id = c.id AND cm.model_id IS DISTINCT FROM c.model_id
                  ORDER BY cm.added_at, o.name)
      FROM pgrag.collections c
      LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id
     ORDER BY c.name
$fn$;
"""

OLD_GRANTS = r"""
CREATE OR REPLACE FUNCTION pgrag.grant_roles() RETURNS text[]
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    -- Entry points no role but the owner may execute unless granted here (the engine: no one).
    c_guarded  CONSTANT text[] := ARRAY['search_engine', 'search_v3', 'search_v4', 'search_v5',
                                        'documents_v1', 'collections_v1', 'section_chunks_v1',
                                        'query_cache_get', 'query_cache_put', 'sync_row_v1',
                                        'ensure_model_index'];
    -- What every pgrag role may execute, and what pgrag_writer alone may.
    c_entries  CONSTANT text[] := ARRAY['search_v3', 'search_v4', 'search_v5', 'documents_v1',
                                        'collections_v1', 'section_chunks_v1', 'query_cache_get',
                                        'query_cache_put'];
    c_writing  CONSTANT text[] := ARRAY['sync_row_v1', 'ensure_model_index'];
    v_done   text[] := '{}';
    v_schema text;
    v_table  text;
    v_role   text;
    v_fn     regprocedure;
BEGIN
    -- By signature from the catalog (pgvector's schema need not be on this search_path).
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = ANY (c_guarded)
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_fn);
    END LOOP;

    FOREACH v_role IN ARRAY ARRAY['pgrag_reader', 'pgrag_app'] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role);
        EXECUTE format('GRANT USAGE ON SCHEMA pgrag TO %I', v_role);
        EXECUTE format('GRANT SELECT ON pgrag.collections, pgrag.embedding_models,'
                       ' pgrag.collection_models TO %I', v_role);
        -- The log holds prompts, so retrieved text: restricted roles may add entries and read
        -- back their ids (RETURNING id), nothing else.
        EXECUTE format('GRANT INSERT, SELECT (id) ON pgrag.queries TO %I', v_role);
        v_done := v_done || v_role;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgrag_writer') THEN
        GRANT USAGE ON SCHEMA pgrag TO pgrag_writer;
        GRANT SELECT, INSERT, UPDATE, DELETE
            ON pgrag.collections, pgrag.embedding_models, pgrag.documents, pgrag.chunks,
               pgrag.chunk_embeddings, pgrag.keyword_postings, pgrag.keyword_df,
               pgrag.keyword_totals, pgrag.keyword_settings, pgrag.acls, pgrag.queries,
               pgrag.collection_models, pgrag.embedding_queue
            TO pgrag_writer;
        GRANT SELECT ON pgrag.role_principals TO pgrag_writer;
        GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA pgrag TO pgrag_writer;
        v_done := v_done || 'pgrag_writer'::text;
    END IF;

    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = ANY (c_entries)
    LOOP
        FOREACH v_role IN ARRAY v_done LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn, v_role);
        END LOOP;
    END LOOP;
    IF 'pgrag_writer' = ANY (v_done) THEN
        FOR v_fn IN
            SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = ANY (c_writing)
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pgrag_writer', v_fn);
        END LOOP;
    END IF;

    -- pgrag.connect() checks the schema revision, kept in pgrag's version table wherever the
    -- first upgrade put it (see pgrag/db/schema.py): every role may read it.
    FOR v_schema, v_table IN
        SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relname = 'alembic_version_pgrag' AND c.relkind = 'r'
           AND pg_has_role(current_user, c.relowner, 'USAGE')
    LOOP
        FOREACH v_role IN ARRAY v_done LOOP
            EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', v_schema, v_role);
            EXECUTE format('GRANT SELECT ON %I.%I TO %I', v_schema, v_table, v_role);
        END LOOP;
    END LOOP;
    RETURN v_done;
END
$fn$;

COMMENT ON FUNCTION pgrag.grant_roles() IS
    'Grants pgrag_reader, pgrag_app and pgrag_writer (those that exist) what they need; returns the roles granted.';
"""


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def upgrade() -> None:
    _sql(
        """
        CREATE INDEX documents_collection_acl_idx ON pgrag.documents (collection_id, acl_id);
        ALTER TABLE pgrag.collections
            ADD COLUMN query_log_max_age interval CHECK (query_log_max_age > interval '0'),
            ADD COLUMN query_log_max_rows bigint CHECK (query_log_max_rows >= 0);
        CREATE INDEX queries_collection_created_idx ON pgrag.queries (collection_id, created_at);
        DROP FUNCTION pgrag.status();
        """
    )


def downgrade() -> None:
    _sql(
        """
        DROP FUNCTION IF EXISTS pgrag.prune_queries(text, integer);
        DROP FUNCTION IF EXISTS pgrag.status();
        DROP FUNCTION IF EXISTS pgrag.collections_v1();
        DROP FUNCTION IF EXISTS pgrag.collections_v2();
        DROP FUNCTION IF EXISTS pgrag.chunk_count(integer, integer[]);
        DROP FUNCTION IF EXISTS pgrag.document_count(integer, integer[]);
        DROP FUNCTION IF EXISTS pgrag.count_rows(text);
        DROP FUNCTION IF EXISTS pgrag.exact_count_limit();
        DROP INDEX pgrag.queries_collection_created_idx;
        ALTER TABLE pgrag.collections DROP COLUMN query_log_max_rows,
                                      DROP COLUMN query_log_max_age;
        DROP INDEX pgrag.documents_collection_acl_idx;
        """
    )
    _sql(OLD_LISTING)
    _sql(OLD_STATUS)
    _sql(OLD_GRANTS)
    _sql("SELECT pgrag.grant_roles()")
