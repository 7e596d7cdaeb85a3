-- name: model_indexes
-- Each model a collection uses (not retired) that should have an HNSW index, and what its
-- index is: valid, its access method and operator class, its expression and its predicate
-- (what pgrag.model_index_ddl builds: hnsw, <type>_<distance>_ops, embedding::<type>(DIM),
-- model_id = ID).
SELECT m.id, m.name, 'pgrag.chunk_embeddings_hnsw_' || m.id,
       coalesce(i.indisvalid, false),
       (SELECT a.amname::text FROM pg_class x JOIN pg_am a ON a.oid = x.relam
         WHERE x.oid = i.indexrelid),
       (SELECT o.opcname::text FROM pg_opclass o WHERE o.oid = i.indclass[0]),
       m.index_type || CASE m.distance WHEN 'cosine' THEN '_cosine_ops'
                                       WHEN 'l2' THEN '_l2_ops' ELSE '_ip_ops' END,
       pg_get_indexdef(i.indexrelid, 1, true),
       m.index_type || '(' || m.dimension || ')',
       pg_get_expr(i.indpred, i.indrelid),
       '(model_id = ' || m.id || ')',
       (SELECT x.reloptions FROM pg_class x WHERE x.oid = i.indexrelid)
  FROM pgrag.embedding_models m
  LEFT JOIN pg_index i ON i.indexrelid = to_regclass('pgrag.chunk_embeddings_hnsw_' || m.id)
 WHERE EXISTS (SELECT 1 FROM pgrag.collection_models cm
                WHERE cm.model_id = m.id AND cm.status <> 'retired')
   AND pgrag.model_index_ddl(m.id) IS NOT NULL
 ORDER BY m.id;

-- name: stray_model_indexes
-- HNSW indexes named for a model that no collection uses (or that does not exist); with
-- %(without)s a collection's id, as if that collection were gone (pgrag collections delete).
SELECT c.oid::regclass::text
  FROM pg_class c
 WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind IN ('i', 'I')
   AND c.relname ~ '^chunk_embeddings_hnsw_[0-9]+$'
   AND NOT EXISTS (SELECT 1 FROM pgrag.collection_models cm
                    WHERE cm.model_id = substring(c.relname FROM '[0-9]+$')::integer
                      AND cm.status <> 'retired'
                      AND cm.collection_id IS DISTINCT FROM %(without)s::integer)
 ORDER BY 1;

-- name: unqueued
-- Per collection and model in use (active or standby): chunks with no vector of it and no
-- queue entry for it, which nothing would ever embed. (A model still building is backfilled
-- by pgrag models reembed.)
SELECT c.name, e.name, count(*)
  FROM ONLY pgrag.chunks k
  JOIN pgrag.collections c ON c.id = k.collection_id
  JOIN pgrag.collection_models m
    ON m.collection_id = k.collection_id AND m.status IN ('active', 'standby')
  JOIN pgrag.embedding_models e ON e.id = m.model_id
 WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings v
                    WHERE v.collection_id = k.collection_id AND v.model_id = m.model_id
                      AND v.chunk_id = k.id)
   AND NOT EXISTS (SELECT 1 FROM pgrag.embedding_queue q
                    WHERE q.model_id = m.model_id AND q.chunk_id = k.id)
 GROUP BY c.name, e.name
 ORDER BY c.name, e.name;

-- name: sequence_position
-- An identity sequence's next value and the largest value its column holds (the table and
-- column are composed in, as identifiers).
SELECT coalesce(s.last_value + s.increment_by, s.start_value),
       (SELECT max({column}) FROM {table})
  FROM pg_sequences s
 WHERE s.schemaname || '.' || s.sequencename = %(sequence)s;

-- name: running_as_superuser
SELECT rolsuper FROM pg_roles WHERE rolname = current_user;

-- name: replication_role
-- session_replication_role as this session has it, and where that comes from.
SELECT setting, source FROM pg_settings WHERE name = 'session_replication_role';

-- name: serial_sequence
-- The sequence an identity column draws from now (whatever it is called).
SELECT pg_get_serial_sequence(%(table)s, %(column)s);

-- name: partitions_missing
-- Collections without their partition of pgrag.chunk_embeddings (ids and names).
SELECT k.id, k.name FROM pgrag.collections k
 WHERE NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                    WHERE i.inhparent = 'pgrag.chunk_embeddings'::regclass
                      AND c.relname = pgrag.collection_partition_name(k.id))
 ORDER BY k.id;

-- name: partitions_orphaned
-- Partitions of pgrag.chunk_embeddings whose collection was deleted.
SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'pgrag.chunk_embeddings'::regclass
   AND NOT EXISTS (SELECT 1 FROM pgrag.collections k
                    WHERE c.relname = pgrag.collection_partition_name(k.id))
 ORDER BY 1;

-- name: partition_grants
-- Privileges on a partition of pgrag.chunk_embeddings held by a role other than its owner: a
-- partition has no row-level security of its own (reads through the parent have the parent's),
-- so a grant on it would show every row of the collection.
SELECT c.relname::text, array_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                                ELSE pg_get_userbyid(a.grantee)::text END)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
       aclexplode(c.relacl) a
 WHERE i.inhparent = 'pgrag.chunk_embeddings'::regclass AND a.grantee <> c.relowner
 GROUP BY c.relname ORDER BY 1;

-- name: stray_vectors
-- Vectors whose chunk or model is gone, and vectors filed under another collection than their
-- chunk's (the triggers in place of foreign keys keep both from happening, but for a delete in
-- REPEATABLE READ or SERIALIZABLE racing a write of the vector, or writes with triggers off).
SELECT count(*) FILTER (WHERE c.id IS NULL OR m.id IS NULL),
       count(*) FILTER (WHERE c.collection_id <> e.collection_id AND m.id IS NOT NULL)
  FROM pgrag.chunk_embeddings e
  LEFT JOIN pgrag.chunks c ON c.id = e.chunk_id
  LEFT JOIN pgrag.embedding_models m ON m.id = e.model_id;
