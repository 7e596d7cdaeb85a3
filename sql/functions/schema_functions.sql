-- Functions the table definitions call: CHECK constraints (principals_valid) and the stored
-- tsvector of every chunk (chunk_tsvector). Applied before the tables on a fresh install, and
-- re-applied with every other file here.
--
-- Their results are stored (a generated column) or enforced on stored rows (constraints), so a
-- body here is part of the data: changing what one returns needs a migration that recomputes or
-- revalidates what depends on it, not an edit alone.

-- A principal is a name such as alice, group:billing or alice@example.com: letters, digits and
-- _ . : @ + -, at most 128 characters (pgrag/db/principals.py checks the same in Python).
CREATE OR REPLACE FUNCTION pgrag.principals_valid(principals text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT principals IS NOT NULL
       AND coalesce(array_ndims(principals), 1) = 1
       AND NOT EXISTS (SELECT 1 FROM unnest(principals) p
                        WHERE p IS NULL OR p !~ '^[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,127}$')
$fn$;

-- Sorted (bytewise) and without duplicates: one spelling per set, so one acl row per set.
CREATE OR REPLACE FUNCTION pgrag.principals_canonical(principals text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(array_agg(DISTINCT p COLLATE "C" ORDER BY p COLLATE "C"), '{}')
      FROM unnest(principals) p
$fn$;

-- The section path ("Billing > Refunds") is weighted B, the chunk's text D, so ts_rank favours
-- a query word found in a heading. The configuration is stored as text (not regconfig: reg*
-- columns block pg_upgrade) and cast here; declared IMMUTABLE so it can define a stored
-- generated column, which holds as long as a text search configuration is not redefined in place.
CREATE OR REPLACE FUNCTION pgrag.chunk_tsvector(config text, section text, content text)
RETURNS tsvector
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT setweight(to_tsvector(config::regconfig, coalesce(section, '')), 'B')
           || to_tsvector(config::regconfig, coalesce(content, ''))
$fn$;

COMMENT ON FUNCTION pgrag.chunk_tsvector(text, text, text) IS
    'The stored tsvector of a chunk: section path (weight B) and text (weight D).';
