-- name: create_collection
-- A new collection with the embedder's model (registered if it is new); nothing if it exists.
INSERT INTO pgrag.collections (name, model_id)
VALUES (%(name)s, pgrag.register_model(%(model)s, %(provider)s, %(dim)s,
        %(distance)s, %(normalized)s, %(max_tokens)s))
ON CONFLICT (name) DO NOTHING;

-- name: record_model_source
-- Record where a model comes from (for queries and pgrag worker), unless it is recorded.
UPDATE pgrag.embedding_models SET settings = %(settings)s
 WHERE id = %(model_id)s AND settings = '{}';

-- name: model_name_dimension
-- The name and dimension of a model.
SELECT name, dimension FROM pgrag.embedding_models WHERE id = %(model_id)s;

-- name: collection_by_name
-- A collection's settings (chunking: settings ->> 'chunking', absent for the fixed chunker).
SELECT id, name, text_config, model_id, chunk_tokens, chunk_overlap,
       coalesce(settings ->> 'chunking', 'fixed')
  FROM pgrag.collections WHERE name = %(name)s;

-- name: record_chunking
-- Record how a collection's documents are chunked (pgrag ingest --chunking).
UPDATE pgrag.collections
   SET settings = settings || jsonb_build_object('chunking', %(chunking)s::text)
 WHERE id = %(collection_id)s;

-- name: collection_id
-- The id of a collection.
SELECT id FROM pgrag.collections WHERE name = %(name)s;

-- name: list_collections
-- Every collection the session may see, with its model and counts (restricted roles too).
SELECT name, model, dimension, documents, chunks, estimated FROM pgrag.collections_v2();
