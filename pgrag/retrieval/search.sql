-- name: collection_model
-- A collection's id and its active model's name and dimension (NULL, NULL without one).
SELECT c.id, m.name, m.dimension FROM pgrag.collections c
  LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id WHERE c.name = %(name)s;

-- name: search
-- One call of pgrag.search_v5 (kept on one line: `pgrag search --sql` prints it). A template:
-- search.call_sql composes the select list, each argument (a placeholder, or a literal for
-- --sql) and the named options given (", rrf_k => ...") into it with psycopg.sql.
SELECT {columns} FROM pgrag.search_v5({collection}, {query}, {embedding}, k => {k}, filter => {filter}{options});

-- name: read_as
-- The principals a pasted statement reads as, for the transaction (`pgrag search --sql
-- --principal ...`): the names are composed in as a literal.
SELECT set_config('pgrag.principals', {names}, true);

-- name: chunk_vectors
-- The stored vectors of some chunks under one model (for MMR).
SELECT e.chunk_id, e.embedding FROM pgrag.chunk_embeddings e
 WHERE e.collection_id = (SELECT k.id FROM pgrag.collections k WHERE k.name = %(c)s)
   AND e.model_id = %(m)s AND e.chunk_id = ANY(%(ids)s);
