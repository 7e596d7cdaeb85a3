-- name: count_contexts
SELECT count(*) FROM pgrag.chunks WHERE context IS NOT NULL OR context_for IS NOT NULL;

-- name: count_checks
SELECT count(*) FROM pgrag.queries WHERE checks IS NOT NULL;

-- name: count_api_keys
SELECT count(*) FROM pgrag.api_keys;

-- name: count_conversations
SELECT count(*) FROM pgrag.conversations;

-- name: count_conversation_turns
SELECT count(*) FROM pgrag.conversation_turns;

-- name: count_thresholds
SELECT count(*) FROM pgrag.embedding_models WHERE min_confidence IS NOT NULL;

-- name: count_model_links
SELECT count(*) FROM pgrag.collection_models WHERE status <> 'active';

-- name: count_index_types
SELECT count(*) FROM pgrag.embedding_models WHERE index_type <> 'vector';

-- name: count_bodies
SELECT count(*) FROM pgrag.documents WHERE body IS NOT NULL;

-- name: count_keyword_settings
SELECT count(*) FROM pgrag.keyword_settings;

-- name: count_queue
SELECT count(*) FROM pgrag.embedding_queue;

-- name: count_cache
SELECT count(*) FROM pgrag.query_embedding_cache;

-- name: count_duplicates
SELECT count(*) FROM pgrag.documents WHERE metadata ? 'duplicate_of';

-- name: count_role_mappings
SELECT count(*) FROM pgrag.role_principals;

-- name: count_acls
SELECT count(*) FROM pgrag.acls WHERE id <> 1;

-- name: count_postings
SELECT count(*) FROM pgrag.keyword_postings;

-- name: count_documents
SELECT count(*) FROM pgrag.documents;

-- name: count_chunks
SELECT count(*) FROM pgrag.chunks;

-- name: count_vectors
SELECT count(*) FROM pgrag.chunk_embeddings;

-- name: count_queries
SELECT count(*) FROM pgrag.queries;

-- name: count_models
SELECT count(*) FROM pgrag.embedding_models;

-- name: create_saved_schema
-- Where a downgrade keeps what the next upgrade puts back: outside schema pgrag (which a
-- downgrade changes), readable by its owner only (roundtrip.trust_saved checked an existing one).
CREATE SCHEMA IF NOT EXISTS pgrag_saved;

-- name: create_saved_table
CREATE TABLE IF NOT EXISTS pgrag_saved.rows (
    kind     text NOT NULL,
    data     jsonb NOT NULL,
    saved_at timestamptz NOT NULL DEFAULT now()
);

-- name: saved_exists
-- (From the catalog: to_regclass would need the right to use the schema, which only its owner
-- has.)
SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'pgrag_saved' AND c.relname = 'rows');

-- name: saved_owner
-- Who owns schema pgrag_saved and who else is in it, if it exists; whether pgrag can trust it
-- (its owner is the running role, a superuser or the owner of schema pgrag, owns everything in
-- it, and no other role has a right on any of it: anything else was not made by a pgrag
-- downgrade); and whether the running role may use it.
SELECT pg_get_userbyid(n.nspowner),
       (SELECT string_agg(DISTINCT x.who, ', ')
          FROM (SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
                  FROM aclexplode(n.nspacl) a WHERE a.grantee <> n.nspowner
                UNION SELECT pg_get_userbyid(c.relowner) FROM pg_class c
                       WHERE c.relnamespace = n.oid AND c.relowner <> n.nspowner
                UNION SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                  ELSE pg_get_userbyid(a.grantee) END
                        FROM pg_class c, aclexplode(c.relacl) a
                       WHERE c.relnamespace = n.oid AND a.grantee <> c.relowner) x(who)),
       n.nspowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
       OR (SELECT rolsuper FROM pg_roles WHERE oid = n.nspowner)
       OR n.nspowner = (SELECT nspowner FROM pg_namespace WHERE nspname = 'pgrag'),
       pg_has_role(current_user, n.nspowner, 'USAGE')
  FROM pg_namespace n
 WHERE n.nspname = 'pgrag_saved';

-- name: drop_saved_table
DROP TABLE IF EXISTS pgrag_saved.rows;

-- name: drop_saved_schema
DROP SCHEMA IF EXISTS pgrag_saved;

-- name: drop_saved_if_empty
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgrag_saved.rows) THEN
        DROP TABLE pgrag_saved.rows;
        DROP SCHEMA pgrag_saved;
    END IF;
END
$do$;

-- name: save_checks
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'checks', jsonb_build_object('id', id, 'checks', checks)
  FROM pgrag.queries WHERE checks IS NOT NULL;

-- name: save_thresholds
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'thresholds', jsonb_build_object('id', id, 'name', name, 'min_confidence', min_confidence)
  FROM pgrag.embedding_models WHERE min_confidence IS NOT NULL;

-- name: save_keyword_settings
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'keyword_settings', jsonb_build_object('collection_id', k.collection_id, 'name', c.name,
           'impact_avgdl', k.impact_avgdl, 'refreshed_at', k.refreshed_at)
  FROM pgrag.keyword_settings k JOIN pgrag.collections c ON c.id = k.collection_id;

-- name: save_model_links
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'model_links', to_jsonb(cm) FROM pgrag.collection_models cm WHERE cm.status <> 'active';

-- name: save_index_types
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'index_types', jsonb_build_object('id', id, 'index_type', index_type)
  FROM pgrag.embedding_models WHERE index_type <> 'vector';

-- name: save_bodies
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'bodies', jsonb_build_object('id', id, 'body', body, 'content_hash', content_hash)
  FROM pgrag.documents WHERE body IS NOT NULL;

-- name: save_queue
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'queue', to_jsonb(q) FROM pgrag.embedding_queue q;

-- name: save_role_mappings
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'role_mappings', to_jsonb(r) FROM pgrag.role_principals r;

-- name: restore_role_mappings
INSERT INTO pgrag.role_principals (role_name, principal)
SELECT s.data ->> 'role_name', s.data ->> 'principal'
  FROM pgrag_saved.rows s WHERE s.kind = 'role_mappings'
ON CONFLICT DO NOTHING;

-- name: restore_model_links
-- A link that is not active comes back as it was, unless the collection or the model is gone
-- or the model became the collection's active one meanwhile.
INSERT INTO pgrag.collection_models (collection_id, model_id, status, added_at, activated_at,
                                     retired_at)
SELECT DISTINCT ON (l.collection_id, l.model_id)
       l.collection_id, l.model_id, l.status, l.added_at, l.activated_at, l.retired_at
  FROM pgrag_saved.rows s
 CROSS JOIN LATERAL jsonb_populate_record(NULL::pgrag.collection_models, s.data) l
 WHERE s.kind = 'model_links'
   AND EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = l.collection_id)
   AND EXISTS (SELECT 1 FROM pgrag.embedding_models m WHERE m.id = l.model_id)
 ORDER BY l.collection_id, l.model_id, s.saved_at DESC
ON CONFLICT (collection_id, model_id) DO UPDATE
   SET status = EXCLUDED.status, added_at = EXCLUDED.added_at,
       activated_at = EXCLUDED.activated_at, retired_at = EXCLUDED.retired_at
 WHERE pgrag.collection_models.status <> 'active';

-- name: restore_queue
-- Queued work comes back for the chunks and models that are still there.
INSERT INTO pgrag.embedding_queue (chunk_id, model_id, collection_id, attempts, last_error,
                                   not_before, enqueued_at)
SELECT q.chunk_id, q.model_id, q.collection_id, q.attempts, q.last_error, q.not_before,
       q.enqueued_at
  FROM pgrag_saved.rows s
 CROSS JOIN LATERAL jsonb_populate_record(NULL::pgrag.embedding_queue, s.data) q
 WHERE s.kind = 'queue'
   AND EXISTS (SELECT 1 FROM pgrag.chunks c WHERE c.id = q.chunk_id)
   AND EXISTS (SELECT 1 FROM pgrag.embedding_models m WHERE m.id = q.model_id)
   AND EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = q.collection_id)
   AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e
                    WHERE e.collection_id = q.collection_id AND e.chunk_id = q.chunk_id
                      AND e.model_id = q.model_id)
ON CONFLICT DO NOTHING;

-- name: restore_index_types
UPDATE pgrag.embedding_models m SET index_type = s.data ->> 'index_type'
  FROM pgrag_saved.rows s
 WHERE s.kind = 'index_types' AND m.id = (s.data ->> 'id')::integer;

-- name: restore_thresholds
UPDATE pgrag.embedding_models m SET min_confidence = (s.data ->> 'min_confidence')::float8
  FROM pgrag_saved.rows s
 WHERE s.kind = 'thresholds' AND m.id = (s.data ->> 'id')::integer
   AND m.name = s.data ->> 'name' AND m.min_confidence IS NULL;

-- name: restore_keyword_settings
-- Each collection's reference length as it was (the upgrade through 0002 took it from the
-- corpus as it is now), and its postings' impacts at that length again: keyword searches read
-- the postings in the order they did before the round trip.
WITH restored AS (
         UPDATE pgrag.keyword_settings k
            SET impact_avgdl = (s.data ->> 'impact_avgdl')::float8,
                refreshed_at = (s.data ->> 'refreshed_at')::timestamptz
           FROM pgrag_saved.rows s, pgrag.collections c
          WHERE s.kind = 'keyword_settings' AND c.id = (s.data ->> 'collection_id')::integer
            AND c.name = s.data ->> 'name' AND k.collection_id = c.id
            AND k.impact_avgdl <> (s.data ->> 'impact_avgdl')::float8
      RETURNING k.collection_id, k.impact_avgdl)
UPDATE pgrag.keyword_postings p
   SET impact = p.tf / (p.tf + 1.5 * (0.25 + 0.75 * p.dl / r.impact_avgdl))
  FROM restored r
 WHERE p.collection_id = r.collection_id;

-- name: restore_bodies
-- A document written with SQL gets its body back unless it was rewritten meanwhile (its chunks
-- are those of the same body, so the sync trigger keeps them and embeds nothing).
UPDATE pgrag.documents d SET body = s.data ->> 'body'
  FROM pgrag_saved.rows s
 WHERE s.kind = 'bodies' AND d.id = (s.data ->> 'id')::bigint
   AND d.content_hash = s.data ->> 'content_hash' AND d.body IS NULL;

-- name: restore_checks
UPDATE pgrag.queries q SET checks = s.data -> 'checks'
  FROM pgrag_saved.rows s
 WHERE s.kind = 'checks' AND q.id = (s.data ->> 'id')::bigint AND q.checks IS NULL;

-- name: save_api_keys
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'api_keys', to_jsonb(k) FROM pgrag.api_keys k;

-- name: restore_api_keys
-- Every key as it was (revoked ones stay revoked), unless its id or hash was taken meanwhile.
INSERT INTO pgrag.api_keys (id, name, key_hash, principals, scopes, created_at, expires_at,
                            revoked_at, last_used_at)
SELECT k.id, k.name, k.key_hash, k.principals, k.scopes, k.created_at, k.expires_at,
       k.revoked_at, k.last_used_at
  FROM pgrag_saved.rows s
 CROSS JOIN LATERAL jsonb_populate_record(NULL::pgrag.api_keys, s.data) k
 WHERE s.kind = 'api_keys'
ON CONFLICT DO NOTHING;

-- name: save_conversations
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'conversations', to_jsonb(v) FROM pgrag.conversations v;

-- name: save_conversation_turns
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'conversation_turns', to_jsonb(t) FROM pgrag.conversation_turns t;

-- name: restore_conversations
-- Every conversation as it was, unless its collection is gone or its id was taken meanwhile.
INSERT INTO pgrag.conversations (id, owner, collection_id, title, created_at, updated_at)
SELECT v.id, v.owner, v.collection_id, v.title, v.created_at, v.updated_at
  FROM pgrag_saved.rows s
 CROSS JOIN LATERAL jsonb_populate_record(NULL::pgrag.conversations, s.data) v
 WHERE s.kind = 'conversations'
   AND EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = v.collection_id)
ON CONFLICT DO NOTHING;

-- name: restore_conversation_turns
-- The turns of the conversations put back (after restore_conversations).
INSERT INTO pgrag.conversation_turns (conversation_id, turn, role, content, standalone_query,
                                      sources, query_id, created_at)
SELECT t.conversation_id, t.turn, t.role, t.content, t.standalone_query, t.sources, t.query_id,
       t.created_at
  FROM pgrag_saved.rows s
 CROSS JOIN LATERAL jsonb_populate_record(NULL::pgrag.conversation_turns, s.data) t
 WHERE s.kind = 'conversation_turns'
   AND EXISTS (SELECT 1 FROM pgrag.conversations v WHERE v.id = t.conversation_id)
ON CONFLICT DO NOTHING;

-- name: save_contexts
INSERT INTO pgrag_saved.rows (kind, data)
SELECT 'contexts', jsonb_build_object('id', id, 'context', context, 'context_for', context_for,
                                      'content_hash', content_hash)
  FROM pgrag.chunks WHERE context IS NOT NULL OR context_for IS NOT NULL;

-- name: restore_contexts
-- A chunk gets its context line back unless it was rewritten meanwhile (its vector was made
-- with the context: the content hash says so); the keyword trigger indexes the line's words.
UPDATE pgrag.chunks c SET context = s.data ->> 'context', context_for = s.data ->> 'context_for'
  FROM pgrag_saved.rows s
 WHERE s.kind = 'contexts' AND c.id = (s.data ->> 'id')::bigint
   AND c.content_hash = s.data ->> 'content_hash'
   AND c.context IS NULL AND c.context_for IS NULL;

-- name: forget_restored
DELETE FROM pgrag_saved.rows WHERE kind = ANY (%(kinds)s);

-- name: requeue
-- Every chunk that has no vector of its collection's active (or standby) model and is not
-- queued for it, queued (pgrag worker embeds it); returns how many (chunk, model) pairs. (A
-- model still building is backfilled by pgrag models reembed, which resumes where it stopped.)
WITH missing AS (
         SELECT c.collection_id, array_agg(DISTINCT c.id) AS ids
           FROM ONLY pgrag.chunks c
           JOIN pgrag.collection_models m
             ON m.collection_id = c.collection_id AND m.status IN ('active', 'standby')
          WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e
                             WHERE e.collection_id = c.collection_id AND e.model_id = m.model_id
                               AND e.chunk_id = c.id)
            AND NOT EXISTS (SELECT 1 FROM pgrag.embedding_queue q
                             WHERE q.model_id = m.model_id AND q.chunk_id = c.id)
          GROUP BY c.collection_id)
SELECT coalesce(sum(pgrag.embedding_enqueue(collection_id, ids)), 0)::bigint FROM missing;
