-- pgrag.search_v5: search_v4, with the vectors of a model the caller names.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256): once shipped this function is never
-- edited in place; a changed contract is added beside it as search_v6.
--
--   SELECT * FROM pgrag.search_v5('handbook', 'refund window', $1::vector,
--                                 model => 'sentence-transformers/all-MiniLM-L6-v2');
--
-- Arguments, columns, ranking, visibility and the keyword fallback are search_v4's
-- (sql/functions/search_v4.sql). What is new is `model`: the name of the embedding model the
-- query vector was made with. A collection can hold the vectors of several models while it is
-- re-embedded (sql/functions/models_v1.sql); naming the model makes a search correct across a
-- switch: a query embedded with the old model just before `pgrag models activate` is compared
-- with the old model's vectors, which stay until the model is retired, never with the new
-- model's. NULL means the collection's active model, as search_v4. A model that is not the
-- collection's, or is retired there, is an error; one still building may be searched (its
-- vectors are partial until the backfill ends), to compare models before switching.
-- Vectors of a model indexed at half precision (embedding_models.index_type 'halfvec') are
-- compared as halfvec, so its HNSW index serves the search.
-- The model is resolved once, here, and a query with a vector is answered by
-- search_with_model_v1 with that model: search_v4 (through search_v3) would read the
-- collection's active model again, and between the two reads pgrag.activate_model_v1 may have
-- switched it. A keyword-only query needs no model and goes to search_v4.
CREATE FUNCTION pgrag.search_v5(
    collection        text,
    query_text        text,
    query_embedding   vector DEFAULT NULL,
    k                 integer DEFAULT 10,
    filter            jsonb DEFAULT '{}',
    rrf_k             integer DEFAULT 5,
    vector_depth      integer DEFAULT NULL,
    keyword_depth     integer DEFAULT NULL,
    vector_weight     double precision DEFAULT 0.5,
    keyword_weight    double precision DEFAULT 1.0,
    temperature       double precision DEFAULT 0.02,
    postings_per_term integer DEFAULT 50000,
    fallback_chunks   integer DEFAULT 5000,
    model             text DEFAULT NULL
) RETURNS TABLE (
    rank            integer,
    score           double precision,
    chunk_id        bigint,
    document_id     bigint,
    source          text,
    title           text,
    section         text,
    text            text,
    vector_rank     integer,
    keyword_rank    integer,
    vector_distance double precision,
    keyword_score   double precision,
    metadata        jsonb,
    probability     double precision
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_collection_id integer;
    v_active        integer;
    v_model_id      integer;
    v_status        text;
BEGIN
    IF query_embedding IS NOT NULL OR model IS NOT NULL THEN
        SELECT c.id, c.model_id INTO v_collection_id, v_active
          FROM pgrag.collections c WHERE c.name = collection;
        IF FOUND THEN  -- (else search_v4 names the missing collection)
            v_model_id := v_active;
            IF model IS NOT NULL THEN
                SELECT cm.model_id, cm.status INTO v_model_id, v_status
                  FROM pgrag.collection_models cm
                  JOIN pgrag.embedding_models m ON m.id = cm.model_id
                 WHERE cm.collection_id = v_collection_id AND m.name = model
                 ORDER BY cm.status = 'retired', cm.status <> 'active', cm.model_id
                 LIMIT 1;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'embedding model % is not a model of collection %',
                        quote_literal(model), quote_literal(collection)
                        USING ERRCODE = '22023',
                              HINT = 'pgrag models list --collection C (or pgrag.collection_models) lists them.';
                END IF;
                IF v_status = 'retired' THEN
                    RAISE EXCEPTION 'embedding model % is retired in collection %',
                        quote_literal(model), quote_literal(collection)
                        USING ERRCODE = '22023',
                              HINT = 'Embed the query with the collection''s active model.';
                END IF;
            END IF;
            IF query_embedding IS NOT NULL AND v_model_id IS NOT NULL THEN
                IF fallback_chunks IS NOT NULL AND fallback_chunks NOT BETWEEN 0 AND 1000000 THEN
                    RAISE EXCEPTION 'fallback_chunks must be between 0 and 1000000 (0 or NULL: no fallback), got %',
                        fallback_chunks USING ERRCODE = '22023';
                END IF;
                RETURN QUERY
                SELECT * FROM pgrag.search_with_model_v1(
                    collection, query_text, query_embedding, k, filter, rrf_k, vector_depth,
                    keyword_depth, vector_weight, keyword_weight, temperature,
                    postings_per_term, v_model_id);
                IF FOUND OR query_text IS NULL OR coalesce(fallback_chunks, 0) = 0
                   OR keyword_weight = 0 THEN
                    RETURN;
                END IF;
                -- Nothing matched either arm: search_v4's keyword fallback.
                RETURN QUERY
                SELECT * FROM pgrag.search_v4(collection, query_text, NULL, k, filter, rrf_k,
                                              vector_depth, keyword_depth, vector_weight,
                                              keyword_weight, temperature, postings_per_term,
                                              fallback_chunks);
                RETURN;
            END IF;
        END IF;
    END IF;
    RETURN QUERY
    SELECT * FROM pgrag.search_v4(collection, query_text, query_embedding, k, filter, rrf_k,
                                  vector_depth, keyword_depth, vector_weight, keyword_weight,
                                  temperature, postings_per_term, fallback_chunks);
END
$fn$;

COMMENT ON FUNCTION pgrag.search_v5(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer, integer, text) IS
    'Hybrid search as search_v4, with the vectors of the named embedding model (NULL: the active one); halfvec-indexed models included.';
