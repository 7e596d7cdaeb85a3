-- Models as data, per collection: registering a model, its HNSW index, which models a
-- collection has, which one serves its searches, and switching between them without downtime.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
-- Public entry points:
-- activate_model_v1 and retire_model_v1 (a changed argument list or result is a _v2).
--
-- pgrag.collection_models holds one row per (collection, model) with a status:
--   building  vectors are being backfilled (pgrag models reembed); searchable on request only
--   active    the model queries are embedded with; exactly one per collection, and always
--             the one pgrag.collections.model_id names (a trigger keeps the two in step)
--   standby   was active; its vectors are kept up to date, so it can be activated again
--   retired   its vectors are gone (pgrag models retire); it can be added again
-- Every write path (pgrag ingest, the SQL sync triggers, the worker) gives a new chunk a vector
-- for every model that is not retired, directly or through pgrag.embedding_queue.

-- Record an embedding model and give it its own partial HNSW index (ensure_model_index, below).
-- Returns the model's id. Registering the same (name, dimension) again returns the existing id
-- and checks that the distance and normalisation agree. Vectors of a model live in
-- pgrag.chunk_embeddings next to every other model's; the partial index
--   USING hnsw ((embedding::vector(DIM)) <opclass>) WHERE model_id = ID
-- is what lets models of different dimensions coexist (pgvector's documented pattern), and
-- the cast in it rejects a vector of the wrong size on insert.
CREATE OR REPLACE FUNCTION pgrag.register_model(
    p_name       text,
    p_provider   text,
    p_dimension  integer,
    p_distance   text DEFAULT 'cosine',
    p_normalized boolean DEFAULT true,
    p_max_tokens integer DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_id        integer;
    v_distance  text;
    v_normal    boolean;
    v_opclass   text;
BEGIN
    -- The names pgrag.embeddings.models.check_model_name allows: printable, trimmed, <= 200.
    IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 200 OR p_name <> btrim(p_name)
       OR p_name ~ '[\x01-\x1f\x7f-\x9f\u00a0\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]' THEN
        RAISE EXCEPTION 'invalid model name %: use printable characters (letters, digits, punctuation, spaces between words; no control characters, tabs, newlines or bidi marks), at most 200',
            quote_literal(p_name) USING ERRCODE = '22023';
    END IF;
    IF p_dimension IS NULL OR p_dimension NOT BETWEEN 1 AND 16000 THEN
        RAISE EXCEPTION 'embedding dimension % is out of range (1..16000)', p_dimension
            USING ERRCODE = '22023';
    END IF;
    v_opclass := CASE p_distance
        WHEN 'cosine' THEN 'vector_cosine_ops'
        WHEN 'l2' THEN 'vector_l2_ops'
        WHEN 'inner_product' THEN 'vector_ip_ops'
    END;
    IF v_opclass IS NULL THEN
        RAISE EXCEPTION 'unknown distance %; use cosine, l2 or inner_product', quote_literal(p_distance)
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO pgrag.embedding_models (name, provider, dimension, distance, normalized, max_tokens)
    VALUES (p_name, p_provider, p_dimension, p_distance, p_normalized, p_max_tokens)
    ON CONFLICT (name, dimension) DO NOTHING
    RETURNING id INTO v_id;

    IF v_id IS NULL THEN
        SELECT id, distance, normalized INTO v_id, v_distance, v_normal
        FROM pgrag.embedding_models WHERE name = p_name AND dimension = p_dimension;
        IF v_distance <> p_distance OR v_normal <> p_normalized THEN
            RAISE EXCEPTION 'embedding model % (% dimensions) is registered with distance % (normalized: %), not % (normalized: %)',
                quote_literal(p_name), p_dimension, v_distance, v_normal, p_distance, p_normalized
                USING ERRCODE = '22023';
        END IF;
        RETURN v_id;
    END IF;

    PERFORM pgrag.ensure_model_index(v_id);
    RETURN v_id;
END
$fn$;

COMMENT ON FUNCTION pgrag.register_model(text, text, integer, text, boolean, integer) IS
    'Record an embedding model and create its partial HNSW index; returns the model id.';

-- collections.model_id is the active model: any write of it (pgrag ingest creating a
-- collection, activate_model_v1, plain SQL) makes that model active and the previous one standby.
CREATE OR REPLACE FUNCTION pgrag.collection_model_changed() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.model_id IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE pgrag.collection_models SET status = 'standby'
     WHERE collection_id = NEW.id AND status = 'active' AND model_id <> NEW.model_id;
    INSERT INTO pgrag.collection_models (collection_id, model_id, status, activated_at)
    VALUES (NEW.id, NEW.model_id, 'active', now())
    ON CONFLICT (collection_id, model_id)
    DO UPDATE SET status = 'active', activated_at = now(), retired_at = NULL;
    RETURN NULL;
END
$fn$;

-- What follows ON <table> in the statement that creates a model's partial HNSW index (NULL when
-- the model gets none: over 2,000 dimensions, or 4,000 for halfvec).
CREATE OR REPLACE FUNCTION pgrag.model_index_spec(p_model_id integer)
RETURNS text
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_dimension integer;
    v_distance  text;
    v_type      text;
    v_schema    text;
BEGIN
    SELECT m.dimension, m.distance, m.index_type INTO v_dimension, v_distance, v_type
      FROM pgrag.embedding_models m WHERE m.id = p_model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'embedding model % does not exist', p_model_id USING ERRCODE = '42704';
    END IF;
    IF v_dimension > (CASE v_type WHEN 'halfvec' THEN 4000 ELSE 2000 END) THEN
        RETURN NULL;
    END IF;
    SELECT n.nspname INTO v_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    RETURN format(
        'USING hnsw ((embedding::%I.%I(%s)) %I.%I) WITH (m = 16, ef_construction = 128) WHERE model_id = %s',
        v_schema, v_type, v_dimension, v_schema,
        v_type || CASE v_distance WHEN 'cosine' THEN '_cosine_ops'
                                  WHEN 'l2' THEN '_l2_ops'
                                  ELSE '_ip_ops' END,
        p_model_id);
END
$fn$;

-- The statement that creates a model's partial HNSW index, chunk_embeddings_hnsw_<ID>: a
-- partitioned index, one HNSW graph per collection's partition (NULL when the model gets none).
-- Run as it is, it builds every partition's in the caller's transaction, which holds writers to
-- pgrag.chunk_embeddings off until it commits. With p_concurrently, it creates the partitioned
-- index ON ONLY the parent (invalid, and at once); pgrag.embeddings.index then builds each
-- partition's with CREATE INDEX CONCURRENTLY (model_index_partition_ddl) and attaches it, and
-- the index is valid when every partition's is attached: writes to every collection go on
-- meanwhile, and a build that was stopped resumes at the partitions it had not reached.
CREATE OR REPLACE FUNCTION pgrag.model_index_ddl(p_model_id integer, p_concurrently boolean DEFAULT false)
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('CREATE INDEX IF NOT EXISTS %I ON %s pgrag.chunk_embeddings ',
                  'chunk_embeddings_hnsw_' || p_model_id,
                  CASE WHEN p_concurrently THEN 'ONLY' ELSE '' END)
           || pgrag.model_index_spec(p_model_id)
$fn$;

-- A model's HNSW index on one collection's partition (CONCURRENTLY when asked), named
-- <partition>_hnsw_<ID>, to be attached to chunk_embeddings_hnsw_<ID>.
CREATE OR REPLACE FUNCTION pgrag.model_index_partition_ddl(p_model_id integer, p_partition text,
                                                   p_concurrently boolean DEFAULT false)
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT format('CREATE INDEX %s IF NOT EXISTS %I ON pgrag.%I ',
                  CASE WHEN p_concurrently THEN 'CONCURRENTLY' ELSE '' END,
                  p_partition || '_hnsw_' || p_model_id, p_partition)
           || pgrag.model_index_spec(p_model_id)
$fn$;

-- The partitions of pgrag.chunk_embeddings that have no index attached to the model's
-- partitioned index (all of them when it is missing), with the name their index gets.
CREATE OR REPLACE FUNCTION pgrag.model_index_unbuilt(p_model_id integer)
RETURNS TABLE (partition_name text, index_name text)
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT c.relname::text, c.relname || '_hnsw_' || p_model_id
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pgrag.chunk_embeddings'::regclass
       AND NOT EXISTS (SELECT 1 FROM pg_inherits ii JOIN pg_index x ON x.indexrelid = ii.inhrelid
                        WHERE ii.inhparent = to_regclass('pgrag.chunk_embeddings_hnsw_' || p_model_id)
                          AND x.indrelid = c.oid)
     ORDER BY c.relname
$fn$;

-- Creates a model's partial HNSW index, chunk_embeddings_hnsw_<ID>, if it is missing, invalid or
-- not what model_index_ddl builds; true when it built one. USING hnsw ((embedding::vector(DIM)) <opclass>) WHERE model_id = ID,
-- or halfvec(DIM) for a model indexed at half precision (embedding_models.index_type; up to
-- 4,000 dimensions), with m = 16 and ef_construction = 128: on 200k clustered 384-d vectors
-- recall@10 against exact search then reaches 0.98 at ef_search 160 where pgvector's default
-- graph (64) levels off near 0.978 however wide the search (docs/benchmarks.md). Models over
-- 2,000 dimensions (4,000 for halfvec) get no index and are searched exactly. Nothing drops the
-- index to load faster: every collection of the model searches with it. A valid index returns
-- at once, taking no lock, so that a caller never waits for another's build of an index it
-- already has. A build here holds writers to pgrag.chunk_embeddings off until it commits;
-- pgrag (pgrag.embeddings.index) builds CONCURRENTLY instead where its role may. SECURITY
-- DEFINER, so pgrag_writer may create a model's index (it may not create indexes on pgrag's
-- tables itself).
CREATE OR REPLACE FUNCTION pgrag.ensure_model_index(p_model_id integer) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_ddl   text := pgrag.model_index_ddl(p_model_id);
    v_index text := 'chunk_embeddings_hnsw_' || p_model_id;
    v_ok    boolean;
    v_valid boolean;
    v_part  record;
BEGIN
    IF v_ddl IS NULL THEN
        RETURN false;
    END IF;
    FOR v_pass IN 1..2 LOOP
        -- What model_index_ddl builds (the table, hnsw, the model's operator class, expression
        -- and predicate; as pgrag.embeddings.index's health query and pgrag db check judge
        -- it), and valid: anything else is an index searches cannot use.
        SELECT i.indrelid = 'pgrag.chunk_embeddings'::regclass
               AND i.indnatts = 1
               AND a.amname = 'hnsw'
               AND o.opcname::text = m.index_type || CASE m.distance WHEN 'cosine' THEN '_cosine_ops'
                                                                     WHEN 'l2' THEN '_l2_ops'
                                                                     ELSE '_ip_ops' END
               AND strpos(coalesce(pg_get_indexdef(i.indexrelid, 1, true), ''),
                          m.index_type || '(' || m.dimension || ')') > 0
               AND pg_get_expr(i.indpred, i.indrelid) IS NOT DISTINCT FROM
                   '(model_id = ' || m.id || ')',
               i.indisvalid
          INTO v_ok, v_valid
          FROM pgrag.embedding_models m
          LEFT JOIN pg_index i ON i.indexrelid = to_regclass('pgrag.' || v_index)
          LEFT JOIN pg_class x ON x.oid = i.indexrelid
          LEFT JOIN pg_am a ON a.oid = x.relam
          LEFT JOIN pg_opclass o ON o.oid = i.indclass[0]
         WHERE m.id = p_model_id;
        IF coalesce(v_ok AND v_valid, false) THEN
            RETURN false;
        END IF;
        EXIT WHEN v_pass = 2;
        -- One build per model at a time (pgrag builds CONCURRENTLY under the same lock, as a
        -- session lock): an index another session is still building is invalid too.
        PERFORM pg_advisory_xact_lock(hashtext('pgrag.model_index'), p_model_id);
    END LOOP;
    IF NOT coalesce(v_ok, false) THEN
        -- Missing, or wrong (not what model_index_ddl builds: searches cannot use it): made
        -- anew on the parent alone, each partition's below. (Right but invalid: a concurrent
        -- build, pgrag.embeddings.index, stopped before every partition's was attached; it is
        -- finished below.)
        EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', v_index);
        EXECUTE pgrag.model_index_ddl(p_model_id, true);
    END IF;
    -- Each partition's that is not attached yet, named <partition>_hnsw_<model> as the
    -- concurrent build names them (an invalid one a stopped build left is built again).
    FOR v_part IN SELECT * FROM pgrag.model_index_unbuilt(p_model_id) LOOP
        IF EXISTS (SELECT 1 FROM pg_index x
                    WHERE x.indexrelid = to_regclass('pgrag.' || quote_ident(v_part.index_name))
                      AND NOT x.indisvalid) THEN
            EXECUTE format('DROP INDEX pgrag.%I', v_part.index_name);
        END IF;
        EXECUTE pgrag.model_index_partition_ddl(p_model_id, v_part.partition_name);
        EXECUTE format('ALTER INDEX pgrag.%I ATTACH PARTITION pgrag.%I', v_index, v_part.index_name);
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_index i
                    WHERE i.indexrelid = to_regclass('pgrag.' || v_index) AND i.indisvalid) THEN
        -- Invalid with every partition's attached: not a state a build leaves; built again.
        EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', v_index);
        EXECUTE v_ddl;
    END IF;
    RETURN true;
END
$fn$;

COMMENT ON FUNCTION pgrag.ensure_model_index(integer) IS
    'Create the partial HNSW index of an embedding model (vector or halfvec) if it is missing, invalid or not built as model_index_ddl builds it; true when created.';

-- The chunks of a collection that have no vector of a model, counted up to p_limit.
CREATE OR REPLACE FUNCTION pgrag.model_missing(p_collection_id integer, p_model_id integer,
                                       p_limit bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan  -- (the collection a constant: its partition alone)
AS $fn$
    SELECT count(*) FROM (
        SELECT 1 FROM pgrag.chunks c
         WHERE c.collection_id = p_collection_id
           AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e
                            WHERE e.collection_id = p_collection_id AND e.model_id = p_model_id
                              AND e.chunk_id = c.id)
         LIMIT p_limit) x
$fn$;

-- Makes a model the collection's active one, atomically: searches that name no model use it
-- from the next statement on. Refused while any chunk lacks its vector (pgrag models reembed
-- fills them), or while the model's HNSW index is missing (it would be searched exactly; build
-- it first: pgrag models reembed does, without blocking writes). The collection row is locked,
-- so nothing is written in between: pgrag ingest holds it FOR SHARE while it writes, and a
-- chunk or document written with SQL takes a key-share lock on it through its foreign key.
-- The check for missing vectors reads the collection's chunks (seconds at 10 million, while
-- writes to this collection wait). The previous model becomes standby, its vectors kept.
CREATE OR REPLACE FUNCTION pgrag.activate_model_v1(p_collection text, p_model_id integer)
RETURNS integer
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_collection_id integer;
    v_active        integer;
    v_status        text;
    v_missing       bigint;
BEGIN
    SELECT c.id, c.model_id INTO v_collection_id, v_active
      FROM pgrag.collections c WHERE c.name = p_collection FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'collection % does not exist', quote_literal(p_collection)
            USING ERRCODE = '42704';
    END IF;
    SELECT cm.status INTO v_status FROM pgrag.collection_models cm
     WHERE cm.collection_id = v_collection_id AND cm.model_id = p_model_id;
    IF v_status IS NULL OR v_status = 'retired' THEN
        RAISE EXCEPTION 'embedding model % is not a model of collection % (or is retired)',
            p_model_id, quote_literal(p_collection)
            USING ERRCODE = '22023', HINT = 'pgrag models reembed MODEL --collection C adds it.';
    END IF;
    IF v_active = p_model_id THEN
        RETURN p_model_id;
    END IF;
    v_missing := pgrag.model_missing(v_collection_id, p_model_id, 1);
    IF v_missing > 0 THEN
        RAISE EXCEPTION 'chunks of collection % have no vector of embedding model % yet',
            quote_literal(p_collection), p_model_id
            USING ERRCODE = '55000', HINT = 'Run pgrag models reembed MODEL --collection C again.';
    END IF;
    -- (Valid: a CREATE INDEX CONCURRENTLY that was interrupted leaves an invalid one.)
    IF pgrag.model_index_ddl(p_model_id) IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_index i
                        WHERE i.indexrelid = to_regclass('pgrag.chunk_embeddings_hnsw_' || p_model_id)
                          AND i.indisvalid) THEN
        RAISE EXCEPTION 'embedding model % has no valid HNSW index yet', p_model_id
            USING ERRCODE = '55000',
                  HINT = 'pgrag models reembed builds it; or SELECT pgrag.ensure_model_index(model_id).';
    END IF;
    UPDATE pgrag.collections SET model_id = p_model_id WHERE id = v_collection_id;
    RETURN p_model_id;
END
$fn$;

COMMENT ON FUNCTION pgrag.activate_model_v1(text, integer) IS
    'Switch a collection to another of its models, atomically; refused while chunks lack its vectors.';

-- Retires a model of a collection: searches may no longer name it, and nothing is queued for
-- it. Its vectors are deleted by retire_model_vectors, in batches (pgrag models retire).
CREATE OR REPLACE FUNCTION pgrag.retire_model_v1(p_collection text, p_model_id integer)
RETURNS void
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_collection_id integer;
    v_active        integer;
BEGIN
    SELECT c.id, c.model_id INTO v_collection_id, v_active
      FROM pgrag.collections c WHERE c.name = p_collection FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'collection % does not exist', quote_literal(p_collection)
            USING ERRCODE = '42704';
    END IF;
    IF v_active = p_model_id THEN
        RAISE EXCEPTION 'embedding model % is the active model of collection %; activate another first',
            p_model_id, quote_literal(p_collection) USING ERRCODE = '55000';
    END IF;
    UPDATE pgrag.collection_models SET status = 'retired', retired_at = now()
     WHERE collection_id = v_collection_id AND model_id = p_model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'embedding model % is not a model of collection %',
            p_model_id, quote_literal(p_collection) USING ERRCODE = '22023';
    END IF;
    DELETE FROM pgrag.embedding_queue WHERE collection_id = v_collection_id AND model_id = p_model_id;
END
$fn$;

-- Deletes up to p_batch vectors of a retired model in a collection; returns how many. When
-- none are left and no collection uses the model any more, its HNSW index is dropped too.
CREATE OR REPLACE FUNCTION pgrag.retire_model_vectors(p_collection_id integer, p_model_id integer,
                                              p_batch integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan  -- (the collection a constant: its partition alone)
AS $fn$
DECLARE
    v_deleted bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgrag.collection_models
                    WHERE collection_id = p_collection_id AND model_id = p_model_id
                      AND status = 'retired') THEN
        RAISE EXCEPTION 'embedding model % is not retired in collection %', p_model_id, p_collection_id
            USING ERRCODE = '55000';
    END IF;
    DELETE FROM pgrag.chunk_embeddings e
     WHERE e.collection_id = p_collection_id AND e.model_id = p_model_id
       AND e.chunk_id IN (SELECT e2.chunk_id FROM pgrag.chunk_embeddings e2
                           WHERE e2.collection_id = p_collection_id AND e2.model_id = p_model_id
                           LIMIT p_batch);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    IF v_deleted = 0 AND NOT EXISTS (SELECT 1 FROM pgrag.collection_models
                                      WHERE model_id = p_model_id AND status <> 'retired') THEN
        IF EXISTS (SELECT 1 FROM pg_class c
                    WHERE c.oid = to_regclass('pgrag.chunk_embeddings_hnsw_' || p_model_id)
                      AND NOT pg_has_role(current_user, c.relowner, 'USAGE')) THEN
            RAISE NOTICE 'embedding model % is used by no collection; its index pgrag.chunk_embeddings_hnsw_% can be dropped by its owner',
                p_model_id, p_model_id;
        ELSE
            EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', 'chunk_embeddings_hnsw_' || p_model_id);
        END IF;
    END IF;
    RETURN v_deleted;
END
$fn$;
