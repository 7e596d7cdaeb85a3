-- name: record_answer
-- Record one question and its answer, under the principals in effect; the entry's id.
INSERT INTO pgrag.queries (collection_id, model_id, question, principals,
       retrieved, prompt, generator, answer, citations, abstained, abstain_reason,
       timings, checks)
SELECT c.id, c.model_id, %(q)s, pgrag.session_principals(), %(retrieved)s, %(prompt)s,
       %(generator)s, %(answer)s, %(citations)s, %(abstained)s, %(reason)s, %(timings)s,
       %(checks)s
  FROM pgrag.collections c WHERE c.name = %(collection)s RETURNING id;

-- name: prune_after_logging
-- Remove a bounded batch of the collection's entries its retention no longer keeps, never the
-- one just logged.
SELECT pgrag.prune_queries(%(collection)s, %(batch)s, %(keep)s);

-- name: trace
-- One recorded question and answer, with its collection's and model's names.
SELECT q.id, q.created_at, q.db_user, c.name, m.name, q.question, q.principals,
       q.retrieved, q.prompt, q.generator, q.answer, q.citations, q.abstained,
       q.abstain_reason, q.timings, q.checks
  FROM pgrag.queries q
  LEFT JOIN pgrag.collections c ON c.id = q.collection_id
  LEFT JOIN pgrag.embedding_models m ON m.id = q.model_id
 WHERE q.id = %(id)s;

-- name: chunk_sources
-- The source of each of some chunks' documents (chunks since removed are absent).
SELECT c.id, d.source FROM pgrag.chunks c
  JOIN pgrag.documents d ON d.id = c.document_id WHERE c.id = ANY (%(ids)s);
