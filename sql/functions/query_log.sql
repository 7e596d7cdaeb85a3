-- Retention of the question log, pgrag.queries (pgrag/answer/traces.py).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- Each collection may keep its questions for at most query_log_max_age and at most the newest
-- query_log_max_rows of them (columns of pgrag.collections; NULL: no limit). prune_queries
-- removes what is beyond either, oldest first, at most `batch` rows per call, so one call's
-- work is bounded: `ask` calls it after logging (the log never grows far past its limits),
-- and `pgrag queries prune` calls it until nothing is left to remove. A size limit keeps the
-- newest entries by id (the sequence, which no session can set: restricted roles may not
-- choose an entry's id or created_at), reading the newest query_log_max_rows entries' index to
-- find where the rest begins. Entries another prune is removing are skipped (SKIP LOCKED):
-- concurrent prunes neither wait nor deadlock. One collection whose pruning fails (a warning
-- names it) does not stop the others'.

-- Remove up to `batch` (1..100000) of the entries that a collection's retention (NULL: every
-- collection's) no longer keeps, never the entry `keep` (the one `ask` just logged: with
-- query_log_max_rows 0, or newer entries committed meanwhile, a later prune removes it); how
-- many it removed. SECURITY
-- DEFINER: restricted roles may not delete from the log, but they may make it keep its
-- retention (it removes nothing else).
CREATE OR REPLACE FUNCTION pgrag.prune_queries(collection text DEFAULT NULL,
                                               batch integer DEFAULT 1000,
                                               keep bigint DEFAULT NULL)
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
    v_c    bigint;  -- removed of this collection
    r      record;
BEGIN
    IF batch IS NULL OR batch < 1 OR batch > 100000 THEN
        RAISE EXCEPTION 'prune_queries: batch must be 1 to 100000, not %', coalesce(batch::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_left := batch;
    FOR r IN
        SELECT c.id, c.name, c.query_log_max_age AS max_age, c.query_log_max_rows AS max_rows
          FROM pgrag.collections c
         WHERE (prune_queries.collection IS NULL OR c.name = prune_queries.collection)
           AND (c.query_log_max_age IS NOT NULL OR c.query_log_max_rows IS NOT NULL)
         ORDER BY c.id
    LOOP
        EXIT WHEN v_left <= 0;
        v_c := 0;
        BEGIN
            IF r.max_age IS NOT NULL THEN
                DELETE FROM pgrag.queries q
                 WHERE q.id IN (SELECT o.id FROM pgrag.queries o
                                 WHERE o.collection_id = r.id AND o.created_at < now() - r.max_age
                                   AND o.id IS DISTINCT FROM keep
                                 ORDER BY o.created_at LIMIT v_left
                                   FOR UPDATE SKIP LOCKED);
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_c := v_n;
            END IF;
            IF r.max_rows IS NOT NULL AND v_left - v_c > 0 THEN
                DELETE FROM pgrag.queries q
                 WHERE q.id IN (SELECT o.id FROM pgrag.queries o
                                 WHERE o.collection_id = r.id
                                 ORDER BY o.id DESC
                                 OFFSET r.max_rows LIMIT v_left - v_c
                                   FOR UPDATE SKIP LOCKED)
                   AND q.id IS DISTINCT FROM keep;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_c := v_c + v_n;
            END IF;
        EXCEPTION WHEN OTHERS THEN  -- (its removals are undone: the others' go on)
            v_c := 0;
            RAISE WARNING 'prune_queries: collection %: %', r.name, SQLERRM
                USING HINT = 'Set its retention again: pgrag queries retention -c ' || r.name;
        END;
        v_done := v_done + v_c;
        v_left := v_left - v_c;
    END LOOP;
    RETURN v_done;
END
$fn$;
