-- name: keep_old_vectors
-- Keep a streamed document's stored vectors by content hash until commit (for reuse).
CREATE TEMP TABLE pgrag_old_vectors ON COMMIT DROP AS
SELECT c.content_hash, e.embedding FROM pgrag.chunks c
  JOIN pgrag.chunk_embeddings e
    ON e.collection_id = c.collection_id AND e.chunk_id = c.id AND e.model_id = %(model_id)s
  JOIN pgrag.documents d ON d.id = c.document_id
 WHERE d.collection_id = %(collection_id)s AND d.source = %(source)s;

-- name: index_old_vectors
-- Looked up once per group of a streamed document: by index, not a scan of them all.
CREATE INDEX ON pgrag_old_vectors (content_hash);

-- name: old_vectors
-- The kept vectors (keep_old_vectors) of these content hashes, one per hash.
SELECT DISTINCT ON (content_hash) content_hash, embedding
  FROM pgrag_old_vectors WHERE content_hash = ANY (%(hashes)s);

-- name: lock_collection
-- Lock the collection until commit: its active model, and whether it has others in use.
SELECT c.model_id,
       EXISTS (SELECT 1 FROM pgrag.collection_models m WHERE m.collection_id = c.id
               AND m.status <> 'retired' AND m.model_id <> %(model_id)s)
  FROM pgrag.collections c WHERE c.id = %(collection_id)s FOR SHARE OF c;

-- name: enqueue_chunks
-- Queue chunks for the collection's other models (pgrag worker embeds them).
SELECT pgrag.embedding_enqueue(%(collection_id)s, %(chunk_ids)s);

-- name: lock_original
-- The content and readers of a copy's original, if it is still one, locked until commit.
SELECT content_hash, principals FROM pgrag.documents
 WHERE collection_id = %(collection_id)s AND source = %(source)s
   AND NOT metadata ? 'duplicate_of' AND body IS NULL FOR SHARE;

-- name: new_chunk_ids
-- Ids for n new chunks.
SELECT nextval(pg_get_serial_sequence('pgrag.chunks', 'id')) FROM generate_series(1, %(n)s);

-- name: upsert_document
-- Insert or update a document's row: readers as given, else public (new) or as they were.
INSERT INTO pgrag.documents (collection_id, source, title, metadata, content_hash, principals)
VALUES (%(collection_id)s, %(source)s, %(title)s, %(metadata)s, %(content_hash)s,
        coalesce(%(allow)s::text[], '{public}'))
ON CONFLICT (collection_id, source) DO UPDATE SET title = EXCLUDED.title,
       metadata = EXCLUDED.metadata, content_hash = EXCLUDED.content_hash,
       principals = coalesce(%(allow)s::text[], pgrag.documents.principals),
       -- the file is its source now, not a body once written with SQL (migration 0008)
       body = NULL, updated_at = now()
RETURNING id, principals;

-- name: lock_documents
-- Lock, in one statement and in source order, every stored document a batch will lock as it
-- writes: its own, the originals its copies point to, and the copies of the documents it
-- rewrites (documents_hand_over moves them). Taken any later, in the batch's order, such
-- locks could cross another ingest's and deadlock. (Each copy is found through the metadata
-- index, @>.)
SELECT d.id FROM pgrag.documents d
 WHERE d.id IN (SELECT x.id FROM pgrag.documents x
                 WHERE x.collection_id = %(collection_id)s AND x.source = ANY (%(sources)s)
                UNION ALL
                SELECT x.id FROM unnest(%(rewritten)s::text[]) AS r(source)
                  JOIN pgrag.documents x
                    ON x.collection_id = %(collection_id)s
                   AND x.metadata @> jsonb_build_object('duplicate_of', r.source))
 ORDER BY d.source, d.id
   FOR UPDATE OF d;

-- name: insert_documents
-- upsert_document for a batch of documents planned as new, in input order (so concurrent
-- writers lock rows in the same order): each one's source, id, readers and whether a
-- concurrent writer stored it first (then it is updated, and its chunks must go).
INSERT INTO pgrag.documents AS d (collection_id, source, title, metadata, content_hash, principals)
SELECT %(collection_id)s, t.source, t.title, t.metadata::jsonb, t.content_hash,
       coalesce(%(allow)s::text[], '{public}')
  FROM unnest(%(sources)s::text[], %(titles)s::text[], %(metadata)s::text[],
              %(hashes)s::text[]) WITH ORDINALITY AS t(source, title, metadata, content_hash, n)
 ORDER BY t.n
ON CONFLICT (collection_id, source) DO UPDATE SET title = EXCLUDED.title,
       metadata = EXCLUDED.metadata, content_hash = EXCLUDED.content_hash,
       principals = coalesce(%(allow)s::text[], d.principals),
       body = NULL, updated_at = now()
RETURNING d.source, d.id, d.principals, d.xmax <> 0;

-- name: delete_documents_chunks
-- Delete every chunk of these documents (new ones a concurrent writer stored first).
DELETE FROM pgrag.chunks WHERE document_id = ANY (%(document_ids)s);

-- name: hand_over
-- Identical documents keep a rewritten document's old content (sql/functions/dedup.sql).
SELECT pgrag.documents_hand_over(%(document_id)s, %(collection_id)s, %(source)s);

-- name: stored_chunks
-- A document's stored chunks, in order: what identifies each one's content.
SELECT id, content_hash, page, section, context FROM pgrag.chunks
 WHERE document_id = %(document_id)s ORDER BY ordinal;

-- name: contexts_asked_for
-- Kept chunks whose context line (or its absence) was asked for this document version.
UPDATE pgrag.chunks SET context_for = %(content_hash)s
 WHERE id = ANY (%(ids)s) AND context_for IS DISTINCT FROM %(content_hash)s;

-- name: delete_chunks_except
-- Delete a document's chunks but those kept.
DELETE FROM pgrag.chunks WHERE document_id = %(document_id)s AND id <> ALL (%(keep)s);

-- name: park_ordinals
-- Move kept chunks out of the way of the new ordinals ((document, ordinal) is unique).
UPDATE pgrag.chunks SET ordinal = -1 - ordinal WHERE id = ANY (%(ids)s);

-- name: place_ordinals
-- Put kept chunks at their new ordinals.
UPDATE pgrag.chunks c SET ordinal = m.ordinal
  FROM unnest(%(ids)s::bigint[], %(ordinals)s::int[]) AS m(id, ordinal)
 WHERE c.id = m.id;

-- name: staging_chunks_table
-- A session-private table shaped like the chunk columns ingest writes, emptied at each commit.
CREATE TEMP TABLE IF NOT EXISTS pgrag_staging_chunks ON COMMIT DELETE ROWS AS
SELECT id, document_id, collection_id, ordinal, content, section, page, token_count,
       content_hash, principals, text_config, context, context_for FROM pgrag.chunks
  WITH NO DATA;

-- name: staging_vectors_table
-- A session-private table shaped like the vector columns ingest writes, emptied at each commit.
CREATE TEMP TABLE IF NOT EXISTS pgrag_staging_vectors ON COMMIT DELETE ROWS AS
SELECT model_id, chunk_id, embedding FROM pgrag.chunk_embeddings WITH NO DATA;

-- name: copy_chunks
-- Chunks into the staging table, in binary.
COPY pgrag_staging_chunks (id, document_id, collection_id, ordinal, content,
     section, page, token_count, content_hash, principals, text_config, context, context_for)
FROM STDIN (FORMAT BINARY);

-- name: copy_vectors
-- Vectors into the staging table, in binary.
COPY pgrag_staging_vectors (model_id, chunk_id, embedding) FROM STDIN (FORMAT BINARY);

-- name: insert_staged_chunks
-- The staged chunks into pgrag.chunks (through its row-level security policies).
INSERT INTO pgrag.chunks (id, document_id, collection_id, ordinal, content, section,
       page, token_count, content_hash, principals, text_config, context, context_for)
SELECT id, document_id, collection_id, ordinal, content, section, page, token_count,
       content_hash, principals, text_config, context, context_for FROM pgrag_staging_chunks;

-- name: insert_staged_vectors
-- The staged vectors into pgrag.chunk_embeddings, each in its chunk's collection's partition
-- (the chunk staged with it, else the stored one).
INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)
SELECT v.model_id, v.chunk_id, v.embedding,
       coalesce(s.collection_id,
                (SELECT c.collection_id FROM pgrag.chunks c WHERE c.id = v.chunk_id))
  FROM pgrag_staging_vectors v LEFT JOIN pgrag_staging_chunks s ON s.id = v.chunk_id;

-- name: empty_staged_chunks
-- Empty the chunk staging table. TRUNCATE, not DELETE: a streamed document copies many groups
-- in one transaction, and the dead rows a DELETE leaves (no vacuum within a transaction) made
-- every later group's INSERT ... SELECT scan all the earlier ones: quadratic in the file.
TRUNCATE pgrag_staging_chunks;

-- name: empty_staged_vectors
-- Empty the vector staging table (TRUNCATE, as above).
TRUNCATE pgrag_staging_vectors;

-- name: set_access
-- New readers for a stored document; its chunks, vectors and postings follow (trigger).
UPDATE pgrag.documents SET principals = %(principals)s, updated_at = now()
 WHERE id = %(document_id)s;

-- name: ensure_acl
-- The access list of these principals, created if it is new (pgrag.acl_for).
SELECT pgrag.acl_for(%(principals)s::text[]);
