-- name: documents_by_source
-- The stored documents of these sources in a collection, each with its source; for a
-- contextual ingest whether some of its chunks have no context for its current version, else
-- whether any has one.
SELECT d.source, d.id, d.content_hash, d.principals,
       %(contextual)s::boolean AND EXISTS (
           SELECT 1 FROM pgrag.chunks c
            WHERE c.document_id = d.id AND c.context_for IS DISTINCT FROM d.content_hash),
       NOT %(contextual)s::boolean AND EXISTS (
           SELECT 1 FROM pgrag.chunks c
            WHERE c.document_id = d.id AND c.context_for IS NOT NULL)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s AND d.source = ANY (%(sources)s);

-- name: originals
-- Stored documents with these contents that a copy may point to, with their readers.
SELECT content_hash, source, principals FROM pgrag.documents
 WHERE collection_id = %(collection_id)s AND content_hash = ANY (%(content_hashes)s)
   -- (a document written with SQL is chunked from its body, which SQL may change under a
   -- copy: never an original)
   AND NOT metadata ? 'duplicate_of' AND body IS NULL ORDER BY id;
