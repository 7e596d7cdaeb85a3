-- name: read_as
-- Make this transaction read as these principals (comma-separated); the setting ends with it.
SELECT set_config('pgrag.principals', %(principals)s, true);
