-- pgrag.section_chunks_v1: small-to-big retrieval. For chunks a search returned, the chunks of
-- the same section (same document, section path and page) around each, so that a prompt can
-- hold the whole section while the index holds small chunks.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
--   SELECT * FROM pgrag.section_chunks_v1(ARRAY[4711, 4712]);
--
-- SECURITY DEFINER like search_v4: restricted roles call it without any SELECT on chunks. It
-- returns only chunks the session may see (pgrag.visible_acls), seeds included: a chunk id
-- the caller may not see returns nothing, the same as one that does not exist. For each seed,
-- up to max_chunks chunks nearest to it by position, in document order.
CREATE OR REPLACE FUNCTION pgrag.section_chunks_v1(chunk_ids bigint[], max_chunks integer DEFAULT 20)
RETURNS TABLE (chunk_id bigint, sibling_id bigint, ordinal integer, content text)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH acls AS (
             SELECT CASE WHEN pgrag.unrestricted() THEN NULL
                         ELSE pgrag.visible_acls() END AS visible),
         seeds AS (
             SELECT c.id, c.document_id, c.section, c.page, c.ordinal
               FROM pgrag.chunks c, acls a
              WHERE c.id = ANY (chunk_ids)
                AND (a.visible IS NULL OR c.acl_id = ANY (a.visible)))
    SELECT s.id, x.id, x.ordinal, x.content
      FROM seeds s
     CROSS JOIN acls a
     CROSS JOIN LATERAL (
           SELECT x.id, x.ordinal, x.content
             FROM pgrag.chunks x
            WHERE x.document_id = s.document_id
              AND x.section IS NOT DISTINCT FROM s.section
              AND x.page IS NOT DISTINCT FROM s.page
              AND (a.visible IS NULL OR x.acl_id = ANY (a.visible))
            ORDER BY abs(x.ordinal - s.ordinal), x.ordinal
            LIMIT greatest(1, least(coalesce(max_chunks, 20), 1000))) x
     ORDER BY s.id, x.ordinal
$fn$;

COMMENT ON FUNCTION pgrag.section_chunks_v1(bigint[], integer) IS
    'Small-to-big: the visible chunks of each given chunk''s section, nearest first, returned in document order.';
