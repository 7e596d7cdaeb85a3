-- name: documents_named
-- The documents a target names (source, directory or JSON Lines file), with chunk counts.
SELECT d.id, d.source, (SELECT count(*) FROM pgrag.chunks c
                        WHERE c.document_id = d.id)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s
   AND (d.source = ANY (%(exact)s)
        OR left(d.source, length(%(under)s)) = %(under)s
        OR (d.metadata ->> 'format' = 'jsonl'
            AND d.source = %(records)s || (d.metadata ->> 'record')));

-- name: documents_of_source
-- The documents of a stored source (and a JSON Lines source's records), with chunk counts.
SELECT d.id, d.source, (SELECT count(*) FROM pgrag.chunks c
                        WHERE c.document_id = d.id)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s
   AND (d.source = %(source)s
        OR (d.metadata ->> 'format' = 'jsonl'
            AND d.source = %(records)s || (d.metadata ->> 'record')));

-- name: documents_under
-- Documents stored from files under these directories, with format, record and chunks.
SELECT d.id, d.source, d.metadata ->> 'format', d.metadata ->> 'record',
       (SELECT count(*) FROM pgrag.chunks c WHERE c.document_id = d.id)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s
   AND EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) p
                WHERE left(d.source, length(p)) = p);

-- name: hand_over_all
-- An identical document that stays inherits each deleted one's chunks (sql/functions/dedup.sql).
SELECT pgrag.documents_hand_over(d.id, d.collection_id, d.source, %(ids)s)
  FROM pgrag.documents d WHERE d.id = ANY (%(ids)s) ORDER BY d.source;

-- name: delete_chunks
-- Delete the documents' chunks in one statement (the keyword trigger then runs once).
DELETE FROM pgrag.chunks WHERE document_id = ANY (%(ids)s);

-- name: delete_documents
-- Delete the documents.
DELETE FROM pgrag.documents WHERE id = ANY (%(ids)s);
