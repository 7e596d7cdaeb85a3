-- name: collection
-- The collection to tune, whether any of its chunks has a vector of its active model, and its
-- fusion setting (NULL: the built-in fusion).
SELECT c.id, EXISTS (SELECT 1 FROM pgrag.chunk_embeddings ce
                      WHERE ce.collection_id = c.id AND ce.model_id = c.model_id),
       c.settings -> 'fusion'
  FROM pgrag.collections c WHERE c.name = %(collection)s;

-- name: check_setting
-- A search that reads the collection's fusion setting, so that search_v5 names what is wrong
-- with it before any question is written.
SELECT 1 FROM pgrag.search_v5(%(collection)s, 'pgrag', NULL, k => 1, fallback_chunks => 0);

-- name: sample_chunks
-- A seeded sample of the collection's chunks (an order by a hash of the id and the seed), with
-- their documents' titles.
SELECT ch.id, d.title, ch.content
  FROM pgrag.chunks ch
  JOIN pgrag.collections c ON c.id = ch.collection_id
  JOIN pgrag.documents d ON d.id = ch.document_id
 WHERE c.name = %(collection)s
 ORDER BY md5(ch.id::text || ':' || %(seed)s)
 LIMIT %(n)s;

-- name: keyword_list
-- The keyword arm's best chunks with their BM25 scores (no fallback: unmatched words give none).
-- The arm's weight is given, so that a collection's fusion setting cannot switch it off.
SELECT chunk_id, keyword_score
  FROM pgrag.search_v5(%(collection)s, %(query)s, NULL, k => %(k)s, fallback_chunks => 0,
                       vector_weight => 1, keyword_weight => 1);

-- name: vector_list
-- The vector arm's nearest chunks with their distances, searched as the hybrid searches at
-- that depth (the same HNSW search list).
SELECT chunk_id, vector_distance
  FROM pgrag.search_v5(%(collection)s, NULL, %(embedding)s, k => %(k)s, vector_depth => %(k)s,
                       vector_weight => 1, keyword_weight => 1);

-- name: save_fusion
-- Record the tuned fusion on the collection, where search_v5 reads it.
UPDATE pgrag.collections SET settings = settings || jsonb_build_object('fusion', %(fusion)s::jsonb)
 WHERE name = %(collection)s;
