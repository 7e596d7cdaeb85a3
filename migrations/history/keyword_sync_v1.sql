-- pgrag.keyword_sync_v1: keep the BM25 keyword index in step with pgrag.chunks.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256); a change is a new _vN beside this.
--
-- A statement-level trigger on chunks (INSERT, UPDATE, DELETE; transition tables, so a COPY of
-- ten thousand chunks is one pass, not ten thousand) that maintains:
--   keyword_postings  one row per (collection, lexeme, chunk): term frequency, chunk length and
--                     an impact: BM25's term-frequency part, what search_v2 sums (times idf);
--   keyword_df        document frequency per (collection, lexeme), as signed deltas;
--   keyword_totals    chunk count and total length per collection, as signed deltas.
-- Deltas are appended, never updated in place: concurrent writers to one collection never wait
-- on a shared counter row, and a reader's snapshot always sums to exactly the postings it sees,
-- so statistics are exact, not eventually consistent. pgrag.keyword_maintain_v1() folds the
-- deltas together (pgrag ingest calls it after every run).
--
-- Term frequency and length come from the stored tsvector (pgrag.chunk_tsvector_v1: stop words
-- removed, words stemmed; the section path counts as text): tf = the lexeme's positions, length =
-- all positions. A tsvector keeps at most 255 positions per lexeme, so tf saturates there, where
-- BM25 has long since saturated anyway.
CREATE FUNCTION pgrag.keyword_sync_v1() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    -- The chunks whose words leave the index and the chunks whose words enter it.
    v_gone_collections integer[];
    v_gone_ids         bigint[];
    v_gone_tsv         tsvector[];
    v_new_collections  integer[];
    v_new_ids          bigint[];
    v_new_tsv          tsvector[];
BEGIN
    -- What leaves and what enters, as a set difference on (id, collection, words): it holds
    -- for any UPDATE, including one that changes ids, and for INSERT ... ON CONFLICT, MERGE or
    -- a row matched twice. An UPDATE that leaves all three alone touches nothing.
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(o.collection_id), array_agg(o.id), array_agg(o.tsv)
          INTO v_gone_collections, v_gone_ids, v_gone_tsv
          FROM old_rows o;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.collection_id), array_agg(n.id), array_agg(n.tsv)
          INTO v_new_collections, v_new_ids, v_new_tsv
          FROM new_rows n;
    ELSE
        SELECT array_agg(o.collection_id), array_agg(o.id), array_agg(o.tsv)
          INTO v_gone_collections, v_gone_ids, v_gone_tsv
          FROM old_rows o
         WHERE NOT EXISTS (SELECT 1 FROM new_rows n
                            WHERE n.id = o.id AND n.collection_id = o.collection_id
                              AND n.tsv = o.tsv);
        SELECT array_agg(n.collection_id), array_agg(n.id), array_agg(n.tsv)
          INTO v_new_collections, v_new_ids, v_new_tsv
          FROM new_rows n
         WHERE NOT EXISTS (SELECT 1 FROM old_rows o
                            WHERE o.id = n.id AND o.collection_id = n.collection_id
                              AND o.tsv = n.tsv);
    END IF;

    IF v_gone_ids IS NOT NULL THEN
        WITH gone AS MATERIALIZED (
                 SELECT g.collection_id, g.chunk_id, g.tsv,
                        (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                           FROM unnest(g.tsv) u) AS dl
                   FROM unnest(v_gone_collections, v_gone_ids, v_gone_tsv)
                        AS g(collection_id, chunk_id, tsv)),
             terms AS MATERIALIZED (
                 SELECT g.collection_id, g.chunk_id, u.lexeme
                   FROM gone g, unnest(g.tsv) u),
             dropped AS (
                 DELETE FROM pgrag.keyword_postings p
                  USING terms t
                  WHERE p.collection_id = t.collection_id AND p.lexeme = t.lexeme
                    AND p.chunk_id = t.chunk_id),
             df AS (
                 -- A collection being deleted takes its statistics with it (ON DELETE CASCADE).
                 INSERT INTO pgrag.keyword_df (collection_id, lexeme, df)
                 SELECT t.collection_id, t.lexeme, -count(*)
                   FROM terms t
                  WHERE EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = t.collection_id)
                  GROUP BY t.collection_id, t.lexeme)
        INSERT INTO pgrag.keyword_totals (collection_id, chunks, length)
        SELECT g.collection_id, -count(*), -sum(g.dl)
          FROM gone g
         WHERE EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = g.collection_id)
         GROUP BY g.collection_id;
    END IF;

    IF v_new_ids IS NOT NULL THEN
        -- The collection's reference average length, for impacts: fixed when the collection
        -- gets its first chunks, refreshed by keyword_maintain_v1 when the live average drifts.
        INSERT INTO pgrag.keyword_settings (collection_id, impact_avgdl)
        SELECT n.collection_id,
               greatest(avg((SELECT sum(coalesce(array_length(u.positions, 1), 1))
                               FROM unnest(n.tsv) u)), 1)
          FROM unnest(v_new_collections, v_new_tsv) AS n(collection_id, tsv)
         GROUP BY n.collection_id
        ON CONFLICT (collection_id) DO NOTHING;
        -- Held to commit: keyword_maintain_v1 refreshes impacts under FOR UPDATE of this row,
        -- so it waits for writers whose postings its refresh must see, and they for it.
        PERFORM 1 FROM pgrag.keyword_settings s
          WHERE s.collection_id = ANY (v_new_collections) FOR SHARE;

        WITH added AS MATERIALIZED (
                 SELECT n.collection_id, n.chunk_id, n.tsv,
                        (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)
                           FROM unnest(n.tsv) u) AS dl
                   FROM unnest(v_new_collections, v_new_ids, v_new_tsv)
                        AS n(collection_id, chunk_id, tsv)),
             terms AS MATERIALIZED (
                 SELECT a.collection_id, a.chunk_id, a.dl, u.lexeme,
                        coalesce(array_length(u.positions, 1), 1) AS tf
                   FROM added a, unnest(a.tsv) u),
             postings AS (
                 -- impact = BM25's term-frequency part (k1 = 1.5, b = 0.75) at the reference
                 -- average length: the order in which a term's postings are read when pruned.
                 INSERT INTO pgrag.keyword_postings (collection_id, lexeme, chunk_id, tf, dl, impact)
                 SELECT t.collection_id, t.lexeme, t.chunk_id, t.tf, t.dl,
                        t.tf / (t.tf + 1.5 * (0.25 + 0.75 * t.dl / s.impact_avgdl))
                   FROM terms t
                   JOIN pgrag.keyword_settings s ON s.collection_id = t.collection_id),
             df AS (
                 INSERT INTO pgrag.keyword_df (collection_id, lexeme, df)
                 SELECT t.collection_id, t.lexeme, count(*)
                   FROM terms t
                  GROUP BY t.collection_id, t.lexeme)
        INSERT INTO pgrag.keyword_totals (collection_id, chunks, length)
        SELECT a.collection_id, count(*), sum(a.dl)
          FROM added a
         GROUP BY a.collection_id;
    END IF;
    RETURN NULL;
END
$fn$;

COMMENT ON FUNCTION pgrag.keyword_sync_v1() IS
    'Statement trigger on pgrag.chunks: maintains keyword_postings, keyword_df and keyword_totals.';

-- TRUNCATE pgrag.chunks fires no row or delete triggers; the keyword index goes with it.
CREATE FUNCTION pgrag.keyword_truncate_v1() RETURNS trigger
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

COMMENT ON FUNCTION pgrag.keyword_truncate_v1() IS
    'Statement trigger on TRUNCATE pgrag.chunks: empties the keyword index.';
