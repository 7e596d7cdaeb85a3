-- name: documents_named
-- The documents a target names, with their chunk counts: a stored source as given or made
-- absolute, the files under a directory, or a JSON Lines file's records.
SELECT d.id, d.source, (SELECT count(*) FROM pgrag.chunks c
                        WHERE c.document_id = d.id)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s
   AND (d.source = ANY (%(exact)s)
        OR left(d.source, length(%(under)s)) = %(under)s
        OR (d.metadata ->> 'format' = 'jsonl'
            AND d.source = %(records)s || (d.metadata ->> 'record')));

-- name: documents_under
-- The documents stored from files under these directories, with their format, JSON Lines
-- record and chunk count.
SELECT d.id, d.source, d.metadata ->> 'format', d.metadata ->> 'record',
       (SELECT count(*) FROM pgrag.chunks c WHERE c.document_id = d.id)
  FROM pgrag.documents d
 WHERE d.collection_id = %(collection_id)s
   AND EXISTS (SELECT 1 FROM unnest(%(prefixes)s::text[]) p
                WHERE left(d.source, length(p)) = p);

-- name: hand_over_all
-- An identical document that stays inherits the chunks of each one deleted
-- (sql/functions/dedup_v1.sql).
SELECT pgrag.documents_hand_over_v1(d.id, d.collection_id, d.source, %(ids)s)
  FROM pgrag.documents d WHERE d.id = ANY (%(ids)s) ORDER BY d.source;

-- name: delete_chunks
-- The documents' chunks, in one statement, so that the keyword index's statement trigger
-- runs once (a cascade from documents would run it once per document).
DELETE FROM pgrag.chunks WHERE document_id = ANY (%(ids)s);

-- name: delete_documents
-- The documents.
DELETE FROM pgrag.documents WHERE id = ANY (%(ids)s);
