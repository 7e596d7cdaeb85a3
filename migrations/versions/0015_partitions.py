"""Vectors partitioned by collection (issue 21): one HNSW graph per collection.

pgrag.chunk_embeddings becomes a table PARTITION BY LIST (collection_id), with one partition
per collection (chunk_embeddings_c<ID>; sql/functions/partitions.sql creates each new
collection's). A collection's vector search reads its own partition and walks its own graph
rather than one built over every tenant's vectors (docs/scale.md#partitions measures it).

- chunk_embeddings gets collection_id (the chunk's), NOT NULL; its primary key becomes
  (model_id, chunk_id, collection_id) (a partitioned table's unique keys hold the partition
  key). Its foreign keys (to chunks and to embedding_models) give way to triggers: attaching a
  new collection's partition would copy them onto it, and adding a foreign key locks the
  referenced table against writes until the collection's transaction ends (every ingest would
  wait for a new collection, and two could deadlock). The triggers check what the keys did
  (the chunk and the model exist, the collection is the chunk's) and do what the cascade did
  (a chunk deleted, or moved to another collection, takes its vectors along; TRUNCATE of
  chunks too; a model with vectors cannot be deleted).
- collections.id > 0: the id names the partition.
- Each model's HNSW index (chunk_embeddings_hnsw_<ID>) becomes a partitioned index: one graph
  per partition (chunk_embeddings_c<ID>_hnsw_<model>). An index that was invalid or missing is
  left for the next build (pgrag ingest, worker, models reembed, db repair).
- A trigger on collections creates a new collection's partition.

The upgrade copies the vectors in this transaction and builds each partition's graphs: writes
to the vectors wait for it. Above 100,000 vectors it stops (nothing changed) unless
PGRAG_PARTITION_IN_PLACE=1, and says to run `pgrag db partition` first, which copies them
online, in batches (pgrag/db/partition.py); a database so prepared is switched over here in a
moment.

The downgrade puts the single table back (its vectors copied, the indexes built again, its
foreign keys back).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Above this many vectors the copy is not done inside the upgrade (pgrag/db/partition.py).
IN_PLACE_LIMIT = 100_000

# The same statements as sql/schema/tables.sql's: the two must agree (test_schema_migrations).
CREATE_PARTITIONED = """
CREATE TABLE pgrag.chunk_embeddings (
    model_id      integer NOT NULL,
    chunk_id      bigint NOT NULL,
    embedding     vector NOT NULL,
    acl_id        integer NOT NULL,
    collection_id integer NOT NULL,
    PRIMARY KEY (model_id, chunk_id, collection_id)
) PARTITION BY LIST (collection_id);
CREATE INDEX chunk_embeddings_chunk_idx ON pgrag.chunk_embeddings (chunk_id);
"""

# Row-level security and the acl trigger, as sql/schema/policies.sql and triggers.sql have them.
PROTECT = """
CREATE TRIGGER chunk_embeddings_acl
    BEFORE INSERT OR UPDATE OF chunk_id, acl_id, collection_id, model_id
    ON pgrag.chunk_embeddings FOR EACH ROW EXECUTE FUNCTION pgrag.chunk_embeddings_acl();
ALTER TABLE pgrag.chunk_embeddings ENABLE ROW LEVEL SECURITY;
CREATE POLICY visible ON pgrag.chunk_embeddings
    USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
    WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
"""

# The triggers in place of the foreign keys, and the new collection's partition, on functions
# that are placeholders until this release's are applied at the end of the run (in the same
# transaction: sql/functions/partitions.sql).
TRIGGERS = """
CREATE OR REPLACE FUNCTION pgrag.collections_partition() RETURNS trigger
LANGUAGE plpgsql AS $fn$ BEGIN RETURN NULL; END $fn$;
CREATE OR REPLACE FUNCTION pgrag.chunks_vectors_deleted() RETURNS trigger
LANGUAGE plpgsql AS $fn$ BEGIN RETURN NULL; END $fn$;
CREATE OR REPLACE FUNCTION pgrag.chunks_vectors_moved() RETURNS trigger
LANGUAGE plpgsql AS $fn$ BEGIN RETURN NULL; END $fn$;
CREATE OR REPLACE FUNCTION pgrag.chunks_vectors_truncated() RETURNS trigger
LANGUAGE plpgsql AS $fn$ BEGIN RETURN NULL; END $fn$;
CREATE OR REPLACE FUNCTION pgrag.embedding_models_deleting() RETURNS trigger
LANGUAGE plpgsql AS $fn$ BEGIN RETURN OLD; END $fn$;
CREATE OR REPLACE FUNCTION pgrag.chunks_id_changing() RETURNS trigger
LANGUAGE plpgsql AS $fn$ BEGIN RETURN NEW; END $fn$;
CREATE TRIGGER collections_partition AFTER INSERT ON pgrag.collections
    FOR EACH ROW EXECUTE FUNCTION pgrag.collections_partition();
CREATE TRIGGER chunks_vectors_delete AFTER DELETE ON pgrag.chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.chunks_vectors_deleted();
CREATE TRIGGER chunks_vectors_move AFTER UPDATE OF collection_id ON pgrag.chunks
    FOR EACH ROW WHEN (OLD.collection_id IS DISTINCT FROM NEW.collection_id)
    EXECUTE FUNCTION pgrag.chunks_vectors_moved();
CREATE TRIGGER chunks_id_fixed BEFORE UPDATE OF id ON pgrag.chunks
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION pgrag.chunks_id_changing();
CREATE TRIGGER chunks_vectors_truncate AFTER TRUNCATE ON pgrag.chunks
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.chunks_vectors_truncated();
CREATE TRIGGER embedding_models_vectors BEFORE DELETE ON pgrag.embedding_models
    FOR EACH ROW EXECUTE FUNCTION pgrag.embedding_models_deleting();
"""

# This revision's functions (sql/functions/partitions.sql, models.sql): 0014's release has none
# of them (it puts its own model_index_ddl back when its `pgrag db upgrade` runs).
ADDED_FUNCTIONS = (
    "collections_partition()",
    "chunks_vectors_deleted()",
    "chunks_vectors_moved()",
    "chunks_vectors_truncated()",
    "embedding_models_deleting()",
    "chunks_id_changing()",
    "collection_partition(integer)",
    "collection_partition_name(integer)",
    "model_index_unbuilt(integer)",
    "model_index_partition_ddl(integer, text, boolean)",
    "model_index_spec(integer)",
)


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def _vector_on_search_path() -> None:
    """pgvector's types resolvable for the rest of this migration's transaction, wherever the
    extension is installed (managed services often keep extensions in their own schema)."""
    _sql(
        "SELECT set_config('search_path', format('%I, ', n.nspname)"
        " || current_setting('search_path'), true)"
        " FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        " WHERE e.extname = 'vector'"
    )


def upgrade() -> None:
    import os

    conn = op.get_bind().connection.driver_connection
    _vector_on_search_path()
    bad = conn.execute("SELECT string_agg(name, ', ') FROM pgrag.collections WHERE id <= 0")
    names = bad.fetchone()[0]
    if names:
        _refuse(
            f"collections {names} have an id of 0 or less, and a collection's id names its"
            " partition of the vectors (chunk_embeddings_c<ID>)",
            "pgrag never makes such ids (its start at 1): delete those collections and ingest"
            " them again under positive ids, then `pgrag db upgrade`",
        )
    prepared = conn.execute("SELECT to_regclass('pgrag.chunk_embeddings_next') IS NOT NULL")
    if prepared.fetchone()[0]:
        _switch_over()
    else:
        if os.environ.get("PGRAG_PARTITION_IN_PLACE") != "1":
            vectors = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM pgrag.chunk_embeddings LIMIT %s) x",
                (IN_PLACE_LIMIT + 1,),
            ).fetchone()[0]
            if vectors > IN_PLACE_LIMIT:
                _refuse(
                    f"pgrag.chunk_embeddings holds over {IN_PLACE_LIMIT:,} vectors: partitioning"
                    " them inside this upgrade would hold every write to them until it is done",
                    "Run `pgrag db partition` first (online, in batches; it resumes if stopped),"
                    " then `pgrag db upgrade`; or set PGRAG_PARTITION_IN_PLACE=1 to do it here",
                )
        _in_place()
    _sql(PROTECT)
    _sql(TRIGGERS)
    _sql("ALTER TABLE pgrag.collections ADD CONSTRAINT collections_id_check CHECK (id > 0);")


def _refuse(message: str, hint: str) -> None:
    """Stop the upgrade (nothing is changed: one transaction) with a message and what to do."""

    def quote(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    _sql(
        f"DO $do$ BEGIN RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = {quote(message)},"
        f" HINT = {quote(hint)}; END $do$;"
    )


def _switch_over() -> None:
    """The copy `pgrag db partition` made (kept current by its triggers) becomes the table."""
    conn = op.get_bind().connection.driver_connection
    ready = conn.execute("SELECT ready FROM pgrag.partition_progress").fetchone()
    if not (ready and ready[0]):
        _refuse(
            "`pgrag db partition` has not finished copying the vectors",
            "Run `pgrag db partition` again (it resumes), then `pgrag db upgrade`",
        )
    _sql(
        """
        LOCK TABLE pgrag.chunk_embeddings IN ACCESS EXCLUSIVE MODE;
        DROP TRIGGER partition_next_collection ON pgrag.collections;
        DROP TRIGGER IF EXISTS partition_mirror_move ON pgrag.chunks;
        DROP TABLE pgrag.chunk_embeddings;
        DROP FUNCTION pgrag.partition_mirror();
        DROP FUNCTION IF EXISTS pgrag.partition_mirror_move();
        DROP FUNCTION pgrag.partition_mirror_truncate();
        DROP FUNCTION pgrag.partition_next_collection();
        -- (a collection its trigger missed: none should be)
        SELECT pgrag.partition_next_partition(k.id) FROM pgrag.collections k;
        DROP FUNCTION pgrag.partition_next_partition(integer);
        DROP TABLE pgrag.partition_progress;
        """
    )
    _rename("chunk_embeddings_next", "chunk_embeddings")


def _in_place() -> None:
    """The vectors copied into the partitioned table in this transaction, and each model's
    valid index built again on every partition."""
    _sql(
        """
        SET LOCAL maintenance_work_mem = '512MB';
        -- The statements that built the models' valid HNSW indexes, for the new table's.
        CREATE TEMP TABLE pgrag_0015_indexes ON COMMIT DROP AS
        SELECT x.relname::text AS name, pg_get_indexdef(i.indexrelid) AS ddl
          FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
         WHERE i.indrelid = 'pgrag.chunk_embeddings'::regclass AND i.indisvalid
           AND x.relname ~ '^chunk_embeddings_hnsw_[0-9]+$';
        """
    )
    _sql(CREATE_PARTITIONED.replace("chunk_embeddings", "chunk_embeddings_next"))
    _sql(
        """
        DO $do$
        DECLARE
            v_id integer;
        BEGIN
            FOR v_id IN SELECT id FROM pgrag.collections ORDER BY id LOOP
                EXECUTE format('CREATE TABLE pgrag.%I PARTITION OF pgrag.chunk_embeddings_next'
                               ' FOR VALUES IN (%s)', 'chunk_embeddings_c' || v_id, v_id);
            END LOOP;
        END
        $do$;
        INSERT INTO pgrag.chunk_embeddings_next (model_id, chunk_id, embedding, acl_id, collection_id)
        SELECT e.model_id, e.chunk_id, e.embedding, e.acl_id, c.collection_id
          FROM pgrag.chunk_embeddings e JOIN pgrag.chunks c ON c.id = e.chunk_id;
        DROP TABLE pgrag.chunk_embeddings;
        """
    )
    _rename("chunk_embeddings_next", "chunk_embeddings")
    _sql(
        """
        -- Each model's index again: on the parent only, then each partition's graph, attached
        -- (named as pgrag.embeddings.index names the ones it builds).
        DO $do$
        DECLARE
            v_index record;
            v_part  text;
            v_child text;
        BEGIN
            FOR v_index IN SELECT name, ddl FROM pgrag_0015_indexes ORDER BY name LOOP
                EXECUTE replace(v_index.ddl, ' ON pgrag.chunk_embeddings ',
                                ' ON ONLY pgrag.chunk_embeddings ');
                FOR v_part IN
                    SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                     WHERE i.inhparent = 'pgrag.chunk_embeddings'::regclass ORDER BY c.relname
                LOOP
                    v_child := v_part || '_hnsw_'
                               || substr(v_index.name, length('chunk_embeddings_hnsw_') + 1);
                    EXECUTE replace(replace(v_index.ddl, ' ON pgrag.chunk_embeddings ',
                                            format(' ON pgrag.%I ', v_part)),
                                    'CREATE INDEX ' || v_index.name || ' ',
                                    format('CREATE INDEX %I ', v_child));
                    EXECUTE format('ALTER INDEX pgrag.%I ATTACH PARTITION pgrag.%I',
                                   v_index.name, v_child);
                END LOOP;
            END LOOP;
        END
        $do$;
        """
    )


def _rename(old: str, new: str) -> None:
    """Rename table pgrag.<old> and its indexes named after it (the partitioned ones, not the
    partitions' own) to <new> (two constant names)."""
    _sql(
        """
        DO $do$
        DECLARE
            v_name text;
        BEGIN
            FOR v_name IN
                SELECT x.relname FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
                 WHERE i.indrelid = 'pgrag.OLD'::regclass AND x.relname LIKE 'OLD%'
            LOOP
                EXECUTE format('ALTER INDEX pgrag.%I RENAME TO %I', v_name,
                               'NEW' || substr(v_name, length('OLD') + 1));
            END LOOP;
        END
        $do$;
        ALTER TABLE pgrag.OLD RENAME TO NEW;
        """.replace("OLD", old).replace("NEW", new)
    )


def downgrade() -> None:
    _vector_on_search_path()
    _sql(
        """
        SET LOCAL maintenance_work_mem = '512MB';
        ALTER TABLE pgrag.collections DROP CONSTRAINT collections_id_check;
        DROP TRIGGER collections_partition ON pgrag.collections;
        DROP TRIGGER chunks_vectors_delete ON pgrag.chunks;
        DROP TRIGGER chunks_vectors_move ON pgrag.chunks;
        DROP TRIGGER chunks_vectors_truncate ON pgrag.chunks;
        DROP TRIGGER chunks_id_fixed ON pgrag.chunks;
        DROP TRIGGER embedding_models_vectors ON pgrag.embedding_models;
        CREATE TEMP TABLE pgrag_0015_indexes ON COMMIT DROP AS
        SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY pgrag.chunk_embeddings ',
                       ' ON pgrag.chunk_embeddings ') AS ddl
          FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid
         WHERE i.indrelid = 'pgrag.chunk_embeddings'::regclass AND i.indisvalid
           AND x.relname ~ '^chunk_embeddings_hnsw_[0-9]+$';
        CREATE TABLE pgrag.chunk_embeddings_prev (
            model_id   integer NOT NULL REFERENCES pgrag.embedding_models (id),
            chunk_id   bigint NOT NULL REFERENCES pgrag.chunks (id) ON DELETE CASCADE,
            embedding  vector NOT NULL,
            acl_id     integer NOT NULL,
            PRIMARY KEY (model_id, chunk_id)
        );
        CREATE INDEX chunk_embeddings_prev_chunk_idx ON pgrag.chunk_embeddings_prev (chunk_id);
        INSERT INTO pgrag.chunk_embeddings_prev (model_id, chunk_id, embedding, acl_id)
        SELECT model_id, chunk_id, embedding, acl_id FROM pgrag.chunk_embeddings;
        DROP TABLE pgrag.chunk_embeddings;
        """
    )
    _sql(
        "\n".join(f"DROP FUNCTION IF EXISTS pgrag.{f};" for f in ADDED_FUNCTIONS)  # noqa: S608
    )
    _rename("chunk_embeddings_prev", "chunk_embeddings")
    _sql(
        """
        ALTER TABLE pgrag.chunk_embeddings
            RENAME CONSTRAINT chunk_embeddings_prev_model_id_fkey TO chunk_embeddings_model_id_fkey;
        ALTER TABLE pgrag.chunk_embeddings
            RENAME CONSTRAINT chunk_embeddings_prev_chunk_id_fkey TO chunk_embeddings_chunk_id_fkey;
        DO $do$
        DECLARE
            v_ddl text;
        BEGIN
            FOR v_ddl IN SELECT ddl FROM pgrag_0015_indexes LOOP
                EXECUTE v_ddl;
            END LOOP;
        END
        $do$;
        """
    )
    _sql(
        """
        CREATE TRIGGER chunk_embeddings_acl BEFORE INSERT OR UPDATE OF chunk_id, acl_id
            ON pgrag.chunk_embeddings FOR EACH ROW EXECUTE FUNCTION pgrag.chunk_embeddings_acl();
        ALTER TABLE pgrag.chunk_embeddings ENABLE ROW LEVEL SECURITY;
        CREATE POLICY visible ON pgrag.chunk_embeddings
            USING ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]))
            WITH CHECK ((SELECT pgrag.unrestricted()) OR acl_id = ANY ((SELECT pgrag.visible_acls())::integer[]));
        """
    )
