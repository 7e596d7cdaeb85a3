-- What `pgrag status` and `pgrag collections` count, and how cheaply.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- Counting rows is O(rows): at ten million chunks an exact count(*) takes seconds. So counts
-- are exact up to pgrag.exact_count_limit rows (a setting any session may SET; 100,000 by
-- default) and above it the planner's estimate (from the statistics ANALYZE keeps), marked
-- estimated. Only sessions that see everything get estimates (see collections_v2): a
-- restricted session's counts are exact and cost what it may read.

-- The most rows a count reads before it becomes an estimate: pgrag.exact_count_limit, a whole
-- number 0 to 999999999999999 (unset or empty: 100,000); anything else is refused, naming it.
CREATE OR REPLACE FUNCTION pgrag.exact_count_limit() RETURNS bigint
LANGUAGE plpgsql STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_raw text := btrim(coalesce(current_setting('pgrag.exact_count_limit', true), ''));
BEGIN
    IF v_raw = '' THEN
        RETURN 100000;
    END IF;
    IF v_raw !~ '^[0-9]{1,15}$' THEN
        RAISE EXCEPTION 'pgrag.exact_count_limit must be a whole number of rows, 0 to 999999999999999, not %',
                        quote_literal(v_raw)
            USING ERRCODE = '22023',
                  HINT = 'SET pgrag.exact_count_limit = 100000, or RESET pgrag.exact_count_limit for the default.';
    END IF;
    RETURN v_raw::bigint;
END
$fn$;

-- The rows of a query (pgrag's own, never a caller's text): exact when there are at most
-- exact_count_limit() of them, else the greater of that bound and the planner's estimate.
-- SECURITY INVOKER: it reads as whoever calls it. VOLATILE only because PostgreSQL allows
-- EXPLAIN in no other function; it writes nothing.
CREATE OR REPLACE FUNCTION pgrag.count_rows(query text, OUT n bigint, OUT estimated boolean)
LANGUAGE plpgsql VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_limit bigint := pgrag.exact_count_limit();
    v_plan  jsonb;
BEGIN
    EXECUTE format('SELECT count(*) FROM (%s LIMIT %s) s', query, v_limit + 1) INTO n;
    estimated := n > v_limit;
    IF estimated THEN
        EXECUTE 'EXPLAIN (FORMAT JSON) ' || query INTO v_plan;
        n := greatest(n, (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::numeric::bigint);
    END IF;
END
$fn$;

-- The documents of a collection among acls (NULL: all of them): exact for a list of acls
-- (through the (collection_id, acl_id) index: it costs what those acls hold), and for all of
-- them exact up to exact_count_limit(), an estimate above it.
CREATE OR REPLACE FUNCTION pgrag.document_count(collection_id integer, acls integer[],
                                                OUT documents bigint, OUT estimated boolean)
LANGUAGE plpgsql STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF acls IS NOT NULL THEN
        SELECT count(*) INTO documents FROM pgrag.documents d
         WHERE d.collection_id = document_count.collection_id AND d.acl_id = ANY (acls);
        estimated := false;
        RETURN;
    END IF;
    SELECT r.n, r.estimated INTO documents, estimated
      FROM pgrag.count_rows(format('SELECT 1 FROM pgrag.documents WHERE collection_id = %s',
                                   document_count.collection_id)) r;
END
$fn$;

-- The chunks of a collection among acls (NULL: all of them), as document_count counts.
CREATE OR REPLACE FUNCTION pgrag.chunk_count(collection_id integer, acls integer[],
                                             OUT chunks bigint, OUT estimated boolean)
LANGUAGE plpgsql STABLE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF acls IS NOT NULL THEN
        SELECT count(*) INTO chunks FROM pgrag.chunks k
         WHERE k.collection_id = chunk_count.collection_id AND k.acl_id = ANY (acls);
        estimated := false;
        RETURN;
    END IF;
    SELECT r.n, r.estimated INTO chunks, estimated
      FROM pgrag.count_rows(format('SELECT 1 FROM pgrag.chunks WHERE collection_id = %s',
                                   chunk_count.collection_id)) r;
END
$fn$;

-- Per collection: documents, chunks, queued work and the active model (pgrag status), and
-- whether any count is an estimate. SECURITY DEFINER, with collections_v2's visibility: a
-- session that names principals, or a restricted role (pgrag_reader, pgrag_app), counts the
-- documents and chunks it may read, exactly; queued work (pending, failed) is shown to the
-- owner and pgrag_writer only (NULL for restricted roles: it is the whole collection's).
CREATE OR REPLACE FUNCTION pgrag.status()
RETURNS TABLE (collection text, documents bigint, chunks bigint, pending bigint,
               failed bigint, active_model text, other_models text[], estimated boolean)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_acls  integer[] := pgrag.visible_acls();
    v_queue boolean := pgrag.unrestricted_role();
BEGIN
    RETURN QUERY
        SELECT c.name, n.documents, k.chunks, p.n, f.n,
               m.name,
               ARRAY(SELECT o.name || ' (' || cm.status || ')'
                       FROM pgrag.collection_models cm
                       JOIN pgrag.embedding_models o ON o.id = cm.model_id
                      WHERE cm.collection_id = c.id AND cm.model_id IS DISTINCT FROM c.model_id
                      ORDER BY cm.added_at, o.name),
               n.estimated OR k.estimated OR coalesce(p.estimated, false)
                 OR coalesce(f.estimated, false)
          FROM pgrag.collections c
          LEFT JOIN pgrag.embedding_models m ON m.id = c.model_id
         CROSS JOIN LATERAL pgrag.document_count(c.id, v_acls) n
         CROSS JOIN LATERAL pgrag.chunk_count(c.id, v_acls) k
          LEFT JOIN LATERAL (SELECT * FROM pgrag.count_rows(format(
                 'SELECT 1 FROM pgrag.embedding_queue WHERE collection_id = %s'
                 ' AND last_error IS NULL', c.id)) WHERE v_queue) p ON true
          LEFT JOIN LATERAL (SELECT * FROM pgrag.count_rows(format(
                 'SELECT 1 FROM pgrag.embedding_queue WHERE collection_id = %s'
                 ' AND last_error IS NOT NULL', c.id)) WHERE v_queue) f ON true
         ORDER BY c.name;
END
$fn$;
