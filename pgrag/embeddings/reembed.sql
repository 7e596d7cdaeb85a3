-- name: attach_model
-- Add a model to a collection as building (again, if it was retired).
INSERT INTO pgrag.collection_models (collection_id, model_id, status)
VALUES (%(collection_id)s, %(model_id)s, 'building')
ON CONFLICT (collection_id, model_id) DO UPDATE SET status = 'building', retired_at = NULL
 WHERE pgrag.collection_models.status = 'retired';

-- name: missing_vectors
-- How many chunks of the collection have no vector of the model yet.
SELECT pgrag.model_missing(%(collection_id)s, %(model_id)s);

-- name: chunks_without_vector
-- The next chunks of a collection after an id without the model's vector (queued ones too if asked).
SELECT c.id, c.section, c.content, c.content_hash, c.context FROM pgrag.chunks c
 WHERE c.collection_id = %(collection_id)s AND c.id > %(after)s
   AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e
                    WHERE e.collection_id = c.collection_id AND e.model_id = %(model_id)s
                      AND e.chunk_id = c.id)
   AND (%(queued)s OR NOT EXISTS (SELECT 1 FROM pgrag.embedding_queue q
                    WHERE q.chunk_id = c.id AND q.model_id = %(model_id)s))
 ORDER BY c.id LIMIT %(limit)s;

-- name: known_vectors
-- The model's vectors of chunks of the collection whose text has these hashes (one per hash).
SELECT DISTINCT ON (c.content_hash) c.content_hash, e.embedding
  FROM pgrag.chunks c JOIN pgrag.chunk_embeddings e
    ON e.collection_id = c.collection_id AND e.chunk_id = c.id AND e.model_id = %(model_id)s
 WHERE c.collection_id = %(collection_id)s AND left(c.content_hash, 16) = ANY (%(prefixes)s)
   AND c.content_hash = ANY (%(hashes)s);

-- name: activate_model
-- Make the model the collection's active one, in one transaction.
SELECT pgrag.activate_model_v1(%(collection)s, %(model_id)s);

-- name: model_status
-- The model's status in the collection, if it is one of its models.
SELECT status FROM pgrag.collection_models
 WHERE collection_id = %(collection_id)s AND model_id = %(model_id)s;

-- name: retire_model
-- Mark the model retired in the collection.
SELECT pgrag.retire_model_v1(%(collection)s, %(model_id)s);

-- name: delete_retired_vectors
-- Delete up to %(batch)s of the retired model's vectors in the collection; how many went.
SELECT pgrag.retire_model_vectors(%(collection_id)s, %(model_id)s, %(batch)s);
