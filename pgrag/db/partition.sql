-- name: try_lock
-- One `pgrag db partition` per database at a time (a session lock); whether it was taken.
SELECT pg_try_advisory_lock(hashtext('pgrag.partition'), 0);

-- name: holder
-- The session that holds that lock, if this role may see it.
SELECT a.pid, a.usename, a.application_name FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.classid = hashtext('pgrag.partition')::oid AND l.objid = 0
   AND l.pid <> pg_backend_pid();

-- name: nonpositive_collections
-- The collections whose id could not name a partition (NULL: none).
SELECT string_agg(quote_literal(name), ', ' ORDER BY id) FROM pgrag.collections WHERE id <= 0;

-- name: check_client
-- A statement of this session stops within a second of its client going away (killed), rather
-- than running on, holding the run's lock, to its end (PostgreSQL 14 and later have it).
DO $do$
BEGIN
    PERFORM set_config('client_connection_check_interval', '1s', false);
EXCEPTION WHEN undefined_object THEN
    NULL;
END
$do$;

-- name: layout
-- Whether pgrag.chunk_embeddings is partitioned already, whether the session's role owns schema
-- pgrag, and how many vectors the table holds (the planner's estimate; -1: never counted).
SELECT c.relkind = 'p', pg_has_role(current_user, n.nspowner, 'USAGE'), c.reltuples::bigint
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = to_regclass('pgrag.chunk_embeddings');

-- name: vector_on_search_path
-- pgvector's schema first on this session's search_path (its types named unqualified).
SELECT set_config('search_path', format('%I, ', n.nspname) || current_setting('search_path'), false)
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'vector';

-- name: lock_briefly
-- Wait a moment at most for a lock, in this transaction.
SET LOCAL lock_timeout = '200ms';

-- name: lock_vectors
-- Writes to the chunks and today's vectors held off while the triggers are put on them, in
-- the order writers take them (chunks, then vectors): the other order waits for a writer that
-- holds chunks and waits for the vectors, over and over.
LOCK TABLE pgrag.chunks, pgrag.chunk_embeddings IN SHARE ROW EXCLUSIVE MODE;

-- name: create_next
-- The partitioned table beside today's (the same definition as sql/schema/tables.sql's, under
-- another name until the upgrade switches over). Its vectors follow today's table's, whose
-- foreign keys still hold them to their chunks and models.
CREATE TABLE IF NOT EXISTS pgrag.chunk_embeddings_next (
    model_id      integer NOT NULL,
    chunk_id      bigint NOT NULL,
    embedding     vector NOT NULL,
    acl_id        integer NOT NULL,
    collection_id integer NOT NULL,
    PRIMARY KEY (model_id, chunk_id, collection_id)
) PARTITION BY LIST (collection_id);

-- name: create_next_chunk_index
CREATE INDEX IF NOT EXISTS chunk_embeddings_next_chunk_idx ON pgrag.chunk_embeddings_next (chunk_id);

-- name: create_progress
-- Where the copy stands: the last (model, chunk) copied, how many, whether all is ready.
CREATE TABLE IF NOT EXISTS pgrag.partition_progress (
    id          integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    model_id    integer NOT NULL DEFAULT 0,
    chunk_id    bigint NOT NULL DEFAULT 0,
    copied      bigint NOT NULL DEFAULT 0,
    ready       boolean NOT NULL DEFAULT false,
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- name: start_progress
INSERT INTO pgrag.partition_progress DEFAULT VALUES ON CONFLICT DO NOTHING;

-- name: create_next_partition_function
-- A collection's partition of the new table (named as sql/functions/partitions.sql names it).
CREATE OR REPLACE FUNCTION pgrag.partition_next_partition(p_collection_id integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF to_regclass('pgrag.' || quote_ident('chunk_embeddings_c' || p_collection_id)) IS NULL THEN
        EXECUTE format('CREATE TABLE pgrag.%I PARTITION OF pgrag.chunk_embeddings_next FOR VALUES IN (%s)',
                       'chunk_embeddings_c' || p_collection_id, p_collection_id);
    END IF;
END $fn$;

-- name: guard_next_partition_function
REVOKE EXECUTE ON FUNCTION pgrag.partition_next_partition(integer) FROM PUBLIC;

-- name: create_next_collection_function
-- A new collection's partition, from a trigger (pgrag_writer creates collections).
CREATE OR REPLACE FUNCTION pgrag.partition_next_collection() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    PERFORM pgrag.partition_next_partition(NEW.id);
    RETURN NULL;
END $fn$;

-- name: create_mirror_function
-- Every write to today's table, repeated on the new one in the same transaction: an insert or
-- an update as an upsert (the copy may have been there first), a delete as a delete.
CREATE OR REPLACE FUNCTION pgrag.partition_mirror() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        DELETE FROM pgrag.chunk_embeddings_next x USING old_rows o
         WHERE x.model_id = o.model_id AND x.chunk_id = o.chunk_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO pgrag.chunk_embeddings_next (model_id, chunk_id, embedding, acl_id, collection_id)
        SELECT n.model_id, n.chunk_id, n.embedding, n.acl_id, c.collection_id
          FROM new_rows n JOIN pgrag.chunks c ON c.id = n.chunk_id
        ON CONFLICT (model_id, chunk_id, collection_id)
        DO UPDATE SET embedding = EXCLUDED.embedding, acl_id = EXCLUDED.acl_id;
    END IF;
    RETURN NULL;
END $fn$;

-- name: create_mirror_truncate_function
CREATE OR REPLACE FUNCTION pgrag.partition_mirror_truncate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    TRUNCATE pgrag.chunk_embeddings_next;
    RETURN NULL;
END $fn$;

-- name: create_mirror_move_function
-- A chunk moved to another collection (a write to chunks, not to today's vectors): its vectors
-- in the new table move with it.
CREATE OR REPLACE FUNCTION pgrag.partition_mirror_move() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    UPDATE pgrag.chunk_embeddings_next x SET collection_id = NEW.collection_id
     WHERE x.chunk_id = NEW.id AND x.collection_id = OLD.collection_id;
    RETURN NULL;
END $fn$;

-- name: drop_mirror_moves
DROP TRIGGER IF EXISTS partition_mirror_move ON pgrag.chunks;

-- name: mirror_moves
CREATE TRIGGER partition_mirror_move AFTER UPDATE OF collection_id ON pgrag.chunks
    FOR EACH ROW WHEN (OLD.collection_id IS DISTINCT FROM NEW.collection_id)
    EXECUTE FUNCTION pgrag.partition_mirror_move();

-- name: drop_mirror_inserts
DROP TRIGGER IF EXISTS partition_mirror_insert ON pgrag.chunk_embeddings;

-- name: mirror_inserts
CREATE TRIGGER partition_mirror_insert AFTER INSERT ON pgrag.chunk_embeddings
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgrag.partition_mirror();

-- name: drop_mirror_updates
DROP TRIGGER IF EXISTS partition_mirror_update ON pgrag.chunk_embeddings;

-- name: mirror_updates
CREATE TRIGGER partition_mirror_update AFTER UPDATE ON pgrag.chunk_embeddings
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.partition_mirror();

-- name: drop_mirror_deletes
DROP TRIGGER IF EXISTS partition_mirror_delete ON pgrag.chunk_embeddings;

-- name: mirror_deletes
CREATE TRIGGER partition_mirror_delete AFTER DELETE ON pgrag.chunk_embeddings
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgrag.partition_mirror();

-- name: drop_mirror_truncates
DROP TRIGGER IF EXISTS partition_mirror_truncate ON pgrag.chunk_embeddings;

-- name: mirror_truncates
CREATE TRIGGER partition_mirror_truncate AFTER TRUNCATE ON pgrag.chunk_embeddings
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.partition_mirror_truncate();

-- name: drop_partition_new_collections
DROP TRIGGER IF EXISTS partition_next_collection ON pgrag.collections;

-- name: partition_new_collections
CREATE TRIGGER partition_next_collection AFTER INSERT ON pgrag.collections
    FOR EACH ROW EXECUTE FUNCTION pgrag.partition_next_collection();

-- name: partition_collections
-- A partition for every collection there is.
SELECT pgrag.partition_next_partition(id) FROM pgrag.collections ORDER BY id;

-- name: progress
-- Where the copy stands: the last (model, chunk) copied, how many, and whether it is done.
SELECT model_id, chunk_id, copied, ready FROM pgrag.partition_progress;

-- name: copy_batch
-- The next vectors of today's table after the last one copied, into the new table, and the
-- progress row moved on: one transaction. FOR KEY SHARE holds off a delete of a vector being
-- copied, and FOR SHARE a move of its chunk to another collection, until this commits (then
-- the mirror triggers delete or move it in the new table too); a vector copied after the
-- mirror wrote it is left as the mirror wrote it.
WITH batch AS (
         SELECT e.model_id, e.chunk_id, e.embedding, e.acl_id, c.collection_id
           FROM pgrag.chunk_embeddings e
           JOIN pgrag.chunks c ON c.id = e.chunk_id,
                pgrag.partition_progress p
          WHERE (e.model_id, e.chunk_id) > (p.model_id, p.chunk_id)
          ORDER BY e.model_id, e.chunk_id
          LIMIT %(batch)s
            FOR KEY SHARE OF e FOR SHARE OF c),
     copied AS (
         INSERT INTO pgrag.chunk_embeddings_next (model_id, chunk_id, embedding, acl_id, collection_id)
         SELECT b.model_id, b.chunk_id, b.embedding, b.acl_id, b.collection_id FROM batch b
         ON CONFLICT DO NOTHING
         RETURNING 1),
     last AS (
         SELECT b.model_id, b.chunk_id FROM batch b
          ORDER BY b.model_id DESC, b.chunk_id DESC LIMIT 1)
UPDATE pgrag.partition_progress p
   SET model_id = last.model_id, chunk_id = last.chunk_id,
       copied = p.copied + (SELECT count(*) FROM batch), updated_at = now()
  FROM last
RETURNING (SELECT count(*) FROM batch);

-- name: model_indexes
-- Today's valid HNSW indexes of the models: their names and definitions.
SELECT x.relname::text, pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
 WHERE i.indrelid = 'pgrag.chunk_embeddings'::regclass AND i.indisvalid
   AND x.relname ~ '^chunk_embeddings_hnsw_[0-9]+$'
 ORDER BY 1;

-- name: unbuilt
-- The new table's partitions without an index attached to the named partitioned index.
SELECT c.relname::text
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'pgrag.chunk_embeddings_next'::regclass
   AND NOT EXISTS (SELECT 1 FROM pg_inherits ii JOIN pg_index x ON x.indexrelid = ii.inhrelid
                    WHERE ii.inhparent = to_regclass(%(index)s) AND x.indrelid = c.oid)
 ORDER BY 1;

-- name: invalid_index
-- Whether an index of this name exists and is invalid.
SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%(name)s) AND NOT indisvalid);

-- name: create_parent_index
-- A model's partitioned index on the new table alone (invalid until every partition's is
-- attached).
CREATE INDEX IF NOT EXISTS {index} ON ONLY pgrag.chunk_embeddings_next {spec};

-- name: create_child_index
-- A model's index on one partition, without blocking its writes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} {spec};

-- name: drop_index
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: attach_index
ALTER INDEX {index} ATTACH PARTITION {child};

-- name: build_memory
SET maintenance_work_mem = '512MB';

-- name: analyze_next
ANALYZE pgrag.chunk_embeddings_next;

-- name: mark_ready
-- The copy and the indexes are done: `pgrag db upgrade` may switch the tables over.
UPDATE pgrag.partition_progress SET ready = true, updated_at = now();
