-- name: analyze_chunks
-- Planner statistics for chunks (not waiting for a VACUUM or an index build).
ANALYZE (SKIP_LOCKED) pgrag.chunks;

-- name: partition_name
-- The collection's partition of pgrag.chunk_embeddings (NULL if it has none).
SELECT c.relname FROM pg_class c
 WHERE c.oid = to_regclass('pgrag.' || pgrag.collection_partition_name(%(collection_id)s));

-- name: analyze_partition
-- Planner statistics for a collection's vectors (not waiting for a VACUUM or an index build).
ANALYZE (SKIP_LOCKED) {partition};

-- name: keyword_maintain
-- Fold appended keyword statistics; refresh BM25 impacts if the average length moved.
SELECT * FROM pgrag.keyword_maintain_v2(%(collection)s);

-- name: analyze_keyword_postings
-- Planner statistics for keyword postings (not waiting for a VACUUM).
ANALYZE (SKIP_LOCKED) pgrag.keyword_postings;

-- name: analyze_keyword_df
-- Planner statistics for keyword document frequencies (not waiting for a VACUUM).
ANALYZE (SKIP_LOCKED) pgrag.keyword_df;
