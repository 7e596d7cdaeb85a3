-- pgrag.search_v2: hybrid retrieval with a BM25 keyword arm, in one function call.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256): once shipped this function is never
-- edited in place; a changed contract is added beside it as search_v3. search_v1 stays.
--
--   SELECT * FROM pgrag.search_v2('handbook', 'refund window');               -- keyword only
--   SELECT * FROM pgrag.search_v2('handbook', 'refund window', $1::vector);   -- hybrid
--   SELECT * FROM pgrag.search_v2('handbook', NULL, $1::vector, k => 5);      -- vector only
--
-- Keyword arm: Okapi BM25 (k1 = 1.5, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) with OR
-- semantics over the query's lexemes (the collection's text search configuration: stop words
-- dropped, words stemmed), summed over pgrag.keyword_postings (see keyword_sync_v1). N and df are
-- exact for the caller's snapshot; each posting's term-frequency part (its impact) is computed at
-- the collection's reference average length, which keyword_maintain_v1 refreshes once the live
-- average drifts by more than 10% (pgrag ingest runs it after every ingest).
-- Pruning, for large collections: when the query's terms have more than postings_per_term
-- postings in all, each term reads its best postings (highest impact first) up to a share of
-- postings_per_term proportional to its idf (a rare term is read whole), and the 250 (or
-- 4 x keyword_depth) best candidates are completed by primary-key probes for the terms whose
-- lists were cut, so every returned score is exact BM25; only a chunk that never became a
-- candidate can be missed. NULL reads every posting (exact, always); a metadata filter also
-- reads every posting, so it never starves the arm. The keyword arm alone keeps k candidates,
-- fused keyword_depth (default max(4k, 40)).
-- Vector arm: as search_v1 (the collection's active model, partial HNSW index with iterative
-- scans, exact scan when the index returns too few rows), with a wider HNSW search list:
-- ef_search = 2 x depth, at least 200.
-- Fusion: Reciprocal Rank Fusion, score = sum over arms of weight / (rrf_k + rank). The defaults
-- (rrf_k 5, keyword 1.0, vector 0.5) were chosen by a sweep on SQuAD v1.1 dev (docs/search.md):
-- with all-MiniLM-L6-v2 the BM25 arm is the stronger one, and a small rrf_k lets each arm's top
-- hits count. A collection whose vector arm is stronger wants other weights: measure yours with
-- pgrag eval retrieval --vector-weight ... --keyword-weight ... --rrf-k ...
-- probability: p(z|x) over the returned rows, softmax(score / temperature). The default 0.02
-- minimises the negative log-likelihood of the relevant passage among the top 10 on SQuAD dev
-- under the default fusion; a chunk first in both arms is then ~1,800 times as likely as one
-- tenth in both.
--
-- SECURITY INVOKER with a fixed search_path: row-level security and privileges of the caller
-- apply to every row it reads.
CREATE FUNCTION pgrag.search_v2(
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
    postings_per_term integer DEFAULT 50000
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
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 40
-- Each statement is planned once per session: the custom plans PostgreSQL would otherwise try
-- first cost more to make than to run (3x the latency of a keyword search on SQuAD). The vector
-- arm is dynamic SQL and is planned per call, with the query vector's model and dimension.
SET plan_cache_mode = force_generic_plan
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
    v_filtered      boolean;
    v_use_vector    boolean;
    v_use_keyword   boolean;
    v_vdepth        integer;
    v_kdepth        integer;
    v_vector_sql    text;
    v_terms         text[] COLLATE "C";
    v_idfs          float8[];
    v_dfs           float8[];
    v_candidates    bigint[];
    v_candidate_scores float8[];
    v_pruned        boolean := false;
    v_vec_ids       bigint[];
    v_vec_dists     float8[];
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
    IF temperature IS NULL OR NOT temperature > 0 OR temperature IN ('NaN', 'Infinity') THEN
        RAISE EXCEPTION 'temperature must be a finite number > 0, got %', temperature
            USING ERRCODE = '22023';
    END IF;
    IF vector_weight IN ('NaN', 'Infinity') OR keyword_weight IN ('NaN', 'Infinity') THEN
        RAISE EXCEPTION 'vector_weight and keyword_weight must be finite, got % and %',
            vector_weight, keyword_weight USING ERRCODE = '22023';
    END IF;
    IF postings_per_term IS NOT NULL AND postings_per_term < 1 THEN
        RAISE EXCEPTION 'postings_per_term must be at least 1 (or NULL for exact), got %',
            postings_per_term USING ERRCODE = '22023';
    END IF;
    IF query_text IS NULL AND query_embedding IS NULL THEN
        RAISE EXCEPTION 'search_v2 needs query_text, query_embedding or both' USING ERRCODE = '22023';
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
    v_filtered := filter IS NOT NULL AND filter <> '{}'::jsonb;

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
    v_use_keyword := query_text IS NOT NULL AND keyword_weight > 0;

    v_vdepth := greatest(coalesce(vector_depth, greatest(4 * k, 40)), k);
    -- Alone, the keyword arm needs only k candidates; fused, more (and pruning then works to
    -- the depth's floor, not k's).
    v_kdepth := greatest(coalesce(keyword_depth,
                                  CASE WHEN v_use_vector THEN greatest(4 * k, 40) ELSE k END), k);

    IF v_use_keyword THEN
        -- The query's terms that occur in the collection, with their idf.
        SELECT array_agg(x.lexeme),
               array_agg(x.df),
               array_agg(ln(1 + (st.n - x.df + 0.5) / (x.df + 0.5))),
               -- (the pruned path tracks terms in a 62-bit mask: a longer query reads all)
               coalesce(NOT v_filtered AND sum(x.df) > postings_per_term AND count(*) <= 62,
                        false)
          INTO v_terms, v_dfs, v_idfs, v_pruned
          FROM (SELECT sum(t.chunks)::float8 AS n
                  FROM pgrag.keyword_totals t WHERE t.collection_id = v_collection_id) st,
               unnest(to_tsvector(v_text_config, query_text)) u,
               LATERAL (SELECT u.lexeme COLLATE "C" AS lexeme, sum(d.df)::float8 AS df
                          FROM pgrag.keyword_df d
                         WHERE d.collection_id = v_collection_id
                           AND d.lexeme = u.lexeme COLLATE "C") x
         WHERE x.df > 0;
        IF v_terms IS NULL THEN
            v_use_keyword := false;  -- only stop words, or no chunk has any of the words
        ELSIF v_pruned THEN
            -- Impact-ordered reading with a budget: each term reads its best postings (highest
            -- impact first) up to a share of postings_per_term proportional to its idf, so a
            -- rare term is read whole and a common one only where it weighs most. The best
            -- candidates by what was read are then completed: each is probed (primary key)
            -- for the terms whose lists were cut short and did not show it, so their scores
            -- are exact BM25; only a chunk that never became a candidate can be missed.
            WITH t AS (
                     SELECT b.lexeme, b.idf, b.df,
                            (1::bigint << (b.i - 1)::int) AS bit,  -- at most 62 terms here
                            greatest(ceil(postings_per_term * b.idf / sum(b.idf) OVER ()),
                                     v_kdepth)::int AS budget
                       FROM unnest(v_terms, v_idfs, v_dfs) WITH ORDINALITY
                            AS b(lexeme, idf, df, i)),
                 cand AS (
                     SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s,
                            bit_or(t.bit) AS found  -- which terms' postings showed the chunk
                       FROM t
                      CROSS JOIN LATERAL (
                          SELECT q.chunk_id, q.impact
                            FROM pgrag.keyword_postings q
                           WHERE q.collection_id = v_collection_id AND q.lexeme = t.lexeme
                           ORDER BY q.impact DESC
                           LIMIT t.budget) p
                      GROUP BY p.chunk_id
                      ORDER BY s DESC, p.chunk_id
                      LIMIT greatest(4 * v_kdepth, 250)),
                 rest AS (
                     SELECT c.id, sum(t.idf * q.impact) AS s
                       FROM cand c
                      CROSS JOIN t
                      CROSS JOIN LATERAL (
                          SELECT q.impact FROM pgrag.keyword_postings q
                           WHERE q.collection_id = v_collection_id AND q.lexeme = t.lexeme
                             AND q.chunk_id = c.id
                           LIMIT 1) q  -- a probe of the primary key, never a list scan
                      WHERE t.budget < t.df AND c.found & t.bit = 0
                      GROUP BY c.id)
            SELECT array_agg(x.id ORDER BY x.s DESC, x.id), array_agg(x.s ORDER BY x.s DESC, x.id)
              INTO v_candidates, v_candidate_scores
              FROM (SELECT c.id, c.s + coalesce(r.s, 0) AS s
                      FROM cand c LEFT JOIN rest r ON r.id = c.id
                     ORDER BY 2 DESC, 1
                     LIMIT v_kdepth) x;
        END IF;
    END IF;

    IF NOT v_use_vector AND NOT v_use_keyword THEN
        RETURN;  -- nothing to search with: only stop words, or every arm weighted 0
    END IF;

    IF v_use_vector THEN
        -- A search list twice the depth asked, at least 200 (at most pgvector's 1,000): on
        -- 200k clustered vectors, in a graph built by ensure_model_index_v2, recall@10 is
        -- 0.969 at ef 100 and 0.996 at ef 200 (docs/benchmarks.md). The function's SET clause
        -- puts the caller's value back on exit.
        PERFORM set_config('hnsw.ef_search', least(greatest(2 * v_vdepth, 200), 1000)::text,
                           true);
        -- %6$s joins documents only when a filter needs them. The exact branch orders by
        -- "distance + 0" so that the planner cannot answer it from the HNSW index; it runs only
        -- when the index scan came back short.
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
                  LIMIT $4),
             hits AS (
                 SELECT id, dist FROM ann WHERE (SELECT count(*) FROM ann) >= $4
                 UNION ALL
                 SELECT id, dist FROM exact WHERE (SELECT count(*) FROM ann) < $4)
             SELECT array_agg(id ORDER BY dist, id), array_agg(dist ORDER BY dist, id) FROM hits',
            v_schema, v_dimension,
            CASE v_distance WHEN 'cosine' THEN '<=>' WHEN 'l2' THEN '<->' ELSE '<#>' END,
            v_model_id,
            CASE WHEN v_filtered THEN ' AND d.metadata @> $2' ELSE '' END,
            CASE WHEN v_filtered THEN ' JOIN pgrag.documents d ON d.id = c.document_id' ELSE '' END);
        EXECUTE v_vector_sql INTO v_vec_ids, v_vec_dists
          USING v_collection_id, filter, query_embedding, v_vdepth;
    END IF;

    IF NOT v_use_vector AND NOT v_pruned AND NOT v_filtered THEN
        -- The commonest call, keyword only, in the smallest statement: it runs in a third of a
        -- millisecond, so executor start-up matters (tests/test_keyword_index.py checks it
        -- agrees with the general statement below).
        RETURN QUERY
        WITH w AS (
                 SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
                   FROM unnest(v_terms, v_idfs) AS t(lexeme, idf)
                   JOIN pgrag.keyword_postings p
                     ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
                  GROUP BY p.chunk_id
                  ORDER BY s DESC, p.chunk_id
                  LIMIT v_kdepth),
             top AS (
                 SELECT r.id, r.kr, r.s, keyword_weight / (rrf_k + r.kr) AS fused,
                        c.document_id AS doc, c.section AS sect, c.content, d.source AS src,
                        d.title AS ttl, d.metadata AS meta
                   FROM (SELECT w.id, w.s, (row_number() OVER (ORDER BY w.s DESC, w.id))::int AS kr
                           FROM w) r
                   JOIN pgrag.chunks c ON c.id = r.id
                   JOIN pgrag.documents d ON d.id = c.document_id
                  ORDER BY r.kr
                  LIMIT k),
             z AS (SELECT top.*, exp(greatest((top.fused - max(top.fused) OVER ()) / temperature, -700)) AS e
                     FROM top)
        SELECT (row_number() OVER (ORDER BY z.kr))::int, z.fused, z.id, z.doc, z.src, z.ttl,
               z.sect, z.content, NULL::integer, z.kr, NULL::float8, z.s, z.meta,
               z.e / sum(z.e) OVER ()
          FROM z
         ORDER BY z.kr;
        RETURN;
    END IF;

    RETURN QUERY
    WITH terms AS (
             SELECT t.lexeme, t.idf FROM unnest(v_terms, v_idfs) AS t(lexeme, idf)),
         -- Keyword arm, one of three ways (the others are switched off by their WHERE):
         -- every posting of every term,
         kw_exact AS (
             SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
               FROM terms t
               JOIN pgrag.keyword_postings p
                 ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
              WHERE v_use_keyword AND NOT v_pruned AND NOT v_filtered
              GROUP BY p.chunk_id
              ORDER BY s DESC, p.chunk_id
              LIMIT v_kdepth),
         -- every posting of the chunks the filter admits,
         kw_filtered AS (
             SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
               FROM terms t
               JOIN pgrag.keyword_postings p
                 ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
               JOIN pgrag.chunks c ON c.id = p.chunk_id
               JOIN pgrag.documents d ON d.id = c.document_id
              WHERE v_use_keyword AND v_filtered AND d.metadata @> filter
              GROUP BY p.chunk_id
              ORDER BY s DESC, p.chunk_id
              LIMIT v_kdepth),
         -- or, pruned: the best candidates, completed above.
         kw_pruned AS (
             SELECT x.id, x.s FROM unnest(v_candidates, v_candidate_scores) AS x(id, s)
              WHERE v_use_keyword AND v_pruned),
         kw AS (SELECT * FROM kw_exact
                UNION ALL SELECT * FROM kw_filtered
                UNION ALL SELECT * FROM kw_pruned),
         w AS (SELECT kw.id, kw.s, (row_number() OVER (ORDER BY kw.s DESC, kw.id))::int AS r
                 FROM kw),
         v AS (SELECT x.id, x.dist, x.r::int AS r
                 FROM unnest(v_vec_ids, v_vec_dists) WITH ORDINALITY AS x(id, dist, r)),
         f AS (SELECT coalesce(v.id, w.id) AS id, v.r AS vr, w.r AS kr, v.dist, w.s,
                      coalesce(vector_weight / (rrf_k + v.r), 0)
                      + coalesce(keyword_weight / (rrf_k + w.r), 0) AS fused,
                      least(v.r, w.r) AS best
                 FROM v FULL JOIN w ON w.id = v.id),
         -- Chunks are read in fused order, only until k of them are visible to the caller.
         top AS (SELECT f.id, f.vr, f.kr, f.dist, f.s, f.fused, f.best, c.document_id AS doc,
                        c.section AS sect, c.content, d.source AS src, d.title AS ttl,
                        d.metadata AS meta
                   FROM (SELECT * FROM f ORDER BY f.fused DESC, f.best, f.id) f
                   JOIN pgrag.chunks c ON c.id = f.id
                   JOIN pgrag.documents d ON d.id = c.document_id
                  ORDER BY f.fused DESC, f.best, f.id
                  LIMIT k),
         z AS (SELECT top.*, exp(greatest((top.fused - max(top.fused) OVER ()) / temperature, -700)) AS e
                 FROM top)
    SELECT (row_number() OVER (ORDER BY z.fused DESC, z.best, z.id))::int,
           z.fused, z.id, z.doc, z.src, z.ttl, z.sect, z.content, z.vr, z.kr, z.dist, z.s,
           z.meta, z.e / sum(z.e) OVER ()
      FROM z
     ORDER BY z.fused DESC, z.best, z.id;
END
$fn$;

COMMENT ON FUNCTION pgrag.search_v2(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer) IS
    'Hybrid search (HNSW vector arm + BM25 keyword arm, fused with RRF, with p(z|x)) over one collection; SECURITY INVOKER.';
