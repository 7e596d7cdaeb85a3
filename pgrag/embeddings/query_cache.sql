-- name: cached_vector
-- The cached vector (as text) of a query digest under a model, for this session's scope.
SELECT pgrag.query_cache_get(%(model_id)s, %(digest)s);

-- name: cache_vector
-- Cache a query's vector (as text) under a model, for this session's scope.
SELECT pgrag.query_cache_put(%(model_id)s, %(digest)s, %(vector)s);
