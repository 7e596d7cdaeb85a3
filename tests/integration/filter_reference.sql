-- The filter evaluator as released before filters were compiled (pgrag 0.x, sql/functions/filter.sql
-- at the commit before this file was added), kept as the reference the compiled one must agree
-- with: tests/integration/test_search_limits.py creates it in pg_temp.
CREATE OR REPLACE FUNCTION pg_temp.filter_match_reference(metadata jsonb, filter jsonb) RETURNS boolean
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
        IF v_key = '$and' THEN
            IF EXISTS (SELECT 1 FROM jsonb_array_elements(v_cond) e
                        WHERE NOT pg_temp.filter_match_reference(metadata, e.value)) THEN
                RETURN false;
            END IF;
        ELSIF v_key = '$or' THEN
            IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_cond) e
                            WHERE pg_temp.filter_match_reference(metadata, e.value)) THEN
                RETURN false;
            END IF;
        ELSIF v_key = '$not' THEN
            IF pg_temp.filter_match_reference(metadata, v_cond) THEN
                RETURN false;
            END IF;
        ELSIF jsonb_typeof(v_cond) = 'object'
              AND EXISTS (SELECT 1 FROM jsonb_object_keys(v_cond) k WHERE left(k, 1) = '$') THEN
            v_value := metadata -> v_key;
            FOR v_op, v_arg IN SELECT e.key, e.value FROM jsonb_each(v_cond) e LOOP
                IF v_op IN ('$eq', '$ne') THEN
                    v_hit := metadata @> jsonb_build_object(v_key, v_arg);
                    IF v_hit <> (v_op = '$eq') THEN RETURN false; END IF;
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
