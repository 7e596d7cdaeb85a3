-- SQL-first sync: documents written with plain SQL get chunks, keyword postings and (through
-- pgrag.embedding_queue and `pgrag worker`) vectors.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
-- Public entry points:
-- sync_row_v1 (a trigger applications attach) and chunk_text_v1.
--
--   INSERT INTO pgrag.documents (collection_id, source, title, body)
--   SELECT id, 'kb/42', 'Refunds', 'Refunds are accepted within 30 days ...'
--     FROM pgrag.collections WHERE name = 'handbook';
--
-- A document with a body is chunked in the database when it is inserted or its body or title
-- changes: keyword search finds it as soon as the transaction commits. Its chunks are queued
-- for every model of the collection that is not retired, unless a chunk with the same text in
-- the collection already has that model's vector (then it is copied, nothing is embedded).
-- Deleting the document deletes its chunks, vectors and queue entries (foreign keys).
-- Documents written by `pgrag ingest` have no body (it chunks files itself) and are left alone;
-- setting a body on one makes SQL its source (its identical copies, if any, first get copies of
-- its chunks: they keep their own content). Setting the body back to NULL leaves the chunks as
-- they are, for pgrag ingest to rewrite (it does so when it rewrites a document).
-- Chunks are sized in words (chunk_text_v1); `pgrag worker` embeds one longer than its model's
-- input as the mean of its pieces' vectors, so no text is left out of a vector.

-- Chunks of at most p_words words, packed paragraph by paragraph (a blank line ends one); a
-- paragraph longer than p_words is cut into windows overlapping by p_overlap words. A "word" is
-- a run of at most 40 characters without white space, so text without spaces is cut as well.
CREATE OR REPLACE FUNCTION pgrag.chunk_text_v1(p_text text, p_words integer, p_overlap integer DEFAULT 0)
RETURNS TABLE (ordinal integer, content text, words integer)
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_para  text;
    v_words text[];
    v_n     integer;
    v_buf   text := '';
    v_count integer := 0;
    v_ord   integer := 0;
    i       integer;
BEGIN
    IF p_words IS NULL OR p_words < 1 OR p_overlap IS NULL OR p_overlap < 0
       OR p_overlap >= p_words THEN
        RAISE EXCEPTION 'chunk_text_v1 needs p_words >= 1 and 0 <= p_overlap < p_words, got % and %',
            p_words, p_overlap USING ERRCODE = '22023';
    END IF;
    FOREACH v_para IN ARRAY regexp_split_to_array(coalesce(p_text, ''), '\n[ \t\r\f\v]*\n')
    LOOP
        v_words := ARRAY(SELECT m[1] FROM regexp_matches(v_para, '(\S{1,40})', 'g') m);
        v_n := cardinality(v_words);
        CONTINUE WHEN v_n = 0;
        IF v_count > 0 AND v_count + v_n > p_words THEN
            ordinal := v_ord; content := v_buf; words := v_count;
            RETURN NEXT;
            v_ord := v_ord + 1; v_buf := ''; v_count := 0;
        END IF;
        IF v_n > p_words THEN
            i := 1;
            LOOP
                ordinal := v_ord;
                content := array_to_string(v_words[i : i + p_words - 1], ' ');
                words := least(p_words, v_n - i + 1);
                RETURN NEXT;
                v_ord := v_ord + 1;
                EXIT WHEN i + p_words - 1 >= v_n;
                i := i + p_words - p_overlap;
            END LOOP;
        ELSE
            v_buf := CASE WHEN v_count = 0 THEN '' ELSE v_buf || E'\n\n' END
                     || array_to_string(v_words, ' ');
            v_count := v_count + v_n;
        END IF;
    END LOOP;
    IF v_count > 0 THEN
        ordinal := v_ord; content := v_buf; words := v_count;
        RETURN NEXT;
    END IF;
END
$fn$;

COMMENT ON FUNCTION pgrag.chunk_text_v1(text, integer, integer) IS
    'Chunks of at most p_words words, paragraph by paragraph, for documents written with SQL.';

-- Before a document with a body is written: its content hash is the body's.
CREATE OR REPLACE FUNCTION pgrag.documents_body() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.body IS NOT NULL THEN
        NEW.content_hash := encode(sha256(convert_to(NEW.body, 'UTF8')), 'hex');
        IF TG_OP = 'UPDATE' THEN
            NEW.updated_at := now();
        END IF;
    END IF;
    RETURN NEW;
END
$fn$;

-- Queues chunks for every model of their collection that is not retired and that they have no
-- vector of, after copying the vectors of chunks with the same text where there are some.
-- Returns the number of (chunk, model) pairs queued. Workers waiting on the channel
-- pgrag_embedding_queue (LISTEN) are woken when the transaction commits.
CREATE OR REPLACE FUNCTION pgrag.embedding_enqueue(p_collection_id integer, p_chunk_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan  -- (the collection a constant: its partition alone)
AS $fn$
DECLARE
    v_queued bigint;
BEGIN
    INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)
    SELECT DISTINCT ON (m.model_id, n.id) m.model_id, n.id, e.embedding, p_collection_id
      FROM pgrag.chunks n
      JOIN pgrag.collection_models m
        ON m.collection_id = p_collection_id AND m.status <> 'retired'
      JOIN pgrag.chunks o
        ON o.collection_id = p_collection_id
       AND left(o.content_hash, 16) = left(n.content_hash, 16)
       AND o.content_hash = n.content_hash AND o.id <> n.id
      JOIN pgrag.chunk_embeddings e
        ON e.collection_id = p_collection_id AND e.chunk_id = o.id AND e.model_id = m.model_id
     WHERE n.id = ANY (p_chunk_ids)
       AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings x
                        WHERE x.collection_id = p_collection_id AND x.model_id = m.model_id
                          AND x.chunk_id = n.id)
     ORDER BY m.model_id, n.id, o.id
    ON CONFLICT DO NOTHING;
    INSERT INTO pgrag.embedding_queue (chunk_id, model_id, collection_id)
    SELECT n.id, m.model_id, p_collection_id
      FROM pgrag.chunks n
      JOIN pgrag.collection_models m
        ON m.collection_id = p_collection_id AND m.status <> 'retired'
     WHERE n.id = ANY (p_chunk_ids)
       AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings x
                        WHERE x.collection_id = p_collection_id AND x.model_id = m.model_id
                          AND x.chunk_id = n.id)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_queued = ROW_COUNT;
    IF v_queued > 0 THEN
        PERFORM pg_notify('pgrag_embedding_queue', p_collection_id::text);
    END IF;
    RETURN v_queued;
END
$fn$;

-- After a document's body or title was written: its chunks follow. A chunk whose position and
-- text are unchanged keeps its row (and its vectors); the others are replaced and queued.
-- Identical copies of the document (metadata.duplicate_of, migration 0005) first get copies of
-- its current chunks (documents_materialize): their content is their own file's.
CREATE OR REPLACE FUNCTION pgrag.documents_sync() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_words   integer;
    v_overlap integer;
    v_config  text;
    v_ords    integer[];
    v_texts   text[];
    v_hashes  text[];
    v_counts  integer[];
    v_section text;
    v_ids     bigint[];
    v_copy    bigint;
BEGIN
    IF NEW.body IS NULL THEN
        RETURN NULL;  -- not (or no longer) written with SQL: its chunks are pgrag ingest's
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.body IS NOT DISTINCT FROM NEW.body
       AND OLD.title IS NOT DISTINCT FROM NEW.title THEN
        RETURN NULL;
    END IF;
    -- A copy given a body is a document of its own now: it no longer points at its original.
    IF NEW.metadata ? 'duplicate_of' THEN
        UPDATE pgrag.documents SET metadata = metadata - 'duplicate_of' WHERE id = NEW.id;
    END IF;
    FOR v_copy IN
        SELECT d.id FROM pgrag.documents d
         WHERE d.collection_id = NEW.collection_id
           AND d.metadata @> jsonb_build_object('duplicate_of', NEW.source)
         ORDER BY d.id
    LOOP
        PERFORM pgrag.documents_materialize(v_copy);
        -- (It copies the vectors there are; chunks still waiting for a model are queued.)
        PERFORM pgrag.embedding_enqueue(
            NEW.collection_id,
            ARRAY(SELECT c.id FROM pgrag.chunks c WHERE c.document_id = v_copy));
    END LOOP;
    -- Sizes are in the embedding model's tokens; English runs about 1.3 of them to the word.
    SELECT greatest(1, (c.chunk_tokens * 3) / 4), (c.chunk_overlap * 3) / 4, c.text_config
      INTO v_words, v_overlap, v_config
      FROM pgrag.collections c WHERE c.id = NEW.collection_id;
    v_overlap := least(v_overlap, v_words - 1);
    v_section := nullif(btrim(NEW.title), '');
    SELECT coalesce(array_agg(t.ordinal ORDER BY t.ordinal), '{}'),
           coalesce(array_agg(t.content ORDER BY t.ordinal), '{}'),
           coalesce(array_agg(encode(sha256(convert_to(
               CASE WHEN v_section IS NULL THEN t.content
                    ELSE v_section || E'\n' || t.content END, 'UTF8')), 'hex') ORDER BY t.ordinal), '{}'),
           coalesce(array_agg(t.words ORDER BY t.ordinal), '{}')
      INTO v_ords, v_texts, v_hashes, v_counts
      FROM pgrag.chunk_text_v1(NEW.body, v_words, v_overlap) t;
    DELETE FROM pgrag.chunks c
     WHERE c.document_id = NEW.id
       AND (c.ordinal, c.content_hash, coalesce(c.section, ''))
           NOT IN (SELECT u.o, u.h, coalesce(v_section, '')
                     FROM unnest(v_ords, v_hashes) AS u(o, h));
    WITH added AS (
        INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, section,
                                  token_count, content_hash, text_config)
        SELECT NEW.id, NEW.collection_id, u.o, u.t, v_section, (u.w * 4 + 2) / 3, u.h, v_config
          FROM unnest(v_ords, v_texts, v_hashes, v_counts) AS u(o, t, h, w)
         WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunks c
                            WHERE c.document_id = NEW.id AND c.ordinal = u.o)
        RETURNING id)
    SELECT array_agg(id) INTO v_ids FROM added;
    IF v_ids IS NOT NULL THEN
        PERFORM pgrag.embedding_enqueue(NEW.collection_id, v_ids);
    END IF;
    RETURN NULL;
END
$fn$;

-- A trigger function for an application's own table: each row becomes a document of a
-- collection, kept in step on INSERT, UPDATE and DELETE.
--
--   CREATE TRIGGER articles_pgrag AFTER INSERT OR UPDATE OR DELETE ON app.articles
--       FOR EACH ROW EXECUTE FUNCTION pgrag.sync_row_v1('handbook', 'id', 'body', 'title');
--
-- Arguments: the collection (created beforehand, with its model: `pgrag ingest` or
-- `pgrag models`), the key column, the text column, and optionally the title column and a
-- column of principals (text[]; NULL or absent: public). The document's source is
-- "schema.table/key"; its metadata is {"table": "schema.table", "key": "..."}. SECURITY
-- DEFINER, executable by pgrag_writer (and the owner) only: attaching it takes that grant.
CREATE OR REPLACE FUNCTION pgrag.sync_row_v1() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_collection_id integer;
    v_table   text := format('%s.%s', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    v_new     jsonb;
    v_old     jsonb;
    v_key     text;
    v_old_key text;
    v_principals text[];
BEGIN
    IF TG_NARGS < 3 THEN
        RAISE EXCEPTION 'pgrag.sync_row_v1 needs (collection, key column, text column [, title column [, principals column]]), got % arguments on %',
            TG_NARGS, v_table USING ERRCODE = '22023';
    END IF;
    SELECT c.id INTO v_collection_id FROM pgrag.collections c WHERE c.name = TG_ARGV[0];
    IF NOT FOUND THEN
        RAISE EXCEPTION 'collection % (named by the pgrag trigger on %) does not exist',
            quote_literal(TG_ARGV[0]), v_table
            USING ERRCODE = '42704', HINT = 'Create it first, with pgrag ingest (pgrag collections lists them).';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        v_old := to_jsonb(OLD);
        v_old_key := v_old ->> TG_ARGV[1];
    END IF;
    IF TG_OP <> 'DELETE' THEN
        v_new := to_jsonb(NEW);
        -- Every column named must exist: a misspelt principals column must never make a
        -- restricted row public.
        FOR i IN 1 .. least(TG_NARGS - 1, 4) LOOP
            IF TG_ARGV[i] <> '' AND NOT v_new ? TG_ARGV[i] OR i < 3 AND TG_ARGV[i] = '' THEN
                RAISE EXCEPTION 'table % has no column % (named by its pgrag trigger)',
                    v_table, quote_ident(TG_ARGV[i]) USING ERRCODE = '42703';
            END IF;
        END LOOP;
        v_key := v_new ->> TG_ARGV[1];
        IF v_key IS NULL THEN
            RAISE EXCEPTION 'the key column % of % is NULL', quote_ident(TG_ARGV[1]), v_table
                USING ERRCODE = '23502';
        END IF;
    END IF;
    IF v_old_key IS NOT NULL AND v_old_key IS DISTINCT FROM v_key THEN
        DELETE FROM pgrag.documents
         WHERE collection_id = v_collection_id AND source = v_table || '/' || v_old_key;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN NULL;
    END IF;
    IF TG_NARGS > 4 AND TG_ARGV[4] <> '' THEN
        CASE jsonb_typeof(v_new -> TG_ARGV[4])
            WHEN 'array' THEN
                v_principals := ARRAY(SELECT jsonb_array_elements_text(v_new -> TG_ARGV[4]));
            WHEN 'null' THEN
                v_principals := NULL;  -- public, as documented
            ELSE
                RAISE EXCEPTION 'column % of % holds %, not an array of principals',
                    quote_ident(TG_ARGV[4]), v_table, jsonb_typeof(v_new -> TG_ARGV[4])
                    USING ERRCODE = '42804', HINT = 'Name a text[] column, such as ''{alice,group:billing}''.';
        END CASE;
    END IF;
    INSERT INTO pgrag.documents (collection_id, source, title, body, metadata, content_hash,
                                 principals)
    VALUES (v_collection_id, v_table || '/' || v_key,
            CASE WHEN TG_NARGS > 3 AND TG_ARGV[3] <> '' THEN v_new ->> TG_ARGV[3] END,
            coalesce(v_new ->> TG_ARGV[2], ''),
            jsonb_build_object('table', v_table, 'key', v_key), '',
            coalesce(v_principals, '{public}'))
    ON CONFLICT (collection_id, source) DO UPDATE
       SET title = EXCLUDED.title, body = EXCLUDED.body, principals = EXCLUDED.principals
     WHERE pgrag.documents.title IS DISTINCT FROM EXCLUDED.title
        OR pgrag.documents.body IS DISTINCT FROM EXCLUDED.body
        OR pgrag.documents.principals IS DISTINCT FROM EXCLUDED.principals;
    RETURN NULL;
END
$fn$;

COMMENT ON FUNCTION pgrag.sync_row_v1() IS
    'Trigger for an application table: keeps one pgrag document per row (collection, key column, text column [, title column [, principals column]]).';
