-- pgrag.search_v1: hybrid retrieval in one statement.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256): once shipped this function is never
-- edited in place; a changed contract is added beside it as search_v2.
--
--   SELECT * FROM pgrag.search_v1('handbook', 'refund window');               -- keyword only
--   SELECT * FROM pgrag.search_v1('handbook', 'refund window', $1::vector);   -- hybrid
--   SELECT * FROM pgrag.search_v1('handbook', NULL, $1::vector, k => 5);      -- vector only
--
-- Vector arm: the collection's active model, nearest neighbours through that model's partial
-- HNSW index, with pgvector 0.8 iterative scans so filters do not starve the result. When the
-- index still yields fewer candidates than asked (a small collection, a selective filter), the
-- arm is answered by an exact scan over the rows the filters admit instead.
-- Keyword arm: OR over the query's lexemes (a question must not return nothing because one word
-- is missing from the passage), ranked by ts_rank with length normalisation, through the GIN index.
-- Fusion: Reciprocal Rank Fusion, score = sum over arms of weight / (rrf_k + rank).
-- filter: documents whose metadata contains this jsonb (@>), e.g. '{"team": "billing"}'.
--
-- SECURITY INVOKER with a fixed search_path: row-level security and privileges of the caller
-- apply to every row it reads.
CREATE FUNCTION pgrag.search_v1(
    collection      text,
    query_text      text,
    query_embedding vector DEFAULT NULL,
    k               integer DEFAULT 10,
    filter          jsonb DEFAULT '{}',
    rrf_k           integer DEFAULT 60,
    vector_depth    integer DEFAULT NULL,
    keyword_depth   integer DEFAULT NULL,
    vector_weight   double precision DEFAULT 1.0,
    keyword_weight  double precision DEFAULT 1.0
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
    metadata        jsonb
)
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 40
AS $fn$
#variable_conflict use_column
DECLARE
    v_collection_id integer;
    v_text_config   regconfig;
    v_config_name   text;
    v_model_id      integer;
    v_dimension     integer;
    v_distance      text;
    v_schema        text;
    v_qdims         integer;
    v_query_lexemes tsvector;
    v_tsquery       tsquery;
    v_use_vector    boolean;
    v_use_keyword   boolean;
    v_vdepth        integer;
    v_kdepth        integer;
    v_filter_sql    text := '';
    v_vector_sql    text;
    v_keyword_sql   text;
BEGIN
    IF k IS NULL OR k NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, got %', k USING ERRCODE = '22023';
    END IF;
    IF rrf_k IS NULL OR rrf_k < 1 THEN
        RAISE EXCEPTION 'rrf_k must be at least 1, got %', rrf_k USING ERRCODE = '22023';
    END IF;
    IF vector_weight IS NULL OR vector_weight < 0 OR keyword_weight IS NULL OR keyword_weight < 0 THEN
        RAISE EXCEPTION 'vector_weight and keyword_weight must be >= 0, got % and %',
            vector_weight, keyword_weight USING ERRCODE = '22023';
    END IF;
    IF query_text IS NULL AND query_embedding IS NULL THEN
        RAISE EXCEPTION 'search_v1 needs query_text, query_embedding or both' USING ERRCODE = '22023';
    END IF;
    IF filter IS NOT NULL AND jsonb_typeof(filter) <> 'object' THEN
        RAISE EXCEPTION 'filter must be a jsonb object such as {"team": "billing"}, got %', filter
            USING ERRCODE = '22023';
    END IF;

    SELECT c.id, c.text_config, c.model_id
      INTO v_collection_id, v_config_name, v_model_id
      FROM pgrag.collections c WHERE c.name = collection;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'collection % does not exist', quote_literal(collection)
            USING ERRCODE = '42704',
                  HINT = 'SELECT name FROM pgrag.collections lists the collections.';
    END IF;
    v_text_config := v_config_name::regconfig;

    IF query_embedding IS NOT NULL THEN
        IF v_model_id IS NULL THEN
            RAISE EXCEPTION 'collection % has no embedding model yet', quote_literal(collection)
                USING ERRCODE = '22023', HINT = 'Ingest documents first, or pass a NULL query_embedding for keyword-only search.';
        END IF;
        SELECT m.dimension, m.distance INTO v_dimension, v_distance
          FROM pgrag.embedding_models m WHERE m.id = v_model_id;
        SELECT n.nspname INTO v_schema
          FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
         WHERE e.extname = 'vector';
        EXECUTE format('SELECT %I.vector_dims($1)', v_schema) INTO v_qdims USING query_embedding;
        IF v_qdims <> v_dimension THEN
            RAISE EXCEPTION 'query_embedding has % dimensions but collection % uses a %-dimensional model',
                v_qdims, quote_literal(collection), v_dimension
                USING ERRCODE = '22000', HINT = 'Embed the query with the collection''s model (see pgrag.embedding_models).';
        END IF;
    END IF;
    v_use_vector := query_embedding IS NOT NULL AND vector_weight > 0;

    -- OR over the query's normalised lexemes. The text form of a stripped tsvector quotes each
    -- lexeme exactly as tsquery input expects, and lexemes never contain spaces.
    v_use_keyword := false;
    IF query_text IS NOT NULL AND keyword_weight > 0 THEN
        v_query_lexemes := strip(to_tsvector(v_text_config, query_text));
        IF length(v_query_lexemes) > 0 THEN
            v_tsquery := replace(v_query_lexemes::text, ''' ''', ''' | ''')::tsquery;
            v_use_keyword := true;
        END IF;
    END IF;

    IF NOT v_use_vector AND NOT v_use_keyword THEN
        RETURN;  -- nothing to search with: only stop words, or every arm weighted 0
    END IF;

    v_vdepth := greatest(coalesce(vector_depth, greatest(4 * k, 40)), k);
    v_kdepth := greatest(coalesce(keyword_depth, greatest(4 * k, 40)), k);
    -- Enough candidates from the graph for the depth asked; the function's SET clause puts
    -- the caller's value back on exit.
    PERFORM set_config('hnsw.ef_search', least(greatest(v_vdepth, 40), 1000)::text, true);

    IF filter IS NOT NULL AND filter <> '{}'::jsonb THEN
        v_filter_sql := ' AND d.metadata @> $6';
    END IF;

    IF v_use_vector THEN
        -- %6$s joins documents only when a filter needs them.
        -- The exact branch orders by "distance + 0" so that the planner cannot answer it from
        -- the HNSW index; it runs only when the index scan came back short.
        v_vector_sql := format(
            'WITH ann AS MATERIALIZED (
                 SELECT ce.chunk_id AS id,
                        (ce.embedding::%1$I.vector(%2$s) OPERATOR(%1$I.%3$s) $3)::float8 AS dist
                   FROM pgrag.chunk_embeddings ce
                   JOIN pgrag.chunks c ON c.id = ce.chunk_id%6$s
                  WHERE ce.model_id = %4$s AND c.collection_id = $1%5$s
                  ORDER BY ce.embedding::%1$I.vector(%2$s) OPERATOR(%1$I.%3$s) $3
                  LIMIT $4),
             exact AS (
                 SELECT ce.chunk_id AS id,
                        (ce.embedding::%1$I.vector(%2$s) OPERATOR(%1$I.%3$s) $3)::float8 AS dist
                   FROM pgrag.chunk_embeddings ce
                   JOIN pgrag.chunks c ON c.id = ce.chunk_id%6$s
                  WHERE ce.model_id = %4$s AND c.collection_id = $1%5$s
                  ORDER BY (ce.embedding::%1$I.vector(%2$s) OPERATOR(%1$I.%3$s) $3) + 0
                  LIMIT $4)
             SELECT id, dist FROM ann WHERE (SELECT count(*) FROM ann) >= $4
             UNION ALL
             SELECT id, dist FROM exact WHERE (SELECT count(*) FROM ann) < $4',
            v_schema, v_dimension,
            CASE v_distance WHEN 'cosine' THEN '<=>' WHEN 'l2' THEN '<->' ELSE '<#>' END,
            v_model_id, v_filter_sql,
            CASE WHEN v_filter_sql = '' THEN ''
                 ELSE ' JOIN pgrag.documents d ON d.id = c.document_id' END);
    ELSE
        v_vector_sql := 'SELECT NULL::bigint AS id, NULL::float8 AS dist WHERE false';
    END IF;

    IF v_use_keyword THEN
        v_keyword_sql :=
            'SELECT c.id, ts_rank(c.tsv, $2, 1)::float8 AS s
               FROM pgrag.chunks c'
            || CASE WHEN v_filter_sql = '' THEN ''
                    ELSE ' JOIN pgrag.documents d ON d.id = c.document_id' END || '
              WHERE c.collection_id = $1 AND c.tsv @@ $2' || v_filter_sql || '
              ORDER BY s DESC, c.id
              LIMIT $5';
    ELSE
        v_keyword_sql := 'SELECT NULL::bigint AS id, NULL::float8 AS s WHERE false';
    END IF;

    RETURN QUERY EXECUTE format(
        'WITH vec AS MATERIALIZED (%s),
              kw AS MATERIALIZED (%s),
              v AS (SELECT id, dist, (row_number() OVER (ORDER BY dist, id))::int AS r FROM vec),
              w AS (SELECT id, s, (row_number() OVER (ORDER BY s DESC, id))::int AS r FROM kw),
              f AS (
                  SELECT coalesce(v.id, w.id) AS id, v.r AS vr, w.r AS kr, v.dist, w.s,
                         coalesce($8 / ($7 + v.r), 0) + coalesce($9 / ($7 + w.r), 0) AS score
                    FROM v FULL JOIN w ON w.id = v.id
              )
         SELECT (row_number() OVER (ORDER BY f.score DESC, least(f.vr, f.kr), f.id))::int,
                f.score::float8, c.id, d.id, d.source, d.title, c.section, c.content,
                f.vr, f.kr, f.dist, f.s, d.metadata
           FROM f
           JOIN pgrag.chunks c ON c.id = f.id
           JOIN pgrag.documents d ON d.id = c.document_id
          ORDER BY f.score DESC, least(f.vr, f.kr), f.id
          LIMIT $10',
        v_vector_sql, v_keyword_sql)
    USING v_collection_id, v_tsquery, query_embedding, v_vdepth, v_kdepth, filter,
          rrf_k, vector_weight, keyword_weight, k;
END
$fn$;

COMMENT ON FUNCTION pgrag.search_v1(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision) IS
    'Hybrid search (HNSW vector arm + GIN keyword arm, fused with RRF) over one collection; SECURITY INVOKER.';
