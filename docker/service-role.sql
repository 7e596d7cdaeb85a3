-- The login role `pgrag serve` and `pgrag worker` run as (docs/serve.md#the-database-role):
-- not the owner of schema pgrag, not a superuser. Run after `pgrag db upgrade` (which creates
-- the NOLOGIN roles pgrag_app and pgrag_writer), as the owner, with psql:
--
--   psql -v ON_ERROR_STOP=1 -v password='...' -f docker/service-role.sql
--
-- The owner need not be a superuser: a role with CREATEROLE (the administrator of RDS, Cloud
-- SQL or Supabase) will do, as long as it may grant pgrag_app and pgrag_writer (PostgreSQL 16
-- and later: it has ADMIN OPTION on them, which the role that created them has). One
-- transaction: a run that fails leaves no half-made role behind, and says why.
--
-- pgrag_app: its per-request pgrag.principals are trusted (the service names each caller's).
-- pgrag_writer: uploads and deletes (/v1/documents) and `pgrag worker`'s embedding queue.
-- A read-only deployment (no uploads, no worker on this role) grants pgrag_app only.
\set ON_ERROR_STOP on
BEGIN;

SELECT :'password' = '' AS pgrag_no_password \gset
\if :pgrag_no_password
DO $$ BEGIN
    RAISE EXCEPTION 'no password for pgrag_service: run psql with -v password=''...''';
END $$;
\endif

SELECT format('CREATE ROLE pgrag_service LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS'
              ' NOREPLICATION PASSWORD %L', :'password')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgrag_service') \gexec

-- A role that exists already: its password, and what it should not have taken away. Only what
-- differs is changed (naming SUPERUSER, BYPASSRLS, REPLICATION or CREATEDB at all in ALTER
-- ROLE takes a role that has that attribute itself, even to say NO). A superuser, a role that
-- bypasses row-level security or one that may stream the WAL would see every tenant's
-- documents: if this role may not take that away, the run stops here with PostgreSQL's
-- reason. An expired password or a connection limit of 0 would keep the service out.
SELECT format('ALTER ROLE pgrag_service WITH LOGIN PASSWORD %L', :'password') \gexec
SELECT 'ALTER ROLE pgrag_service WITH ' || concat_ws(' ',
           CASE WHEN rolsuper THEN 'NOSUPERUSER' END,
           CASE WHEN rolbypassrls THEN 'NOBYPASSRLS' END,
           CASE WHEN rolreplication THEN 'NOREPLICATION' END,
           CASE WHEN rolcreatedb THEN 'NOCREATEDB' END,
           CASE WHEN rolcreaterole THEN 'NOCREATEROLE' END,
           CASE WHEN rolvaliduntil < now() THEN 'VALID UNTIL ''infinity''' END,
           CASE WHEN rolconnlimit = 0 THEN 'CONNECTION LIMIT -1' END)
  FROM pg_roles
 WHERE rolname = 'pgrag_service'
   AND (rolsuper OR rolbypassrls OR rolreplication OR rolcreatedb OR rolcreaterole
        OR rolvaliduntil < now() OR rolconnlimit = 0)
\gexec

-- Its memberships: pgrag_app and pgrag_writer, usable (on PostgreSQL 16 and later a grant may
-- be made WITH INHERIT FALSE, which gives none of the role's privileges), and nothing else. A
-- membership in another role (the schema's owner, pg_read_all_data, ...) would read as that
-- role, and ADMIN OPTION would let it hand out pgrag_app's trust: the run stops, naming them.
DO $grant$
DECLARE
    r text;
    v_other text;
BEGIN
    SELECT string_agg(format('%s%s', m.roleid::regrole,
                             CASE WHEN m.admin_option THEN ' (with ADMIN OPTION)' END), ', ')
      INTO v_other
      FROM pg_auth_members m
     WHERE m.member = 'pgrag_service'::regrole
       AND (m.roleid::regrole::text NOT IN ('pgrag_app', 'pgrag_writer') OR m.admin_option);
    IF v_other IS NOT NULL THEN
        RAISE EXCEPTION 'role pgrag_service is also a member of %, which it must not be', v_other
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'REVOKE those from pgrag_service (or drop the role), then run this again.';
    END IF;
    FOREACH r IN ARRAY ARRAY['pgrag_app', 'pgrag_writer'] LOOP
        CONTINUE WHEN pg_has_role('pgrag_service', r, 'USAGE');
        BEGIN
            EXECUTE format('GRANT %I TO pgrag_service', r)
                || CASE WHEN current_setting('server_version_num')::int >= 160000
                        THEN ' WITH INHERIT TRUE' ELSE '' END;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role % may not grant % to pgrag_service: %', current_user, r, SQLERRM
                USING ERRCODE = 'insufficient_privilege',
                      HINT = format('Run this script as a superuser, or as a role with ADMIN OPTION'
                                    ' on pgrag_app and pgrag_writer (the role that created them'
                                    ' has it), or have one run GRANT %1$s TO %2$s WITH ADMIN'
                                    ' OPTION first.',
                                    quote_ident(r), quote_ident(current_user));
        END;
    END LOOP;
END
$grant$;

COMMIT;
