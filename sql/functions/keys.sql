-- API keys of `pgrag serve` (pgrag/service/keys.py, pgrag/service/auth.py).
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- pgrag.api_keys holds the sha256 of each whole key and the principals and scopes it is bound
-- to. No restricted role may read or write the table: the service, a member of pgrag_app,
-- verifies the key a request presents through api_key_v1 below, and learns only what that
-- one key is bound to. `pgrag keys create|list|revoke` writes the table as the owner of
-- schema pgrag.

-- The key whose sha256 is key_hash: no row when there is none; else its id and a status,
-- 'valid' (with its principals and scopes), 'revoked' or 'expired' (principals and scopes
-- NULL). A valid key's last_used_at is set to now() when it is older than a minute (at most
-- one write a minute per key, skipped when another transaction holds the row or this one is
-- read-only, as on a standby). SECURITY DEFINER: the caller may not read pgrag.api_keys.
CREATE OR REPLACE FUNCTION pgrag.api_key_v1(key_hash bytea)
RETURNS TABLE (key_id text, principals text[], scopes text[], status text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    k record;
BEGIN
    SELECT a.id, a.principals, a.scopes, a.expires_at, a.revoked_at, a.last_used_at INTO k
      FROM pgrag.api_keys a
     WHERE a.key_hash = api_key_v1.key_hash;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF k.revoked_at IS NOT NULL THEN
        RETURN QUERY SELECT k.id, NULL::text[], NULL::text[], 'revoked'::text;
        RETURN;
    END IF;
    IF k.expires_at IS NOT NULL AND k.expires_at <= now() THEN
        RETURN QUERY SELECT k.id, NULL::text[], NULL::text[], 'expired'::text;
        RETURN;
    END IF;
    IF (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
       AND current_setting('transaction_read_only') = 'off' THEN
        UPDATE pgrag.api_keys a SET last_used_at = now()
         WHERE a.id IN (SELECT b.id FROM pgrag.api_keys b WHERE b.id = k.id
                           FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN QUERY SELECT k.id, k.principals, k.scopes, 'valid'::text;
END
$fn$;

COMMENT ON FUNCTION pgrag.api_key_v1(bytea) IS
    'The API key whose sha256 is key_hash: its id, principals, scopes and status (valid, revoked, expired); no row if none.';
