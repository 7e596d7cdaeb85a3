-- pgrag.chunk_tsvector_v1: the full-text vector stored with every chunk.
--
-- Released SQL objects are frozen (see sql/RELEASED.sha256); a change is a new _vN beside this.
--
-- The section path ("Billing > Refunds") is weighted B, the chunk's text D, so ts_rank favours
-- a query word found in a heading. The configuration is stored as text (not regconfig: reg*
-- columns block pg_upgrade) and cast here; declared IMMUTABLE so it can define a stored
-- generated column, which holds as long as a text search configuration is not redefined in place.
CREATE FUNCTION pgrag.chunk_tsvector_v1(config text, section text, content text)
RETURNS tsvector
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT setweight(to_tsvector(config::regconfig, coalesce(section, '')), 'B')
           || to_tsvector(config::regconfig, coalesce(content, ''))
$fn$;

COMMENT ON FUNCTION pgrag.chunk_tsvector_v1(text, text, text) IS
    'The stored tsvector of a chunk: section path (weight B) and text (weight D).';
