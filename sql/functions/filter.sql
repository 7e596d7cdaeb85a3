-- pgrag metadata filters: a small JSON language over documents.metadata, read as data.
--
-- Re-applied by every `pgrag db upgrade` and by `pgrag db repair` (sql/README.md).
--
-- A filter is a jsonb object; every entry must hold (AND):
--   {"team": "billing"}                          equality (jsonb containment, like @>)
--   {"tags": ["gdpr", "eu"]}                     the tags array holds both
--   {"team": {"$in": ["billing", "sales"]}}      one of these (for an array field: shares one)
--   {"team": {"$nin": [...]}}, {"team": {"$ne": "x"}}, {"team": {"$eq": "x"}}
--   {"tags": {"$all": ["a", "b"]}}               the array holds all of them
--   {"date": {"$gte": "2024-01-01", "$lt": "2025-01-01"}}
--                                                ranges: numbers compare as numbers; ISO dates
--                                                (YYYY-MM-DD, optionally a time and zone) as
--                                                timestamps; other strings bytewise
--   {"draft": {"$exists": false}}
--   {"$or": [{...}, {...}]}, {"$and": [...]}, {"$not": {...}}
-- A value that is missing or of another type never satisfies a comparison. Keys and values are
-- only ever compared as data: no SQL (and no jsonpath) is built from them.
--
-- Bounds (filter_check, before anything is read; each a one-line error naming it):
-- at most 1,000,000 bytes of JSON, 10,000 list values in all, 200 keys and operators in all,
-- and 32 levels of JSON nesting. Cost: a search compiles its filter once (filter_check):
-- each $in / $nin list of scalars becomes a lookup object, so a row is tested against a list
-- by one binary search (per element of an array field), never by a walk over the list; the
-- plain entries are jsonb containment, answered by the GIN index on documents.metadata. A
-- compiled filter may carry the search's deadline ("$deadline": [epoch seconds, limit in ms]),
-- checked for every row tested (pgrag.search_timeout, in sql/functions/search.sql).

-- An ISO-8601 date or timestamp as timestamptz (zone offsets up to +-15:59, PostgreSQL's range);
-- NULL when the text is not one (never an error,
-- so one malformed value in a document's metadata cannot break every search that filters).
CREATE OR REPLACE FUNCTION pgrag.metadata_time(value text) RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    m text[];
BEGIN
    m := regexp_match(value,
        '^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(?:Z|[+-](?:0\d|1[0-5])(?::?[0-5]\d)?)?)?$');
    IF m IS NULL OR m[1]::int < 1 OR m[2]::int NOT BETWEEN 1 AND 12 OR m[3]::int < 1
       OR m[3]::int > extract(day FROM make_date(m[1]::int, m[2]::int, 1)
                                       + interval '1 month - 1 day')
       OR coalesce(m[4]::int, 0) > 23 OR coalesce(m[5]::int, 0) > 59
       OR coalesce(m[6]::int, 0) > 59 THEN
        RETURN NULL;
    END IF;
    RETURN value::timestamptz;
END
$fn$;

-- -1, 0 or 1 comparing a metadata value with a bound; NULL when they do not compare.
CREATE OR REPLACE FUNCTION pgrag.filter_compare(value jsonb, bound jsonb) RETURNS integer
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_bound_time timestamptz;
    v_time       timestamptz;
BEGIN
    IF value IS NULL THEN
        RETURN NULL;
    ELSIF jsonb_typeof(bound) = 'number' THEN
        IF jsonb_typeof(value) <> 'number' THEN RETURN NULL; END IF;
        RETURN sign((value #>> '{}')::numeric - (bound #>> '{}')::numeric)::int;
    ELSIF jsonb_typeof(value) <> 'string' THEN
        RETURN NULL;
    END IF;
    v_bound_time := pgrag.metadata_time(bound #>> '{}');
    IF v_bound_time IS NOT NULL THEN
        v_time := pgrag.metadata_time(value #>> '{}');
        IF v_time IS NULL THEN RETURN NULL; END IF;
        RETURN CASE WHEN v_time < v_bound_time THEN -1 WHEN v_time > v_bound_time THEN 1 ELSE 0 END;
    END IF;
    RETURN CASE WHEN (value #>> '{}') COLLATE "C" < (bound #>> '{}') COLLATE "C" THEN -1
                WHEN (value #>> '{}') COLLATE "C" > (bound #>> '{}') COLLATE "C" THEN 1
                ELSE 0 END;
END
$fn$;

-- Checks a filter and returns it compiled for filter_match: the same entries, but each $in /
-- $nin list as {"keys": {key: true, ...}, "rest": [its objects and arrays]}, a key standing
-- for a scalar so that equal values have equal keys (numbers as numbers: 1, 1.0 and 1e0 are
-- one). Raises a one-line error naming the entry for anything it does not understand, and,
-- for the whole filter (path 'filter'), for a filter past the bounds at the top of this file.
CREATE OR REPLACE FUNCTION pgrag.filter_check(filter jsonb, path text DEFAULT 'filter') RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_key     text;
    v_cond    jsonb;
    v_op      text;
    v_arg     jsonb;
    v_item    jsonb;
    v_out     jsonb := '{}';
    v_list    jsonb;
    v_ops     jsonb;
    v_where   text;
    v_bytes   integer;
    v_depth   integer;
    v_values  bigint;
    v_keys    bigint;
BEGIN
    IF filter IS NULL THEN
        RETURN '{}';
    END IF;
    IF path = 'filter' THEN  -- the bounds, once, for the whole filter
        v_bytes := octet_length(filter::text);
        IF v_bytes > 1000000 THEN
            RAISE EXCEPTION 'filter is % bytes of JSON; the limit is 1000000: filter on fewer values (or on a coarser key)',
                v_bytes USING ERRCODE = '54000';
        END IF;
        WITH RECURSIVE node(v, depth) AS (
            SELECT filter, 1
            UNION ALL
            SELECT c.v, node.depth + 1
              FROM node
             CROSS JOIN LATERAL (
                   SELECT e.value AS v
                     FROM jsonb_each(CASE WHEN jsonb_typeof(node.v) = 'object' THEN node.v END) e
                   UNION ALL
                   SELECT e.value
                     FROM jsonb_array_elements(CASE WHEN jsonb_typeof(node.v) = 'array' THEN node.v END) e) c
             WHERE node.depth <= 32)
        SELECT max(n.depth),
               sum(CASE WHEN jsonb_typeof(n.v) = 'array' THEN jsonb_array_length(n.v) ELSE 0 END),
               sum(CASE WHEN jsonb_typeof(n.v) = 'object'
                        THEN (SELECT count(*) FROM jsonb_object_keys(n.v)) ELSE 0 END)
          INTO v_depth, v_values, v_keys
          FROM node n;
        IF v_depth > 32 THEN
            RAISE EXCEPTION 'filter is nested more than 32 levels deep (the limit): flatten its $and / $or / $not'
                USING ERRCODE = '54000';
        END IF;
        IF v_values > 10000 THEN
            RAISE EXCEPTION 'filter has % list values; the limit is 10000: split the search, or filter on a coarser key',
                v_values USING ERRCODE = '54000';
        END IF;
        IF v_keys > 200 THEN
            RAISE EXCEPTION 'filter has % keys and operators; the limit is 200: combine values with $in',
                v_keys USING ERRCODE = '54000';
        END IF;
    END IF;
    IF jsonb_typeof(filter) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object such as {"team": "billing"}, got %', path, filter
            USING ERRCODE = '22023';
    END IF;
    FOR v_key, v_cond IN SELECT e.key, e.value FROM jsonb_each(filter) e LOOP
        v_where := path || '.' || v_key;
        IF v_key IN ('$and', '$or') THEN
            IF jsonb_typeof(v_cond) <> 'array' OR jsonb_array_length(v_cond) = 0 THEN
                RAISE EXCEPTION '% must be a non-empty list of filters, got %', v_where, v_cond
                    USING ERRCODE = '22023';
            END IF;
            v_list := '[]';
            FOR v_item IN SELECT e.value FROM jsonb_array_elements(v_cond) e LOOP
                v_list := v_list || jsonb_build_array(pgrag.filter_check(v_item, v_where));
            END LOOP;
            v_out := v_out || jsonb_build_object(v_key, v_list);
        ELSIF v_key = '$not' THEN
            v_out := v_out || jsonb_build_object(v_key, pgrag.filter_check(v_cond, v_where));
        ELSIF left(v_key, 1) = '$' THEN
            RAISE EXCEPTION 'unknown filter operator % at %: use $and, $or or $not here, or a metadata key',
                v_key, path USING ERRCODE = '22023';
        ELSIF jsonb_typeof(v_cond) = 'object'
              AND EXISTS (SELECT 1 FROM jsonb_object_keys(v_cond) k WHERE left(k, 1) = '$') THEN
            v_ops := '{}';
            FOR v_op, v_arg IN SELECT e.key, e.value FROM jsonb_each(v_cond) e LOOP
                IF v_op IN ('$eq', '$ne') THEN
                    NULL;
                ELSIF v_op IN ('$in', '$nin', '$all') THEN
                    IF jsonb_typeof(v_arg) <> 'array' THEN
                        RAISE EXCEPTION '%.% must be a list, got %', v_where, v_op, v_arg
                            USING ERRCODE = '22023';
                    END IF;
                    IF v_op <> '$all' THEN  -- compiled: a lookup, not a list to walk per row
                        v_arg := jsonb_build_object(
                            'keys', coalesce(
                                (SELECT jsonb_object_agg(x.k, true)
                                   FROM (SELECT DISTINCT
                                                CASE jsonb_typeof(a.value)
                                                    WHEN 'string' THEN 's' || (a.value #>> '{}')
                                                    WHEN 'number' THEN 'n' || trim_scale((a.value #>> '{}')::numeric)::text
                                                    WHEN 'boolean' THEN 'b' || (a.value #>> '{}')
                                                    WHEN 'null' THEN 'z'
                                                END AS k
                                           FROM jsonb_array_elements(v_arg) a) x
                                  WHERE x.k IS NOT NULL), '{}'),
                            'rest', coalesce(
                                (SELECT jsonb_agg(a.value) FROM jsonb_array_elements(v_arg) a
                                  WHERE jsonb_typeof(a.value) IN ('object', 'array')), '[]'));
                    END IF;
                ELSIF v_op IN ('$gt', '$gte', '$lt', '$lte') THEN
                    IF jsonb_typeof(v_arg) NOT IN ('number', 'string') THEN
                        RAISE EXCEPTION '%.% must be a number, a date or a string, got %',
                            v_where, v_op, v_arg USING ERRCODE = '22023';
                    END IF;
                    IF jsonb_typeof(v_arg) = 'string' AND (v_arg #>> '{}') ~ '^\d{4}-\d{2}-\d{2}'
                       AND pgrag.metadata_time(v_arg #>> '{}') IS NULL THEN
                        RAISE EXCEPTION '%.% is not a valid ISO date or timestamp: %',
                            v_where, v_op, v_arg USING ERRCODE = '22023';
                    END IF;
                ELSIF v_op = '$exists' THEN
                    IF jsonb_typeof(v_arg) <> 'boolean' THEN
                        RAISE EXCEPTION '%.$exists must be true or false, got %', v_where, v_arg
                            USING ERRCODE = '22023';
                    END IF;
                ELSIF left(v_op, 1) = '$' THEN
                    RAISE EXCEPTION 'unknown filter operator % at %: use $eq $ne $in $nin $all $gt $gte $lt $lte $exists',
                        v_op, v_where USING ERRCODE = '22023';
                ELSE
                    RAISE EXCEPTION '% mixes operators and plain keys (%): write {"$eq": {...}} for an object value',
                        v_where, v_op USING ERRCODE = '22023';
                END IF;
                v_ops := v_ops || jsonb_build_object(v_op, v_arg);
            END LOOP;
            v_out := v_out || jsonb_build_object(v_key, v_ops);
        ELSE
            v_out := v_out || jsonb_build_object(v_key, v_cond);
        END IF;
    END LOOP;
    RETURN v_out;
END
$fn$;

-- Does a document's metadata satisfy a filter (as filter_check compiled it)? A "$deadline"
-- entry raises once the clock has passed it.
CREATE OR REPLACE FUNCTION pgrag.filter_match(metadata jsonb, filter jsonb) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_key   text;
    v_cond  jsonb;
    v_op    text;
    v_arg   jsonb;
    v_value jsonb;
    v_hit   boolean;
    v_cmp   integer;
BEGIN
    FOR v_key, v_cond IN SELECT e.key, e.value FROM jsonb_each(filter) e LOOP
        IF v_key = '$deadline' THEN  -- [epoch seconds, the limit in ms]
            IF extract(epoch FROM clock_timestamp()) > (v_cond ->> 0)::float8 THEN
                RAISE EXCEPTION 'search stopped by its time limit of % ms (pgrag.search_timeout) while testing the filter',
                    v_cond ->> 1
                    USING ERRCODE = '57014',
                          HINT = 'Narrow the filter, or raise the limit: SET pgrag.search_timeout = ''2min'' (0: none); see docs/search.md#limits.';
            END IF;
        ELSIF v_key = '$and' THEN
            IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_cond) e
                        WHERE NOT pgrag.filter_match(metadata, e.value)) THEN
                RETURN false;
            END IF;
        ELSIF v_key = '$or' THEN
            IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_cond) e
                            WHERE pgrag.filter_match(metadata, e.value)) THEN
                RETURN false;
            END IF;
        ELSIF v_key = '$not' THEN
            IF pgrag.filter_match(metadata, v_cond) THEN
                RETURN false;
            END IF;
        ELSIF jsonb_typeof(v_cond) = 'object'
              AND EXISTS (SELECT 1 FROM jsonb_object_keys(v_cond) k WHERE left(k, 1) = '$') THEN
            v_value := metadata -> v_key;
            FOR v_op, v_arg IN SELECT e.key, e.value FROM jsonb_each(v_cond) e LOOP
                IF v_op IN ('$eq', '$ne') THEN
                    v_hit := metadata @> jsonb_build_object(v_key, v_arg);
                    IF v_hit <> (v_op = '$eq') THEN RETURN false; END IF;
                ELSIF v_op IN ('$in', '$nin') AND jsonb_typeof(v_arg) = 'object' THEN
                    -- compiled: a scalar is looked up; an array field shares a scalar; the
                    -- lists' objects and arrays ("rest") are tested as before, by containment.
                    v_hit := CASE jsonb_typeof(v_value)
                                 WHEN 'array' THEN EXISTS (
                                     SELECT 1 FROM jsonb_array_elements(v_value) x
                                      WHERE (v_arg -> 'keys') ? CASE jsonb_typeof(x.value)
                                              WHEN 'string' THEN 's' || (x.value #>> '{}')
                                              WHEN 'number' THEN 'n' || trim_scale((x.value #>> '{}')::numeric)::text
                                              WHEN 'boolean' THEN 'b' || (x.value #>> '{}')
                                              WHEN 'null' THEN 'z'
                                          END)
                                 WHEN 'object' THEN false
                                 ELSE coalesce((v_arg -> 'keys') ? CASE jsonb_typeof(v_value)
                                              WHEN 'string' THEN 's' || (v_value #>> '{}')
                                              WHEN 'number' THEN 'n' || trim_scale((v_value #>> '{}')::numeric)::text
                                              WHEN 'boolean' THEN 'b' || (v_value #>> '{}')
                                              WHEN 'null' THEN 'z'
                                          END, false)
                             END
                             OR (v_arg -> 'rest' <> '[]' AND EXISTS (
                                 SELECT 1 FROM jsonb_array_elements(v_arg -> 'rest') e
                                  WHERE metadata @> jsonb_build_object(v_key, e.value)
                                     OR (jsonb_typeof(v_value) = 'array' AND v_value @> e.value)));
                    IF v_hit <> (v_op = '$in') THEN RETURN false; END IF;
                ELSIF v_op IN ('$in', '$nin') THEN
                    v_hit := EXISTS (
                        SELECT 1 FROM jsonb_array_elements(v_arg) e
                         WHERE metadata @> jsonb_build_object(v_key, e.value)
                            OR (jsonb_typeof(v_value) = 'array' AND v_value @> e.value));
                    IF v_hit <> (v_op = '$in') THEN RETURN false; END IF;
                ELSIF v_op = '$all' THEN
                    IF jsonb_typeof(v_value) IS DISTINCT FROM 'array' OR NOT v_value @> v_arg THEN
                        RETURN false;
                    END IF;
                ELSIF v_op = '$exists' THEN
                    IF (v_value IS NOT NULL) <> (v_arg = 'true'::jsonb) THEN RETURN false; END IF;
                ELSE
                    v_cmp := pgrag.filter_compare(v_value, v_arg);
                    IF v_cmp IS NULL
                       OR (v_op = '$gt' AND v_cmp <= 0) OR (v_op = '$gte' AND v_cmp < 0)
                       OR (v_op = '$lt' AND v_cmp >= 0) OR (v_op = '$lte' AND v_cmp > 0) THEN
                        RETURN false;
                    END IF;
                END IF;
            END LOOP;
        ELSIF NOT metadata @> jsonb_build_object(v_key, v_cond) THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$fn$;
