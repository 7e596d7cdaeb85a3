-- name: health
-- Each model a collection uses (not retired), its HNSW index, that index's state and whether
-- someone holds the model's build lock (pgrag.ensure_model_index's), and the index's oid
-- (NULL when missing). The state: ok (valid, and what pgrag.model_index_ddl builds), missing,
-- invalid (left by an interrupted CREATE INDEX CONCURRENTLY), wrong (valid, but on another
-- table or with another access method, operator class, expression or predicate: searches
-- cannot use it; judged as pgrag.ensure_model_index and pgrag db check judge it), or none
-- (over the dimensions HNSW indexes: searched exactly, by design).
SELECT m.id, m.name, 'chunk_embeddings_hnsw_' || m.id,
       CASE WHEN pgrag.model_index_ddl(m.id) IS NULL THEN 'none'
            WHEN i.indexrelid IS NULL THEN 'missing'
            WHEN NOT i.indisvalid THEN 'invalid'
            WHEN i.indrelid <> 'pgrag.chunk_embeddings'::regclass
              OR i.indnatts <> 1
              OR a.amname IS DISTINCT FROM 'hnsw'
              OR o.opcname::text IS DISTINCT FROM
                 m.index_type || CASE m.distance WHEN 'cosine' THEN '_cosine_ops'
                                                 WHEN 'l2' THEN '_l2_ops' ELSE '_ip_ops' END
              OR strpos(coalesce(pg_get_indexdef(i.indexrelid, 1, true), ''),
                        m.index_type || '(' || m.dimension || ')') = 0
              OR pg_get_expr(i.indpred, i.indrelid) IS DISTINCT FROM '(model_id = ' || m.id || ')'
            THEN 'wrong'
            ELSE 'ok' END,
       EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                  AND l.classid = hashtext('pgrag.model_index')::oid
                  AND l.objid = m.id::oid),
       i.indexrelid::bigint
  FROM pgrag.embedding_models m
  LEFT JOIN pg_index i ON i.indexrelid = to_regclass('pgrag.chunk_embeddings_hnsw_' || m.id)
  LEFT JOIN pg_class x ON x.oid = i.indexrelid
  LEFT JOIN pg_am a ON a.oid = x.relam
  LEFT JOIN pg_opclass o ON o.oid = i.indclass[0]
 WHERE EXISTS (SELECT 1 FROM pgrag.collection_models cm
                WHERE cm.model_id = m.id AND cm.status <> 'retired')
    OR m.id = ANY (%(models)s)
 ORDER BY m.id;

-- name: owns_vectors
-- Whether the session's role owns pgrag.chunk_embeddings (and so may build its indexes
-- CONCURRENTLY, outside any transaction).
SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class
 WHERE oid = 'pgrag.chunk_embeddings'::regclass;

-- name: model_index_ddl
-- The statement that creates a model's HNSW index on the parent table only (invalid until each
-- partition's is attached).
SELECT pgrag.model_index_ddl(%(model_id)s, true);

-- name: unbuilt_partitions
-- The partitions without an index attached to the model's, and the name theirs gets.
SELECT partition_name, index_name FROM pgrag.model_index_unbuilt(%(model_id)s);

-- name: partition_index_ddl
-- The CREATE INDEX CONCURRENTLY statement of a model's HNSW index on one partition.
SELECT pgrag.model_index_partition_ddl(%(model_id)s, %(partition)s, true);

-- name: invalid_index
-- Whether an index of this name exists and is invalid.
SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%(name)s) AND NOT indisvalid);

-- name: attached_count
-- How many partitions' indexes are attached to the model's partitioned index.
SELECT count(*) FROM pg_inherits
 WHERE inhparent = to_regclass('pgrag.chunk_embeddings_hnsw_' || %(model_id)s);

-- name: one_second_lock_timeout
-- Give up on a lock that is not free within a second, for this session.
SET lock_timeout = '1s';

-- name: attach_index
-- A partition's index into the model's partitioned index.
ALTER INDEX {index} ATTACH PARTITION {child};

-- name: lock_build
-- Wait for the session lock on building the model's index (ensure_model_index takes it too).
SELECT pg_advisory_lock(hashtext('pgrag.model_index'), %(model_id)s);

-- name: try_lock_build
-- Take the session lock on building the model's index if no one holds it; whether it did.
SELECT pg_try_advisory_lock(hashtext('pgrag.model_index'), %(model_id)s);

-- name: unlock_build
-- Let go of the session lock on building the model's index.
SELECT pg_advisory_unlock(hashtext('pgrag.model_index'), %(model_id)s);

-- name: try_lock_build_xact
-- The build lock until this transaction ends, if no one holds it; whether it was taken.
SELECT pg_try_advisory_xact_lock(hashtext('pgrag.model_index'), %(model_id)s);

-- name: lock_timeout
-- Give up on any lock (and, for CREATE INDEX CONCURRENTLY, on older transactions) that is not
-- free within the given milliseconds, for this session.
SET lock_timeout = {ms};

-- name: build_memory
-- Memory for building an HNSW index in this session.
SET maintenance_work_mem = '512MB';

-- name: short_lock_timeout
-- Give up on a lock that is not free within a moment, in this transaction.
SET LOCAL lock_timeout = '1s';

-- name: build_memory_local
-- Memory for building an HNSW index, in this transaction.
SET LOCAL maintenance_work_mem = '512MB';

-- name: drop_index
-- Drop a partition's index (left invalid by a build that failed or was killed) without
-- blocking writes.
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: drop_partitioned_index
-- Drop a model's partitioned index (PostgreSQL drops those only in a transaction: the lock on
-- pgrag.chunk_embeddings is held for a moment, under the session's lock_timeout).
DROP INDEX IF EXISTS {index};

-- name: ensure_model_index
-- Build a model's HNSW index in this transaction if it is missing or invalid (the table's
-- writers wait for the build: for a role that may not build it CONCURRENTLY).
SELECT pgrag.ensure_model_index(%(model_id)s);

-- name: analyze_embeddings
-- Refresh the planner's statistics of the vectors after an index build (not waiting for a
-- VACUUM or another build).
ANALYZE (SKIP_LOCKED) pgrag.chunk_embeddings;

-- name: model_has_vectors
-- Whether any vector of the model is stored (for the table's owner, whom row-level security
-- does not filter: in every collection). One index probe.
SELECT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings WHERE model_id = %(model_id)s);

-- name: others_in_transaction
-- Whether another session of this database is in a transaction (or may be: its state is hidden
-- from this role), which a CREATE INDEX CONCURRENTLY started now would wait for.
SELECT EXISTS (
    SELECT 1 FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
       AND a.backend_type = 'client backend'
       AND (a.state IS NULL OR a.xact_start IS NOT NULL OR a.backend_xmin IS NOT NULL));
