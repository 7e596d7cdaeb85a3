-- name: model_indexes
-- Each model a collection uses (not retired) that should have an HNSW index, and whether it
-- has a valid one.
SELECT m.id, m.name, 'pgrag.chunk_embeddings_hnsw_' || m.id,
       coalesce((SELECT i.indisvalid FROM pg_index i
                  WHERE i.indexrelid = to_regclass('pgrag.chunk_embeddings_hnsw_' || m.id)), false)
  FROM pgrag.embedding_models m
 WHERE EXISTS (SELECT 1 FROM pgrag.collection_models cm
                WHERE cm.model_id = m.id AND cm.status <> 'retired')
   AND pgrag.model_index_ddl(m.id) IS NOT NULL
 ORDER BY m.id;

-- name: unqueued
-- Per collection and model in use (active or standby): chunks with no vector of it and no
-- queue entry for it, which nothing would ever embed. (A model still building is backfilled
-- by pgrag models reembed.)
SELECT c.name, e.name, count(*)
  FROM pgrag.chunks k
  JOIN pgrag.collections c ON c.id = k.collection_id
  JOIN pgrag.collection_models m
    ON m.collection_id = k.collection_id AND m.status IN ('active', 'standby')
  JOIN pgrag.embedding_models e ON e.id = m.model_id
 WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings v
                    WHERE v.model_id = m.model_id AND v.chunk_id = k.id)
   AND NOT EXISTS (SELECT 1 FROM pgrag.embedding_queue q
                    WHERE q.model_id = m.model_id AND q.chunk_id = k.id)
 GROUP BY c.name, e.name
 ORDER BY c.name, e.name;

-- name: ensure_model_index
SELECT pgrag.ensure_model_index(%(model_id)s);

-- name: drop_function
DROP FUNCTION IF EXISTS {function};

-- name: drop_trigger
DROP TRIGGER IF EXISTS {trigger} ON {table};

-- name: enable_trigger
ALTER TABLE {table} ENABLE TRIGGER {trigger};

-- name: enable_always_trigger
ALTER TABLE {table} ENABLE ALWAYS TRIGGER {trigger};

-- name: enable_replica_trigger
ALTER TABLE {table} ENABLE REPLICA TRIGGER {trigger};

-- name: disable_trigger
ALTER TABLE {table} DISABLE TRIGGER {trigger};

-- name: drop_policy
DROP POLICY IF EXISTS {policy} ON {table};

-- name: create_policy
CREATE POLICY {policy} ON {table} AS {permissive} FOR {command} TO {roles} {using} {check};

-- name: enable_rls
ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;

-- name: disable_rls
ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;

-- name: force_rls
ALTER TABLE {table} FORCE ROW LEVEL SECURITY;

-- name: no_force_rls
ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;

-- name: drop_index
DROP INDEX IF EXISTS {index};

-- name: drop_constraint
ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {constraint};

-- name: add_constraint
ALTER TABLE {table} ADD CONSTRAINT {constraint} {definition};

-- name: validate_constraint
ALTER TABLE {table} VALIDATE CONSTRAINT {constraint};

-- name: drop_view
DROP VIEW IF EXISTS {relation};

-- name: revoke_function
REVOKE {privilege} ON FUNCTION {function} FROM {grantee};

-- name: revoke_relation
REVOKE {privilege} ON {relation} FROM {grantee};

-- name: revoke_column
REVOKE {privilege} ({column}) ON {relation} FROM {grantee};

-- name: revoke_schema
REVOKE {privilege} ON SCHEMA pgrag FROM {grantee};

-- name: revoke_sequence
REVOKE {privilege} ON SEQUENCE {relation} FROM {grantee};
