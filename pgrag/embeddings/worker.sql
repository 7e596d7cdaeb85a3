-- name: store_vector
-- Write a chunk's vector of a model, replacing any; a chunk deleted meanwhile is skipped.
INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)
SELECT %(model_id)s, c.id, %(embedding)s, c.collection_id FROM pgrag.chunks c WHERE c.id = %(chunk_id)s
ON CONFLICT (model_id, chunk_id, collection_id) DO UPDATE SET embedding = EXCLUDED.embedding;

-- name: dequeue
-- Take the chunks off the embedding queue for the model.
DELETE FROM pgrag.embedding_queue WHERE model_id = %(model_id)s AND chunk_id = ANY (%(chunk_ids)s);

-- name: renew_lease
-- Extend the lease of claimed queue items by %(lease)s seconds.
UPDATE pgrag.embedding_queue SET not_before = now() + make_interval(secs => %(lease)s)
 WHERE model_id = %(model_id)s AND chunk_id = ANY (%(chunk_ids)s);

-- name: claim
-- Claim up to %(limit)s due queue items by moving their not_before a lease ahead.
WITH picked AS (
  SELECT q.chunk_id, q.model_id FROM pgrag.embedding_queue q
   WHERE q.not_before <= now()
   ORDER BY q.not_before, q.chunk_id
   LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE pgrag.embedding_queue q
   SET not_before = now() + make_interval(secs => %(lease)s)
  FROM picked p WHERE q.chunk_id = p.chunk_id AND q.model_id = p.model_id
RETURNING q.chunk_id, q.model_id;

-- name: claimed_chunks
-- The claimed (chunk, model) items with their chunk's text and the model's status there.
SELECT c.id, m.model_id, c.collection_id, c.section, c.content, cm.status, c.context
  FROM unnest(%(chunk_ids)s::bigint[], %(model_ids)s::int[]) AS m(chunk_id, model_id)
  JOIN pgrag.chunks c ON c.id = m.chunk_id
  LEFT JOIN pgrag.collection_models cm
    ON cm.collection_id = c.collection_id AND cm.model_id = m.model_id;

-- name: drop_item
-- Remove one queue item (its model was retired or dropped from the collection).
DELETE FROM pgrag.embedding_queue WHERE chunk_id = %(chunk_id)s AND model_id = %(model_id)s;

-- name: item_failed
-- Keep failed items queued with their error, retried after a backoff doubling per attempt.
UPDATE pgrag.embedding_queue SET attempts = attempts + 1,
       last_error = %(error)s,
       not_before = now() + make_interval(secs => least(%(cap)s,
           %(first)s * power(2, attempts)))
 WHERE model_id = %(model_id)s AND chunk_id = ANY (%(chunk_ids)s);

-- name: listen_queue
-- Be woken when items are queued (embedding_enqueue notifies).
LISTEN pgrag_embedding_queue;

-- name: collection_names
-- The names of the collections whose ids are in %(ids)s.
SELECT name FROM pgrag.collections WHERE id = ANY (%(ids)s);

-- name: keyword_maintain
-- Fold the collection's keyword statistics.
SELECT * FROM pgrag.keyword_maintain_v2(%(collection)s);

-- name: status
-- Per collection: documents, chunks, pending and failed queue items, models.
SELECT * FROM pgrag.status();
