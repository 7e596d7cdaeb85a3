-- name: vectors_by_hash
-- A stored vector of the model for each of these content hashes (or NULL: vectors false).
SELECT DISTINCT ON (c.content_hash) c.content_hash,
       -- vectors false: only which hashes have a vector
       CASE WHEN %(vectors)s::boolean THEN e.embedding END
  FROM pgrag.chunks c
  JOIN pgrag.chunk_embeddings e
    ON e.collection_id = c.collection_id AND e.chunk_id = c.id AND e.model_id = %(model_id)s
 -- chunks_collection_hash_idx (migration 0005)
 WHERE c.collection_id = %(collection_id)s AND left(c.content_hash, 16) = ANY (%(prefixes)s)
   AND c.content_hash = ANY (%(hashes)s)
   -- Only chunks the session may read, said here rather than left to row-level security, which
   -- does not filter the owner or a superuser: a session writing for some principals (pgrag
   -- serve, pgrag.write_principals) reads as them, and reusing a vector of a document they may
   -- not read would tell them, by the count of texts embedded, that it holds this exact text.
   -- (visible_acls: NULL for a session that sees everything, sql/functions/access.sql.)
   AND ((SELECT pgrag.visible_acls()) IS NULL
        OR c.acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
