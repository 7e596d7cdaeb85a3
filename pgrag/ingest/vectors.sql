-- name: model_index_type
-- The index type of the model given vectors are written for: the collection's active model
-- (model_id), or for a new collection the registered model of this name and dimension, if any.
SELECT index_type FROM pgrag.embedding_models
 WHERE CASE WHEN %(model_id)s::integer IS NULL
            THEN name = %(name)s AND dimension = %(dimension)s
            ELSE id = %(model_id)s END;
