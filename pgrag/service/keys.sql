-- name: insert_key
-- A new key, unless its id is taken (then no row: the caller draws another id).
INSERT INTO pgrag.api_keys (id, name, key_hash, principals, scopes, expires_at)
VALUES (%(id)s, %(name)s, %(key_hash)s, %(principals)s, %(scopes)s, %(expires_at)s)
ON CONFLICT (id) DO NOTHING
RETURNING id, name, principals, scopes, created_at, expires_at, revoked_at, last_used_at;

-- name: list_keys
SELECT id, name, principals, scopes, created_at, expires_at, revoked_at, last_used_at
  FROM pgrag.api_keys
 ORDER BY created_at, id;

-- name: revoke_key
-- Revoke a key; one already revoked keeps the time it was first revoked.
UPDATE pgrag.api_keys SET revoked_at = coalesce(revoked_at, now())
 WHERE id = %(id)s
RETURNING id, name, principals, scopes, created_at, expires_at, revoked_at, last_used_at;

-- name: verify_key
-- What pgrag.api_key_v1 says of the key with this sha256 (sql/functions/keys.sql).
SELECT key_id, principals, scopes, status FROM pgrag.api_key_v1(%(key_hash)s);
