-- Retention of the question log, pgrag.queries (pgrag/answer/traces.py).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- Each collection may keep its questions for at most query_log_max_age and at most the newest
-- query_log_max_rows of them (columns of pgrag.collections; NULL: no limit). prune_queries
-- removes what is beyond either, oldest first, at most `batch` rows per call, so one call's
-- work is bounded: `ask` calls it after logging (the log never grows far past its limits),
-- and `pgrag queries prune` calls it until nothing is left to remove. A size limit reads the
-- newest query_log_max_rows entries' index to find where the rest begins. Entries another
-- prune is removing are skipped (SKIP LOCKED): concurrent prunes neither wait nor deadlock.

-- Remove up to `batch` (1..100000) of the entries that a collection's retention (NULL: every
-- collection's) no longer keeps; how many it removed. SECURITY DEFINER: restricted roles may
-- not delete from the log, but they may make it keep its retention (it removes nothing else).
CREATE OR REPLACE FUNCTION pgrag.prune_queries(collection text DEFAULT NULL,
                                               batch integer DEFAULT 1000)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_left bigint;
    v_done bigint := 0;
    v_n    bigint;
    r      record;
BEGIN
    IF batch IS NULL OR batch < 1 OR batch > 100000 THEN
        RAISE EXCEPTION 'prune_queries: batch must be 1 to 100000, not %', coalesce(batch::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_left := batch;
    FOR r IN
        SELECT c.id, c.query_log_max_age AS max_age, c.query_log_max_rows AS max_rows
          FROM pgrag.collections c
         WHERE (prune_queries.collection IS NULL OR c.name = prune_queries.collection)
           AND (c.query_log_max_age IS NOT NULL OR c.query_log_max_rows IS NOT NULL)
         ORDER BY c.id
    LOOP
        EXIT WHEN v_left <= 0;
        IF r.max_age IS NOT NULL THEN
            DELETE FROM pgrag.queries q
             WHERE q.id IN (SELECT o.id FROM pgrag.queries o
                             WHERE o.collection_id = r.id AND o.created_at < now() - r.max_age
                             ORDER BY o.created_at LIMIT v_left
                               FOR UPDATE SKIP LOCKED);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_done := v_done + v_n;
            v_left := v_left - v_n;
        END IF;
        IF r.max_rows IS NOT NULL AND v_left > 0 THEN
            DELETE FROM pgrag.queries q
             WHERE q.id IN (SELECT o.id FROM pgrag.queries o
                             WHERE o.collection_id = r.id
                             ORDER BY o.created_at DESC, o.id DESC
                             OFFSET r.max_rows LIMIT v_left
                               FOR UPDATE SKIP LOCKED);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_done := v_done + v_n;
            v_left := v_left - v_n;
        END IF;
    END LOOP;
    RETURN v_done;
END
$fn$;
