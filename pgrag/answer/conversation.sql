-- name: act_as
-- Make this transaction's conversations the caller's (pgrag.session_caller); ends with it.
SELECT set_config('pgrag.caller', %(caller)s, true);

-- name: session_caller
-- Who this transaction's conversations belong to.
SELECT pgrag.session_caller();

-- name: start
-- A new conversation of the session's caller; NULL when there is no such collection.
SELECT pgrag.conversation_start_v1(%(collection)s, %(title)s);

-- name: conversation
-- One of the caller's conversations (no row: not the caller's, or none).
SELECT id, collection, title, turns, created_at, updated_at
  FROM pgrag.conversation_v1(%(id)s);

-- name: turns
-- Its turns in order.
SELECT turn, role, content, standalone_query, sources, query_id, created_at
  FROM pgrag.conversation_turns_v1(%(id)s);

-- name: append
-- Append turns after the one last read; the new last turn's number.
SELECT pgrag.conversation_append_v1(%(id)s, %(after)s, %(turns)s);

-- name: conversations
-- The caller's conversations, most recently continued first.
SELECT id, collection, title, turns, created_at, updated_at
  FROM pgrag.conversations_v1(%(collection)s, %(limit)s);

-- name: delete
-- Delete one of the caller's conversations; whether there was one.
SELECT pgrag.conversation_delete_v1(%(id)s);

-- name: match
-- The caller's conversation in a collection whose turns are exactly these (NULL: none).
SELECT pgrag.conversation_match_v1(%(collection)s, %(transcript)s);
