-- What pgrag's roles may do, granted by one function.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md), which then
-- call grant_roles(). An administrator who creates the roles after the upgrade (pgrag could not)
-- runs it again, as the owner of schema pgrag:
--
--   SELECT pgrag.grant_roles();
--
-- pgrag_reader and pgrag_app search and list through SECURITY DEFINER entry points only, and
-- read nothing that holds content, vectors or keyword statistics (a query on a table under
-- row-level security could test its text through side channels); pgrag_writer writes the tables
-- (under row-level security when it names principals), runs the worker and attaches sync
-- triggers; pgrag_app alone verifies the API keys of `pgrag serve` (api_key_v1), and no
-- restricted role has any privilege on pgrag.api_keys; every role reads and writes its own
-- conversations through the conversation_*_v1 entry points and none is granted their tables
-- (sql/functions/conversations.sql). Returns the roles granted.
CREATE OR REPLACE FUNCTION pgrag.grant_roles() RETURNS text[]
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    -- Entry points no role but the owner may execute unless granted here (the engine: no one).
    -- Every other function of pgrag's stays executable by PUBLIC: it is SECURITY INVOKER (it
    -- can do nothing its caller may not), or one the row-level security policies call as the
    -- querying role (session_principals, visible_acls, collection_visible: each tells the
    -- caller only about its own session).
    c_guarded  CONSTANT text[] := ARRAY['search_engine', 'search_v3', 'search_v4', 'search_v5',
                                        'documents_v1', 'collections_v1', 'collections_v2',
                                        'section_chunks_v1', 'document_chunks_v1', 'query_cache_get',
                                        'query_cache_put', 'sync_row_v1', 'ensure_model_index',
                                        'prune_queries', 'count_rows', 'document_count',
                                        'chunk_count', 'status', 'api_key_v1',
                                        'conversation_start_v1', 'conversation_v1',
                                        'conversations_v1', 'conversation_turns_v1',
                                        'conversation_append_v1', 'conversation_delete_v1',
                                        'conversation_match_v1'];
    -- What every pgrag role may execute, and what pgrag_writer alone may.
    c_entries  CONSTANT text[] := ARRAY['search_v3', 'search_v4', 'search_v5', 'documents_v1',
                                        'collections_v1', 'collections_v2', 'section_chunks_v1',
                                        'query_cache_get', 'query_cache_put', 'prune_queries',
                                        'status', 'document_chunks_v1', 'conversation_start_v1',
                                        'conversation_v1', 'conversations_v1',
                                        'conversation_turns_v1', 'conversation_append_v1',
                                        'conversation_delete_v1', 'conversation_match_v1'];
    c_writing  CONSTANT text[] := ARRAY['sync_row_v1', 'ensure_model_index', 'count_rows',
                                        'document_count', 'chunk_count'];
    -- What pgrag_app alone may: verify the API key a request to `pgrag serve` presents.
    c_app      CONSTANT text[] := ARRAY['api_key_v1'];
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
        -- back their ids (RETURNING id), nothing else. Not an entry's id, created_at or db_user:
        -- the retention keeps the newest by id and removes the oldest by created_at, so a role
        -- that chose them could make others' entries look old (the policy checks the rest).
        EXECUTE format('REVOKE INSERT ON pgrag.queries FROM %I', v_role);
        EXECUTE format('GRANT INSERT (collection_id, model_id, question, principals, retrieved,'
                       ' prompt, generator, answer, citations, abstained, abstain_reason,'
                       ' timings, checks), SELECT (id) ON pgrag.queries TO %I', v_role);
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
    IF 'pgrag_app' = ANY (v_done) THEN
        FOR v_fn IN
            SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = ANY (c_app)
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO pgrag_app', v_fn);
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
