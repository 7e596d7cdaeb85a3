-- pgrag.keyword_maintain_v1: fold the keyword statistics' deltas, refresh stale impacts.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256); a change is a new _vN beside this.
--
--   SELECT * FROM pgrag.keyword_maintain_v1('handbook');
--
-- Chunk counts and document frequencies are exact without it (search sums the deltas its
-- snapshot sees); folding keeps that sum to one row per lexeme, so it stays cheap. Impacts (each
-- posting's BM25 term-frequency part) are computed at a reference average chunk length; when the
-- live average has drifted by more than max_drift (a fraction) they are recomputed, so length
-- normalisation is never staler than that.
-- pgrag ingest runs this after every ingest; run it yourself after writing chunks with SQL.
-- Safe to run concurrently with writers, searches and itself.
CREATE FUNCTION pgrag.keyword_maintain_v1(
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

    WITH folded AS (
             DELETE FROM pgrag.keyword_df d
              WHERE d.collection_id = v_id
                AND d.lexeme IN (SELECT x.lexeme FROM pgrag.keyword_df x
                                  WHERE x.collection_id = v_id
                                  GROUP BY x.lexeme HAVING count(*) > 1 OR sum(x.df) = 0)
             RETURNING d.lexeme, d.df),
         kept AS (
             INSERT INTO pgrag.keyword_df (collection_id, lexeme, df)
             SELECT v_id, f.lexeme, sum(f.df) FROM folded f
              GROUP BY f.lexeme HAVING sum(f.df) <> 0)
    SELECT count(*) INTO v_folded FROM folded;

    WITH folded AS (
             DELETE FROM pgrag.keyword_totals t WHERE t.collection_id = v_id
             RETURNING t.chunks, t.length)
    INSERT INTO pgrag.keyword_totals (collection_id, chunks, length)
    SELECT v_id, coalesce(sum(f.chunks), 0), coalesce(sum(f.length), 0) FROM folded f;

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

COMMENT ON FUNCTION pgrag.keyword_maintain_v1(text, double precision) IS
    'Fold keyword statistics deltas and refresh pruning impacts when the average length drifted.';
