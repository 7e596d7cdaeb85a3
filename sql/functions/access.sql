-- pgrag access control: principals, access lists (acls) and who the session is.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md): edit a body
-- here, in place; a changed argument list or result of documents_v1 / collections_v1 is a _v2.
--
-- A principal is a name such as alice, group:billing or alice@example.com (letters, digits and
-- _ . : @ + -, at most 128 characters, compared bytewise); "public" means everyone. A document
-- carries the principals that may read it (documents.principals); each distinct set of them is
-- one row of pgrag.acls, and every row that holds content, vectors or keyword statistics
-- carries its document's acl_id, so row-level security is one integer test per row.
--
-- Who the session is, pgrag.session_principals(), decided by the login role (session_user), so
-- that SECURITY DEFINER functions (search_v5) see the same answer as the caller, and SET ROLE can
-- neither widen nor narrow it (a login can always RESET ROLE):
--   * Unrestricted sessions (superusers, BYPASSRLS roles, the owner of schema pgrag and members
--     of pgrag_writer) see everything, unless they set pgrag.principals, which narrows them to
--     those principals (plus public), e.g. to see what alice sees.
--   * Members of pgrag_app (an application that authenticates its own users) assert the user's
--     principals per transaction: SELECT set_config('pgrag.principals', 'alice,group:billing',
--     true). Without it they see public documents only (and any principals their own role is
--     mapped to in pgrag.role_principals).
--   * Every other role (pgrag_reader, an end user's own database role) sees public documents
--     and the principals pgrag.role_principals maps its roles to. Setting pgrag.principals can
--     only narrow that, never widen it.
--
-- Who the session writes for, pgrag.write_principals (set by the writer, e.g. `pgrag serve`
-- for an upload: the caller's principals): when set, the session may create, change or delete
-- only documents every reader of which is one of them ("public" only when it is named). So a
-- caller can neither publish a document to principals it does not hold nor change or delete a
-- document others may read; the document triggers (documents_acl, documents_deleted) refuse
-- it, for every role, the owner and superusers included. Unset (ingest, the worker, sync
-- triggers), writes are as the role's grants and row-level security allow.
-- Readers and apps are given no SELECT on the tables that hold content, vectors or keyword
-- statistics: they search through pgrag.search_v5 (SECURITY DEFINER, which applies these
-- principals to every row it reads) and list through pgrag.documents_v1. Direct SQL on a table
-- under row-level security leaks through side channels (EXPLAIN ANALYZE row counts when a
-- leakproof comparison runs before the policy), so untrusted roles never get it. Row-level
-- security still filters every other role that is granted SELECT (pgrag_writer naming
-- principals, and any role an administrator grants).

-- The acl row for a set of principals, created on first use. Invalid principals are rejected
-- here, with the offending list in the message.
CREATE OR REPLACE FUNCTION pgrag.acl_for(principals text[]) RETURNS integer
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_set text[];
    v_id  integer;
BEGIN
    IF NOT pgrag.principals_valid(principals) THEN
        RAISE EXCEPTION 'invalid principals %: each must be 1-128 letters, digits or _ . : @ + - (such as alice or group:billing)',
            coalesce(principals::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    v_set := pgrag.principals_canonical(principals);
    SELECT a.id INTO v_id FROM pgrag.acls a WHERE a.principals = v_set;
    IF v_id IS NULL THEN
        INSERT INTO pgrag.acls (principals) VALUES (v_set)
        ON CONFLICT ON CONSTRAINT acls_principals_key DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN  -- a concurrent transaction created it first
            SELECT a.id INTO v_id FROM pgrag.acls a WHERE a.principals = v_set;
        END IF;
    END IF;
    RETURN v_id;
END
$fn$;

-- Whether the login role sees everything when it names no principals: a superuser, a
-- BYPASSRLS role, the owner of schema pgrag or a member of pgrag_writer. The one definition,
-- used by session_principals and unrestricted.
CREATE OR REPLACE FUNCTION pgrag.unrestricted_role() RETURNS boolean
LANGUAGE sql STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT EXISTS (
        SELECT 1 FROM pg_roles r, pg_namespace n
         WHERE r.rolname = session_user AND n.nspname = 'pgrag'
           AND (r.rolsuper OR r.rolbypassrls
                OR pg_has_role(session_user, n.nspowner, 'MEMBER')
                OR EXISTS (SELECT 1 FROM pg_roles w WHERE w.rolname = 'pgrag_writer'
                              AND pg_has_role(session_user, w.oid, 'MEMBER'))))
$fn$;

-- The session's principals; NULL for an unrestricted session (see the top of this file).
-- SECURITY DEFINER: it reads pgrag.role_principals, which restricted roles may not; it depends
-- only on the session (session_user and pgrag.principals), never on its arguments.
CREATE OR REPLACE FUNCTION pgrag.session_principals() RETURNS text[]
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_raw          text := current_setting('pgrag.principals', true);
    v_asserted     text[];
    v_mapped       text[];
    v_unrestricted boolean;
    v_app          boolean;
BEGIN
    IF v_raw IS NOT NULL AND btrim(v_raw) <> '' THEN
        v_asserted := ARRAY(SELECT DISTINCT btrim(p) FROM unnest(string_to_array(v_raw, ',')) p
                             WHERE btrim(p) <> '');
        IF NOT pgrag.principals_valid(v_asserted) THEN
            RAISE EXCEPTION 'pgrag.principals is not a list of principals: %', quote_literal(v_raw)
                USING ERRCODE = '22023',
                      HINT = 'Use comma-separated names of letters, digits and _ . : @ + -, such as alice,group:billing.';
        END IF;
    END IF;

    v_unrestricted := pgrag.unrestricted_role();
    v_app := EXISTS (SELECT 1 FROM pg_roles a WHERE a.rolname = 'pgrag_app'
                        AND pg_has_role(session_user, a.oid, 'MEMBER'));

    IF v_asserted IS NULL AND v_unrestricted THEN
        RETURN NULL;
    END IF;
    IF v_asserted IS NOT NULL AND (v_unrestricted OR v_app) THEN
        RETURN pgrag.principals_canonical(v_asserted || '{public}'::text[]);
    END IF;

    SELECT coalesce(array_agg(m.principal), '{}') INTO v_mapped
      FROM pgrag.role_principals m
      JOIN pg_roles r ON r.rolname = m.role_name
     WHERE pg_has_role(session_user, r.oid, 'MEMBER');
    IF v_asserted IS NOT NULL THEN  -- narrowing only
        v_mapped := ARRAY(SELECT unnest(v_mapped) INTERSECT SELECT unnest(v_asserted));
    END IF;
    RETURN pgrag.principals_canonical(v_mapped || '{public}'::text[]);
END
$fn$;

-- The acls the session may read, sorted; NULL for an unrestricted session. Row-level security
-- policies call it once per statement (as an InitPlan), not once per row, and only when
-- unrestricted is false; the search engine calls it once per search. SECURITY DEFINER: restricted
-- roles may not read pgrag.acls (it names other tenants' principals).
CREATE OR REPLACE FUNCTION pgrag.visible_acls() RETURNS integer[]
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_principals text[] := pgrag.session_principals();
BEGIN
    IF v_principals IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT a.id FROM pgrag.acls a WHERE a.principals && v_principals ORDER BY a.id);
END
$fn$;

-- Whether the session may read some document of a collection (an unrestricted session: any
-- collection that exists). The question log's policy requires it of what a restricted session
-- logs, so no role fills another tenant's collection's log (pushing its entries past the
-- retention). SECURITY DEFINER: restricted roles may not read pgrag.documents; an index probe on
-- (collection_id, acl_id).
CREATE OR REPLACE FUNCTION pgrag.collection_visible(collection_id integer) RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_acls integer[] := pgrag.visible_acls();
BEGIN
    IF collection_visible.collection_id IS NULL THEN
        RETURN false;
    END IF;
    IF v_acls IS NULL THEN
        RETURN EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = collection_visible.collection_id);
    END IF;
    RETURN EXISTS (SELECT 1 FROM pgrag.documents d
                    WHERE d.collection_id = collection_visible.collection_id
                      AND d.acl_id = ANY (v_acls));
END
$fn$;

-- Whether the session sees everything: an unrestricted role that named no principals. Cheap
-- (no acl lookup): the policies test it first, so such sessions never compute visible_acls.
CREATE OR REPLACE FUNCTION pgrag.unrestricted() RETURNS boolean
LANGUAGE sql STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(btrim(current_setting('pgrag.principals', true)), '') = ''
       AND pgrag.unrestricted_role()
$fn$;

-- Documents: principals made canonical, and their acl found (or created). A session that
-- writes for some principals (pgrag.write_principals, see the top of this file) may neither
-- change a document any other principal may read nor give one such a reader. (The setting is
-- read here and in documents_deleted, not through a function of its own: a downgrade to an
-- earlier release restores both bodies and leaves nothing behind.)
CREATE OR REPLACE FUNCTION pgrag.documents_acl() RETURNS trigger
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
        IF TG_OP = 'UPDATE'
           AND NOT coalesce(cardinality(OLD.principals) > 0 AND OLD.principals <@ v_for, false) THEN
            RAISE EXCEPTION 'may not change document %: principals this session does not write for may read it',
                quote_literal(OLD.source)
                USING ERRCODE = '42501',
                      HINT = 'A session with pgrag.write_principals changes only documents readable by none but them.';
        END IF;
    END IF;
    NEW.principals := pgrag.principals_canonical(NEW.principals);
    IF v_for IS NOT NULL
       AND NOT coalesce(cardinality(NEW.principals) > 0 AND NEW.principals <@ v_for, false) THEN
        RAISE EXCEPTION 'may not write document % readable by %: this session writes for % only',
            quote_literal(NEW.source),
            coalesce(nullif(array_to_string(NEW.principals, ', '), ''), 'nobody'),
            array_to_string(pgrag.principals_canonical(v_for), ', ')
            USING ERRCODE = '42501',
                  HINT = 'Every reader of a document must be one of the principals in pgrag.write_principals.';
    END IF;
    NEW.acl_id := pgrag.acl_for(NEW.principals);
    RETURN NEW;
END
$fn$;

-- After a document's access changed: its chunks and their vectors follow (and, through the
-- keyword trigger, its postings and statistics). Nothing is re-embedded.
CREATE OR REPLACE FUNCTION pgrag.documents_acl_changed() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan  -- (the collection a constant: its partition alone)
AS $fn$
BEGIN
    UPDATE pgrag.chunks c SET principals = NEW.principals, acl_id = NEW.acl_id
     WHERE c.document_id = NEW.id;
    UPDATE pgrag.chunk_embeddings e SET acl_id = NEW.acl_id
      FROM pgrag.chunks c
     WHERE c.document_id = NEW.id AND e.collection_id = NEW.collection_id AND e.chunk_id = c.id
       AND e.acl_id <> NEW.acl_id;
    RETURN NULL;
END
$fn$;

-- A chunk's access is its document's, whatever the writer supplied.
CREATE OR REPLACE FUNCTION pgrag.chunks_acl() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    SELECT d.principals, d.acl_id INTO NEW.principals, NEW.acl_id
      FROM pgrag.documents d WHERE d.id = NEW.document_id;
    RETURN NEW;
END
$fn$;

-- After a chunk's access changed (its document's did, or it moved to another document): its
-- vectors follow.
CREATE OR REPLACE FUNCTION pgrag.chunks_acl_changed() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan  -- (the collection a constant: its partition alone)
AS $fn$
BEGIN
    UPDATE pgrag.chunk_embeddings e SET acl_id = NEW.acl_id
     WHERE e.collection_id = NEW.collection_id AND e.chunk_id = NEW.id AND e.acl_id <> NEW.acl_id;
    RETURN NULL;
END
$fn$;

-- A vector's access is its chunk's. And, in place of foreign keys (sql/schema/tables.sql says
-- why the partitioned table has none), its chunk and model must exist and its collection be
-- its chunk's: the chunk row is locked FOR SHARE (a foreign key's check takes FOR KEY SHARE;
-- SHARE also holds off a change of the chunk's collection or access list, which would
-- otherwise miss this uncommitted vector: a review found both), the model's FOR KEY SHARE, so
-- that neither is deleted or changed before this commits (a delete then waits, and the
-- chunk's takes this vector along; in READ COMMITTED this insert, when it waited, reads the
-- chunk as it is now).
CREATE OR REPLACE FUNCTION pgrag.chunk_embeddings_acl() RETURNS trigger
LANGUAGE plpgsql
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_collection integer;
BEGIN
    SELECT c.acl_id, c.collection_id INTO NEW.acl_id, v_collection
      FROM pgrag.chunks c WHERE c.id = NEW.chunk_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a vector of chunk %, which does not exist', NEW.chunk_id
            USING ERRCODE = '23503';
    END IF;
    IF v_collection IS DISTINCT FROM NEW.collection_id THEN
        RAISE EXCEPTION 'a vector of chunk % filed under collection %: its chunk is in collection %',
            NEW.chunk_id, NEW.collection_id, v_collection
            USING ERRCODE = '23503', HINT = 'Insert it with collection_id = its chunk''s.';
    END IF;
    PERFORM 1 FROM pgrag.embedding_models m WHERE m.id = NEW.model_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a vector of embedding model %, which does not exist', NEW.model_id
            USING ERRCODE = '23503';
    END IF;
    RETURN NEW;
END
$fn$;

-- What restricted roles may list: the documents of a collection they may read, and the
-- collections with their visible sizes. SECURITY DEFINER, filtered by visible_acls, which is
-- computed once per call (a plpgsql variable: never once per row) and matched through the
-- index on (collection_id, acl_id), so a call costs what the caller may see, not the size of
-- the collection. An unrestricted session reads everything, through the (collection_id,
-- source) index.
CREATE OR REPLACE FUNCTION pgrag.documents_v1(collection text)
RETURNS TABLE (document_id bigint, source text, title text, metadata jsonb, updated_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_acls integer[] := pgrag.visible_acls();
    v_id   integer;
BEGIN
    SELECT c.id INTO v_id FROM pgrag.collections c WHERE c.name = documents_v1.collection;
    IF v_id IS NULL OR v_acls = '{}' THEN
        RETURN;
    END IF;
    IF v_acls IS NULL THEN
        RETURN QUERY
            SELECT d.id, d.source, d.title, d.metadata, d.updated_at
              FROM pgrag.documents d WHERE d.collection_id = v_id ORDER BY d.source;
    ELSE
        RETURN QUERY
            SELECT d.id, d.source, d.title, d.metadata, d.updated_at
              FROM pgrag.documents d
             WHERE d.collection_id = v_id AND d.acl_id = ANY (v_acls)
             ORDER BY d.source;
    END IF;
END
$fn$;

-- Every collection with its model and the number of documents and chunks the session may
-- read. Chunks come from keyword_totals (a few rows per collection and acl: exact and cheap).
-- Documents (pgrag.document_count, sql/functions/status.sql): a restricted session gets the
-- exact count of what it may read, found through the (collection_id, acl_id) index, so it
-- costs what the caller sees and says nothing of what it may not; an unrestricted session
-- gets an exact count up to pgrag.exact_count_limit documents (100,000 by default) and the
-- planner's estimate above it, with estimated = true. Estimates are never given to a
-- restricted session: an estimate of the whole collection would tell it the size of what it
-- may not read.
CREATE OR REPLACE FUNCTION pgrag.collections_v2()
RETURNS TABLE (name text, model text, dimension integer, documents bigint, chunks bigint,
               estimated boolean)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_acls integer[] := pgrag.visible_acls();
BEGIN
    RETURN QUERY
        SELECT c.name, m.name, m.dimension, n.documents,
               (SELECT coalesce(sum(t.chunks), 0)::bigint FROM pgrag.keyword_totals t
                 WHERE t.collection_id = c.id AND (v_acls IS NULL OR t.acl_id = ANY (v_acls))),
               n.estimated
          FROM pgrag.collections c
          LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id
         CROSS JOIN LATERAL pgrag.document_count(c.id, v_acls) n
         ORDER BY c.name;
END
$fn$;

-- Deprecated: collections_v2 without its estimated column (documents may be an estimate for
-- an unrestricted session, as there).
CREATE OR REPLACE FUNCTION pgrag.collections_v1()
RETURNS TABLE (name text, model text, dimension integer, documents bigint, chunks bigint)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT v.name, v.model, v.dimension, v.documents, v.chunks FROM pgrag.collections_v2() v
$fn$;
