-- What `pgrag status` shows.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).

-- Per collection: documents, chunks, queued work and the active model (pgrag status).
CREATE OR REPLACE FUNCTION pgrag.status()
RETURNS TABLE (collection text, documents bigint, chunks bigint, pending bigint,
               failed bigint, active_model text, other_models text[])
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT c.name,
           (SELECT count(*) FROM pgrag.documents d WHERE d.collection_id = c.id),
           (SELECT count(*) FROM pgrag.chunks k WHERE k.collection_id = c.id),
           (SELECT count(*) FROM pgrag.embedding_queue q
             WHERE q.collection_id = c.id AND q.last_error IS NULL),
           (SELECT count(*) FROM pgrag.embedding_queue q
             WHERE q.collection_id = c.id AND q.last_error IS NOT NULL),
           m.name,
           ARRAY(SELECT o.name || ' (' || cm.status || ')'
                   FROM pgrag.collection_models cm
                   JOIN pgrag.embedding_models o ON o.id = cm.model_id
                  WHERE cm.collection_id = c.id AND cm.model_id IS DISTINCT FROM c.model_id
                  ORDER BY cm.added_at, o.name)
      FROM pgrag.collections c
      LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id
     ORDER BY c.name
$fn$;
