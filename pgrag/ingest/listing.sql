-- name: documents_page
-- A page of the documents of a collection the session may read (pgrag.documents_v1), by source.
SELECT document_id, source, title, metadata, updated_at
  FROM pgrag.documents_v1(%(collection)s)
 WHERE %(after)s::text IS NULL OR source > %(after)s::text
 ORDER BY source
 LIMIT %(limit)s;
