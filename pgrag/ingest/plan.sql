-- name: document_by_source
-- The stored document of a source in a collection, if any.
SELECT id, content_hash, principals FROM pgrag.documents
 WHERE collection_id = %(collection_id)s AND source = %(source)s;

-- name: originals
-- Stored documents with this content that a copy may point to, with their readers.
SELECT source, principals FROM pgrag.documents
 WHERE collection_id = %(collection_id)s AND content_hash = %(content_hash)s
   -- (a document written with SQL is chunked from its body, which SQL may change under a
   -- copy: never an original)
   AND NOT metadata ? 'duplicate_of' AND body IS NULL ORDER BY id;
