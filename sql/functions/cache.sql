-- The query-embedding cache, behind query_cache_get / query_cache_put (pgrag/embeddings/).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- The query-embedding cache: a question asked again is not embedded again. Entries are keyed
-- by model and by a hash of the text (sha256, computed by the caller), and scoped to who asks:
-- the login role and the principals it reads as (session_principals: validated, and narrowed to
-- its mapping for a restricted role). So one role cannot learn whether another asked a
-- question (a cache hit would tell); the table itself is readable by its owner only.
CREATE OR REPLACE FUNCTION pgrag.query_cache_scope() RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT session_user || '|' || coalesce(array_to_string(pgrag.session_principals(), ','), '*')
$fn$;

CREATE OR REPLACE FUNCTION pgrag.query_cache_get(p_model_id integer, p_key bytea)
RETURNS text
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT q.embedding::text FROM pgrag.query_embedding_cache q
     WHERE q.model_id = p_model_id AND q.scope = pgrag.query_cache_scope() AND q.key = p_key
$fn$;

-- Stores an entry (the text form of a vector of the model's dimension); entries older than 30
-- days are dropped now and then, and at most 100,000 are kept per login role.
CREATE OR REPLACE FUNCTION pgrag.query_cache_put(p_model_id integer, p_key bytea, p_embedding text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_scope     text := pgrag.query_cache_scope();
    v_dimension integer;
BEGIN
    IF p_key IS NULL OR length(p_key) <> 32 THEN
        RAISE EXCEPTION 'query_cache_put needs a 32-byte sha256 key' USING ERRCODE = '22023';
    END IF;
    SELECT m.dimension INTO v_dimension FROM pgrag.embedding_models m WHERE m.id = p_model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'embedding model % does not exist', p_model_id USING ERRCODE = '42704';
    END IF;
    -- Cast to the model's dimension: a vector of another size is an error, not an entry.
    EXECUTE format('INSERT INTO pgrag.query_embedding_cache (model_id, db_user, scope, key, embedding)'
                   ' VALUES ($1, $2, $3, $4, $5::%I.vector(%s)) ON CONFLICT DO NOTHING',
                   (SELECT n.nspname FROM pg_extension e
                      JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'),
                   v_dimension)
      USING p_model_id, session_user::text, v_scope, p_key, p_embedding;
    IF random() < 0.01 THEN
        DELETE FROM pgrag.query_embedding_cache WHERE created_at < now() - interval '30 days';
        DELETE FROM pgrag.query_embedding_cache q
         WHERE q.db_user = session_user
           AND q.created_at < (SELECT x.created_at FROM pgrag.query_embedding_cache x
                                WHERE x.db_user = session_user
                                ORDER BY x.created_at DESC OFFSET 100000 LIMIT 1);
    END IF;
END
$fn$;
