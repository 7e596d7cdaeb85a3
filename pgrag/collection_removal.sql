-- name: unrestricted
-- Whether this session reads every document (no principals of its own: sql/functions/access.sql).
SELECT pgrag.unrestricted();

-- name: session_principals
-- The principals this session reads as.
SELECT pgrag.session_principals();

-- name: lock_collection
-- The collection's row, locked until commit: a document written into it now waits (its foreign
-- key check) and then fails, instead of being added to a collection that is going. No row: a
-- delete that got there first.
SELECT 1 FROM pgrag.collections WHERE id = %(id)s FOR UPDATE;

-- name: contents
-- What goes: documents, chunks and logged questions of the collection; chunks of its documents
-- that were moved to other collections; chunks moved into it from other collections' documents.
SELECT (SELECT count(*) FROM pgrag.documents WHERE collection_id = %(id)s),
       (SELECT count(*) FROM pgrag.chunks WHERE collection_id = %(id)s),
       (SELECT count(*) FROM pgrag.queries WHERE collection_id = %(id)s),
       (SELECT count(*) FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id
         WHERE d.collection_id = %(id)s AND c.collection_id <> %(id)s),
       (SELECT count(*) FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id
         WHERE c.collection_id = %(id)s AND d.collection_id <> %(id)s);

-- name: delete_questions
-- The question log's entries of the collection (they quote its documents; its foreign key
-- would only unset their collection, and retention is per collection).
DELETE FROM pgrag.queries WHERE collection_id = %(id)s;

-- name: delete_chunks
-- Every chunk of the collection, in one statement (the keyword index's trigger runs once).
DELETE FROM pgrag.chunks WHERE collection_id = %(id)s;

-- name: delete_documents
-- Every document of the collection (and, by their foreign key, any chunk of theirs that was
-- moved to another collection).
DELETE FROM pgrag.documents WHERE collection_id = %(id)s;

-- name: delete_collection
-- The collection; its foreign keys take its keyword statistics, model links and conversations.
DELETE FROM pgrag.collections WHERE id = %(id)s;

-- name: partition
-- The name of the collection's partition of pgrag.chunk_embeddings, if it has one.
SELECT (SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = to_regclass('pgrag.chunk_embeddings')
           AND c.relname = pgrag.collection_partition_name(%(id)s));

-- name: short_lock_timeout
-- Wait at most a second for the lock on pgrag.chunk_embeddings that dropping a partition or a
-- partitioned index takes (searches queue behind a waiting exclusive lock).
SET LOCAL lock_timeout = '1s';

-- name: drop_partition
-- The collection's partition, empty now.
DROP TABLE IF EXISTS {table};

-- name: drop_index
-- A model's partitioned HNSW index that no collection uses now.
DROP INDEX IF EXISTS {index};
