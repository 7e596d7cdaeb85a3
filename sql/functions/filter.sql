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
-- at most 1,000,000 bytes of jsonb (pg_column_size: never rendered as text), 10,000 list
-- values in all, 200 keys and operators in all, 100 distinct objects and lists in $in / $nin
-- lists (other than one-value lists of a scalar), numbers of magnitude under 1e1000 with at
-- most 1,000 decimal places, and 32 levels (objects and lists as written; a $and / $or's list
-- is part of its operator, a scalar no level). Cost: a search compiles its filter once
-- (filter_check): each $in / $nin list of scalars (and of one-value lists of a scalar, [3])
-- becomes a lookup object, read in place, so a row is tested against a list by one binary
-- search (per element of an array field), never by a walk over the list nor a copy of it;
-- range bounds are read once (numbers as numerics in place, dates parsed at compile time); the
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
        RETURN sign(value::numeric - bound::numeric)::int;
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

-- Checks a filter and returns it compiled for filter_match. Raises a one-line error naming the
-- entry for anything it does not understand, and, for the whole filter (path 'filter'), for a
-- filter past the bounds at the top of this file. The compiled form is a small program:
--   {"$groups": [[instruction, ...], ...], "$sets": {"G.I": {key: true, ...}, ...}}
-- one group per (sub-)filter in post-order (a sub-filter's group before its parent's, the
-- whole filter's last), a group holding when all its instructions do. An instruction is
-- {"op": "=" (containment) / "$eq" / "$gt" / ..., "key": k, "arg": v}; {"op": "$in" / "$nin",
-- "key": k, "set": "G.I", "rest": [the list's objects and arrays]}; or {"op": "$and" / "$or"
-- / "$not", "d": [how many groups back each operand is]}. A set's keys stand for the list's
-- scalars, equal for equal values (numbers as numbers: 1, 1.0 and 1e0 are one key). Below the
-- top level (path <> 'filter') it returns {"g": groups}, lookups still inline.
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
    v_group   jsonb := '[]';  -- this level's instructions
    v_prior   jsonb := '[]';  -- the groups of its sub-filters, before it (post-order)
    v_refs    jsonb;
    v_sets    jsonb := '{}';
    v_at      integer;
    v_where   text;
    v_bytes   integer;
    v_depth   integer;
    v_values  bigint;
    v_keys    bigint;
    v_huge    boolean;
    v_rest    jsonb;
BEGIN
    IF filter IS NULL THEN
        filter := '{}';
    END IF;
    IF path = 'filter' THEN  -- the bounds, once, for the whole filter
        -- Its size as stored (jsonb), never rendered: a number's text can be far longer than
        -- the number (1e131000), so no bound may depend on writing the filter out.
        v_bytes := pg_column_size(filter);
        IF v_bytes > 1000000 THEN
            RAISE EXCEPTION 'filter is % bytes of JSON; the limit is 1000000: filter on fewer values (or on a coarser key)',
                v_bytes USING ERRCODE = '54000';
        END IF;
        -- Levels are the objects and lists the filter is written in, the value of a key being
        -- one level below it; a $and / $or's list is part of its operator (no level of its
        -- own), and a scalar is no level: {"n": 1} is 1 level, {"$not": {"n": 1}} 2,
        -- {"$and": [{"n": 1}]} 2, {"n": {"$in": [1]}} 3.
        WITH RECURSIVE node(v, depth) AS (
            SELECT filter, 1
            UNION ALL
            SELECT c.v, node.depth + CASE WHEN jsonb_typeof(c.v) NOT IN ('object', 'array') THEN 0
                                          WHEN c.k IN ('$and', '$or') AND jsonb_typeof(c.v) = 'array' THEN 0
                                          ELSE 1 END
              FROM node
             CROSS JOIN LATERAL (
                   SELECT e.key AS k, e.value AS v
                     FROM jsonb_each(CASE WHEN jsonb_typeof(node.v) = 'object' THEN node.v END) e
                   UNION ALL
                   SELECT NULL, e.value
                     FROM jsonb_array_elements(CASE WHEN jsonb_typeof(node.v) = 'array' THEN node.v END) e) c
             WHERE node.depth <= 32)
        SELECT max(n.depth),
               sum(CASE WHEN jsonb_typeof(n.v) = 'array' THEN jsonb_array_length(n.v) ELSE 0 END),
               sum(CASE WHEN jsonb_typeof(n.v) = 'object'
                        THEN (SELECT count(*) FROM jsonb_object_keys(n.v)) ELSE 0 END),
               -- numbers past what a filter needs: their text (and any arithmetic on them)
               -- can cost a megabyte each; compared as numerics, never rendered
               bool_or(jsonb_typeof(n.v) = 'number'
                       AND (abs(n.v::numeric) >= 1e1000 OR scale(n.v::numeric) > 1000))
          INTO v_depth, v_values, v_keys, v_huge
          FROM node n;
        IF v_depth > 32 THEN
            RAISE EXCEPTION 'filter is nested more than 32 levels deep (the limit): flatten its $and / $or / $not'
                USING ERRCODE = '54000';
        END IF;
        IF v_huge THEN
            RAISE EXCEPTION 'filter has a number beyond the limits (magnitude under 1e1000, at most 1000 decimal places): compare with a smaller number'
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
            v_refs := '[]';
            FOR v_item IN SELECT e.value FROM jsonb_array_elements(v_cond) e LOOP
                v_prior := v_prior || (pgrag.filter_check(v_item, v_where) -> 'g');
                v_refs := v_refs || to_jsonb(jsonb_array_length(v_prior) - 1);
            END LOOP;
            v_group := v_group || jsonb_build_array(jsonb_build_object('op', v_key, 'c', v_refs));
        ELSIF v_key = '$not' THEN
            v_prior := v_prior || (pgrag.filter_check(v_cond, v_where) -> 'g');
            v_group := v_group || jsonb_build_array(jsonb_build_object(
                'op', v_key, 'c', jsonb_build_array(jsonb_array_length(v_prior) - 1)));
        ELSIF left(v_key, 1) = '$' THEN
            RAISE EXCEPTION 'unknown filter operator % at %: use $and, $or or $not here, or a metadata key',
                v_key, path USING ERRCODE = '22023';
        ELSIF jsonb_typeof(v_cond) = 'object'
              AND EXISTS (SELECT 1 FROM jsonb_object_keys(v_cond) k WHERE left(k, 1) = '$') THEN
            FOR v_op, v_arg IN SELECT e.key, e.value FROM jsonb_each(v_cond) e LOOP
                IF v_op IN ('$eq', '$ne') THEN
                    NULL;
                ELSIF v_op IN ('$in', '$nin', '$all') THEN
                    IF jsonb_typeof(v_arg) <> 'array' THEN
                        RAISE EXCEPTION '%.% must be a list, got %', v_where, v_op, v_arg
                            USING ERRCODE = '22023';
                    END IF;
                    IF v_op <> '$all' THEN  -- compiled: a lookup, not a list to walk per row
                        -- Scalars are keys of the set; a one-value list of a scalar ([3]: an
                        -- array field holding 3) a key marked 'a'; other objects and lists stay
                        -- in "rest", each once, tested by containment (bounded below).
                        v_arg := jsonb_build_object(
                            'set', coalesce(
                                (SELECT jsonb_object_agg(x.k, true)
                                   FROM (SELECT DISTINCT
                                                CASE WHEN jsonb_typeof(a.value) = 'array' THEN 'a' ELSE '' END
                                                || CASE jsonb_typeof(s.v)
                                                       WHEN 'string' THEN 's' || (s.v #>> '{}')
                                                       WHEN 'number' THEN 'n' || trim_scale(s.v::numeric)::text
                                                       WHEN 'boolean' THEN 'b' || (s.v #>> '{}')
                                                       WHEN 'null' THEN 'z'
                                                   END AS k
                                           FROM jsonb_array_elements(v_arg) a
                                          CROSS JOIN LATERAL (
                                                SELECT CASE WHEN jsonb_typeof(a.value) <> 'array' THEN a.value
                                                            WHEN jsonb_array_length(a.value) = 1 THEN a.value -> 0
                                                       END AS v) s) x
                                  WHERE x.k IS NOT NULL), '{}'),
                            'rest', coalesce(
                                (SELECT jsonb_agg(DISTINCT a.value) FROM jsonb_array_elements(v_arg) a
                                  WHERE jsonb_typeof(a.value) = 'object'
                                     OR jsonb_typeof(a.value) = 'array'
                                        AND NOT (jsonb_array_length(a.value) = 1
                                                 AND jsonb_typeof(a.value -> 0) NOT IN ('object', 'array'))),
                                '[]'));
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
                v_group := v_group || jsonb_build_array(
                    jsonb_build_object('op', v_op, 'key', v_key)
                    || CASE WHEN v_op IN ('$in', '$nin') THEN v_arg  -- {"set": ..., "rest": ...}
                            -- a date bound, parsed once: "t", its epoch seconds (exact)
                            WHEN v_op IN ('$gt', '$gte', '$lt', '$lte') AND jsonb_typeof(v_arg) = 'string'
                            THEN jsonb_build_object('arg', v_arg, 't',
                                     extract(epoch FROM pgrag.metadata_time(v_arg #>> '{}')))
                            ELSE jsonb_build_object('arg', v_arg) END);
            END LOOP;
        ELSE
            v_group := v_group || jsonb_build_array(jsonb_build_object(
                'op', '=', 'key', v_key, 'arg', v_cond));
        END IF;
    END LOOP;
    -- A sub-filter's groups are referred to by their distance back from the group that refers
    -- to them, which concatenation in the parent leaves unchanged.
    v_at := jsonb_array_length(v_prior);
    v_group := coalesce((SELECT jsonb_agg(CASE WHEN i.v ? 'c'
                                               THEN (i.v - 'c') || jsonb_build_object('d',
                                                   (SELECT jsonb_agg(v_at - c.x::int)
                                                      FROM jsonb_array_elements_text(i.v -> 'c') c(x)))
                                               ELSE i.v END ORDER BY i.n)
                           FROM jsonb_array_elements(v_group) WITH ORDINALITY i(v, n)), '[]');
    v_prior := v_prior || jsonb_build_array(v_group);
    IF path <> 'filter' THEN
        RETURN jsonb_build_object('g', v_prior);
    END IF;
    -- The lists' objects and lists that are not lookups are tested one by one per row: few.
    SELECT coalesce(sum(jsonb_array_length(i.v -> 'rest')), 0) INTO v_values
      FROM jsonb_array_elements(v_prior) g(v)
     CROSS JOIN LATERAL jsonb_array_elements(g.v) i(v)
     WHERE i.v ? 'rest';
    IF v_values > 100 THEN
        RAISE EXCEPTION 'filter has % distinct objects and lists in its $in / $nin lists; the limit is 100 (scalars and one-value lists such as [3] are looked up, not counted): list scalars instead',
            v_values USING ERRCODE = '54000';
    END IF;
    -- The whole filter: every lookup moves to "$sets", which a row's test reads in place (by
    -- containment: a binary search, no copy), leaving small instructions in "$groups".
    SELECT coalesce(jsonb_object_agg(g.n || '.' || i.n, i.v -> 'set'), '{}') INTO v_sets
      FROM jsonb_array_elements(v_prior) WITH ORDINALITY g(v, n)
     CROSS JOIN LATERAL jsonb_array_elements(g.v) WITH ORDINALITY i(v, n)
     WHERE i.v ? 'set';
    v_prior := (SELECT jsonb_agg(
                    (SELECT coalesce(jsonb_agg(CASE WHEN i.v ? 'set'
                                                    THEN (i.v - 'set') || jsonb_build_object('set', g.n || '.' || i.n)
                                                    ELSE i.v END ORDER BY i.n), '[]')
                       FROM jsonb_array_elements(g.v) WITH ORDINALITY i(v, n))
                    ORDER BY g.n)
                  FROM jsonb_array_elements(v_prior) WITH ORDINALITY g(v, n));
    RETURN jsonb_build_object('$groups', v_prior, '$sets', v_sets);
END
$fn$;

-- Does a document's metadata satisfy a filter, as filter_check compiled it (a filter not
-- compiled is compiled first)? The program is run bottom-up, group by group, each group true
-- when all its instructions hold; the last group is the filter. A lookup reads "$sets" in
-- place; a "$deadline" ([epoch seconds, the limit in ms]) raises once the clock is past it,
-- saying what the search was doing ("$doing", else testing the filter). The search engine
-- also calls it with an empty program ({"$groups": [[]], "$deadline": ..., "$doing": ...}),
-- true for any row, as the time check of its other loops whose length a caller's input sets.
CREATE OR REPLACE FUNCTION pgrag.filter_match(metadata jsonb, filter jsonb) RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_groups jsonb;
    v_ins    jsonb;
    v_res    boolean[] := '{}';
    v_n      integer;
    v_ok     boolean;
    v_hit    boolean;
    v_op     text;
    v_key    text;
    v_arg    jsonb;
    v_value  jsonb;
    v_cmp    integer;
BEGIN
    IF filter ? '$deadline'
       AND extract(epoch FROM clock_timestamp()) > (filter #>> '{$deadline,0}')::float8 THEN
        RAISE EXCEPTION 'search stopped by its time limit of % ms (pgrag.search_timeout) while %',
            filter #>> '{$deadline,1}', coalesce(filter ->> '$doing', 'testing the filter')
            USING ERRCODE = '57014',
                  HINT = 'Narrow the search, or raise the limit: SET pgrag.search_timeout = ''2min'' (0: none); see docs/search.md#limits.';
    END IF;
    IF NOT filter ? '$groups' THEN
        filter := pgrag.filter_check(filter);
    END IF;
    v_groups := filter -> '$groups';
    FOR v_n IN 1 .. jsonb_array_length(v_groups) LOOP
        v_ok := true;
        FOR v_ins IN SELECT e.value FROM jsonb_array_elements(v_groups -> (v_n - 1)) e LOOP
            v_op := v_ins ->> 'op';
            v_key := v_ins ->> 'key';
            v_arg := v_ins -> 'arg';
            v_value := metadata -> v_key;
            IF v_op = '$and' THEN
                v_hit := NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(v_ins -> 'd') d
                                      WHERE NOT v_res[v_n - d::int]);
            ELSIF v_op = '$or' THEN
                v_hit := EXISTS (SELECT 1 FROM jsonb_array_elements_text(v_ins -> 'd') d
                                  WHERE v_res[v_n - d::int]);
            ELSIF v_op = '$not' THEN
                v_hit := NOT v_res[v_n - (v_ins #>> '{d,0}')::int];
            ELSIF v_op = '=' THEN
                v_hit := metadata @> jsonb_build_object(v_key, v_arg);
            ELSIF v_op IN ('$eq', '$ne') THEN
                v_hit := (metadata @> jsonb_build_object(v_key, v_arg)) = (v_op = '$eq');
            ELSIF v_op IN ('$in', '$nin') THEN
                -- A scalar is looked up; an array field shares a scalar; the list's objects
                -- and arrays ("rest") are tested by containment, as they always were.
                v_hit := CASE jsonb_typeof(v_value)
                             WHEN 'array' THEN EXISTS (
                                 SELECT 1
                                   FROM jsonb_array_elements(v_value) x
                                  CROSS JOIN LATERAL (
                                        SELECT CASE jsonb_typeof(x.value)
                                                   WHEN 'string' THEN 's' || (x.value #>> '{}')
                                                   WHEN 'number' THEN 'n' || trim_scale(x.value::numeric)::text
                                                   WHEN 'boolean' THEN 'b' || (x.value #>> '{}')
                                                   ELSE 'z'
                                               END AS k) y
                                  WHERE jsonb_typeof(x.value) NOT IN ('object', 'array')
                                    AND (filter @> jsonb_build_object('$sets', jsonb_build_object(
                                             v_ins ->> 'set', jsonb_build_object(y.k, true)))
                                         OR filter @> jsonb_build_object('$sets', jsonb_build_object(
                                             v_ins ->> 'set', jsonb_build_object('a' || y.k, true)))))
                             WHEN 'object' THEN false
                             ELSE v_value IS NOT NULL
                                  AND filter @> jsonb_build_object('$sets', jsonb_build_object(
                                          v_ins ->> 'set', jsonb_build_object(
                                              CASE jsonb_typeof(v_value)
                                                  WHEN 'string' THEN 's' || (v_value #>> '{}')
                                                  WHEN 'number' THEN 'n' || trim_scale(v_value::numeric)::text
                                                  WHEN 'boolean' THEN 'b' || (v_value #>> '{}')
                                                  ELSE 'z'
                                              END, true)))
                         END
                         OR (v_ins -> 'rest' <> '[]' AND EXISTS (
                             SELECT 1 FROM jsonb_array_elements(v_ins -> 'rest') e
                              WHERE metadata @> jsonb_build_object(v_key, e.value)
                                 OR (jsonb_typeof(v_value) = 'array' AND v_value @> e.value)));
                v_hit := v_hit = (v_op = '$in');
            ELSIF v_op = '$all' THEN
                v_hit := jsonb_typeof(v_value) = 'array' AND v_value @> v_arg;
            ELSIF v_op = '$exists' THEN
                v_hit := (v_value IS NOT NULL) = (v_arg = 'true'::jsonb);
            ELSE
                -- compared as filter_compare does, with the bound as compiled: a number read
                -- as a numeric in place, a date's epoch seconds parsed once ("t")
                v_cmp := CASE WHEN v_value IS NULL THEN NULL
                              WHEN jsonb_typeof(v_arg) = 'number' THEN
                                  CASE WHEN jsonb_typeof(v_value) = 'number'
                                       THEN sign(v_value::numeric - v_arg::numeric)::int END
                              WHEN jsonb_typeof(v_value) <> 'string' THEN NULL
                              WHEN v_ins ? 't' AND v_ins -> 't' <> 'null' THEN
                                  sign(extract(epoch FROM pgrag.metadata_time(v_value #>> '{}'))
                                       - (v_ins -> 't')::numeric)::int
                              ELSE pgrag.filter_compare(v_value, v_arg) END;
                v_hit := v_cmp IS NOT NULL
                         AND CASE v_op WHEN '$gt' THEN v_cmp > 0 WHEN '$gte' THEN v_cmp >= 0
                                       WHEN '$lt' THEN v_cmp < 0 ELSE v_cmp <= 0 END;
            END IF;
            IF NOT coalesce(v_hit, false) THEN
                v_ok := false;
                EXIT;
            END IF;
        END LOOP;
        v_res[v_n] := v_ok;
    END LOOP;
    RETURN v_res[jsonb_array_length(v_groups)];
END
$fn$;
