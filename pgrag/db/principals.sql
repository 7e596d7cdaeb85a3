-- name: read_as
-- Make this transaction read as these principals (comma-separated); the setting ends with it.
SELECT set_config('pgrag.principals', %(principals)s, true);

-- name: act_for
-- Make the session read as these principals and write for them only (comma-separated), until
-- act_for_none: pgrag.write_principals (sql/functions/access.sql).
SELECT set_config('pgrag.principals', %(principals)s, false),
       set_config('pgrag.write_principals', %(principals)s, false);

-- name: act_for_none
-- End act_for: the session reads and writes as its role again.
SELECT set_config('pgrag.principals', '', false), set_config('pgrag.write_principals', '', false);
