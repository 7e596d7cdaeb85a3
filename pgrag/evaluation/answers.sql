-- name: foreign_documents
-- How many documents of the collection are not among %(sources)s.
SELECT count(*) FROM pgrag.documents d JOIN pgrag.collections c ON c.id = d.collection_id
 WHERE c.name = %(collection)s AND d.source <> ALL (%(sources)s);

-- name: save_threshold
-- Record a confidence threshold on the collection's active model; returns the model's name.
UPDATE pgrag.embedding_models m SET min_confidence = %(threshold)s
  FROM pgrag.collections c WHERE c.name = %(collection)s AND m.id = c.model_id
RETURNING m.name;
