-- name: plain_search_path
-- Catalog text written the same way on every server: pgvector's types without their schema.
SELECT set_config('search_path',
                  'pg_catalog, ' || coalesce((SELECT format('%I', n.nspname)
                                                FROM pg_extension e
                                                JOIN pg_namespace n ON n.oid = e.extnamespace
                                               WHERE e.extname = 'vector'), 'public'),
                  true);

-- name: functions
-- Every function of schema pgrag with what defines it (not its comment or owner). (Its body
-- is the release: pgrag.release() names the digest of the files and the version.)
SELECT p.oid::regprocedure::text,
       jsonb_build_object('language', l.lanname, 'source', p.prosrc, 'kind', p.prokind,
                          'definer', p.prosecdef, 'volatility', p.provolatile,
                          'parallel', p.proparallel, 'strict', p.proisstrict,
                          'leakproof', p.proleakproof, 'cost', p.procost, 'rows', p.prorows,
                          'arguments', pg_get_function_arguments(p.oid),
                          'result', pg_get_function_result(p.oid), 'config', p.proconfig)
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'pgrag'::regnamespace
 ORDER BY 1;

-- name: function_grants
-- Who may execute what, besides the owner (PUBLIC included; NULL ACL = the defaults).
SELECT p.oid::regprocedure::text,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
       a.privilege_type
  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE p.pronamespace = 'pgrag'::regnamespace AND a.grantee <> p.proowner
 ORDER BY 1, 2, 3;

-- name: relations
-- Tables, views, sequences and other relations of schema pgrag (not indexes), with their
-- row-level security switches, persistence (p: logged, u: unlogged), replica identity
-- (d: the primary key) and storage options (autovacuum_enabled=false, say). Here and below,
-- the collections' partitions of chunk_embeddings (chunk_embeddings_c<ID>) are left out: there
-- is one per collection, and each is its parent's (its keys, indexes, foreign keys and
-- triggers are the parent's, attached; reads go through the parent's policies and grants).
SELECT c.oid::regclass::text, c.relkind::text, c.relrowsecurity, c.relforcerowsecurity,
       c.relpersistence::text, c.relreplident::text,
       coalesce(ARRAY(SELECT o FROM unnest(c.reloptions) o ORDER BY 1), '{}')
  FROM pg_class c
 WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind NOT IN ('i', 'I', 't', 'c')
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1;

-- name: relation_grants
SELECT c.oid::regclass::text,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
       a.privilege_type
  FROM pg_class c,
       aclexplode(coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's'::"char" ELSE 'r'::"char" END,
                                                c.relowner))) a
 WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind NOT IN ('i', 'I', 't', 'c')
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
   AND a.grantee <> c.relowner
 ORDER BY 1, 2, 3;

-- name: columns
-- Every column of pgrag's tables, in order (dropped ones left out).
SELECT c.oid::regclass::text, a.attname::text, format_type(a.atttypid, a.atttypmod),
       a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity::text,
       a.attgenerated::text,
       CASE WHEN a.attcollation <> t.typcollation THEN co.collname::text END
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation
 WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind IN ('r', 'p')
   AND a.attnum > 0 AND NOT a.attisdropped
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1, a.attnum;

-- name: column_grants
SELECT c.oid::regclass::text || '.' || quote_ident(a.attname),
       CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(x.grantee) END,
       x.privilege_type
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid,
       aclexplode(a.attacl) x
 WHERE c.relnamespace = 'pgrag'::regnamespace AND a.attacl IS NOT NULL
   AND x.grantee <> c.relowner
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1, 2, 3;

-- name: constraints
SELECT co.conrelid::regclass::text || '.' || quote_ident(co.conname), pg_get_constraintdef(co.oid),
       co.convalidated
  FROM pg_constraint co
 WHERE co.connamespace = 'pgrag'::regnamespace AND co.conrelid <> 0
   AND co.contype <> 'n'  -- NOT NULL (a constraint since PostgreSQL 18): the columns say it
   AND co.conrelid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1;

-- name: indexes
-- Every index of schema pgrag but the models' HNSW indexes (one per model: checked against
-- the models instead).
SELECT i.oid::regclass::text, pg_get_indexdef(i.oid), x.indisvalid
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
 WHERE i.relnamespace = 'pgrag'::regnamespace
   AND i.relname !~ '^chunk_embeddings_hnsw_[0-9]+$'
   AND x.indrelid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1;

-- name: triggers
SELECT t.tgrelid::regclass::text || '.' || quote_ident(t.tgname), pg_get_triggerdef(t.oid),
       t.tgenabled::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'pgrag'::regnamespace AND NOT t.tgisinternal
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1;

-- name: policies
SELECT p.polrelid::regclass::text || '.' || quote_ident(p.polname), p.polcmd::text, p.polpermissive,
       ARRAY(SELECT CASE WHEN r = 0 THEN 'public' ELSE pg_get_userbyid(r) END
               FROM unnest(p.polroles) r ORDER BY 1),
       pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid)
  FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
 WHERE c.relnamespace = 'pgrag'::regnamespace
 ORDER BY 1;

-- name: schema_grants
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
       a.privilege_type
  FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
 WHERE n.nspname = 'pgrag' AND a.grantee <> n.nspowner
 ORDER BY 1, 2;

-- name: types
-- Types defined in schema pgrag on their own (a table's row type does not count).
SELECT t.oid::regtype::text, t.typtype::text
  FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
 WHERE t.typnamespace = 'pgrag'::regnamespace AND t.typtype IN ('c', 'd', 'e', 'r', 'm')
   AND (t.typrelid = 0 OR c.relkind = 'c')
 ORDER BY 1;

-- name: owners
-- Who owns schema pgrag and each of its functions and relations (one role should own all).
SELECT 'schema', 'pgrag', pg_get_userbyid(n.nspowner) FROM pg_namespace n WHERE n.nspname = 'pgrag'
UNION ALL
SELECT 'function', p.oid::regprocedure::text, pg_get_userbyid(p.proowner)
  FROM pg_proc p WHERE p.pronamespace = 'pgrag'::regnamespace
UNION ALL
SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' ELSE 'table' END,
       c.oid::regclass::text, pg_get_userbyid(c.relowner)
  FROM pg_class c
 WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind NOT IN ('i', 'I', 't', 'c')
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
   -- an identity or serial column's sequence goes with its table's owner
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                      AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
 ORDER BY 1, 2;

-- name: rules
-- Rewrite rules on pgrag's tables (a view's own _RETURN rule left out).
SELECT r.ev_class::regclass::text || '.' || quote_ident(r.rulename), pg_get_ruledef(r.oid)
  FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
 WHERE c.relnamespace = 'pgrag'::regnamespace AND r.rulename <> '_RETURN'
 ORDER BY 1;

-- name: disabled_internal_triggers
-- The foreign keys' own triggers on pgrag's tables that are disabled, per table (none is).
SELECT t.tgrelid::regclass::text, count(*)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'pgrag'::regnamespace AND t.tgisinternal AND t.tgenabled = 'D'
 GROUP BY 1 ORDER BY 1;

-- name: children
-- Tables that inherit from (or are partitions of) pgrag's tables: their rows show in every
-- read of the parent.
SELECT i.inhrelid::regclass::text, i.inhparent::regclass::text
  FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
 WHERE p.relnamespace = 'pgrag'::regnamespace AND p.relkind <> 'I'  -- (a partitioned index's own: the partitions')
   AND i.inhrelid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1;

-- name: parents
-- Tables that pgrag's tables inherit from (none): every read of such a parent shows the rows
-- of pgrag's table too, whatever row-level security.
SELECT i.inhrelid::regclass::text, i.inhparent::regclass::text
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind NOT IN ('i', 'I')
   AND c.oid NOT IN (SELECT t.relid FROM pg_partition_tree(to_regclass('pgrag.chunk_embeddings')) t
                      WHERE t.level = 1 AND t.relid::regclass::text ~ '^pgrag\.chunk_embeddings_c[0-9]+$')
 ORDER BY 1, 2;

-- name: statistics
-- Extended statistics objects in schema pgrag (none is pgrag's).
SELECT format('%I.%I', n.nspname, s.stxname) FROM pg_statistic_ext s
  JOIN pg_namespace n ON n.oid = s.stxnamespace
 WHERE n.nspname = 'pgrag' ORDER BY 1;

-- name: default_privileges
-- ALTER DEFAULT PRIVILEGES ... IN SCHEMA pgrag: what new objects there would be granted.
SELECT pg_get_userbyid(d.defaclrole), d.defaclobjtype::text,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END,
       a.privilege_type
  FROM pg_default_acl d, aclexplode(d.defaclacl) a
 WHERE d.defaclnamespace = 'pgrag'::regnamespace
 ORDER BY 1, 2, 3, 4;

-- name: operators
SELECT o.oid::regoperator::text FROM pg_operator o
 WHERE o.oprnamespace = 'pgrag'::regnamespace ORDER BY 1;

-- name: role_attributes
-- pgrag's roles, and what would let a restricted one read everything: superuser, BYPASSRLS,
-- or membership of pgrag_writer (unrestricted) or of the owner of schema pgrag.
SELECT r.rolname::text, r.rolsuper, r.rolbypassrls,
       EXISTS (SELECT 1 FROM pg_roles w WHERE w.rolname = 'pgrag_writer'
                  AND w.oid <> r.oid AND pg_has_role(r.oid, w.oid, 'MEMBER')),
       pg_has_role(r.oid, n.nspowner, 'MEMBER')
  FROM pg_roles r, pg_namespace n
 WHERE n.nspname = 'pgrag' AND r.rolname IN ('pgrag_reader', 'pgrag_writer', 'pgrag_app')
 ORDER BY 1;

-- name: roles
-- pgrag's roles that exist in this cluster (grants to the others cannot be there).
SELECT rolname::text FROM pg_roles WHERE rolname IN ('pgrag_reader', 'pgrag_writer', 'pgrag_app');

-- name: sequences
-- Each sequence's definition (an identity column's too): type, start, bounds, step, cycling.
SELECT s.seqrelid::regclass::text, format_type(s.seqtypid, NULL), s.seqstart, s.seqmin,
       s.seqmax, s.seqincrement, s.seqcycle
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
 WHERE c.relnamespace = 'pgrag'::regnamespace
 ORDER BY 1;

-- name: publications
-- Publications that send rows of pgrag's tables to subscribers: named tables, the whole schema,
-- or every table.
SELECT p.pubname::text, c.oid::regclass::text
  FROM pg_publication p
  JOIN pg_publication_rel r ON r.prpubid = p.oid
  JOIN pg_class c ON c.oid = r.prrelid
 WHERE c.relnamespace = 'pgrag'::regnamespace
UNION
SELECT p.pubname::text, 'every table' FROM pg_publication p WHERE p.puballtables
 ORDER BY 1, 2;

-- name: schema_publications
-- Publications of the whole schema (FOR TABLES IN SCHEMA: PostgreSQL 15 and later).
SELECT p.pubname::text, 'schema pgrag'
  FROM pg_publication p JOIN pg_publication_namespace n ON n.pnpubid = p.oid
 WHERE n.pnnspid = 'pgrag'::regnamespace;

-- name: database_settings
-- Settings stored for this database (or for every database), for everyone or for one role,
-- that stop pgrag's triggers (session_replication_role) from firing.
SELECT coalesce(pg_get_userbyid(nullif(s.setrole, 0)), 'everyone'), c.setting
  FROM pg_db_role_setting s, unnest(s.setconfig) c(setting)
 WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
   AND c.setting LIKE 'session\_replication\_role=%'
   AND c.setting <> 'session_replication_role=origin'
 ORDER BY 1, 2;
