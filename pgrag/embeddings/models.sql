-- name: models_named
-- The registered models called %(name)s (more than one is an error the caller reports).
SELECT m.id, m.name, m.provider, m.dimension, m.distance, m.normalized, m.max_tokens,
       m.index_type, m.settings
  FROM pgrag.embedding_models m WHERE m.name = %(name)s
 ORDER BY m.id;

-- name: models_by_id
-- The registered models whose ids are in %(ids)s.
SELECT m.id, m.name, m.provider, m.dimension, m.distance, m.normalized, m.max_tokens,
       m.index_type, m.settings
  FROM pgrag.embedding_models m WHERE m.id = ANY (%(ids)s);

-- name: collection_id
-- The id of the collection called %(collection)s, if any.
SELECT id FROM pgrag.collections WHERE name = %(collection)s;

-- name: collection_models
-- The collection called %(collection)s (no row: there is none) with its models and their
-- status there, the active one first (one row of NULLs after the id: it has none yet).
SELECT c.id, m.id, m.name, m.provider, m.dimension, m.distance, m.normalized, m.max_tokens,
       m.index_type, m.settings, cm.status
  FROM pgrag.collections c
  LEFT JOIN pgrag.collection_models cm ON cm.collection_id = c.id
  LEFT JOIN pgrag.embedding_models m ON m.id = cm.model_id
 WHERE c.name = %(collection)s
 ORDER BY cm.status <> 'active', cm.added_at, m.name;

-- name: models_with_collections
-- Every registered model with the collections that use it, as "name (status)".
SELECT m.id, m.name, m.provider, m.dimension, m.distance, m.normalized, m.max_tokens,
       m.index_type, m.settings,
       coalesce(array_agg(c.name || ' (' || cm.status || ')' ORDER BY c.name)
                FILTER (WHERE c.id IS NOT NULL), '{}')
  FROM pgrag.embedding_models m
  LEFT JOIN pgrag.collection_models cm ON cm.model_id = m.id
  LEFT JOIN pgrag.collections c ON c.id = cm.collection_id
 GROUP BY m.id ORDER BY m.id;

-- name: model_name_taken
-- A row when a model called %(name)s is registered already.
SELECT 1 FROM pgrag.embedding_models WHERE name = %(name)s;

-- name: insert_model
-- Register an embedding model.
INSERT INTO pgrag.embedding_models (name, provider, dimension, distance, normalized,
                                    max_tokens, index_type, settings)
VALUES (%(name)s, %(provider)s, %(dimension)s, %(distance)s, %(normalized)s,
        %(max_tokens)s, %(index_type)s, %(settings)s);
