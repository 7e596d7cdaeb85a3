-- name: vector_type
-- The schema-qualified name of pgvector's type, wherever the extension was installed.
SELECT format('%I.vector', n.nspname) FROM pg_extension e
  JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector';
