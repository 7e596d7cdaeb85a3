-- name: vector_count
-- How many vectors a model has, counting no further than n.
SELECT count(*) FROM (SELECT 1 FROM pgrag.chunk_embeddings
                       WHERE model_id = %(model_id)s LIMIT %(n)s) AS sample;

-- name: owns_vectors
-- Whether the session's role owns pgrag.chunk_embeddings (and may drop its indexes).
SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class
 WHERE oid = 'pgrag.chunk_embeddings'::regclass;

-- name: drop_model_index
-- Drop a model's HNSW index; {} is the index's name (psycopg.sql.Identifier).
DROP INDEX IF EXISTS pgrag.{};

-- name: index_build_memory
-- Memory for building an HNSW index, in this transaction.
SET LOCAL maintenance_work_mem = '512MB';

-- name: ensure_model_index
-- Create a model's HNSW index if it is missing (a no-op when it exists).
SELECT pgrag.ensure_model_index(%(model_id)s);

-- name: analyze_chunks
-- Planner statistics for chunks.
ANALYZE pgrag.chunks;

-- name: analyze_chunk_embeddings
-- Planner statistics for vectors.
ANALYZE pgrag.chunk_embeddings;

-- name: keyword_maintain
-- Fold appended keyword statistics; refresh BM25 impacts if the average length moved.
SELECT * FROM pgrag.keyword_maintain_v2(%(collection)s);

-- name: analyze_keyword_postings
-- Planner statistics for keyword postings.
ANALYZE pgrag.keyword_postings;

-- name: analyze_keyword_df
-- Planner statistics for keyword document frequencies.
ANALYZE pgrag.keyword_df;
