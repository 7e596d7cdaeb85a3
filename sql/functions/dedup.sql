-- Identical documents stored once per collection, and their links kept when plain SQL renames
-- or moves a document.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- A document whose content is identical to another one's in the same collection (same content
-- hash, same principals) is stored as a row of its own, so that its location is recorded and
-- prune, rm and re-ingest treat it like any file, but without chunks or vectors:
-- metadata.duplicate_of names the source of the document that holds them (the original).
-- These functions keep that true whatever happens to either, from pgrag or from plain SQL:
-- - the original deleted or rewritten: its chunks go to its first duplicate (hand_over);
-- - either one's access changed: each duplicate concerned gets copies of the original's chunks
--   and vectors (materialize), so that no one reads through another document's access list.

-- Hands a document's chunks (and so their vectors and postings) to its first duplicate (by
-- source) that is neither in p_excluding (documents about to be deleted with it) nor deleted
-- already, and points its other duplicates at that heir. Returns the heir's id, or NULL when
-- there is none. The document is named by id, collection and source, because the trigger
-- below calls it after the row is gone.
CREATE OR REPLACE FUNCTION pgrag.documents_hand_over(p_document_id bigint,
                                             p_collection_id integer,
                                             p_source text,
                                             p_excluding bigint[] DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_heir     bigint;
    v_heir_src text;
BEGIN
    SELECT d.id, d.source INTO v_heir, v_heir_src
      FROM pgrag.documents d
     WHERE d.collection_id = p_collection_id
       AND d.metadata @> jsonb_build_object('duplicate_of', p_source)
       AND d.id <> p_document_id
       AND d.id <> ALL (coalesce(p_excluding, '{}'))
     ORDER BY d.source, d.id
     LIMIT 1
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE pgrag.chunks SET document_id = v_heir WHERE document_id = p_document_id;
    UPDATE pgrag.documents SET metadata = metadata - 'duplicate_of' WHERE id = v_heir;
    UPDATE pgrag.documents
       SET metadata = jsonb_set(metadata, '{duplicate_of}', to_jsonb(v_heir_src))
     WHERE collection_id = p_collection_id
       AND metadata @> jsonb_build_object('duplicate_of', p_source)
       AND id <> p_document_id;
    RETURN v_heir;
END
$fn$;

-- Gives a duplicate copies of its original's chunks and vectors (nothing is embedded) and makes
-- it a document like any other. Returns the number of chunks copied.
CREATE OR REPLACE FUNCTION pgrag.documents_materialize(p_document_id bigint) RETURNS integer
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan  -- (the collection a constant: its partition alone)
AS $fn$
DECLARE
    v_original   bigint;
    v_collection integer;
    v_copied     integer;
BEGIN
    SELECT o.id, o.collection_id INTO v_original, v_collection
      FROM pgrag.documents d
      JOIN pgrag.documents o ON o.collection_id = d.collection_id
                            AND o.source = d.metadata ->> 'duplicate_of'
     WHERE d.id = p_document_id;
    UPDATE pgrag.documents SET metadata = metadata - 'duplicate_of' WHERE id = p_document_id;
    IF v_original IS NULL THEN
        RETURN 0;
    END IF;
    WITH source_chunks AS (
             SELECT c.* FROM pgrag.chunks c WHERE c.document_id = v_original),
         copied AS (
             INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, section,
                                       page, token_count, content_hash, principals, text_config,
                                       context, context_for)
             SELECT p_document_id, s.collection_id, s.ordinal, s.content, s.section, s.page,
                    s.token_count, s.content_hash, s.principals, s.text_config, s.context,
                    s.context_for
               FROM source_chunks s
             RETURNING id, ordinal),
         vectors AS (
             INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)
             SELECT e.model_id, c.id, e.embedding, e.collection_id
               FROM copied c
               JOIN source_chunks s ON s.ordinal = c.ordinal
               JOIN pgrag.chunk_embeddings e
                 ON e.collection_id = v_collection AND e.chunk_id = s.id
             RETURNING 1)
    SELECT count(*) INTO v_copied FROM copied;
    RETURN v_copied;
END
$fn$;

-- After a document is deleted (pgrag rm, --prune, plain SQL): a duplicate that survives keeps
-- the content. An AFTER trigger, so that rows the same statement deletes are already gone
-- (and never picked as heirs, nor updated under the statement's feet); it is named
-- "Documents_hand_over" (migration 0005) so that it fires before the foreign keys'
-- "RI_ConstraintTrigger_a_..." cascade deletes the chunks: PostgreSQL fires a table's triggers
-- in the order of their names. A session that writes for some principals
-- (pgrag.write_principals, sql/functions/access.sql) may not delete a document others may read.
CREATE OR REPLACE FUNCTION pgrag.documents_deleted() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_raw text := current_setting('pgrag.write_principals', true);
    v_for text[];
BEGIN
    IF coalesce(btrim(v_raw), '') <> '' THEN
        v_for := ARRAY(SELECT btrim(p) FROM unnest(string_to_array(v_raw, ',')) p
                        WHERE btrim(p) <> '');
        IF cardinality(v_for) = 0 OR NOT pgrag.principals_valid(v_for) THEN
            RAISE EXCEPTION 'pgrag.write_principals is not a list of principals: %', quote_literal(v_raw)
                USING ERRCODE = '22023',
                      HINT = 'Use comma-separated names of letters, digits and _ . : @ + -, such as alice,group:billing.';
        END IF;
        IF NOT coalesce(cardinality(OLD.principals) > 0 AND OLD.principals <@ v_for, false) THEN
            RAISE EXCEPTION 'may not delete document %: principals this session does not write for may read it',
                quote_literal(OLD.source)
                USING ERRCODE = '42501',
                      HINT = 'A session with pgrag.write_principals deletes only documents readable by none but them.';
        END IF;
    END IF;
    PERFORM pgrag.documents_hand_over(OLD.id, OLD.collection_id, OLD.source);
    RETURN NULL;
END
$fn$;

-- After a document's access changed: a duplicate no longer reads through its original's
-- chunks, and an original's duplicates no longer read through its new access list.
CREATE OR REPLACE FUNCTION pgrag.documents_access_dedup() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_duplicate bigint;
BEGIN
    IF NEW.metadata ? 'duplicate_of' THEN
        PERFORM pgrag.documents_materialize(NEW.id);
    END IF;
    FOR v_duplicate IN
        SELECT d.id FROM pgrag.documents d
         WHERE d.collection_id = NEW.collection_id
           AND d.metadata @> jsonb_build_object('duplicate_of', NEW.source)
    LOOP
        PERFORM pgrag.documents_materialize(v_duplicate);
    END LOOP;
    RETURN NULL;
END
$fn$;

-- A copy names its original by source (metadata.duplicate_of, above). An
-- application that renames a document with plain SQL (UPDATE pgrag.documents SET source = ...)
-- would leave its copies pointing at a name nothing holds, and a later delete of the original
-- would hand its chunks to no one. After such an UPDATE the copies follow the new name; a
-- document moved to another collection first hands its chunks to a copy that stays.
CREATE OR REPLACE FUNCTION pgrag.documents_renamed() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.collection_id <> OLD.collection_id THEN
        PERFORM pgrag.documents_hand_over(OLD.id, OLD.collection_id, OLD.source);
    ELSE
        UPDATE pgrag.documents
           SET metadata = jsonb_set(metadata, '{duplicate_of}', to_jsonb(NEW.source))
         WHERE collection_id = OLD.collection_id
           AND metadata @> jsonb_build_object('duplicate_of', OLD.source)
           AND id <> NEW.id;
    END IF;
    RETURN NULL;
END
$fn$;
