-- pgrag.search_v4: search_v3 plus a keyword arm that always answers, and a leaner statement for
-- the commonest call.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256): once shipped this function is never
-- edited in place; a changed contract is added beside it as search_v5.
--
--   SELECT * FROM pgrag.search_v4('handbook', 'refund window');               -- keyword only
--   SELECT * FROM pgrag.search_v4('handbook', 'refund window', $1::vector);   -- hybrid
--
-- Arguments, columns, ranking and visibility are search_v3's (sql/functions/search_v3.sql), and
-- every call that is not the case below is answered by search_v3 itself. What is new:
-- 1. Fallback (fallback_chunks): when a search finds nothing although it has query text, because
--    every word of it is a stop word ("Who was he?") or no chunk the caller may see has any of
--    its words ("What is PPP?" in a corpus without "PPP"), the keyword arm matches the words as
--    typed, stop words included (whole words, case-insensitive, not stemmed), in at most
--    fallback_chunks of the collection's chunks the caller may see (and the filter admits).
--    A chunk scores the summed idf (BM25's, over those chunks) of the query words it contains.
--    It answers the rare query that would otherwise get nothing; its cost is bounded by the
--    scan (about 10 ms per 1,000 chunks of SQuAD's length: 20-30 ms on its 2,526), and of a large
--    collection only that sample is read, so an answer found there is a best effort.
--    NULL or 0 turns it off.
-- 2. Keyword only, no filter, unrestricted session (the owner, a writer, an ingest or eval
--    process): one statement looks the terms up and scores them, without the access and filter
--    branches: search_v2's speed again, about 10% more queries/s than search_v3 on SQuAD
--    (docs/benchmarks.md). When the terms need pruning, or nothing matched, search_v3 answers.
CREATE FUNCTION pgrag.search_v4(
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
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- As search_v3: each statement is planned once per session.
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_collection_id integer;
    v_text_config   regconfig;
    v_kdepth        integer;
    v_acls          integer[];
    v_contain       jsonb;
    v_ops           boolean;
BEGIN
    IF query_text IS NULL AND query_embedding IS NULL THEN
        RAISE EXCEPTION 'search_v4 needs query_text, query_embedding or both' USING ERRCODE = '22023';
    END IF;
    IF fallback_chunks IS NOT NULL AND fallback_chunks NOT BETWEEN 0 AND 1000000 THEN
        RAISE EXCEPTION 'fallback_chunks must be between 0 and 1000000 (0 or NULL: no fallback), got %',
            fallback_chunks USING ERRCODE = '22023';
    END IF;

    -- The lean statement, for valid arguments only (search_v3 names what is wrong with others).
    -- ('NaN' sorts above 'Infinity' in PostgreSQL, so "< 'Infinity'" excludes both.)
    IF query_embedding IS NULL AND (filter IS NULL OR filter = '{}'::jsonb)
       AND k BETWEEN 1 AND 1000 AND rrf_k >= 1
       AND keyword_weight > 0 AND keyword_weight < 'Infinity'
       AND vector_weight >= 0 AND vector_weight < 'Infinity'
       AND temperature > 0 AND temperature < 'Infinity'
       AND (vector_depth IS NULL OR vector_depth BETWEEN 1 AND 10000)
       AND (keyword_depth IS NULL OR keyword_depth BETWEEN 1 AND 10000)
       AND (postings_per_term IS NULL OR postings_per_term >= 1)
       -- pgrag.unrestricted_v1() (sql/functions/access_v1.sql), the cheap case first: a session
       -- of this function's owner (current_user here) reads what the function reads in any
       -- case. Calling unrestricted_v1 itself would cost this call a twentieth of its time.
       AND coalesce(btrim(current_setting('pgrag.principals', true)), '') = ''
       AND (session_user = current_user OR pgrag.unrestricted_role_v1())
    THEN
        SELECT c.id, c.text_config::regconfig INTO v_collection_id, v_text_config
          FROM pgrag.collections c WHERE c.name = collection;
        IF FOUND THEN
            v_kdepth := greatest(coalesce(keyword_depth, k), k);
            -- search_v3's exact keyword statement, with the term look-up folded in; it yields
            -- nothing when search_v3 would prune (more than postings_per_term postings in all,
            -- for at most 62 terms), and search_v3 then answers.
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
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
    END IF;

    RETURN QUERY
    SELECT * FROM pgrag.search_v3(collection, query_text, query_embedding, k, filter, rrf_k,
                                  vector_depth, keyword_depth, vector_weight, keyword_weight,
                                  temperature, postings_per_term);
    IF FOUND OR query_text IS NULL OR coalesce(fallback_chunks, 0) = 0 OR keyword_weight = 0 THEN
        RETURN;
    END IF;

    -- The fallback. search_v3 has checked every argument and that the collection exists.
    SELECT c.id INTO v_collection_id FROM pgrag.collections c WHERE c.name = collection;
    v_acls := CASE WHEN pgrag.unrestricted_v1() THEN NULL ELSE pgrag.visible_acls_v1() END;
    v_contain := CASE WHEN filter IS NULL OR filter = '{}'::jsonb THEN '{}'::jsonb
                      ELSE pgrag.filter_check_v1(filter) END;
    v_ops := filter IS NOT NULL AND filter <> '{}'::jsonb AND filter <> v_contain;
    RETURN QUERY
    WITH words AS MATERIALIZED (
             -- Each word as a case-insensitive whole-word pattern, every character that is not
             -- a letter, digit or underscore escaped: the query's words are data, never regex.
             SELECT row_number() OVER (ORDER BY u.lexeme)::int AS i,
                    '\m' || regexp_replace(u.lexeme, '([^[:alnum:]_])', '\\\1', 'g') || '\M'
                        AS pattern
               FROM unnest(to_tsvector('simple'::regconfig, query_text)) u),
         -- The chunks read: the first fallback_chunks the caller may see and the filter admits,
         -- each with the numbers of the words its section or text contains.
         sample AS MATERIALIZED (
             SELECT c.id,
                    ARRAY(SELECT w.i FROM words w
                           WHERE (coalesce(c.section, '') || ' ' || c.content) ~* w.pattern) AS found
               FROM pgrag.chunks c
               JOIN pgrag.documents d ON d.id = c.document_id
              WHERE c.collection_id = v_collection_id
                AND (v_acls IS NULL OR c.acl_id = ANY (v_acls) AND d.acl_id = ANY (v_acls))
                AND (v_contain = '{}'::jsonb OR d.metadata @> v_contain)
                AND (NOT v_ops OR pgrag.filter_match_v1(d.metadata, filter))
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
              LIMIT k),
         top AS (
             SELECT r.id, r.kr, r.s, keyword_weight / (rrf_k + r.kr) AS fused,
                    c.document_id AS doc, c.section AS sect, c.content, d.source AS src,
                    d.title AS ttl, d.metadata AS meta
               FROM (SELECT w.id, w.s, (row_number() OVER (ORDER BY w.s DESC, w.id))::int AS kr
                       FROM w) r
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

COMMENT ON FUNCTION pgrag.search_v4(text, text, vector, integer, jsonb, integer, integer, integer, double precision, double precision, double precision, integer, integer) IS
    'Hybrid search as search_v3, with a keyword fallback (stop words and unindexed words, over at most fallback_chunks chunks) when nothing else matches.';

-- The SECURITY DEFINER entry points granted to pgrag's roles: grant_roles_v1's, and search_v4.
CREATE FUNCTION pgrag.grant_roles_v2() RETURNS text[]
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_done text[];
    v_role text;
    v_fn   regprocedure;
BEGIN
    v_done := pgrag.grant_roles_v1();
    -- By signature from the catalog (pgvector's schema need not be on this search_path).
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = 'search_v4'
    LOOP
        FOREACH v_role IN ARRAY v_done LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_fn, v_role);
        END LOOP;
    END LOOP;
    RETURN v_done;
END
$fn$;

COMMENT ON FUNCTION pgrag.grant_roles_v2() IS
    'Grants pgrag_reader, pgrag_app and pgrag_writer (those that exist) what they need, search_v4 included; returns the roles granted.';
