-- name: try_lock
-- Serialises concurrent `pgrag db upgrade` runs (several app replicas migrating at start-up):
-- a session-level advisory lock, held on a side connection while Alembic works. Tried, not
-- waited for, so that a wait can say who holds it and end.
SELECT pg_try_advisory_lock(%(key)s);

-- name: lock_holder
-- The session holding the migration lock (an advisory lock on a bigint under 2^32: classid 0,
-- objid the key, objsubid 1).
SELECT l.pid, coalesce(a.usename::text, '?'), coalesce(nullif(a.application_name, ''), '?'),
       coalesce(a.state, '?')
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objsubid = 1
   AND l.objid::bigint = %(key)s
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());

-- name: version_table
-- The schema holding pgrag's version table, wherever a previous upgrade created it (whatever
-- the search_path of the role asking). Only a table owned by the owner of schema pgrag or of
-- its documents counts (before pgrag is installed, or after `downgrade base`, one of the
-- running role's): another role's table of that name says nothing about pgrag.
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = %(table)s AND c.relkind IN ('r', 'p')
   -- and in a schema that no other role could drop it from
   AND (n.nspowner = c.relowner
        OR n.nspowner IN (SELECT oid FROM pg_roles WHERE rolsuper OR rolname = 'pg_database_owner')
        OR n.nspowner = (SELECT datdba FROM pg_database WHERE datname = current_database()))
   AND CASE WHEN to_regnamespace('pgrag') IS NULL
            THEN c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
            ELSE c.relowner IN (SELECT nspowner FROM pg_namespace WHERE nspname = 'pgrag'
                                UNION ALL
                                SELECT relowner FROM pg_class
                                 WHERE oid = to_regclass('pgrag.documents'))
       END
 ORDER BY n.nspname = current_schema() DESC, n.nspname
 LIMIT 1;

-- name: version_tables_anywhere
-- Every table named like pgrag's version table, with its owner (said when none is believed).
SELECT format('%%I.%%I', n.nspname, c.relname) || ' (owned by ' || pg_get_userbyid(c.relowner)
       || ', in a schema of ' || pg_get_userbyid(n.nspowner) || ')'
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = %(table)s AND c.relkind IN ('r', 'p')
 ORDER BY 1;

-- name: current_schema
-- Where Alembic creates the version table on a first upgrade, its owner, and whether that is
-- safe: the running role, a superuser or the database's owner owns the schema (any other owner
-- could drop the table there).
SELECT n.nspname::text, pg_get_userbyid(n.nspowner)::text,
       n.nspowner IN (SELECT oid FROM pg_roles
                       WHERE rolname = current_user OR rolsuper OR rolname = 'pg_database_owner')
       OR n.nspowner = (SELECT datdba FROM pg_database WHERE datname = current_database())
  FROM pg_namespace n WHERE n.nspname = current_schema();

-- name: revision
-- The revision in the version table (the schema and table are composed in, as identifiers).
SELECT version_num FROM {schema}.{table};

-- name: schema_exists
-- Whether schema pgrag exists (a database where it does but the version table does not was
-- not installed by pgrag, or lost its version table).
SELECT to_regnamespace('pgrag') IS NOT NULL;

-- name: server
-- The server's version as a number (130016 for 13.16) and as it names itself.
SELECT current_setting('server_version_num')::integer, current_setting('server_version');

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
-- Every table of schema pgrag (what a migration or a repair locks before it changes any), as
-- (schema, table).
SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgrag' AND c.relkind IN ('r', 'p')
 ORDER BY 2;

-- name: table_lock_holders
-- Who holds a lock on one of pgrag's tables now (named when a migration gives up on them).
SELECT DISTINCT l.pid, coalesce(a.usename::text, '?'), coalesce(nullif(a.application_name, ''), '?'),
       coalesce(a.state, '?'), a.backend_type::text
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
   AND (l.relation IN (SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'pgrag'::regnamespace)
        OR l.relation = to_regclass(%(version_table)s))
 ORDER BY 1
 LIMIT 5;

-- name: lock_timeout_short
-- Give up on a lock before deadlock_timeout ends (half of it, at most 500 ms): a search that
-- waits behind the migration is never the one the deadlock detector cancels.
SELECT set_config('lock_timeout',
                  greatest(10, least(500, setting::integer / 2))::text || 'ms', true)
  FROM pg_settings WHERE name = 'deadlock_timeout';

-- name: lock_timeout_set
-- Waits for a lock end after this many milliseconds, for the rest of the transaction.
SELECT set_config('lock_timeout', %(ms)s::text || 'ms', true);

-- name: lock_timeout_ms
-- The lock_timeout in force, in milliseconds (0: none).
SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout';

-- name: lock_table
LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;

-- name: who_runs
-- The running role, the database, and the owner of schema pgrag (NULL: not installed).
SELECT current_user::text, current_database()::text,
       (SELECT pg_get_userbyid(nspowner)::text FROM pg_namespace WHERE nspname = 'pgrag');

-- name: savepoint
SAVEPOINT pgrag_lock;

-- name: release_savepoint
RELEASE SAVEPOINT pgrag_lock;

-- name: rollback_savepoint
ROLLBACK TO SAVEPOINT pgrag_lock;

-- name: runner_owns
-- What the running role owns in schema pgrag when it is not the schema's owner but may act as
-- it (a superuser, or a member of the owner): what a migration it ran just created.
SELECT k.kind, k.name, pg_get_userbyid(n.nspowner)::text
  FROM pg_namespace n
  CROSS JOIN LATERAL (
        SELECT 'FUNCTION' AS kind, p.oid::regprocedure::text AS name
          FROM pg_proc p
         WHERE p.pronamespace = n.oid
           AND p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
        UNION ALL
        SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                              WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
               c.oid::regclass::text
          FROM pg_class c
         WHERE c.relnamespace = n.oid AND c.relkind NOT IN ('i', 'I', 't', 'c')
           AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
           AND NOT EXISTS (SELECT 1 FROM pg_depend d
                            WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                              AND d.refclassid = 'pg_class'::regclass
                              AND d.deptype IN ('a', 'i'))
       ) k
 WHERE n.nspname = 'pgrag'
   AND n.nspowner <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
   AND pg_has_role(current_user, n.nspowner, 'MEMBER')
 ORDER BY 1, 2;

-- name: set_owner
ALTER {kind} {object} OWNER TO {owner};
