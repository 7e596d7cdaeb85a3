-- name: vectors_by_hash
-- A stored vector of the model for each of these content hashes (or NULL: vectors false).
SELECT DISTINCT ON (c.content_hash) c.content_hash,
       -- vectors false: only which hashes have a vector
       CASE WHEN %(vectors)s::boolean THEN e.embedding END
  FROM pgrag.chunks c
  JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id AND e.model_id = %(model_id)s
 -- chunks_collection_hash_idx (migration 0005)
 WHERE c.collection_id = %(collection_id)s AND left(c.content_hash, 16) = ANY (%(prefixes)s)
   AND c.content_hash = ANY (%(hashes)s);
