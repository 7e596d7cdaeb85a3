-- Each collection's partition of pgrag.chunk_embeddings (LIST by collection_id, one value per
-- partition; sql/schema/tables.sql, docs/scale.md#partitions).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md). Internal
-- functions only: applications never name a partition; they read and write the parent.
--
-- A partition is created as a plain table and then ATTACHed: ATTACH PARTITION takes a SHARE
-- UPDATE EXCLUSIVE lock on the parent, which searches (ACCESS SHARE) and writers (ROW
-- EXCLUSIVE) of every other collection do not wait for; CREATE TABLE ... PARTITION OF would take
-- ACCESS EXCLUSIVE and stop them all until the creating transaction commits. The parent's
-- indexes (the primary key, the chunk index, each model's HNSW index) are created on the empty
-- table by the ATTACH. A deleted collection's partition is left attached and empty (dropping it
-- would take ACCESS EXCLUSIVE on the parent for the rest of the deleting transaction);
-- `pgrag db repair` drops it (`pgrag db check` does not count it as a difference).

-- The partition of a collection: its name in schema pgrag.
CREATE OR REPLACE FUNCTION pgrag.collection_partition_name(p_collection_id integer) RETURNS text
LANGUAGE sql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT 'chunk_embeddings_c' || p_collection_id
$fn$;

-- Creates and attaches the collection's partition of pgrag.chunk_embeddings if it has none;
-- true when it did. A table of the name that is not attached (an ATTACH that failed after it
-- was created, in an older transaction) is attached; one attached elsewhere or for other values
-- is an error naming it, as is a collection that does not exist. Run by the owner of schema pgrag
-- (the trigger below, pgrag db repair).
CREATE OR REPLACE FUNCTION pgrag.collection_partition(p_collection_id integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_name   text := pgrag.collection_partition_name(p_collection_id);
    v_rel    regclass := to_regclass(format('pgrag.%I', pgrag.collection_partition_name(p_collection_id)));
    v_bound  text;
    v_model  integer;
    v_ddl    text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgrag.collections k WHERE k.id = p_collection_id) THEN
        RAISE EXCEPTION 'collection % does not exist', coalesce(p_collection_id::text, 'NULL')
            USING ERRCODE = '42704';
    END IF;
    IF v_rel IS NOT NULL THEN
        SELECT pg_get_expr(c.relpartbound, c.oid) INTO v_bound
          FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
         WHERE c.oid = v_rel AND i.inhparent = 'pgrag.chunk_embeddings'::regclass;
        IF v_bound = format('FOR VALUES IN (%s)', p_collection_id) THEN
            RETURN false;
        ELSIF v_bound IS NOT NULL OR EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = v_rel) THEN
            RAISE EXCEPTION 'table pgrag.% is attached to another table, or for other values', v_name
                USING ERRCODE = '55000',
                      HINT = 'Rename or drop it; pgrag db repair then creates the collection''s partition.';
        END IF;
    ELSE
        -- LIKE copies the columns with their NOT NULL; the ATTACH adds the parent's keys,
        -- indexes and row triggers. Each model's HNSW index is made here first,
        -- empty, under the name pgrag.embeddings.index gives the ones it builds
        -- (<partition>_hnsw_<model>), and the ATTACH takes it as the partition's.
        EXECUTE format('CREATE TABLE pgrag.%I (LIKE pgrag.chunk_embeddings)', v_name);
        FOR v_model IN
            SELECT substr(x.relname, length('chunk_embeddings_hnsw_') + 1)::integer
              FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
             WHERE i.indrelid = 'pgrag.chunk_embeddings'::regclass
               AND x.relname ~ '^chunk_embeddings_hnsw_[0-9]+$'
               AND EXISTS (SELECT 1 FROM pgrag.embedding_models m
                            WHERE m.id = substr(x.relname, length('chunk_embeddings_hnsw_') + 1)::integer)
        LOOP
            v_ddl := pgrag.model_index_partition_ddl(v_model, v_name);
            IF v_ddl IS NOT NULL THEN
                EXECUTE v_ddl;
            END IF;
        END LOOP;
    END IF;
    EXECUTE format('ALTER TABLE pgrag.chunk_embeddings ATTACH PARTITION pgrag.%I FOR VALUES IN (%s)',
                   v_name, p_collection_id);
    RETURN true;
END
$fn$;

COMMENT ON FUNCTION pgrag.collection_partition(integer) IS
    'Create and attach a collection''s partition of pgrag.chunk_embeddings if it has none; true when it did.';

-- A new collection gets its partition in the transaction that creates it (attaching it waits
-- only for what holds pgrag.chunk_embeddings' own SHARE UPDATE EXCLUSIVE: an ANALYZE of it,
-- another collection being created). SECURITY DEFINER:
-- pgrag_writer creates collections, and may not create tables in schema pgrag (a trigger
-- function cannot be called but by its trigger).
CREATE OR REPLACE FUNCTION pgrag.collections_partition() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM pgrag.collection_partition(NEW.id);
    RETURN NULL;
END
$fn$;

-- The vectors follow their chunks, in place of foreign keys (sql/schema/tables.sql says why the
-- partitioned table has none). SECURITY DEFINER, as a foreign key's cascade runs as the
-- table's owner: a chunk's vectors go with it whoever deletes it (a trigger function cannot
-- be called but by its trigger). Each statement names one collection as a constant
-- (force_custom_plan), so it reads and locks that collection's partition only, however many
-- collections there are.

-- After chunks are deleted: their vectors, collection by collection.
CREATE OR REPLACE FUNCTION pgrag.chunks_vectors_deleted() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $fn$
DECLARE
    v_collection integer;
BEGIN
    FOR v_collection IN SELECT DISTINCT o.collection_id FROM old_rows o LOOP
        DELETE FROM pgrag.chunk_embeddings e
         WHERE e.collection_id = v_collection
           AND e.chunk_id IN (SELECT o.id FROM old_rows o WHERE o.collection_id = v_collection);
    END LOOP;
    RETURN NULL;
END
$fn$;

-- After a chunk moved to another collection: its vectors to that collection's partition.
CREATE OR REPLACE FUNCTION pgrag.chunks_vectors_moved() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $fn$
BEGIN
    UPDATE pgrag.chunk_embeddings e SET collection_id = NEW.collection_id
     WHERE e.collection_id = OLD.collection_id AND e.chunk_id = NEW.id;
    RETURN NULL;
END
$fn$;

-- After TRUNCATE pgrag.chunks (... CASCADE): the vectors too.
CREATE OR REPLACE FUNCTION pgrag.chunks_vectors_truncated() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    TRUNCATE pgrag.chunk_embeddings;
    RETURN NULL;
END
$fn$;

-- Before an embedding model is deleted: refused while vectors of it are stored (as the foreign
-- key the vectors had refused it). One probe of each partition's primary key.
CREATE OR REPLACE FUNCTION pgrag.embedding_models_deleting() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e WHERE e.model_id = OLD.id) THEN
        RAISE EXCEPTION 'embedding model % still has vectors in pgrag.chunk_embeddings', OLD.id
            USING ERRCODE = '23503',
                  HINT = 'Retire it from its collections first (pgrag models retire), which deletes them.';
    END IF;
    RETURN OLD;
END
$fn$;

-- Before a chunk's id changes: refused while it has vectors (they name it; the foreign key
-- they had refused it too). SECURITY DEFINER, as a foreign key's check sees every row.
CREATE OR REPLACE FUNCTION pgrag.chunks_id_changing() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e
                WHERE e.collection_id = OLD.collection_id AND e.chunk_id = OLD.id) THEN
        RAISE EXCEPTION 'a chunk''s id cannot change while it has vectors (chunk %)', OLD.id
            USING ERRCODE = '23503';
    END IF;
    RETURN NEW;
END
$fn$;
