-- pgrag.register_model_v1: record an embedding model and give it its own partial HNSW index.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256); a change is a new _vN beside this.
--
-- Returns the model's id. Registering the same (name, dimension) again returns the existing id
-- and checks that the distance and normalisation agree. Vectors of a model live in
-- pgrag.chunk_embeddings next to every other model's; the partial index
--   USING hnsw ((embedding::vector(DIM)) <opclass>) WHERE model_id = ID
-- is what lets models of different dimensions coexist (pgvector's documented pattern), and
-- the cast in it rejects a vector of the wrong size on insert.
CREATE FUNCTION pgrag.register_model_v1(
    p_name       text,
    p_provider   text,
    p_dimension  integer,
    p_distance   text DEFAULT 'cosine',
    p_normalized boolean DEFAULT true,
    p_max_tokens integer DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_id        integer;
    v_distance  text;
    v_normal    boolean;
    v_opclass   text;
BEGIN
    IF p_dimension IS NULL OR p_dimension NOT BETWEEN 1 AND 16000 THEN
        RAISE EXCEPTION 'embedding dimension % is out of range (1..16000)', p_dimension
            USING ERRCODE = '22023';
    END IF;
    v_opclass := CASE p_distance
        WHEN 'cosine' THEN 'vector_cosine_ops'
        WHEN 'l2' THEN 'vector_l2_ops'
        WHEN 'inner_product' THEN 'vector_ip_ops'
    END;
    IF v_opclass IS NULL THEN
        RAISE EXCEPTION 'unknown distance %; use cosine, l2 or inner_product', quote_literal(p_distance)
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO pgrag.embedding_models (name, provider, dimension, distance, normalized, max_tokens)
    VALUES (p_name, p_provider, p_dimension, p_distance, p_normalized, p_max_tokens)
    ON CONFLICT (name, dimension) DO NOTHING
    RETURNING id INTO v_id;

    IF v_id IS NULL THEN
        SELECT id, distance, normalized INTO v_id, v_distance, v_normal
        FROM pgrag.embedding_models WHERE name = p_name AND dimension = p_dimension;
        IF v_distance <> p_distance OR v_normal <> p_normalized THEN
            RAISE EXCEPTION 'embedding model % (% dimensions) is registered with distance % (normalized: %), not % (normalized: %)',
                quote_literal(p_name), p_dimension, v_distance, v_normal, p_distance, p_normalized
                USING ERRCODE = '22023';
        END IF;
        RETURN v_id;
    END IF;

    PERFORM pgrag.ensure_model_index_v1(v_id);
    RETURN v_id;
END
$fn$;

COMMENT ON FUNCTION pgrag.register_model_v1(text, text, integer, text, boolean, integer) IS
    'Record an embedding model and create its partial HNSW index; returns the model id.';
