-- name: vectors_by_hash
-- The collection's stored vectors of a model for chunks with these content hashes, one per
-- hash (chunks_collection_hash_idx, migration 0005); with vectors false, NULL in place of
-- each vector: only which hashes have one.
SELECT DISTINCT ON (c.content_hash) c.content_hash,
       CASE WHEN %(vectors)s::boolean THEN e.embedding END
  FROM pgrag.chunks c
  JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id AND e.model_id = %(model_id)s
 WHERE c.collection_id = %(collection_id)s AND left(c.content_hash, 16) = ANY (%(prefixes)s)
   AND c.content_hash = ANY (%(hashes)s);
