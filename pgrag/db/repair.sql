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
-- (CASCADE: and what the grantee granted on from it, whoever holds that now.)
REVOKE {privilege} ON FUNCTION {function} FROM {grantee} CASCADE;

-- name: revoke_relation
REVOKE {privilege} ON {relation} FROM {grantee} CASCADE;

-- name: revoke_column
REVOKE {privilege} ({column}) ON {relation} FROM {grantee} CASCADE;

-- name: revoke_schema
REVOKE {privilege} ON SCHEMA pgrag FROM {grantee} CASCADE;

-- name: revoke_sequence
REVOKE {privilege} ON SEQUENCE {relation} FROM {grantee} CASCADE;

-- name: grant_function
GRANT {privilege} ON FUNCTION {function} TO {grantee};

-- name: grant_relation
GRANT {privilege} ON {relation} TO {grantee};

-- name: grant_column
GRANT {privilege} ({column}) ON {relation} TO {grantee};

-- name: grant_sequence
GRANT {privilege} ON SEQUENCE {relation} TO {grantee};

-- name: drop_rule
DROP RULE IF EXISTS {rule} ON {table};

-- name: no_inherit
ALTER TABLE {child} NO INHERIT {parent};

-- name: drop_operator
DROP OPERATOR IF EXISTS {operator};

-- name: revoke_default
ALTER DEFAULT PRIVILEGES FOR ROLE {role} IN SCHEMA pgrag REVOKE {privilege} ON {objects} FROM {grantee};

-- name: enable_all_triggers
ALTER TABLE {table} ENABLE TRIGGER ALL;

-- name: set_logged
ALTER TABLE {table} SET LOGGED;

-- name: set_default
ALTER TABLE {table} ALTER COLUMN {column} SET DEFAULT {default};

-- name: drop_default
ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT;

-- name: set_not_null
ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL;

-- name: drop_not_null
ALTER TABLE {table} ALTER COLUMN {column} DROP NOT NULL;

-- name: set_owner
ALTER {kind} {object} OWNER TO {owner};

-- name: revoke_role
REVOKE {granted} FROM {role};

-- name: alter_role
ALTER ROLE {role} {attribute};

-- name: replica_identity_default
ALTER TABLE {table} REPLICA IDENTITY DEFAULT;

-- name: reset_options
ALTER TABLE {table} RESET ({options});

-- name: set_options
ALTER TABLE {table} SET ({options});

-- name: alter_sequence
ALTER SEQUENCE {sequence} AS {type} INCREMENT BY {increment} MINVALUE {min} MAXVALUE {max}
    START WITH {start} {cycle};

-- name: move_sequence
-- Past the largest value its column holds.
SELECT setval(%(sequence)s::regclass, %(value)s);

-- name: set_generated
-- {how}: ALWAYS or BY DEFAULT.
ALTER TABLE {table} ALTER COLUMN {column} SET GENERATED {how};

-- name: add_identity
ALTER TABLE {table} ALTER COLUMN {column} ADD GENERATED {how} AS IDENTITY;

-- name: drop_statistics
DROP STATISTICS IF EXISTS {statistics};

-- name: drop_type
DROP TYPE IF EXISTS {type};

-- name: drop_domain
DROP DOMAIN IF EXISTS {type};

-- name: rename_sequence
ALTER SEQUENCE {sequence} RENAME TO {name};

-- name: index_building
-- Whether another session holds the model's index build lock (pgrag.ensure_model_index's;
-- a CREATE INDEX CONCURRENTLY in progress leaves the index invalid until it is done).
SELECT EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                  AND l.classid = hashtext('pgrag.model_index')::oid
                  AND l.objid = %(model_id)s::oid AND l.pid <> pg_backend_pid());

-- name: create_partition
-- A collection's partition of pgrag.chunk_embeddings (sql/functions/partitions.sql).
SELECT pgrag.collection_partition(%(id)s);

-- name: drop_partition
-- An empty partition of a deleted collection (a moment's exclusive lock on the parent).
DROP TABLE IF EXISTS {table};

-- name: revoke_partition
-- Every privilege on a partition from the roles other than its owner.
REVOKE ALL ON {table} FROM {roles};

-- name: delete_orphan_vectors
-- Vectors whose chunk or model is gone.
DELETE FROM pgrag.chunk_embeddings e
 WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunks c WHERE c.id = e.chunk_id)
    OR NOT EXISTS (SELECT 1 FROM pgrag.embedding_models m WHERE m.id = e.model_id);

-- name: refile_vectors
-- Vectors filed under another collection than their chunk's, moved to the chunk's partition.
UPDATE pgrag.chunk_embeddings e SET collection_id = c.collection_id
  FROM pgrag.chunks c
 WHERE c.id = e.chunk_id AND c.collection_id <> e.collection_id;
