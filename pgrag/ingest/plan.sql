-- name: document_by_source
-- The stored document of a source in a collection, if any; for a contextual ingest whether
-- some of its chunks have no context for its current version, else whether any has one.
SELECT d.id, d.content_hash, d.principals,
       %(contextual)s::boolean AND EXISTS (
           SELECT 1 FROM pgrag.chunks c
            WHERE c.document_id = d.id AND c.context_for IS DISTINCT FROM d.content_hash),
       NOT %(contextual)s::boolean AND EXISTS (
           SELECT 1 FROM pgrag.chunks c
            WHERE c.document_id = d.id AND c.context_for IS NOT NULL)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s AND d.source = %(source)s;

-- name: originals
-- Stored documents with this content that a copy may point to, with their readers.
SELECT source, principals FROM pgrag.documents
 WHERE collection_id = %(collection_id)s AND content_hash = %(content_hash)s
   -- (a document written with SQL is chunked from its body, which SQL may change under a
   -- copy: never an original)
   AND NOT metadata ? 'duplicate_of' AND body IS NULL ORDER BY id;
