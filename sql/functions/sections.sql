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

-- pgrag.document_chunks_v1: one whole document, as its chunks in document order, for reading
-- a source a search or an answer cited (the MCP fetch_document tool, an "open the source" link).
--
--   SELECT * FROM pgrag.document_chunks_v1('handbook', 'docs/refunds.md');
--   SELECT * FROM pgrag.document_chunks_v1(NULL, NULL, p_chunk_id => 4711);
--
-- The document is named by its source within a collection, or by the id of any of its chunks
-- (a search result's chunk_id; with a collection too, only a chunk of that collection). At most
-- p_max_chunks chunks, from the first; `chunks` is how many the document has in all. Chunks
-- overlap by the collection's chunk_overlap: pgrag.retrieval.sections.join_chunks joins them.
--
-- SECURITY DEFINER like section_chunks_v1: restricted roles call it without any SELECT on
-- documents or chunks. A document the session may not read (pgrag.visible_acls) returns
-- nothing, the same as one that does not exist.
CREATE OR REPLACE FUNCTION pgrag.document_chunks_v1(p_collection text, p_source text,
                                                    p_chunk_id bigint DEFAULT NULL,
                                                    p_max_chunks integer DEFAULT 10000)
RETURNS TABLE (collection text, document_id bigint, source text, title text, metadata jsonb,
               updated_at timestamptz, chunks bigint, chunk_id bigint, ordinal integer,
               section text, page integer, content text)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH acls AS (
             SELECT CASE WHEN pgrag.unrestricted() THEN NULL
                         ELSE pgrag.visible_acls() END AS visible),
         doc AS (
             SELECT c.name, d.id, d.source, d.title, d.metadata, d.updated_at
               FROM pgrag.documents d
               JOIN pgrag.collections c ON c.id = d.collection_id
              CROSS JOIN acls a
              WHERE (a.visible IS NULL OR d.acl_id = ANY (a.visible))
                AND (p_collection IS NULL OR c.name = p_collection)
                AND CASE WHEN p_chunk_id IS NOT NULL
                         THEN d.id = (SELECT x.document_id FROM pgrag.chunks x
                                       WHERE x.id = p_chunk_id)
                         ELSE p_collection IS NOT NULL AND d.source = p_source END)
    SELECT d.name, d.id, d.source, d.title, d.metadata, d.updated_at,
           count(*) OVER (), x.id, x.ordinal, x.section, x.page, x.content
      FROM doc d
      JOIN pgrag.chunks x ON x.document_id = d.id
     ORDER BY x.ordinal
     LIMIT greatest(1, least(coalesce(p_max_chunks, 10000), 100000))
$fn$;

COMMENT ON FUNCTION pgrag.document_chunks_v1(text, text, bigint, integer) IS
    'One document the session may read, by source or by one of its chunk ids: its chunks in document order.';
