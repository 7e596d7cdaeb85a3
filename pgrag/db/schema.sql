-- name: lock
-- Serialises concurrent `pgrag db upgrade` runs (several app replicas migrating at start-up):
-- a session-level advisory lock, held on a side connection while Alembic works.
SELECT pg_advisory_lock(%(key)s);

-- name: version_table
-- The schema holding pgrag's version table, wherever a previous upgrade created it.
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = %(table)s AND c.relkind IN ('r', 'p')
 ORDER BY n.nspname = current_schema() DESC, n.nspname
 LIMIT 1;

-- name: current_schema
-- Where Alembic creates the version table on a first upgrade.
SELECT current_schema();

-- name: revision
-- The revision in the version table (the schema and table are composed in, as identifiers).
SELECT version_num FROM {schema}.{table};

-- name: schema_exists
-- Whether schema pgrag exists (a database where it does but the version table does not was
-- not installed by pgrag, or lost its version table).
SELECT to_regnamespace('pgrag') IS NOT NULL;

-- name: pgvector
-- The vector extension's default and installed versions (NULL row: not available).
SELECT default_version, installed_version FROM pg_available_extensions WHERE name = 'vector';

-- name: create_vector
-- pgvector, where the extension is not installed yet.
CREATE EXTENSION IF NOT EXISTS vector;

-- name: vector_on_search_path
-- pgvector's types resolvable for the rest of the transaction, wherever the extension lives
-- (managed services often keep extensions in a schema of their own).
SELECT set_config('search_path', format('%I, ', n.nspname) || current_setting('search_path'), true)
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'vector';

-- name: load_vector
-- Load pgvector's library in this session, so that its hnsw.* settings are real parameters
-- when the functions' SET clauses are checked (a non-superuser may not set placeholders).
SELECT '[1]'::vector;

-- name: create_schema
CREATE SCHEMA pgrag;

-- name: comment_schema
COMMENT ON SCHEMA pgrag IS 'pgrag: documents, chunks, embeddings and hybrid search. Managed by pgrag db upgrade.';

-- name: create_roles
-- pgrag's cluster-wide roles, created when the migrating role may (a superuser, or CREATEROLE as
-- on RDS, Cloud SQL and Supabase); otherwise an administrator creates them and runs
-- SELECT pgrag.grant_roles() (docs/application.md).
DO $do$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pgrag_reader', 'pgrag_writer', 'pgrag_app'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r);
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user
                                           AND (rolsuper OR rolcreaterole)) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- another database's upgrade created it just now
            END;
        ELSE
            RAISE NOTICE 'pgrag: role % does not exist and % may not create it; an administrator can create it and then run SELECT pgrag.grant_roles()', r, current_user;
        END IF;
    END LOOP;
END
$do$;

-- name: grant_roles
SELECT pgrag.grant_roles();

-- name: release_exists
-- Whether pgrag.release() exists (since revision 0010, once the functions were applied).
SELECT to_regprocedure('pgrag.release()') IS NOT NULL;

-- name: installed_release
-- What pgrag.release() says: the digest of the function files and the pgrag version that
-- applied them.
SELECT pgrag.release();

-- name: define_release
-- pgrag.release(): the digest of the sql/functions/ files applied last, and the version of
-- pgrag that applied them; pgrag.connect() compares it with its own (the value is composed in
-- as a literal).
CREATE OR REPLACE FUNCTION pgrag.release() RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS {body};

-- name: pgrag_tables
-- Every table of schema pgrag (what a migration or a repair locks before it changes any).
SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgrag' AND c.relkind IN ('r', 'p')
 ORDER BY 1;

-- name: lock_timeout_short
-- Give up on a lock before deadlock_timeout ends (half of it, at most 500 ms): a search that
-- waits behind the migration is never the one the deadlock detector cancels.
SELECT set_config('lock_timeout',
                  greatest(10, least(500, setting::integer / 2))::text || 'ms', true)
  FROM pg_settings WHERE name = 'deadlock_timeout';

-- name: lock_timeout_restore
SELECT set_config('lock_timeout', %(value)s, true);

-- name: lock_timeout_now
SELECT current_setting('lock_timeout');

-- name: lock_tables
LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE;

-- name: savepoint
SAVEPOINT pgrag_lock;

-- name: release_savepoint
RELEASE SAVEPOINT pgrag_lock;

-- name: rollback_savepoint
ROLLBACK TO SAVEPOINT pgrag_lock;

-- name: who
SELECT current_user::text, current_database()::text;
