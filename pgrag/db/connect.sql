-- name: vector_type
-- The schema-qualified name of pgvector's type, wherever the extension was installed.
SELECT format('%I.vector', n.nspname) FROM pg_extension e
  JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector';

-- name: watch_client
-- Have the server notice, while a query of this session runs, that the client has gone (Ctrl-C,
-- a killed process), so a long search stops there: every second, unless the session (its role,
-- its database, the DSN's options) already chose an interval. A server on a platform without
-- the check keeps 0; one older than PostgreSQL 14 has no such setting (NULL here).
DO $$
BEGIN
    IF current_setting('client_connection_check_interval', true) = '0' THEN
        PERFORM set_config('client_connection_check_interval', '1s', false);
    END IF;
EXCEPTION WHEN invalid_parameter_value OR feature_not_supported THEN
    NULL;
END
$$;
