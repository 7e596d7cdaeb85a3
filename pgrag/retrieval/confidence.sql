-- name: active_model
-- A collection's active model: name, distance, calibrated threshold, and what tells the
-- bundled model (provider, package, whether it was loaded from a path).
SELECT m.name, m.distance, m.min_confidence, m.provider,
       m.settings ->> 'package', m.settings ? 'path'
  FROM pgrag.collections c
  JOIN pgrag.embedding_models m ON m.id = c.model_id WHERE c.name = %(c)s;
