-- name: settle
-- Set the visibility map and refresh planner statistics of the tables a load wrote to.
VACUUM (ANALYZE) pgrag.keyword_postings, pgrag.keyword_df, pgrag.keyword_totals,
       pgrag.chunks, pgrag.documents, pgrag.chunk_embeddings;

-- name: stored_vectors
-- Every chunk's document id (metadata doc_id) and vector of the collection's active model.
SELECT d.metadata ->> 'doc_id', e.embedding FROM pgrag.chunk_embeddings e
  JOIN pgrag.chunks c ON c.id = e.chunk_id AND c.collection_id = e.collection_id
  JOIN pgrag.documents d ON d.id = c.document_id
  JOIN pgrag.collections k ON k.id = c.collection_id AND k.model_id = e.model_id
 WHERE k.name = %(collection)s ORDER BY c.id;
