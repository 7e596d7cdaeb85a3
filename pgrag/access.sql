-- name: chosen_sources
-- The sources of a collection's documents chosen by sources, by prefix, or all (both NULL).
SELECT d.source FROM pgrag.documents d
 WHERE d.collection_id = (SELECT id FROM pgrag.collections WHERE name = %(collection)s)
   AND (%(sources)s::text[] IS NULL OR d.source = ANY(%(sources)s))
   -- starts_with, not LIKE: the prefix has no wildcards
   AND (%(prefix)s::text IS NULL OR starts_with(d.source, %(prefix)s));

-- name: change_principals
-- Add and remove principals of the documents chosen as in chosen_sources; chunks follow.
UPDATE pgrag.documents d SET principals = ARRAY(
         SELECT p FROM unnest(d.principals || %(add)s::text[]) p
         EXCEPT SELECT unnest(%(remove)s::text[])),
       updated_at = now()
 WHERE d.collection_id = (SELECT id FROM pgrag.collections WHERE name = %(collection)s)
   AND (%(sources)s::text[] IS NULL OR d.source = ANY(%(sources)s))
   AND (%(prefix)s::text IS NULL OR starts_with(d.source, %(prefix)s))
RETURNING d.source, d.principals;

-- name: chosen_principals
-- The documents chosen as in chosen_sources, and who may read them.
SELECT d.source, d.principals FROM pgrag.documents d
 WHERE d.collection_id = (SELECT id FROM pgrag.collections WHERE name = %(collection)s)
   AND (%(sources)s::text[] IS NULL OR d.source = ANY(%(sources)s))
   AND (%(prefix)s::text IS NULL OR starts_with(d.source, %(prefix)s))
 ORDER BY d.source;

-- name: unmap_role
-- Remove mappings of a database role to principals.
DELETE FROM pgrag.role_principals WHERE role_name = %(role)s AND principal = ANY(%(principals)s);

-- name: role_exists
-- Whether a database role exists.
SELECT 1 FROM pg_roles WHERE rolname = %(role)s;

-- name: map_role
-- Map a database role to principals (kept if mapped already).
INSERT INTO pgrag.role_principals (role_name, principal)
SELECT %(role)s, unnest(%(principals)s::text[]) ON CONFLICT DO NOTHING;
