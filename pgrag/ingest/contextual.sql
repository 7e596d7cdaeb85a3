-- name: stored_contexts
-- The context lines (or their absence) a document's chunks have for this version of it.
SELECT section, page, content, context FROM pgrag.chunks
 WHERE document_id = %(document_id)s AND context_for = %(content_hash)s;
