-- The BM25 keyword index: kept in step with pgrag.chunks by a trigger, folded by
-- keyword_maintain_v2 (which applications that write chunks themselves may call).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- pgrag.keyword_sync is a statement-level trigger on chunks (INSERT, UPDATE, DELETE; transition tables, so a COPY of
-- ten thousand chunks is one pass, not ten thousand) that maintains:
--   keyword_postings  one row per (collection, lexeme, chunk): term frequency, chunk length and
--                     an impact: BM25's term-frequency part, what the search sums (times idf);
--   keyword_df        document frequency per (collection, acl, lexeme), as signed deltas;
--   keyword_totals    chunk count and total length per (collection, acl), as signed deltas.
-- Deltas are appended, never updated in place: concurrent writers to one collection never wait
-- on a shared counter row, and a reader's snapshot always sums to exactly the postings it sees,
-- so statistics are exact, not eventually consistent. pgrag.keyword_maintain_v2() folds the
-- deltas together (pgrag ingest calls it after every run). Every posting and statistics row
-- carries its chunk's acl_id, so row-level security shows a session only the postings, document
-- frequencies and chunk counts of what it may read: BM25 statistics are computed over the
-- caller's visible chunks and never reveal a hidden one. A change of a chunk's access moves its
-- postings and statistics.
--
-- Term frequency and length come from the chunk's words (pgrag.chunk_words: the stored
-- tsvector, pgrag.chunk_tsvector, with the words of the chunk's context line, if it has one;
-- stop words removed, words stemmed; the section path counts as text): tf = the lexeme's
-- positions, length = all positions. A tsvector keeps at most 255 positions per lexeme, so tf
-- saturates there, where BM25 has long since saturated anyway.
CREATE OR REPLACE FUNCTION pgrag.chunk_words(tsv tsvector, config text, context text)
RETURNS tsvector
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- (A chunk without a context keeps exactly its stored tsvector, so the index of chunks
    -- written before contexts existed needs no rebuild.)
    SELECT CASE WHEN coalesce(context, '') = '' THEN tsv
                ELSE tsv || to_tsvector(config::regconfig, context) END
$fn$;

COMMENT ON FUNCTION pgrag.chunk_words(tsvector, text, text) IS
    'The words the keyword index holds for a chunk: its stored tsvector and its context line.';

CREATE OR REPLACE FUNCTION pgrag.keyword_sync() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    -- The chunks whose words leave the index and the chunks whose words enter it.
    v_gone_collections integer[];
    v_gone_ids         bigint[];
    v_gone_acls        integer[];
    v_gone_tsv         tsvector[];
    v_new_collections  integer[];
    v_new_ids          bigint[];
    v_new_acls         integer[];
    v_new_tsv          tsvector[];
BEGIN
    -- What leaves and what enters, as a set difference on (id, collection, access, words: the
    -- stored tsvector and the context line): it holds for any UPDATE, including one that
    -- changes ids, and for INSERT ... ON CONFLICT, MERGE or a row matched twice. An UPDATE
    -- that leaves all four alone touches nothing.
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.collection_id), array_agg(o.id), array_agg(o.acl_id),
               array_agg(pgrag.chunk_words(o.tsv, o.text_config, o.context))
          INTO v_gone_collections, v_gone_ids, v_gone_acls, v_gone_tsv
          FROM old_rows o;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.collection_id), array_agg(n.id), array_agg(n.acl_id),
               array_agg(pgrag.chunk_words(n.tsv, n.text_config, n.context))
          INTO v_new_collections, v_new_ids, v_new_acls, v_new_tsv
          FROM new_rows n;
    ELSE
        SELECT array_agg(o.collection_id), array_agg(o.id), array_agg(o.acl_id),
               array_agg(pgrag.chunk_words(o.tsv, o.text_config, o.context))
          INTO v_gone_collections, v_gone_ids, v_gone_acls, v_gone_tsv
          FROM old_rows o
         WHERE NOT EXISTS (SELECT 1 FROM new_rows n
                            WHERE n.id = o.id AND n.collection_id = o.collection_id
                              AND n.acl_id = o.acl_id AND n.tsv = o.tsv
                              AND n.context IS NOT DISTINCT FROM o.context);
        SELECT array_agg(n.collection_id), array_agg(n.id), array_agg(n.acl_id),
               array_agg(pgrag.chunk_words(n.tsv, n.text_config, n.context))
          INTO v_new_collections, v_new_ids, v_new_acls, v_new_tsv
          FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM old_rows o
                            WHERE o.id = n.id AND o.collection_id = n.collection_id
                              AND o.acl_id = n.acl_id AND o.tsv = n.tsv
                              AND o.context IS NOT DISTINCT FROM n.context);
    END IF;

    IF v_gone_ids IS NOT NULL THEN
        WITH gone AS MATERIALIZED (
                 SELECT g.collection_id, g.chunk_id, g.acl_id, g.tsv,
                        (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                           FROM unnest(g.tsv) u) AS dl
                   FROM unnest(v_gone_collections, v_gone_ids, v_gone_acls, v_gone_tsv)
                        AS g(collection_id, chunk_id, acl_id, tsv)),
             terms AS MATERIALIZED (
                 SELECT g.collection_id, g.chunk_id, g.acl_id, u.lexeme
                   FROM gone g, unnest(g.tsv) u),
             dropped AS (
                 DELETE FROM pgrag.keyword_postings p
                  USING terms t
                  WHERE p.collection_id = t.collection_id AND p.lexeme = t.lexeme
                    AND p.chunk_id = t.chunk_id),
             df AS (
                 -- A collection being deleted takes its statistics with it (ON DELETE CASCADE).
                 INSERT INTO pgrag.keyword_df (collection_id, acl_id, lexeme, df)
                 SELECT t.collection_id, t.acl_id, t.lexeme, -count(*)
                   FROM terms t
                  WHERE EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = t.collection_id)
                  GROUP BY t.collection_id, t.acl_id, t.lexeme)
        INSERT INTO pgrag.keyword_totals (collection_id, acl_id, chunks, length)
        SELECT g.collection_id, g.acl_id, -count(*), -sum(g.dl)
          FROM gone g
         WHERE EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = g.collection_id)
         GROUP BY g.collection_id, g.acl_id;
    END IF;

    IF v_new_ids IS NOT NULL THEN
        -- The collection's reference average length, for impacts: fixed when the collection
        -- gets its first chunks, refreshed by keyword_maintain_v2 when the live average drifts.
        INSERT INTO pgrag.keyword_settings (collection_id, impact_avgdl)
        SELECT n.collection_id,
               greatest(avg((SELECT sum(coalesce(array_length(u.positions, 1), 1))
                               FROM unnest(n.tsv) u)), 1)
          FROM unnest(v_new_collections, v_new_tsv) AS n(collection_id, tsv)
         GROUP BY n.collection_id
        ON CONFLICT (collection_id) DO NOTHING;
        -- Held to commit: keyword_maintain_v2 refreshes impacts under FOR UPDATE of this row,
        -- so it waits for writers whose postings its refresh must see, and they for it.
        PERFORM 1 FROM pgrag.keyword_settings s
          WHERE s.collection_id = ANY (v_new_collections) FOR SHARE;

        WITH added AS MATERIALIZED (
                 SELECT n.collection_id, n.chunk_id, n.acl_id, n.tsv,
                        (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                           FROM unnest(n.tsv) u) AS dl
                   FROM unnest(v_new_collections, v_new_ids, v_new_acls, v_new_tsv)
                        AS n(collection_id, chunk_id, acl_id, tsv)),
             terms AS MATERIALIZED (
                 SELECT a.collection_id, a.chunk_id, a.acl_id, a.dl, u.lexeme,
                        coalesce(array_length(u.positions, 1), 1) AS tf
                   FROM added a, unnest(a.tsv) u),
             postings AS (
                 -- impact = BM25's term-frequency part (k1 = 1.5, b = 0.75) at the reference
                 -- average length: the order in which a term's postings are read when pruned.
                 INSERT INTO pgrag.keyword_postings
                        (collection_id, lexeme, chunk_id, tf, dl, impact, acl_id)
                 SELECT t.collection_id, t.lexeme, t.chunk_id, t.tf, t.dl,
                        t.tf / (t.tf + 1.5 * (0.25 + 0.75 * t.dl / s.impact_avgdl)), t.acl_id
                   FROM terms t
                   JOIN pgrag.keyword_settings s ON s.collection_id = t.collection_id),
             df AS (
                 INSERT INTO pgrag.keyword_df (collection_id, acl_id, lexeme, df)
                 SELECT t.collection_id, t.acl_id, t.lexeme, count(*)
                   FROM terms t
                  GROUP BY t.collection_id, t.acl_id, t.lexeme)
        INSERT INTO pgrag.keyword_totals (collection_id, acl_id, chunks, length)
        SELECT a.collection_id, a.acl_id, count(*), sum(a.dl)
          FROM added a
         GROUP BY a.collection_id, a.acl_id;
    END IF;
    RETURN NULL;
END
$fn$;

COMMENT ON FUNCTION pgrag.keyword_sync() IS
    'Statement trigger on pgrag.chunks: maintains keyword_postings, keyword_df and keyword_totals.';

CREATE OR REPLACE FUNCTION pgrag.keyword_truncate() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    -- The postings (no foreign key, so no TRUNCATE ... CASCADE reaches them) are truncated;
    -- the statistics are deleted, since a TRUNCATE of collections CASCADE may be truncating
    -- them in this same statement.
    TRUNCATE pgrag.keyword_postings;
    DELETE FROM pgrag.keyword_df;
    DELETE FROM pgrag.keyword_totals;
    DELETE FROM pgrag.keyword_settings;
    RETURN NULL;
END
$fn$;

COMMENT ON FUNCTION pgrag.keyword_truncate() IS
    'Statement trigger on TRUNCATE pgrag.chunks: empties the keyword index.';


-- pgrag.keyword_maintain_v2: fold the keyword statistics' deltas, refresh stale impacts. Run it
-- as an unrestricted role (the owner or pgrag_writer): it folds and refreshes only the rows the
-- session can see.
--
--   SELECT * FROM pgrag.keyword_maintain_v2('handbook');
--
-- Chunk counts and document frequencies are exact without it (search sums the deltas its
-- snapshot sees); folding keeps that sum to one row per lexeme, so it stays cheap. Impacts (each
-- posting's BM25 term-frequency part) are computed at a reference average chunk length; when the
-- live average has drifted by more than max_drift (a fraction) they are recomputed, so length
-- normalisation is never staler than that.
-- pgrag ingest runs this after every ingest; run it yourself after writing chunks with SQL.
-- Safe to run concurrently with writers, searches and itself.
CREATE OR REPLACE FUNCTION pgrag.keyword_maintain_v2(
    collection text,
    max_drift  double precision DEFAULT 0.1
) RETURNS TABLE (
    chunks            bigint,
    avg_length        double precision,
    impact_avg_length double precision,
    df_rows_folded    bigint,
    impacts_refreshed boolean
)
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_id      integer;
    v_chunks  bigint;
    v_length  bigint;
    v_ref     double precision;
    v_folded  bigint;
    v_refresh boolean := false;
BEGIN
    IF max_drift IS NULL OR max_drift < 0 THEN
        RAISE EXCEPTION 'max_drift must be >= 0 (a fraction such as 0.1), got %', max_drift
            USING ERRCODE = '22023';
    END IF;
    SELECT c.id INTO v_id FROM pgrag.collections c WHERE c.name = collection;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'collection % does not exist', quote_literal(collection)
            USING ERRCODE = '42704',
                  HINT = 'SELECT name FROM pgrag.collections lists the collections.';
    END IF;

    -- The rows of every (lexeme, acl) with more than one row, and single rows of 0, are
    -- deleted and their sum put back. Each row is judged by one index probe for another row
    -- of its term: a join with a grouped subquery was planned as a nested loop whenever the
    -- statistics predated the collection's rows (a new collection, a first large load) and
    -- took minutes (issue 16: 381 s for 27,000 rows). Whatever rows a run deletes, it puts
    -- back their sum, so concurrent runs never count a delta twice.
    WITH folded AS (
             DELETE FROM pgrag.keyword_df d
              WHERE d.collection_id = v_id
                AND (d.df = 0
                     OR EXISTS (SELECT 1 FROM pgrag.keyword_df x
                                 WHERE x.collection_id = v_id AND x.lexeme = d.lexeme
                                   AND x.acl_id = d.acl_id AND x.ctid <> d.ctid))
             RETURNING d.lexeme, d.acl_id, d.df),
         kept AS (
             INSERT INTO pgrag.keyword_df (collection_id, acl_id, lexeme, df)
             SELECT v_id, f.acl_id, f.lexeme, sum(f.df) FROM folded f
              GROUP BY f.lexeme, f.acl_id HAVING sum(f.df) <> 0)
    SELECT count(*) INTO v_folded FROM folded;

    WITH folded AS (
             DELETE FROM pgrag.keyword_totals t WHERE t.collection_id = v_id
             RETURNING t.acl_id, t.chunks, t.length)
    INSERT INTO pgrag.keyword_totals (collection_id, acl_id, chunks, length)
    SELECT v_id, f.acl_id, sum(f.chunks), sum(f.length) FROM folded f
     GROUP BY f.acl_id HAVING sum(f.chunks) <> 0;

    SELECT sum(t.chunks), sum(t.length) INTO v_chunks, v_length
      FROM pgrag.keyword_totals t WHERE t.collection_id = v_id;
    SELECT s.impact_avgdl INTO v_ref
      FROM pgrag.keyword_settings s WHERE s.collection_id = v_id FOR UPDATE;

    IF v_ref IS NOT NULL AND v_chunks > 0 AND v_length > 0
       AND abs((v_length::float8 / v_chunks) / v_ref - 1) > max_drift THEN
        v_ref := v_length::float8 / v_chunks;
        UPDATE pgrag.keyword_postings p
           SET impact = p.tf / (p.tf + 1.5 * (0.25 + 0.75 * p.dl / v_ref))
         WHERE p.collection_id = v_id;
        UPDATE pgrag.keyword_settings s SET impact_avgdl = v_ref, refreshed_at = now()
         WHERE s.collection_id = v_id;
        v_refresh := true;
    END IF;

    RETURN QUERY SELECT coalesce(v_chunks, 0),
                        CASE WHEN v_chunks > 0 THEN v_length::float8 / v_chunks END,
                        v_ref, v_folded, v_refresh;
END
$fn$;

COMMENT ON FUNCTION pgrag.keyword_maintain_v2(text, double precision) IS
    'Fold keyword statistics deltas and refresh pruning impacts when the average length drifted.';
