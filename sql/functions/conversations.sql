-- Conversations: a caller's questions and answers in order (pgrag/answer/conversation.py).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- A conversation belongs to one caller: the name of whoever asked, as the application that
-- authenticated them says it (pgrag serve: `key:<key id>`, `jwt:<issuer>#<sub>`, `local`).
-- The session says who it is per transaction, like its principals:
--
--   SELECT set_config('pgrag.caller', 'key:ab12cd34', true);
--
-- pgrag.session_caller() decides, by the login role (session_user, so SET ROLE changes nothing):
--   * Unrestricted roles (superusers, BYPASSRLS roles, the owner of schema pgrag, members of
--     pgrag_writer) and members of pgrag_app may name any caller: they authenticate their own
--     users. A pgrag_app session that names none is refused (otherwise all of an application's
--     users would share one history); an unrestricted one is `db:<login role>`.
--   * Every other role (pgrag_reader, an end user's own role) is `db:<login role>`; naming
--     another caller is refused.
-- Restricted roles get no privilege on the tables: they read and write their own conversations
-- through the SECURITY DEFINER entry points below, which filter by the session's caller (they
-- run as the owner of schema pgrag, whom row-level security does not filter). Row-level
-- security (sql/schema/policies.sql) shows every other session only its caller's rows.

-- Whether a caller's name can be stored: 1-512 characters, no control characters, no
-- surrounding spaces.
CREATE OR REPLACE FUNCTION pgrag.caller_valid(caller text) RETURNS boolean
LANGUAGE sql IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT caller IS NOT NULL AND length(caller) BETWEEN 1 AND 512
       AND caller !~ '[[:cntrl:]]' AND caller = btrim(caller)
$fn$;

-- The session's caller (see the top of this file).
CREATE OR REPLACE FUNCTION pgrag.session_caller() RETURNS text
LANGUAGE plpgsql STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_raw     text := nullif(current_setting('pgrag.caller', true), '');
    v_own     text := 'db:' || session_user;
    v_trusted boolean;
BEGIN
    v_trusted := pgrag.unrestricted_role()
                 OR EXISTS (SELECT 1 FROM pg_roles a WHERE a.rolname = 'pgrag_app'
                               AND pg_has_role(session_user, a.oid, 'MEMBER'));
    IF v_raw IS NULL THEN
        IF v_trusted AND NOT pgrag.unrestricted_role() THEN
            RAISE EXCEPTION 'this pgrag_app session names no caller, so its conversations would be every user''s'
                USING ERRCODE = '42501',
                      HINT = 'Name the user first: SELECT set_config(''pgrag.caller'', ''key:ab12cd34'', true).';
        END IF;
        RETURN v_own;
    END IF;
    IF NOT pgrag.caller_valid(v_raw) THEN
        RAISE EXCEPTION 'pgrag.caller is not a caller''s name: %', quote_literal(v_raw)
            USING ERRCODE = '22023',
                  HINT = 'Use 1-512 characters without control characters or surrounding spaces.';
    END IF;
    IF v_raw = v_own OR v_trusted THEN
        RETURN v_raw;
    END IF;
    RAISE EXCEPTION 'role % may not act as caller %', session_user, quote_literal(v_raw)
        USING ERRCODE = '42501',
              HINT = 'Only members of pgrag_app and unrestricted roles name a caller; leave pgrag.caller unset.';
END
$fn$;

-- Start a conversation in a collection for the session's caller; its id, or NULL when there
-- is no such collection.
CREATE OR REPLACE FUNCTION pgrag.conversation_start_v1(collection text, title text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_caller text := pgrag.session_caller();
    v_cid    integer;
    v_id     uuid;
BEGIN
    SELECT c.id INTO v_cid FROM pgrag.collections c WHERE c.name = conversation_start_v1.collection;
    IF v_cid IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgrag.conversations (owner, collection_id, title)
    VALUES (v_caller, v_cid, left(conversation_start_v1.title, 200))
    RETURNING id INTO v_id;
    RETURN v_id;
END
$fn$;

-- One of the caller's conversations (no row: there is none of that id that is the caller's).
CREATE OR REPLACE FUNCTION pgrag.conversation_v1(conversation uuid)
RETURNS TABLE (id uuid, collection text, title text, turns integer,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT v.id, c.name, v.title,
           (SELECT coalesce(max(t.turn), 0) FROM pgrag.conversation_turns t
             WHERE t.conversation_id = v.id),
           v.created_at, v.updated_at
      FROM pgrag.conversations v
      JOIN pgrag.collections c ON c.id = v.collection_id
     WHERE v.id = conversation_v1.conversation AND v.owner = pgrag.session_caller()
$fn$;

-- The caller's conversations, most recently continued first (of one collection, or all).
CREATE OR REPLACE FUNCTION pgrag.conversations_v1(collection text DEFAULT NULL,
                                                  lim integer DEFAULT 50)
RETURNS TABLE (id uuid, collection text, title text, turns integer,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT v.id, c.name, v.title,
           (SELECT coalesce(max(t.turn), 0) FROM pgrag.conversation_turns t
             WHERE t.conversation_id = v.id),
           v.created_at, v.updated_at
      FROM pgrag.conversations v
      JOIN pgrag.collections c ON c.id = v.collection_id
     WHERE v.owner = pgrag.session_caller()
       AND (conversations_v1.collection IS NULL OR c.name = conversations_v1.collection)
     ORDER BY v.updated_at DESC, v.id
     LIMIT greatest(least(coalesce(conversations_v1.lim, 50), 1000), 0)
$fn$;

-- The turns of one of the caller's conversations, in order (none: not the caller's).
CREATE OR REPLACE FUNCTION pgrag.conversation_turns_v1(conversation uuid)
RETURNS TABLE (turn integer, role text, content text, standalone_query text, sources jsonb,
               query_id bigint, created_at timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT t.turn, t.role, t.content, t.standalone_query, t.sources, t.query_id, t.created_at
      FROM pgrag.conversation_turns t
      JOIN pgrag.conversations v ON v.id = t.conversation_id
     WHERE t.conversation_id = conversation_turns_v1.conversation
       AND v.owner = pgrag.session_caller()
     ORDER BY t.turn
$fn$;

-- Append turns (a jsonb array of {role, content, standalone_query?, sources?, query_id?}) to
-- one of the caller's conversations, numbered after its last; the new last turn's number.
-- after_turn (when not NULL) is the last turn the caller read: if another request appended
-- since, nothing is appended and the error is a serialization failure (40001), since the new
-- answer's citation numbers were chosen from the turns read.
CREATE OR REPLACE FUNCTION pgrag.conversation_append_v1(conversation uuid, after_turn integer,
                                                        turns jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_caller text := pgrag.session_caller();
    v_id     uuid;
    v_last   integer;
    v_n      integer;
BEGIN
    SELECT v.id INTO v_id FROM pgrag.conversations v
     WHERE v.id = conversation_append_v1.conversation AND v.owner = v_caller
       FOR UPDATE;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'conversation % does not exist or is another caller''s',
            coalesce(conversation_append_v1.conversation::text, 'NULL')
            USING ERRCODE = 'P0002',
                  HINT = 'Start a new conversation, or continue one this caller started.';
    END IF;
    IF turns IS NULL OR jsonb_typeof(turns) <> 'array' THEN
        RAISE EXCEPTION 'conversation_append_v1: turns must be a jsonb array, not %',
            coalesce(jsonb_typeof(turns), 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(max(t.turn), 0) INTO v_last FROM pgrag.conversation_turns t
     WHERE t.conversation_id = v_id;
    IF after_turn IS NOT NULL AND after_turn <> v_last THEN
        RAISE EXCEPTION 'conversation % went on while this answer was made (it is at turn %, not %)',
            v_id, v_last, after_turn
            USING ERRCODE = '40001', HINT = 'Ask the question again.';
    END IF;
    INSERT INTO pgrag.conversation_turns (conversation_id, turn, role, content, standalone_query,
                                          sources, query_id)
    SELECT v_id, v_last + e.ord::integer, e.t ->> 'role', e.t ->> 'content',
           e.t ->> 'standalone_query', coalesce(e.t -> 'sources', '[]'::jsonb),
           (e.t ->> 'query_id')::bigint
      FROM jsonb_array_elements(turns) WITH ORDINALITY AS e(t, ord);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE pgrag.conversations v SET updated_at = now() WHERE v.id = v_id;
    RETURN v_last + v_n;
END
$fn$;

-- The caller's conversation in a collection whose turns are exactly `transcript` (a jsonb array
-- of {role, content}, oldest first), among its 100 most recently continued there; NULL if none.
-- A chat client that sends the whole history with every request (as OpenAI's API has it)
-- continues the conversation it had, without knowing its id.
CREATE OR REPLACE FUNCTION pgrag.conversation_match_v1(collection text, transcript jsonb)
RETURNS uuid
LANGUAGE sql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT r.id
      FROM (SELECT v.id, v.updated_at FROM pgrag.conversations v
              JOIN pgrag.collections c ON c.id = v.collection_id
             WHERE v.owner = pgrag.session_caller() AND c.name = conversation_match_v1.collection
             ORDER BY v.updated_at DESC LIMIT 100) r
     WHERE jsonb_typeof(transcript) = 'array'
       AND (SELECT count(*) FROM pgrag.conversation_turns t WHERE t.conversation_id = r.id)
           = jsonb_array_length(transcript)
       AND NOT EXISTS (
           SELECT 1 FROM pgrag.conversation_turns t
             JOIN jsonb_array_elements(transcript) WITH ORDINALITY AS e(m, ord) ON e.ord = t.turn
            WHERE t.conversation_id = r.id
              AND (t.role IS DISTINCT FROM e.m ->> 'role'
                   OR btrim(t.content) IS DISTINCT FROM btrim(e.m ->> 'content')))
     ORDER BY r.updated_at DESC
     LIMIT 1
$fn$;

-- Delete one of the caller's conversations and its turns; whether there was one.
CREATE OR REPLACE FUNCTION pgrag.conversation_delete_v1(conversation uuid) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM pgrag.conversations v
     WHERE v.id = conversation_delete_v1.conversation AND v.owner = pgrag.session_caller();
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n > 0;
END
$fn$;
