-- pgrag.ensure_model_index_v1: create an embedding model's partial HNSW index if it is missing.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256); a change is a new _vN beside this.
--
-- The index is USING hnsw ((embedding::vector(DIM)) <opclass>) WHERE model_id = ID, named
-- chunk_embeddings_hnsw_<ID>. Bulk loads drop it and call this afterwards, because building
-- an HNSW index once is several times faster than inserting into a live one. Returns true when
-- it created the index. Models over 2,000 dimensions get no HNSW index (pgvector's limit for
-- the vector type) and are searched exactly.
CREATE FUNCTION pgrag.ensure_model_index_v1(p_model_id integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_dimension integer;
    v_distance  text;
    v_schema    text;
    v_index     text := 'chunk_embeddings_hnsw_' || p_model_id;
BEGIN
    SELECT m.dimension, m.distance INTO v_dimension, v_distance
      FROM pgrag.embedding_models m WHERE m.id = p_model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'embedding model % does not exist', p_model_id USING ERRCODE = '42704';
    END IF;
    IF v_dimension > 2000 OR to_regclass('pgrag.' || v_index) IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT n.nspname INTO v_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON pgrag.chunk_embeddings USING hnsw ((embedding::%I.vector(%s)) %I.%I) WHERE model_id = %s',
        v_index, v_schema, v_dimension, v_schema,
        CASE v_distance WHEN 'cosine' THEN 'vector_cosine_ops'
                        WHEN 'l2' THEN 'vector_l2_ops'
                        ELSE 'vector_ip_ops' END,
        p_model_id);
    RETURN true;
END
$fn$;

COMMENT ON FUNCTION pgrag.ensure_model_index_v1(integer) IS
    'Create the partial HNSW index of an embedding model if it is missing; true when created.';
