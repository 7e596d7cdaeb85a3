-- Hybrid search: one engine, pgrag.search_engine, behind the public entry point search_v5.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md). The engine's
-- body is edited here, in place; search_v5's argument list and result columns are its contract,
-- and only a change to them (or to what a column means) is a search_v6. search_v3 and search_v4,
-- earlier contracts, are thin wrappers over the engine for one more release (deprecated: use
-- search_v5, which takes every argument they take).
--
--   SELECT * FROM pgrag.search_v5('handbook', 'refund window');               -- keyword only
--   SELECT * FROM pgrag.search_v5('handbook', 'refund window', $1::vector);   -- hybrid
--   SELECT * FROM pgrag.search_v5('handbook', NULL, $1::vector, k => 5);      -- vector only
--   SELECT * FROM pgrag.search_v5('handbook', 'refund', NULL,
--                                 filter => '{"team": {"$in": ["billing", "sales"]}}');
--
-- Keyword arm: Okapi BM25 (k1 = 1.5, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) with OR
-- semantics over the query's lexemes (the collection's text search configuration: stop words
-- dropped, words stemmed), summed over pgrag.keyword_postings (sql/functions/keyword.sql). N and
-- df are exact for the caller's snapshot and its visible chunks; each posting's term-frequency
-- part (its impact) is computed at the collection's reference average length, which
-- keyword_maintain_v2 refreshes once the live average drifts by more than 10%.
-- Pruning, for large collections: when the query's terms have more than postings_per_term
-- postings in all, each term reads its best postings (highest impact first) up to a share of
-- postings_per_term proportional to its idf (a rare term is read whole), and the 250 (or
-- 4 x keyword_depth) best candidates are completed by primary-key probes for the terms whose
-- lists were cut, so every returned score is exact BM25; only a chunk that never became a
-- candidate can be missed. NULL reads every posting (exact, always); a metadata filter also
-- reads every posting, so it never starves the arm. The keyword arm alone keeps k candidates,
-- fused keyword_depth (default max(4k, 40)).
-- Fallback (fallback_chunks): when a search finds nothing although it has query text, because
-- every word of it is a stop word ("Who was he?") or no chunk the caller may see has any of its
-- words ("What is PPP?"), the words are matched as typed, stop words included (whole words as
-- the 'simple' configuration parses them: case-insensitive, not stemmed), in at most
-- fallback_chunks (50,000) of the collection's chunks the caller may see (and the filter
-- admits); a chunk scores the summed idf of the words it holds. Its cost is bounded by that
-- scan, one parse per chunk whatever the words, and by the time limit, checked per chunk.
-- NULL or 0 turns it off.
-- Vector arm: the model's partial HNSW index (vector or halfvec, as embedding_models.index_type
-- says) with pgvector's iterative scans, ef_search = 2 x depth (at least 200; pgrag.ef_search
-- or the collection's settings ->> 'ef_search' set it instead), and an exact scan when the
-- index returns too few rows. `model` names the embedding model the query vector was
-- made with (NULL: the collection's active model); a model that is not the collection's, or is
-- retired there, is an error; one still building may be searched, to compare before switching.
-- A query vector of the wrong dimension is an error, never an empty result.
-- Fusion (docs/search.md#fusion): by default a convex combination, the weighted mean of each
-- arm's scores as z-scores over its candidate list (a chunk missing from a list takes the
-- list's lowest; vector 0.4, keyword 0.6). The method, normalisation (z-score or min-max) and
-- weight were chosen on half of SQuAD v1.1 dev's articles and a CMake manual set, and reported
-- on the other half and a Vim manual set (docs/benchmarks.md#fusion-that-transfers).
-- Reciprocal Rank Fusion, sum over arms of weight / (rrf_k + rank), when the caller names
-- rrf_k (weights 0.5 and 1.0 by default). A collection's settings -> 'fusion' (pgrag tune)
-- replaces the defaults the caller leaves NULL.
-- probability: p(z|x) over the returned rows, softmax(score / temperature); the default (0.5
-- z-score, 0.1 min-max, 0.02 RRF) minimises the negative log-likelihood of the relevant
-- passage among the top 10 on SQuAD dev.
-- Visibility: the entry points are SECURITY DEFINER, so restricted roles (pgrag_reader,
-- pgrag_app) search without any SELECT on the tables (whose direct use would leak through side
-- channels). The engine asks pgrag.visible_acls (sql/functions/access.sql) once which access
-- lists the session may read and tests every protected row it reads against them; BM25's
-- statistics come from the visible access lists only. k results: when the caller is restricted
-- or filters, the chunks it may match are counted (up to 2 x sqrt(depth x table size), between
-- 2,000 and 50,000); if they are fewer, both arms score exactly those chunks, else the vector arm
-- filters during an iterative HNSW scan (exact should it still come back short) and the keyword
-- arm reads every posting the caller can see, so neither arm is starved by what it may not
-- return. The vector arm reads the collection's own partition of pgrag.chunk_embeddings and
-- its own HNSW graph (docs/scale.md#partitions).
-- Filters are pgrag's JSON language (sql/functions/filter.sql), never built into SQL.
--
-- Limits (docs/search.md#limits). Arguments: query_text at most 20,000 characters, rrf_k at
-- most 1,000,000, weights at most 1,000,000, temperature between 1e-300 and 1e6 (with the
-- ranges below); a query vector's norm between 1e-15 and 1e15 in pgvector's single precision;
-- a filter as bounded in sql/functions/filter.sql; the fallback reads the first
-- 100 words of the query. Time: a search stops with SQLSTATE 57014 once it has run longer
-- than its time limit while testing rows against its filter or reading chunks for the keyword
-- fallback (the loops a caller's input could otherwise stretch without bound; a reader may SET
-- statement_timeout = 0, so this limit is the one it cannot lift). The limit is a duration
-- (milliseconds, or such as '10s') of the collection, collections.settings ->>
-- 'search_timeout' (30s when unset, 0 for none), which a session may only lower, with the
-- setting pgrag.search_timeout (SET, or ALTER ROLE alice SET pgrag.search_timeout = '5s').
-- A function cannot set statement_timeout for the statement calling it
-- (PostgreSQL arms that timer when the statement starts), so the hard limit for everything is
-- the caller's statement_timeout, per role: ALTER ROLE app SET statement_timeout = '30s'.
--
-- pgrag.search_engine is SECURITY INVOKER and executable by no one but the owner: the entry
-- points below call it.
CREATE OR REPLACE FUNCTION pgrag.search_engine(
    collection        text,
    query_text        text,
    query_embedding   vector,
    k                 integer,
    filter            jsonb,
    rrf_k             integer,
    vector_depth      integer,
    keyword_depth     integer,
    vector_weight     double precision,
    keyword_weight    double precision,
    temperature       double precision,
    postings_per_term integer,
    fallback_chunks   integer,
    model             text
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
    v_vtype         text;
    v_vcast         text;
    v_dimension     integer;
    v_distance      text;
    v_schema        text;
    v_qdims         integer;
    v_filtered      boolean;
    v_contain       jsonb;
    v_ops           boolean;
    v_restricted    boolean;
    v_visible       bigint;
    v_limit         integer;
    v_small         boolean := false;
    v_cand          bigint[];
    v_probe         boolean := false;
    v_acls          integer[];
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
    v_active        integer;
    v_status        text;
    v_rows          bigint := 0;
    v_match         jsonb;
    v_settings      jsonb;
    v_timeout       float8;
    v_deadline      float8;  -- epoch seconds; NULL: no time limit
    v_watch         boolean := false;  -- check v_deadline per keyword posting read
    v_tick          jsonb;  -- the deadline as a program for filter_match (true for any row)
    v_text          text;
    v_ms            float8;
    v_norm          float8;
    v_max           float8;
    v_sq            float8;
    v_fusion        jsonb;
    v_method        text;
    v_convex        boolean;
    v_zscore        boolean;
    v_wsum          float8;
    v_ef            integer;
    v_found         boolean;
    v_ef_setting    text;
    v_timeout_setting text;
    v_timeouts_valid boolean := true;
BEGIN
    -- Bounds every caller meets, before anything is read (docs/search.md#limits): each a
    -- one-line error naming the argument and its limit, never a raw PostgreSQL one.
    IF query_text IS NULL AND query_embedding IS NULL THEN
        RAISE EXCEPTION 'search_v5 needs query_text, query_embedding or both (both are NULL)'
            USING ERRCODE = '22023';
    END IF;
    IF collection IS NULL THEN
        RAISE EXCEPTION 'search_v5 needs a collection name (collection is NULL)'
            USING ERRCODE = '22023',
                  HINT = 'SELECT name FROM pgrag.collections lists the collections.';
    END IF;
    IF length(query_text) > 20000 THEN
        RAISE EXCEPTION 'query_text is % characters; the limit is 20000: search with a shorter question',
            length(query_text) USING ERRCODE = '54000';
    END IF;
    IF rrf_k > 1000000 THEN
        RAISE EXCEPTION 'rrf_k must be between 1 and 1000000, got %', rrf_k USING ERRCODE = '22023';
    END IF;
    -- (NaN and Infinity sort above every number: the general path names them as not finite)
    IF vector_weight > 1000000 AND vector_weight < 'Infinity'
       OR keyword_weight > 1000000 AND keyword_weight < 'Infinity' THEN
        RAISE EXCEPTION 'vector_weight and keyword_weight must be between 0 and 1000000, got % and %',
            coalesce(vector_weight::text, 'the default'), coalesce(keyword_weight::text, 'the default')
            USING ERRCODE = '22023';
    END IF;
    IF temperature > 0 AND temperature < 1e-300 OR temperature > 1000000 AND temperature < 'Infinity' THEN
        RAISE EXCEPTION 'temperature must be between 1e-300 and 1000000, got %', temperature
            USING ERRCODE = '22023';
    END IF;
    IF fallback_chunks IS NOT NULL AND fallback_chunks NOT BETWEEN 0 AND 50000 THEN
        RAISE EXCEPTION 'fallback_chunks must be between 0 and 50000 (0 or NULL: no fallback), got %',
            fallback_chunks USING ERRCODE = '22023';
    END IF;

    -- The fusion (docs/search.md#fusion). A caller naming rrf_k gets Reciprocal Rank Fusion;
    -- otherwise the collection's settings -> 'fusion' (written by `pgrag tune`) decide, and
    -- without them the convex combination of z-scored arms at the built-in weights. Each of
    -- rrf_k, the weights and temperature the caller leaves NULL comes from the collection's
    -- setting, else from the method's default (RRF: 5, 0.5, 1.0, temperature 0.02; convex:
    -- 0.4, 0.6, temperature 0.5 for z-scores, 0.1 for min-max).
    -- The collection, read once for the fusion, the model and the lean statement below (the
    -- general path reads it again, and names it when it is missing).
    SELECT c.id, c.model_id, c.text_config, c.settings -> 'fusion', c.settings ->> 'ef_search',
           c.settings ->> 'search_timeout'
      INTO v_collection_id, v_active, v_config_name, v_fusion, v_ef_setting, v_timeout_setting
      FROM pgrag.collections c WHERE c.name = collection;
    v_found := FOUND;
    IF rrf_k IS NULL OR vector_weight IS NULL OR keyword_weight IS NULL OR temperature IS NULL THEN
        -- A setting that is wrong fails every search of the collection with one line naming
        -- what is wrong, rather than searching some other way than it says.
        v_text := CASE
            WHEN v_fusion IS NULL OR jsonb_typeof(v_fusion) = 'null' THEN NULL
            WHEN jsonb_typeof(v_fusion) <> 'object' THEN 'it is not a JSON object'
            WHEN coalesce(v_fusion ->> 'method', 'convex') NOT IN ('convex', 'rrf')
                THEN format('"method" must be "convex" or "rrf", got %s', v_fusion -> 'method')
            WHEN coalesce(v_fusion ->> 'normalization', 'zscore') NOT IN ('zscore', 'minmax')
                THEN format('"normalization" must be "zscore" or "minmax", got %s',
                            v_fusion -> 'normalization')
            WHEN (v_fusion -> 'vector_weight') = '0'::jsonb AND (v_fusion -> 'keyword_weight') = '0'::jsonb
                THEN 'vector_weight and keyword_weight are both 0, which switches off both arms'
            ELSE (SELECT format('"%s" must be %s, got %s', e.key,
                                CASE e.key WHEN 'rrf_k' THEN 'a whole number from 1 to 1000000'
                                           WHEN 'temperature' THEN 'a number from 1e-300 to 1000000'
                                           ELSE 'a number from 0 to 1000000' END,
                                left(e.value::text, 40))
                    FROM jsonb_each(v_fusion) e
                   WHERE e.key IN ('rrf_k', 'vector_weight', 'keyword_weight', 'temperature')
                     AND CASE WHEN jsonb_typeof(e.value) <> 'number' THEN true
                              WHEN e.key = 'rrf_k'
                                  THEN NOT ((e.value::text)::numeric BETWEEN 1 AND 1000000
                                            AND (e.value::text)::numeric = trunc((e.value::text)::numeric))
                              WHEN e.key = 'temperature'
                                  THEN NOT (e.value::text)::numeric BETWEEN 1e-300 AND 1000000
                              ELSE NOT (e.value::text)::numeric BETWEEN 0 AND 1000000 END
                   ORDER BY e.key LIMIT 1)
        END;
        IF v_text IS NOT NULL THEN
            RAISE EXCEPTION 'the fusion setting of collection % is not valid: %', quote_literal(collection), v_text
                USING ERRCODE = '22023',
                      HINT = 'Fix it (docs/search.md#fusion), or remove it: UPDATE pgrag.collections SET settings = settings - ''fusion'' WHERE name = ...';
        END IF;
        IF jsonb_typeof(v_fusion) IS DISTINCT FROM 'object' THEN
            v_fusion := '{}';
        END IF;
    ELSE
        v_fusion := '{}';  -- (the caller named every knob: the setting does not apply)
    END IF;
    v_method := coalesce(v_fusion ->> 'method', 'convex');
    v_convex := rrf_k IS NULL AND v_method = 'convex';
    v_zscore := v_convex AND coalesce(v_fusion ->> 'normalization', 'zscore') = 'zscore';
    IF v_convex <> (v_method = 'convex') THEN
        v_fusion := '{}';  -- the caller chose RRF: a tuned convex setting does not apply
    ELSIF query_embedding IS NULL OR query_text IS NULL THEN
        -- One arm asked for: the collection's weights do not change its order, and a weight of
        -- 0 there must not switch off the only arm the caller asked for.
        v_fusion := v_fusion - 'vector_weight' - 'keyword_weight';
    END IF;
    rrf_k := coalesce(rrf_k, (v_fusion ->> 'rrf_k')::float8::integer, 5);
    vector_weight := coalesce(vector_weight, (v_fusion ->> 'vector_weight')::float8,
                              CASE WHEN v_convex THEN 0.4 ELSE 0.5 END);
    keyword_weight := coalesce(keyword_weight, (v_fusion ->> 'keyword_weight')::float8,
                               CASE WHEN v_convex THEN 0.6 ELSE 1.0 END);
    temperature := coalesce(temperature, (v_fusion ->> 'temperature')::float8,
                            CASE WHEN v_zscore THEN 0.5 WHEN v_convex THEN 0.1 ELSE 0.02 END);

    -- The model the query vector was made with, resolved once: a model the caller names must be
    -- one of the collection's (not retired); NULL is the active one. The general path below
    -- reads the collection again but keeps this model, so a model switched in between (pgrag
    -- models activate) never pairs a vector with another model's vectors.
    IF query_embedding IS NOT NULL OR model IS NOT NULL THEN
        IF v_found THEN  -- (else the general path names the missing collection)
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
        END IF;
    END IF;

    -- The time limit's settings, checked as the general path checks them (which reports a bad
    -- one): the lean statements below do not use the limit, but a bad setting must fail every
    -- search, not only those that take the general path. Unset, they cost nothing here.
    FOREACH v_text IN ARRAY ARRAY[v_timeout_setting, current_setting('pgrag.search_timeout', true)] LOOP
        CONTINUE WHEN coalesce(btrim(v_text), '') = '' OR btrim(v_text) ~ '^\d+(\.\d+)?$';
        BEGIN
            v_timeouts_valid := v_timeouts_valid
                                AND extract(epoch FROM btrim(v_text)::interval) >= 0;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
                       OR interval_field_overflow OR numeric_value_out_of_range THEN
            v_timeouts_valid := false;
        END;
    END LOOP;

    -- The lean statement, for valid arguments only (the general path below names what is wrong
    -- with others).
    -- ('NaN' sorts above 'Infinity' in PostgreSQL, so "< 'Infinity'" excludes both.)
    IF query_embedding IS NULL AND (filter IS NULL OR filter = '{}'::jsonb) AND v_timeouts_valid
       AND k BETWEEN 1 AND 1000 AND rrf_k >= 1
       AND keyword_weight > 0 AND keyword_weight < 'Infinity'
       AND vector_weight >= 0 AND vector_weight < 'Infinity'
       AND temperature > 0 AND temperature < 'Infinity'
       AND (vector_depth IS NULL OR vector_depth BETWEEN 1 AND 10000)
       AND (keyword_depth IS NULL OR keyword_depth BETWEEN 1 AND 10000)
       AND (postings_per_term IS NULL OR postings_per_term >= 1)
       -- pgrag.unrestricted() (sql/functions/access.sql), the cheap case first: a session of
       -- the owner of the SECURITY DEFINER entry point that called the engine (current_user
       -- here) reads what the search reads in any case. Calling unrestricted() itself would
       -- cost this call a twentieth of its time.
       AND coalesce(btrim(current_setting('pgrag.principals', true)), '') = ''
       AND (session_user = current_user OR pgrag.unrestricted_role())
    THEN
        IF v_found THEN
            v_text_config := v_config_name::regconfig;
            v_kdepth := greatest(coalesce(keyword_depth, k), k);  -- (40 read when convex: below)
            -- The general path's exact keyword statement, with the term look-up folded in; it
            -- yields nothing when the general path would prune (more than postings_per_term
            -- postings in all, for at most 62 terms), and the general path then answers.
            RETURN QUERY
            WITH terms AS MATERIALIZED (
                     SELECT x.lexeme, x.df, ln(1 + (st.n - x.df + 0.5) / (x.df + 0.5)) AS idf
                       FROM (SELECT sum(t.chunks)::float8 AS n
                               FROM pgrag.keyword_totals t
                              WHERE t.collection_id = v_collection_id) st,
                            unnest(to_tsvector(v_text_config, query_text)) u,
                            LATERAL (SELECT u.lexeme COLLATE "C" AS lexeme, sum(d.df)::float8 AS df
                                       FROM pgrag.keyword_df d
                                      WHERE d.collection_id = v_collection_id
                                        AND d.lexeme = u.lexeme COLLATE "C") x
                      WHERE x.df > 0),
                 w AS (
                     SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
                       FROM terms t
                       JOIN pgrag.keyword_postings p
                         ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
                      WHERE postings_per_term IS NULL
                         OR (SELECT sum(t2.df) <= postings_per_term OR count(*) > 62 FROM terms t2)
                      GROUP BY p.chunk_id
                      ORDER BY s DESC, p.chunk_id
                      LIMIT CASE WHEN v_convex THEN greatest(v_kdepth, 40) ELSE v_kdepth END),
                 top AS (
                     SELECT r.id, r.kr, r.s, CASE WHEN NOT v_convex THEN keyword_weight / (rrf_k + r.kr)
                                 WHEN v_zscore THEN coalesce((greatest(r.s, r.lo) - r.mu) / nullif(r.sd, 0), 0)
                                 WHEN r.hi > r.lo THEN (r.s - r.lo) / (r.hi - r.lo) ELSE 1 END AS fused,
                            c.document_id AS doc, c.section AS sect, c.content, d.source AS src,
                            d.title AS ttl, d.metadata AS meta
                       FROM (SELECT q.*, CASE WHEN count(*) FILTER (WHERE q.kr <= 40) OVER () < 40 THEN 0
                                                                ELSE min(q.s) FILTER (WHERE q.kr <= 40) OVER () END AS lo,
                                             max(q.s) OVER () AS hi,
                                             (sum(q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40 AS mu,
                                             sqrt(greatest((sum(q.s * q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40
                                                           - ((sum(q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40) ^ 2, 0)) AS sd
                                        FROM (SELECT w.id, w.s,
                                                     (row_number() OVER (ORDER BY w.s DESC, w.id))::int AS kr
                                                FROM w) q
                                        ORDER BY q.kr LIMIT k) r
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
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
    END IF;

    -- The lean vector statement: vector only, no filter, an unrestricted caller, valid
    -- arguments and a query vector the general path would accept (anything else goes on to
    -- the general path, which names what is wrong). Its steps are the general path's
    -- vector arm (the same ef_search, the same index scan and exact fallback, the same
    -- scores), without the general path's statement, whose plan covers every arm and
    -- filter and costs about half a millisecond to start (docs/benchmarks.md: the vector
    -- arm beside the recipe). The tests check that both paths agree.
    <<lean_vector>>
    BEGIN
        EXIT lean_vector WHEN NOT coalesce(
            query_text IS NULL AND query_embedding IS NOT NULL AND v_found AND v_model_id IS NOT NULL
            AND v_timeouts_valid
            AND (filter IS NULL OR filter = '{}'::jsonb)
            AND k BETWEEN 1 AND 1000 AND rrf_k >= 1
            AND vector_weight > 0 AND vector_weight < 'Infinity'
            AND keyword_weight >= 0 AND keyword_weight < 'Infinity'
            AND temperature > 0 AND temperature < 'Infinity'
            AND (vector_depth IS NULL OR vector_depth BETWEEN 1 AND 10000)
            AND (keyword_depth IS NULL OR keyword_depth BETWEEN 1 AND 10000)
            AND (postings_per_term IS NULL OR postings_per_term >= 1)
            AND coalesce(btrim(current_setting('pgrag.principals', true)), '') = ''
            AND (session_user = current_user OR pgrag.unrestricted_role()), false);
        SELECT m.dimension, m.distance, m.index_type INTO v_dimension, v_distance, v_vtype
          FROM pgrag.embedding_models m WHERE m.id = v_model_id;
        -- The general path's checks of the vector, as one static statement: its dimension, and
        -- a norm well inside the range the general path accepts (its squared length, summed
        -- in single precision, between 1e-30 and 1e30): a vector near either bound, where
        -- single precision's rounding decides, goes on to the general path. A halfvec index,
        -- whose range is narrower, is checked there too.
        SELECT count(*), sqrt(sum(x::float8 * x::float8)) INTO v_qdims, v_norm
          FROM unnest(query_embedding::real[]) x;
        EXIT lean_vector WHEN v_vtype <> 'vector' OR v_qdims <> v_dimension
                              OR NOT (v_norm >= 1.01e-15 AND v_norm <= 0.99e15);
        v_text := coalesce(nullif(btrim(current_setting('pgrag.ef_search', true)), ''),
                           nullif(btrim(v_ef_setting), ''));
        v_ef := CASE WHEN v_text ~ '^[0-9]{1,4}$' THEN v_text::integer END;
        EXIT lean_vector WHEN v_text IS NOT NULL AND v_ef IS NULL OR v_ef NOT BETWEEN 1 AND 1000;
        SELECT n.nspname INTO v_schema
          FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
         WHERE e.extname = 'vector';
        v_vcast := format('%I.%I(%s)', v_schema, v_vtype, v_dimension);
        v_vdepth := greatest(coalesce(vector_depth, greatest(4 * k, 40)), k);
        PERFORM set_config('hnsw.ef_search',
                           coalesce(v_ef, least(greatest(2 * v_vdepth, 200), 1000))::text, true);
        -- The collection's own partition of the vectors, and its own HNSW graph (the
        -- collection id is a constant to the planner: it reads that partition alone).
        FOREACH v_text IN ARRAY ARRAY['', ' + 0'] LOOP
            EXECUTE format(
                'SELECT array_agg(h.id ORDER BY h.dist, h.id), array_agg(h.dist ORDER BY h.dist, h.id)
                   FROM (SELECT ce.chunk_id AS id,
                                (ce.embedding::%2$s OPERATOR(%1$I.%3$s) $2::%2$s)::float8 AS dist
                           FROM pgrag.chunk_embeddings ce
                          WHERE ce.collection_id = $1 AND ce.model_id = %4$s
                          ORDER BY (ce.embedding::%2$s OPERATOR(%1$I.%3$s) $2::%2$s)%5$s
                          LIMIT $3) h',
                v_schema, v_vcast,
                CASE v_distance WHEN 'cosine' THEN '<=>' WHEN 'l2' THEN '<->' ELSE '<#>' END,
                v_model_id, v_text)
              INTO v_vec_ids, v_vec_dists USING v_collection_id, query_embedding, v_vdepth;
            EXIT WHEN coalesce(cardinality(v_vec_ids), 0) >= v_vdepth;
        END LOOP;
        -- (the general statement's vector arm and fusion, for one arm: the same expressions)
        RETURN QUERY
        WITH v AS (SELECT x.id, x.dist, x.r::int AS r,
                          CASE WHEN v_zscore
                               THEN coalesce((avg(x.dist) FILTER (WHERE x.r <= 40) OVER ()
                                              - least(x.dist, max(x.dist) FILTER (WHERE x.r <= 40) OVER ()))
                                             / nullif(stddev_pop(x.dist) FILTER (WHERE x.r <= 40) OVER (), 0), 0)
                               WHEN max(x.dist) FILTER (WHERE x.r <= 40) OVER () > min(x.dist) OVER ()
                               THEN greatest(max(x.dist) FILTER (WHERE x.r <= 40) OVER () - x.dist, 0)
                                    / (max(x.dist) FILTER (WHERE x.r <= 40) OVER () - min(x.dist) OVER ())
                               ELSE 1 END AS n
                     FROM unnest(v_vec_ids, v_vec_dists) WITH ORDINALITY AS x(id, dist, r)),
             f AS (SELECT v.id, v.r, v.dist,
                          CASE WHEN v_convex THEN (vector_weight * v.n + 0) / vector_weight
                               ELSE vector_weight / (rrf_k + v.r) + 0 END AS fused
                     FROM v),
             top AS (SELECT f.*, c.document_id AS doc, c.section AS sect, c.content,
                            d.source AS src, d.title AS ttl, d.metadata AS meta
                       FROM (SELECT * FROM f ORDER BY f.fused DESC, f.r, f.id) f
                       JOIN pgrag.chunks c ON c.id = f.id
                       JOIN pgrag.documents d ON d.id = c.document_id
                      WHERE c.collection_id = v_collection_id
                      ORDER BY f.fused DESC, f.r, f.id
                      LIMIT k),
             z AS (SELECT top.*, exp(greatest((top.fused - max(top.fused) OVER ()) / temperature, -700)) AS e
                     FROM top)
        SELECT (row_number() OVER (ORDER BY z.fused DESC, z.r, z.id))::int,
               z.fused, z.id, z.doc, z.src, z.ttl, z.sect, z.content, z.r, NULL::integer, z.dist,
               NULL::float8, z.meta, z.e / sum(z.e) OVER ()
          FROM z
         ORDER BY z.fused DESC, z.r, z.id;
        RETURN;
    END lean_vector;

    -- The general path: both arms, visibility, filters and fusion.
    <<general>>
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
        IF vector_depth IS NOT NULL AND vector_depth NOT BETWEEN 1 AND 10000
           OR keyword_depth IS NOT NULL AND keyword_depth NOT BETWEEN 1 AND 10000 THEN
            RAISE EXCEPTION 'vector_depth and keyword_depth must be between 1 and 10000, got % and %',
                vector_depth, keyword_depth USING ERRCODE = '22023';
        END IF;
        IF postings_per_term IS NOT NULL AND postings_per_term < 1 THEN
            RAISE EXCEPTION 'postings_per_term must be at least 1 (or NULL for exact), got %',
                postings_per_term USING ERRCODE = '22023';
        END IF;
        -- Checked before anything is read: an unknown operator or a malformed date is an error
        -- naming the entry, never a silent "no results".
        -- (filter_check returns the filter compiled for filter_match: a small program, its
        -- $in lists as lookups.)
        v_match := CASE WHEN filter IS NULL OR filter = '{}'::jsonb THEN '{}'::jsonb
                        ELSE pgrag.filter_check(filter) END;
        -- The plain entries: jsonb containment, answered by the GIN index on documents.metadata.
        SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}') INTO v_contain
          FROM jsonb_each(CASE WHEN jsonb_typeof(filter) = 'object' THEN filter END) e
         WHERE left(e.key, 1) <> '$'
           AND NOT (jsonb_typeof(e.value) = 'object'
                    AND EXISTS (SELECT 1 FROM jsonb_object_keys(e.value) k WHERE left(k, 1) = '$'));

        SELECT c.id, c.text_config, coalesce(v_model_id, c.model_id), c.settings
          INTO v_collection_id, v_config_name, v_model_id, v_settings
          FROM pgrag.collections c WHERE c.name = collection;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'collection % does not exist', quote_literal(collection)
                USING ERRCODE = '42704',
                      HINT = 'SELECT name FROM pgrag.collections lists the collections.';
        END IF;
        v_text_config := v_config_name::regconfig;
        v_filtered := filter IS NOT NULL AND filter <> '{}'::jsonb;
        v_ops := v_filtered AND filter <> v_contain;  -- more than containment: filter_match
        BEGIN
            -- The time limit, which every row tested against the filter checks (and every
            -- chunk the keyword fallback reads): the
            -- collection's (settings ->> 'search_timeout', which readers cannot change; 30 s
            -- when unset; 0: none), lowered by the session's pgrag.search_timeout if that is
            -- smaller (0 or unset: the collection's applies). Each is ms or a duration.
            v_timeout := 'Infinity';
            FOREACH v_text IN ARRAY ARRAY[coalesce(nullif(btrim(v_settings ->> 'search_timeout'), ''), '30000'),
                                          nullif(btrim(current_setting('pgrag.search_timeout', true)), '')] LOOP
                CONTINUE WHEN v_text IS NULL;
                BEGIN
                    v_ms := CASE WHEN v_text ~ '^\d+(\.\d+)?$' THEN v_text::float8
                                 ELSE extract(epoch FROM v_text::interval) * 1000 END;
                EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow
                               OR interval_field_overflow OR numeric_value_out_of_range THEN
                    v_ms := -1;
                END;
                IF v_ms < 0 THEN
                    RAISE EXCEPTION 'search_timeout must be a duration such as 30s or 2min (or milliseconds; 0: none), got %',
                        quote_literal(v_text) USING ERRCODE = '22023',
                        HINT = 'It is set by pgrag.search_timeout, or by the collection''s settings ->> ''search_timeout''.';
                END IF;
                IF v_ms > 0 THEN
                    v_timeout := least(v_timeout, v_ms);
                END IF;
            END LOOP;
            v_timeout := CASE WHEN v_timeout = 'Infinity' THEN 0 ELSE v_timeout END;
            IF v_timeout > 0 THEN
                v_deadline := extract(epoch FROM clock_timestamp()) + v_timeout / 1000;
                -- the time check of the loops other than filter testing: an empty program
                -- (true for every row) carrying the deadline, run by filter_match
                v_tick := jsonb_build_object('$groups', '[[]]'::jsonb, '$sets', '{}'::jsonb,
                                             '$deadline', jsonb_build_array(v_deadline, v_timeout));
                IF v_ops THEN
                    v_match := v_match || jsonb_build_object('$deadline',
                                                             jsonb_build_array(v_deadline, v_timeout));
                END IF;
            END IF;
        END;
        -- Who is asking (the login role and pgrag.principals: sql/functions/access.sql); NULL
        -- is unrestricted. Every protected row this function reads is tested against it.
        -- (unrestricted first: it is the cheap test, and the common case for owners.)
        -- (pgrag.unrestricted() with the owner's shortcut first, as the lean statement has it)
        v_acls := CASE WHEN coalesce(btrim(current_setting('pgrag.principals', true)), '') = ''
                            AND (session_user = current_user OR pgrag.unrestricted_role())
                       THEN NULL ELSE pgrag.visible_acls() END;
        v_restricted := v_acls IS NOT NULL;

        IF query_embedding IS NOT NULL THEN
            IF v_model_id IS NULL THEN
                RAISE EXCEPTION 'collection % has no embedding model yet', quote_literal(collection)
                    USING ERRCODE = '22023', HINT = 'Ingest documents first, or pass a NULL query_embedding for keyword-only search.';
            END IF;
            SELECT m.dimension, m.distance, m.index_type INTO v_dimension, v_distance, v_vtype
              FROM pgrag.embedding_models m WHERE m.id = v_model_id;
            SELECT n.nspname INTO v_schema
              FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
             WHERE e.extname = 'vector';
            EXECUTE format('SELECT %1$I.vector_dims($1), %1$I.vector_norm($1),
                                   (SELECT max(abs(x)) FROM unnest($1::real[]) x)', v_schema)
              INTO v_qdims, v_norm, v_max USING query_embedding;
            -- Vectors are compared as the model's index stores them (vector or halfvec).
            v_vcast := format('%I.%I(%s)', v_schema, v_vtype, v_dimension);
            IF v_qdims <> v_dimension THEN
                RAISE EXCEPTION 'query_embedding has % dimensions but collection % uses a %-dimensional model',
                    v_qdims, quote_literal(collection), v_dimension
                    USING ERRCODE = '22000', HINT = 'Embed the query with the collection''s model (see pgrag.embedding_models).';
            END IF;
            -- A zero vector has no direction: every distance would be NaN, ranked by chunk id.
            IF NOT v_norm > 0 OR v_norm = 'Infinity' THEN
                RAISE EXCEPTION 'query_embedding has length (norm) %: a search vector must be nonzero and finite',
                    v_norm USING ERRCODE = '22023',
                    HINT = 'Check the embedder: it returned a vector of zeros.';
            END IF;
            IF v_vtype = 'halfvec' AND v_max > 65504 THEN
                RAISE EXCEPTION 'query_embedding has a value of magnitude %, beyond the 65504 this model''s halfvec index holds',
                    v_max USING ERRCODE = '22023';
            END IF;
            -- pgvector computes distances in single precision, on the type the index stores: a
            -- vector whose squared length under- or overflows there (every component 1e-23,
            -- or 1e38) gets NaN or constant distances although its double-precision norm is
            -- fine. Its own arithmetic decides: q <#> q is minus q's squared length as the
            -- distances see it, which must stay well inside float range.
            EXECUTE format('SELECT -($1::%1$s OPERATOR(%2$I.<#>) $1::%1$s)::float8', v_vcast, v_schema)
              INTO v_sq USING query_embedding;
            IF NOT (v_sq >= 1e-30 AND v_sq <= 1e30) THEN
                RAISE EXCEPTION 'query_embedding has length (norm) %, which the distances (single precision) cannot use: a search vector''s norm must be between 1e-15 and 1e15',
                    v_norm USING ERRCODE = '22023',
                    HINT = 'Normalise the vector (divide it by its norm), or check the embedder.';
            END IF;
        END IF;
        v_use_vector := query_embedding IS NOT NULL AND vector_weight > 0;
        v_use_keyword := query_text IS NOT NULL AND keyword_weight > 0;

        v_vdepth := greatest(coalesce(vector_depth, greatest(4 * k, 40)), k);
        -- Alone, the keyword arm needs only k candidates; fused, more (and pruning then works to
        -- the depth's floor, not k's).
        -- (Alone, under the convex fusion, at least 40: its scores are normalised with the
        -- statistics of its first 40, as in a hybrid search, so they do not depend on k.)
        v_kdepth := greatest(coalesce(keyword_depth,
                                      CASE WHEN v_use_vector THEN greatest(4 * k, 40)
                                           WHEN v_convex THEN greatest(k, 40) ELSE k END), k);

        IF v_filtered OR v_restricted THEN
            -- The chunks this call may return, counted up to a limit; below it both arms score
            -- exactly these. The limit is about where scoring every candidate costs what an HNSW
            -- scan that must step over the other rows does: sqrt(depth x table size), doubled.
            SELECT least(50000, greatest(2000,
                       2 * sqrt(greatest(v_vdepth, v_kdepth) * greatest(c.reltuples, 0)::float8)))::int
              INTO v_limit
              FROM pg_class c WHERE c.oid = 'pgrag.chunks'::regclass;
            IF NOT v_filtered THEN
                -- Exact for the caller: the statistics rows of what it may see.
                SELECT coalesce(sum(t.chunks), 0) INTO v_visible
                  FROM pgrag.keyword_totals t
                 WHERE t.collection_id = v_collection_id AND t.acl_id = ANY (v_acls);
            END IF;
            -- Planned per call (EXECUTE), with the filter's values known, so the planner can pick
            -- the GIN index on documents.metadata; the statement text is fixed.
            IF NOT v_filtered AND v_visible <= v_limit THEN
                EXECUTE 'SELECT array_agg(x.id ORDER BY x.id) FROM (
                             SELECT c.id FROM pgrag.chunks c
                              WHERE c.collection_id = $1 AND ($3 IS NULL OR c.acl_id = ANY ($3))
                              LIMIT $2) x'
                  INTO v_cand USING v_collection_id, v_limit + 1, v_acls;
            ELSIF v_filtered AND v_contain <> '{}'::jsonb THEN
                EXECUTE 'SELECT array_agg(x.id ORDER BY x.id) FROM (
                             SELECT c.id FROM pgrag.documents d
                               JOIN pgrag.chunks c ON c.document_id = d.id
                              WHERE d.collection_id = $1 AND d.metadata @> $3
                                AND ($4 IS NULL OR pgrag.filter_match(d.metadata, $4))
                                AND ($5 IS NULL OR d.acl_id = ANY ($5))
                              LIMIT $2) x'
                  INTO v_cand USING v_collection_id, v_limit + 1, v_contain,
                                    CASE WHEN v_ops THEN v_match END, v_acls;
            ELSIF v_filtered THEN
                EXECUTE 'SELECT array_agg(x.id ORDER BY x.id) FROM (
                             SELECT c.id FROM pgrag.documents d
                               JOIN pgrag.chunks c ON c.document_id = d.id
                              WHERE d.collection_id = $1 AND pgrag.filter_match(d.metadata, $3)
                                AND ($4 IS NULL OR d.acl_id = ANY ($4))
                              LIMIT $2) x'
                  INTO v_cand USING v_collection_id, v_limit + 1, v_match, v_acls;
            END IF;
            v_small := (NOT v_filtered AND v_visible <= v_limit OR v_filtered)
                       AND coalesce(cardinality(v_cand), 0) <= v_limit;
            IF NOT v_small THEN
                v_cand := NULL;
            ELSIF v_cand IS NULL THEN
                EXIT general;  -- the caller may see nothing that matches
            END IF;
        END IF;

        IF v_use_keyword THEN
            IF v_restricted THEN
                -- The query's terms that occur in the collection, with their idf: for a restricted
                -- caller from its own statistics rows only, acl_id being a key of the index, so
                -- that no other access list's rows are touched (not even the activity counters in
                -- pg_stat_* can tell whether a hidden chunk has a word); otherwise from all of them.
                SELECT array_agg(x.lexeme),
                       array_agg(x.df),
                       array_agg(ln(1 + (st.n - x.df + 0.5) / (x.df + 0.5))),
                       -- (the pruned path tracks terms in a 62-bit mask: a longer query reads all)
                       coalesce(NOT v_filtered AND NOT v_small AND sum(x.df) > postings_per_term
                                AND count(*) <= 62,
                                false)
                  INTO v_terms, v_dfs, v_idfs, v_pruned
                  FROM (SELECT sum(t.chunks)::float8 AS n
                          FROM pgrag.keyword_totals t
                         WHERE t.collection_id = v_collection_id
                           AND t.acl_id = ANY (v_acls)) st,
                       unnest(to_tsvector(v_text_config, query_text)) u,
                       -- One index descent per (term, access list) of the caller's, so that
                       -- no other list's entry is read (PostgreSQL 16 and older may apply
                       -- acl_id = ANY (...) as a filter over every list's entries for the term,
                       -- whose read counts then tell whether hidden chunks have the word).
                       LATERAL (SELECT u.lexeme COLLATE "C" AS lexeme, sum(d.df)::float8 AS df
                                  FROM unnest(v_acls) a(acl_id)
                                  CROSS JOIN LATERAL (
                                        SELECT e.df FROM pgrag.keyword_df e
                                         WHERE e.collection_id = v_collection_id
                                           AND e.lexeme = u.lexeme COLLATE "C"
                                           AND e.acl_id = a.acl_id
                                        OFFSET 0) d) x
                 WHERE x.df > 0;
            ELSE
                SELECT array_agg(x.lexeme),
                       array_agg(x.df),
                       array_agg(ln(1 + (st.n - x.df + 0.5) / (x.df + 0.5))),
                       -- (the pruned path tracks terms in a 62-bit mask: a longer query reads all)
                       coalesce(NOT v_filtered AND NOT v_small AND sum(x.df) > postings_per_term
                                AND count(*) <= 62,
                                false)
                  INTO v_terms, v_dfs, v_idfs, v_pruned
                  FROM (SELECT sum(t.chunks)::float8 AS n
                          FROM pgrag.keyword_totals t
                         WHERE t.collection_id = v_collection_id) st,
                       unnest(to_tsvector(v_text_config, query_text)) u,
                       LATERAL (SELECT u.lexeme COLLATE "C" AS lexeme, sum(d.df)::float8 AS df
                                  FROM pgrag.keyword_df d
                                 WHERE d.collection_id = v_collection_id
                                   AND d.lexeme = u.lexeme COLLATE "C") x
                 WHERE x.df > 0;
            END IF;
            -- A long query (more terms than pruning tracks) reads every posting of each term,
            -- a read its text could stretch: each posting read then checks the time limit.
            v_watch := v_deadline IS NOT NULL AND coalesce(cardinality(v_terms), 0) > 62;
            v_tick := v_tick || '{"$doing": "reading keyword postings"}';
            IF v_terms IS NULL THEN
                v_use_keyword := false;  -- only stop words, or no chunk has any of the words
            ELSIF v_small THEN
                -- Probes cost one index descent per (term, candidate); reading a term's list costs
                -- its length, which for a restricted caller includes postings it cannot see (so
                -- its own df undercounts): probe unless that is clearly the larger read.
                v_probe := cardinality(v_cand) * cardinality(v_terms)
                           <= greatest(50000, (SELECT sum(x) FROM unnest(v_dfs) x));
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
                                 AND (v_acls IS NULL OR q.acl_id = ANY (v_acls))
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
            EXIT general;  -- nothing to search with: only stop words, or every arm weighted 0
        END IF;

        IF v_use_vector THEN
            IF v_small THEN
                -- Few candidates: exact distances for exactly these (primary-key probes). The
                -- "+ 0" keeps the planner from walking the HNSW index to order them.
                EXECUTE format(
                    'SELECT array_agg(h.id ORDER BY h.dist, h.id), array_agg(h.dist ORDER BY h.dist, h.id)
                       FROM (SELECT ce.chunk_id AS id,
                                    (ce.embedding::%2$s OPERATOR(%1$I.%3$s) $1::%2$s)::float8 AS dist
                               FROM pgrag.chunk_embeddings ce
                              WHERE ce.collection_id = $4 AND ce.model_id = %4$s
                                AND ce.chunk_id = ANY ($2)
                              ORDER BY (ce.embedding::%2$s OPERATOR(%1$I.%3$s) $1::%2$s) + 0
                              LIMIT $3) h',
                    v_schema, v_vcast,
                    CASE v_distance WHEN 'cosine' THEN '<=>' WHEN 'l2' THEN '<->' ELSE '<#>' END,
                    v_model_id)
                  INTO v_vec_ids, v_vec_dists
                  USING query_embedding, v_cand, v_vdepth, v_collection_id;
            ELSE
                -- A search list twice the depth asked, at least 200 (at most pgvector's 1,000): on
                -- 200k clustered vectors, in a graph built by ensure_model_index, recall@10 is
                -- 0.969 at ef 100 and 0.996 at ef 200 (docs/benchmarks.md). The function's SET clause
                -- puts the caller's value back on exit.
                -- The speed/recall knob (docs/search.md#speed-and-recall): pgrag.ef_search (SET
                -- for a session, SET LOCAL for a transaction), else the collection's settings ->>
                -- 'ef_search', else the list above. pgvector's iterative scan still returns the
                -- depth asked when the list is shorter than it.
                v_text := coalesce(nullif(btrim(current_setting('pgrag.ef_search', true)), ''),
                                   nullif(btrim(v_settings ->> 'ef_search'), ''));
                v_ef := CASE WHEN v_text ~ '^[0-9]{1,4}$' THEN v_text::integer END;
                IF v_text IS NOT NULL AND v_ef IS NULL OR v_ef NOT BETWEEN 1 AND 1000 THEN
                    RAISE EXCEPTION '% must be a whole number between 1 and 1000, got %',
                        CASE WHEN nullif(btrim(current_setting('pgrag.ef_search', true)), '') IS NOT NULL
                             THEN 'pgrag.ef_search'
                             ELSE format('the ef_search setting of collection %s', quote_literal(collection)) END,
                        quote_literal(v_text) USING ERRCODE = '22023',
                        HINT = 'It is set by pgrag.ef_search (SET), or by the collection''s settings ->> ''ef_search''.';
                END IF;
                PERFORM set_config('hnsw.ef_search',
                                   coalesce(v_ef, least(greatest(2 * v_vdepth, 200), 1000))::text, true);
                -- The index scan, then, only when it came back short, an exact scan ordered by
                -- "distance + 0" (so that the planner cannot answer it from the HNSW index): two
                -- small statements, each planned per call, rather than one with both branches
                -- (which cost more to plan than the index scan of a small collection costs to
                -- run). The collection's own partition is read (its id a constant to the
                -- planner); %6$s joins chunks and documents only when a filter needs them.
                FOREACH v_text IN ARRAY ARRAY['', ' + 0'] LOOP
                    v_vector_sql := format(
                        'SELECT array_agg(h.id ORDER BY h.dist, h.id), array_agg(h.dist ORDER BY h.dist, h.id)
                           FROM (SELECT ce.chunk_id AS id,
                                        (ce.embedding::%2$s OPERATOR(%1$I.%3$s) $3::%2$s)::float8 AS dist
                                   FROM pgrag.chunk_embeddings ce%6$s
                                  WHERE ce.collection_id = $1 AND ce.model_id = %4$s%5$s
                                  ORDER BY (ce.embedding::%2$s OPERATOR(%1$I.%3$s) $3::%2$s)%7$s
                                  LIMIT $4) h',
                        v_schema, v_vcast,
                        CASE v_distance WHEN 'cosine' THEN '<=>' WHEN 'l2' THEN '<->' ELSE '<#>' END,
                        v_model_id,
                        CASE WHEN v_restricted THEN ' AND ce.acl_id = ANY ($6)' ELSE '' END
                        || CASE WHEN v_restricted AND v_filtered THEN ' AND d.acl_id = ANY ($6)' ELSE '' END
                        || CASE WHEN v_filtered THEN ' AND d.metadata @> $2' ELSE '' END
                        || CASE WHEN v_ops THEN ' AND pgrag.filter_match(d.metadata, $5)' ELSE '' END,
                        CASE WHEN v_filtered THEN ' JOIN pgrag.chunks c ON c.id = ce.chunk_id' ELSE '' END
                        || CASE WHEN v_filtered THEN ' JOIN pgrag.documents d ON d.id = c.document_id' ELSE '' END,
                        v_text);
                    EXECUTE v_vector_sql INTO v_vec_ids, v_vec_dists
                      USING v_collection_id, v_contain, query_embedding, v_vdepth, v_match, v_acls;
                    EXIT WHEN coalesce(cardinality(v_vec_ids), 0) >= v_vdepth;
                END LOOP;
            END IF;
        END IF;

        IF NOT v_use_vector AND NOT v_pruned AND NOT v_filtered AND NOT v_small THEN
            -- The commonest call, keyword only, in the smallest statement: it runs in a third of a
            -- millisecond, so executor start-up matters (the tests check that it
            -- agrees with the general statement below).
            RETURN QUERY
            WITH w AS (
                     SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
                       FROM unnest(v_terms, v_idfs) AS t(lexeme, idf)
                       JOIN pgrag.keyword_postings p
                         ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
                      WHERE (v_acls IS NULL OR p.acl_id = ANY (v_acls))
                        AND (NOT v_watch OR pgrag.filter_match(jsonb_build_object('c', p.chunk_id), v_tick))
                      GROUP BY p.chunk_id
                      ORDER BY s DESC, p.chunk_id
                      LIMIT CASE WHEN v_convex THEN greatest(v_kdepth, 40) ELSE v_kdepth END),
                 top AS (
                     SELECT r.id, r.kr, r.s, CASE WHEN NOT v_convex THEN keyword_weight / (rrf_k + r.kr)
                                 WHEN v_zscore THEN coalesce((greatest(r.s, r.lo) - r.mu) / nullif(r.sd, 0), 0)
                                 WHEN r.hi > r.lo THEN (r.s - r.lo) / (r.hi - r.lo) ELSE 1 END AS fused,
                            c.document_id AS doc, c.section AS sect, c.content, d.source AS src,
                            d.title AS ttl, d.metadata AS meta
                       FROM (SELECT q.*, CASE WHEN count(*) FILTER (WHERE q.kr <= 40) OVER () < 40 THEN 0
                                                                ELSE min(q.s) FILTER (WHERE q.kr <= 40) OVER () END AS lo,
                                             max(q.s) OVER () AS hi,
                                             (sum(q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40 AS mu,
                                             sqrt(greatest((sum(q.s * q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40
                                                           - ((sum(q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40) ^ 2, 0)) AS sd
                                        FROM (SELECT w.id, w.s,
                                                     (row_number() OVER (ORDER BY w.s DESC, w.id))::int AS kr
                                                FROM w) q
                                        ORDER BY q.kr LIMIT k) r
                       JOIN pgrag.chunks c ON c.id = r.id
                       JOIN pgrag.documents d ON d.id = c.document_id
                      WHERE v_acls IS NULL OR c.acl_id = ANY (v_acls)  -- (again, for every row shown)
                      ORDER BY r.kr
                      LIMIT k),
                 z AS (SELECT top.*, exp(greatest((top.fused - max(top.fused) OVER ()) / temperature, -700)) AS e
                         FROM top)
            SELECT (row_number() OVER (ORDER BY z.kr))::int, z.fused, z.id, z.doc, z.src, z.ttl,
                   z.sect, z.content, NULL::integer, z.kr, NULL::float8, z.s, z.meta,
                   z.e / sum(z.e) OVER ()
              FROM z
             ORDER BY z.kr;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            EXIT general;
        END IF;

        -- (the weights of the arms that searched: the convex score stays within [0, 1])
        v_wsum := CASE WHEN v_use_vector THEN vector_weight ELSE 0 END
                  + CASE WHEN v_use_keyword THEN keyword_weight ELSE 0 END;
        RETURN QUERY
        WITH terms AS (
                 SELECT t.lexeme, t.idf FROM unnest(v_terms, v_idfs) AS t(lexeme, idf)),
             -- Keyword arm, one of four ways (the others are switched off by their WHERE):
             -- every posting of every term,
             kw_exact AS (
                 SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
                   FROM terms t
                   JOIN pgrag.keyword_postings p
                     ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
                  WHERE v_use_keyword AND NOT v_pruned AND NOT v_filtered AND NOT v_small
                    AND (NOT v_watch OR pgrag.filter_match(jsonb_build_object('c', p.chunk_id), v_tick))
                    AND (v_acls IS NULL OR p.acl_id = ANY (v_acls))
                  GROUP BY p.chunk_id
                  ORDER BY s DESC, p.chunk_id
                  LIMIT v_kdepth),
             -- the postings of few candidates: each (term, candidate) probed in the primary key
             -- when that is the smaller read, else each term's list read whole and matched
             -- against the candidates by hash,
             kw_small AS (
                 SELECT x.id, sum(x.s) AS s
                   FROM (SELECT c.id, t.idf * q.impact AS s
                           FROM unnest(v_cand) AS c(id)
                          CROSS JOIN terms t
                          CROSS JOIN LATERAL (
                              SELECT q.impact FROM pgrag.keyword_postings q
                               WHERE q.collection_id = v_collection_id AND q.lexeme = t.lexeme
                                 AND q.chunk_id = c.id
                              OFFSET 0) q  -- a probe per pair: not to be planned as a join
                          WHERE v_use_keyword AND v_small AND v_probe
                            AND (NOT v_watch OR pgrag.filter_match(jsonb_build_object('c', c.id), v_tick))
                         UNION ALL
                         SELECT p.chunk_id, t.idf * p.impact
                           FROM terms t
                           JOIN pgrag.keyword_postings p
                             ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
                          WHERE v_use_keyword AND v_small AND NOT v_probe
                            AND (NOT v_watch OR pgrag.filter_match(jsonb_build_object('c', p.chunk_id), v_tick))
                            AND (v_acls IS NULL OR p.acl_id = ANY (v_acls))
                            AND p.chunk_id IN (SELECT unnest(v_cand))) x
                  GROUP BY x.id
                  ORDER BY s DESC, x.id
                  LIMIT v_kdepth),
             -- every posting of the chunks the filter admits (when they are many),
             kw_filtered AS (
                 SELECT p.chunk_id AS id, sum(t.idf * p.impact) AS s
                   FROM terms t
                   JOIN pgrag.keyword_postings p
                     ON p.collection_id = v_collection_id AND p.lexeme = t.lexeme
                   JOIN pgrag.chunks c ON c.id = p.chunk_id
                   JOIN pgrag.documents d ON d.id = c.document_id
                  WHERE v_use_keyword AND v_filtered AND NOT v_small AND d.metadata @> v_contain
                    AND (NOT v_watch OR pgrag.filter_match(jsonb_build_object('c', p.chunk_id), v_tick))
                    AND (v_acls IS NULL OR p.acl_id = ANY (v_acls))
                    AND (v_acls IS NULL OR d.acl_id = ANY (v_acls))
                    AND (NOT v_ops OR pgrag.filter_match(d.metadata, v_match))
                  GROUP BY p.chunk_id
                  ORDER BY s DESC, p.chunk_id
                  LIMIT v_kdepth),
             -- or, pruned: the best candidates, completed above.
             kw_pruned AS (
                 SELECT x.id, x.s FROM unnest(v_candidates, v_candidate_scores) AS x(id, s)
                  WHERE v_use_keyword AND v_pruned),
             kw AS (SELECT * FROM kw_exact
                    UNION ALL SELECT * FROM kw_small
                    UNION ALL SELECT * FROM kw_filtered
                    UNION ALL SELECT * FROM kw_pruned),
             -- Each arm's scores normalised with the statistics of its first 40 candidates (the
             -- depth at k <= 10) and floored at its 40th's, which a chunk missing from the list
             -- also scores: a deeper list (a larger k) then only adds candidates, and never
             -- moves the ones a shorter list ranked.
             -- (The keyword arm's 40 are padded with BM25 0, what every chunk without a query
             -- word scores: a single match stands far out, and a missing chunk scores 0's.)
             w AS (SELECT q.id, q.s, q.r,
                          CASE WHEN v_zscore
                               THEN coalesce((greatest(q.s, q.lo) - q.mu) / nullif(q.sd, 0), 0)
                               WHEN q.hi > q.lo THEN greatest(q.s - q.lo, 0) / (q.hi - q.lo)
                               ELSE 1 END AS n,
                          CASE WHEN v_zscore THEN coalesce((q.lo - q.mu) / nullif(q.sd, 0), 0)
                               ELSE 0 END AS fl
                     FROM (SELECT p.*,
                                  CASE WHEN count(*) FILTER (WHERE p.r <= 40) OVER () < 40 THEN 0
                                       ELSE min(p.s) FILTER (WHERE p.r <= 40) OVER () END AS lo,
                                  max(p.s) OVER () AS hi,
                                  (sum(p.s) FILTER (WHERE p.r <= 40) OVER ()) / 40 AS mu,
                                  sqrt(greatest((sum(p.s * p.s) FILTER (WHERE p.r <= 40) OVER ()) / 40
                                                - ((sum(p.s) FILTER (WHERE p.r <= 40) OVER ()) / 40) ^ 2, 0)) AS sd
                             FROM (SELECT kw.id, kw.s,
                                          (row_number() OVER (ORDER BY kw.s DESC, kw.id))::int AS r
                                     FROM kw) p) q),
             v AS (SELECT x.id, x.dist, x.r::int AS r,
                          CASE WHEN v_zscore
                               THEN coalesce((avg(x.dist) FILTER (WHERE x.r <= 40) OVER ()
                                              - least(x.dist, max(x.dist) FILTER (WHERE x.r <= 40) OVER ()))
                                             / nullif(stddev_pop(x.dist) FILTER (WHERE x.r <= 40) OVER (), 0), 0)
                               WHEN max(x.dist) FILTER (WHERE x.r <= 40) OVER () > min(x.dist) OVER ()
                               THEN greatest(max(x.dist) FILTER (WHERE x.r <= 40) OVER () - x.dist, 0)
                                    / (max(x.dist) FILTER (WHERE x.r <= 40) OVER () - min(x.dist) OVER ())
                               ELSE 1 END AS n
                     FROM unnest(v_vec_ids, v_vec_dists) WITH ORDINALITY AS x(id, dist, r)),
             -- RRF: weight / (rrf_k + rank) summed; convex: the weighted mean of each arm's
             -- normalised score (a chunk not in a list scores its floor: min-max 0, z-score the
             -- list's lowest).
             f AS (SELECT coalesce(v.id, w.id) AS id, v.r AS vr, w.r AS kr, v.dist, w.s,
                          CASE WHEN v_convex
                               THEN (coalesce(vector_weight * coalesce(v.n, CASE WHEN v_zscore THEN (SELECT min(v2.n) FROM v v2) ELSE 0 END), 0)
                                     + coalesce(keyword_weight * coalesce(w.n, (SELECT max(w2.fl) FROM w w2)), 0))
                                    / v_wsum
                               ELSE coalesce(vector_weight / (rrf_k + v.r), 0)
                                    + coalesce(keyword_weight / (rrf_k + w.r), 0) END AS fused,
                          least(v.r, w.r) AS best
                     FROM v FULL JOIN w ON w.id = v.id),
             -- Chunks are read in fused order, only until k of them are visible to the caller.
             top AS (SELECT f.id, f.vr, f.kr, f.dist, f.s, f.fused, f.best, c.document_id AS doc,
                            c.section AS sect, c.content, d.source AS src, d.title AS ttl,
                            d.metadata AS meta
                       FROM (SELECT * FROM f ORDER BY f.fused DESC, f.best, f.id) f
                       JOIN pgrag.chunks c ON c.id = f.id
                       JOIN pgrag.documents d ON d.id = c.document_id
                      WHERE (v_acls IS NULL OR c.acl_id = ANY (v_acls))  -- (again, for every row shown)
                        -- (and of this collection: the vector arm reads a model's vectors without
                        -- the collection's chunks when no other collection had the model)
                        AND c.collection_id = v_collection_id
                      ORDER BY f.fused DESC, f.best, f.id
                      LIMIT k),
             z AS (SELECT top.*, exp(greatest((top.fused - max(top.fused) OVER ()) / temperature, -700)) AS e
                     FROM top)
        SELECT (row_number() OVER (ORDER BY z.fused DESC, z.best, z.id))::int,
               z.fused, z.id, z.doc, z.src, z.ttl, z.sect, z.content, z.vr, z.kr, z.dist, z.s,
               z.meta, z.e / sum(z.e) OVER ()
          FROM z
         ORDER BY z.fused DESC, z.best, z.id;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
    END general;

    IF v_rows > 0 OR query_text IS NULL OR coalesce(fallback_chunks, 0) = 0
       OR keyword_weight = 0 THEN
        RETURN;
    END IF;
    v_tick := v_tick || '{"$doing": "reading chunks for the keyword fallback"}';
    -- The fallback. The general path has checked every argument and the collection, and set
    -- v_collection_id, v_acls (who is asking), v_contain and v_ops (the filter).
    RETURN QUERY
    WITH words AS MATERIALIZED (
             -- The query's words as the 'simple' configuration reads them (lower-cased, not
             -- stemmed, stop words kept): its first 100, a bounded scan.
             SELECT row_number() OVER (ORDER BY u.lexeme)::int AS i, u.lexeme
               FROM (SELECT u.lexeme FROM unnest(to_tsvector('simple'::regconfig, query_text)) u
                      ORDER BY u.lexeme LIMIT 100) u),
         -- The chunks read: the first fallback_chunks the caller may see and the filter admits,
         -- each with the numbers of the words its section, context line or text contains, as
         -- whole words
         -- ('simple' lexemes of the chunk: one parse of the chunk, whatever the words, never
         -- a pattern per word). Each chunk read checks the search's time limit.
         sample AS MATERIALIZED (
             SELECT c.id,
                    ARRAY(SELECT w.i FROM words w JOIN unnest(l.lexemes) x(lexeme) ON x.lexeme = w.lexeme)
                        AS found
               FROM pgrag.chunks c
               JOIN pgrag.documents d ON d.id = c.document_id
              CROSS JOIN LATERAL (
                    SELECT tsvector_to_array(to_tsvector('simple'::regconfig,
                               coalesce(c.section, '') || ' ' || coalesce(c.context, '') || ' '
                               || c.content)) AS lexemes
                    OFFSET 0) l  -- (parsed once per chunk, not once per word)
              WHERE c.collection_id = v_collection_id
                AND (v_acls IS NULL OR c.acl_id = ANY (v_acls) AND d.acl_id = ANY (v_acls))
                AND (v_contain = '{}'::jsonb OR d.metadata @> v_contain)
                AND (NOT v_ops OR pgrag.filter_match(d.metadata, v_match))
                AND (v_deadline IS NULL OR pgrag.filter_match(d.metadata, v_tick))
              LIMIT fallback_chunks),
         idf AS MATERIALIZED (
             SELECT w.i, ln(1 + (n.n - x.df + 0.5) / (x.df + 0.5)) AS idf
               FROM words w
              CROSS JOIN (SELECT count(*)::float8 AS n FROM sample) n
              CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM sample s
                                   WHERE w.i = ANY (s.found)) x
              WHERE x.df > 0),
         w AS (
             SELECT s.id, sum(i.idf) AS s
               FROM sample s JOIN idf i ON i.i = ANY (s.found)
              GROUP BY s.id
              ORDER BY 2 DESC, s.id
              LIMIT CASE WHEN v_convex THEN greatest(k, 40) ELSE k END),
         top AS (
             SELECT r.id, r.kr, r.s, CASE WHEN NOT v_convex THEN keyword_weight / (rrf_k + r.kr)
                                 WHEN v_zscore THEN coalesce((greatest(r.s, r.lo) - r.mu) / nullif(r.sd, 0), 0)
                                 WHEN r.hi > r.lo THEN (r.s - r.lo) / (r.hi - r.lo) ELSE 1 END AS fused,
                    c.document_id AS doc, c.section AS sect, c.content, d.source AS src,
                    d.title AS ttl, d.metadata AS meta
               FROM (SELECT q.*, CASE WHEN count(*) FILTER (WHERE q.kr <= 40) OVER () < 40 THEN 0
                                                        ELSE min(q.s) FILTER (WHERE q.kr <= 40) OVER () END AS lo,
                                     max(q.s) OVER () AS hi,
                                     (sum(q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40 AS mu,
                                     sqrt(greatest((sum(q.s * q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40
                                                   - ((sum(q.s) FILTER (WHERE q.kr <= 40) OVER ()) / 40) ^ 2, 0)) AS sd
                                FROM (SELECT w.id, w.s,
                                             (row_number() OVER (ORDER BY w.s DESC, w.id))::int AS kr
                                        FROM w) q
                                ORDER BY q.kr LIMIT k) r
               JOIN pgrag.chunks c ON c.id = r.id
               JOIN pgrag.documents d ON d.id = c.document_id
              ORDER BY r.kr),
         z AS (SELECT top.*, exp(greatest((top.fused - max(top.fused) OVER ()) / temperature, -700)) AS e
                 FROM top)
    SELECT (row_number() OVER (ORDER BY z.kr))::int, z.fused, z.id, z.doc, z.src, z.ttl,
           z.sect, z.content, NULL::integer, z.kr, NULL::float8, z.s, z.meta,
           z.e / sum(z.e) OVER ()
      FROM z
     ORDER BY z.kr;
END
$fn$;

COMMENT ON FUNCTION pgrag.search_engine(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer, integer, text) IS
    'The hybrid search engine behind search_v5 (and the deprecated search_v3, search_v4).';

-- The public entry point. Its defaults are the search's defaults.
CREATE OR REPLACE FUNCTION pgrag.search_v5(
    collection        text,
    query_text        text,
    query_embedding   vector DEFAULT NULL,
    k                 integer DEFAULT 10,
    filter            jsonb DEFAULT '{}',
    rrf_k             integer DEFAULT NULL,
    vector_depth      integer DEFAULT NULL,
    keyword_depth     integer DEFAULT NULL,
    vector_weight     double precision DEFAULT NULL,
    keyword_weight    double precision DEFAULT NULL,
    temperature       double precision DEFAULT NULL,
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
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM pgrag.search_engine(collection, query_text, query_embedding, k, filter, rrf_k,
                                      vector_depth, keyword_depth, vector_weight,
                                      keyword_weight, temperature, postings_per_term,
                                      fallback_chunks, model)
$fn$;

COMMENT ON FUNCTION pgrag.search_v5(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer, integer, text) IS
    'Hybrid search (BM25 keyword arm + HNSW vector arm, fused by their normalised scores or RRF, with p(z|x)) over one collection as the session may see it; model names the query vector''s embedding model (NULL: the active one).';

-- Deprecated (an earlier contract, kept for one more release): search_v5 without `model`.
CREATE OR REPLACE FUNCTION pgrag.search_v4(
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
    fallback_chunks   integer DEFAULT 5000
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
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM pgrag.search_engine(collection, query_text, query_embedding, k, filter, rrf_k,
                                      vector_depth, keyword_depth, vector_weight,
                                      keyword_weight, temperature, postings_per_term,
                                      fallback_chunks, NULL)
$fn$;

COMMENT ON FUNCTION pgrag.search_v4(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer, integer) IS
    'Deprecated: search_v5 without its model argument; dropped in a later release.';

-- Deprecated (an earlier contract, kept for one more release): search_v5 without `model` and
-- without the keyword fallback.
CREATE OR REPLACE FUNCTION pgrag.search_v3(
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
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT * FROM pgrag.search_engine(collection, query_text, query_embedding, k, filter, rrf_k,
                                      vector_depth, keyword_depth, vector_weight,
                                      keyword_weight, temperature, postings_per_term, 0, NULL)
$fn$;

COMMENT ON FUNCTION pgrag.search_v3(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer) IS
    'Deprecated: search_v5 without its model argument and keyword fallback; dropped in a later release.';
