-- name: document_chunks
-- One document the session may read, by source in a collection or by one of its chunk ids:
-- its chunks in document order (at most n).
SELECT collection, document_id, source, title, metadata, updated_at, chunks,
       chunk_id, ordinal, section, page, content
  FROM pgrag.document_chunks_v1(%(collection)s, %(source)s, %(chunk_id)s, %(n)s);
