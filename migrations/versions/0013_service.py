"""What `pgrag serve` keeps in PostgreSQL (issue 17).

- api_keys: the service's API keys, each bound to principals and scopes. Only the sha256 of
  the whole key is stored; ``id`` is the 8-character key id that listings show and the key
  itself carries (``pgrag_<id>_<secret>``). No restricted role gets any privilege on it: the
  service verifies a key through pgrag.api_key_v1 (sql/functions/keys.sql, SECURITY DEFINER,
  granted to pgrag_app), and `pgrag keys` manages them as the owner of schema pgrag.
- conversations and conversation_turns: a caller's questions and answers in order
  (pgrag/answer/conversation.py), under row-level security by pgrag.session_caller(), the
  caller a pgrag_app session names per transaction (set_config('pgrag.caller', ..., true)).
  The policies call session_caller, so it (and caller_valid, which it calls) is created here
  too; the function files, applied after the migrations, create the same and the entry points.

The downgrade drops the tables and the functions.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


# sql/functions/conversations.sql's caller_valid and session_caller, as this revision ships them.
SESSION_CALLER = r"""
CREATE OR REPLACE FUNCTION pgrag.caller_valid(caller text) RETURNS boolean
LANGUAGE sql IMMUTABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT caller IS NOT NULL AND length(caller) BETWEEN 1 AND 512
       AND caller !~ '[[:cntrl:]]' AND caller = btrim(caller)
$fn$;

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
"""

CONVERSATIONS = """
CREATE TABLE pgrag.conversations (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner         text NOT NULL
                  CONSTRAINT conversations_owner_check CHECK (char_length(owner) BETWEEN 1 AND 512),
    collection_id integer NOT NULL REFERENCES pgrag.collections (id) ON DELETE CASCADE,
    title         text CONSTRAINT conversations_title_check CHECK (char_length(title) <= 200),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conversations_owner_idx ON pgrag.conversations (owner, updated_at DESC);
CREATE INDEX conversations_collection_idx ON pgrag.conversations (collection_id);
CREATE TABLE pgrag.conversation_turns (
    conversation_id  uuid NOT NULL REFERENCES pgrag.conversations (id) ON DELETE CASCADE,
    turn             integer NOT NULL CONSTRAINT conversation_turns_turn_check CHECK (turn >= 1),
    role             text NOT NULL
                     CONSTRAINT conversation_turns_role_check CHECK (role IN ('user', 'assistant')),
    content          text NOT NULL,
    standalone_query text,
    sources          jsonb NOT NULL DEFAULT '[]'
                     CONSTRAINT conversation_turns_sources_check CHECK (jsonb_typeof(sources) = 'array'),
    query_id         bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, turn)
);
ALTER TABLE pgrag.conversations ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON pgrag.conversations
    USING (owner = (SELECT pgrag.session_caller()))
    WITH CHECK (owner = (SELECT pgrag.session_caller()));
ALTER TABLE pgrag.conversation_turns ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON pgrag.conversation_turns
    USING (EXISTS (SELECT 1 FROM pgrag.conversations c
                    WHERE c.id = conversation_id AND c.owner = (SELECT pgrag.session_caller())))
    WITH CHECK (EXISTS (SELECT 1 FROM pgrag.conversations c
                         WHERE c.id = conversation_id AND c.owner = (SELECT pgrag.session_caller())));
"""


def upgrade() -> None:
    _sql(
        """
        CREATE TABLE pgrag.api_keys (
            id           text PRIMARY KEY
                         CONSTRAINT api_keys_id_check CHECK (id ~ '^[a-z0-9]{8}$'),
            name         text CONSTRAINT api_keys_name_check CHECK (char_length(name) <= 200),
            key_hash     bytea NOT NULL UNIQUE
                         CONSTRAINT api_keys_key_hash_check CHECK (octet_length(key_hash) = 32),
            principals   text[] NOT NULL
                         CONSTRAINT api_keys_principals_check
                         CHECK (pgrag.principals_valid(principals) AND cardinality(principals) > 0),
            scopes       text[] NOT NULL DEFAULT '{read}'
                         CONSTRAINT api_keys_scopes_check
                         CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['read', 'write']),
            created_at   timestamptz NOT NULL DEFAULT now(),
            expires_at   timestamptz,
            revoked_at   timestamptz,
            last_used_at timestamptz
        );
        """
    )
    _sql(SESSION_CALLER)
    _sql(CONVERSATIONS)


def downgrade() -> None:
    _sql(
        """
        DROP FUNCTION IF EXISTS pgrag.api_key_v1(bytea);
        DROP TABLE pgrag.api_keys;
        DROP FUNCTION IF EXISTS pgrag.conversation_start_v1(text, text);
        DROP FUNCTION IF EXISTS pgrag.conversation_v1(uuid);
        DROP FUNCTION IF EXISTS pgrag.conversations_v1(text, integer);
        DROP FUNCTION IF EXISTS pgrag.conversation_turns_v1(uuid);
        DROP FUNCTION IF EXISTS pgrag.conversation_append_v1(uuid, integer, jsonb);
        DROP FUNCTION IF EXISTS pgrag.conversation_delete_v1(uuid);
        DROP FUNCTION IF EXISTS pgrag.conversation_match_v1(text, jsonb);
        DROP TABLE pgrag.conversation_turns;
        DROP TABLE pgrag.conversations;
        DROP FUNCTION pgrag.session_caller();
        DROP FUNCTION pgrag.caller_valid(text);
        -- 0013's release added it in sql/functions/sections.sql (no DDL of its own): revision
        -- 0012 did not have it.
        DROP FUNCTION IF EXISTS pgrag.document_chunks_v1(text, text, bigint, integer);
        """
    )
