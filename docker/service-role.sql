-- The login role `pgrag serve` and `pgrag worker` run as (docs/serve.md#the-database-role):
-- not the owner of schema pgrag, not a superuser. Run after `pgrag db upgrade` (which creates
-- the NOLOGIN roles pgrag_app and pgrag_writer), as the owner, with psql:
--
--   psql -v ON_ERROR_STOP=1 -v password='...' -f docker/service-role.sql
--
-- The owner need not be a superuser: a role with CREATEROLE (the administrator of RDS, Cloud
-- SQL or Supabase) will do, as long as it may grant pgrag_app and pgrag_writer (PostgreSQL 16
-- and later: it has ADMIN OPTION on them, which the role that created them has). One
-- transaction: a run that fails leaves no half-made role behind.
--
-- pgrag_app: its per-request pgrag.principals are trusted (the service names each caller's).
-- pgrag_writer: uploads and deletes (/v1/documents) and `pgrag worker`'s embedding queue.
-- A read-only deployment (no uploads, no worker on this role) grants pgrag_app only.
BEGIN;

SELECT format('CREATE ROLE pgrag_service LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS'
              ' PASSWORD %L', :'password')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgrag_service') \gexec

-- A role that exists already: its password, and an attribute it should not have taken away.
-- Only what differs is changed (naming SUPERUSER, BYPASSRLS or CREATEDB at all in ALTER ROLE
-- takes a role that has that attribute itself, even to say NO). A superuser, or a role that
-- bypasses row-level security, would see every tenant's documents: if this role may not take
-- that away, the run stops here with PostgreSQL's reason.
SELECT format('ALTER ROLE pgrag_service WITH LOGIN PASSWORD %L', :'password') \gexec
SELECT 'ALTER ROLE pgrag_service WITH ' || concat_ws(' ',
           CASE WHEN rolsuper THEN 'NOSUPERUSER' END,
           CASE WHEN rolbypassrls THEN 'NOBYPASSRLS' END,
           CASE WHEN rolcreatedb THEN 'NOCREATEDB' END,
           CASE WHEN rolcreaterole THEN 'NOCREATEROLE' END)
  FROM pg_roles
 WHERE rolname = 'pgrag_service' AND (rolsuper OR rolbypassrls OR rolcreatedb OR rolcreaterole)
\gexec

-- Membership, granted once (a second grant by another grantor would be a second membership on
-- PostgreSQL 16 and later), with what to do when this role may not grant it.
DO $grant$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['pgrag_app', 'pgrag_writer'] LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_auth_members m
                               WHERE m.roleid = r::regrole AND m.member = 'pgrag_service'::regrole);
        BEGIN
            EXECUTE format('GRANT %I TO pgrag_service', r);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role % may not grant % to pgrag_service: %', current_user, r, SQLERRM
                USING ERRCODE = 'insufficient_privilege',
                      HINT = format('Run this script as a superuser, or as a role with ADMIN OPTION'
                                    ' on %1$s (the role that created it has it), or have one run'
                                    ' GRANT %1$s TO %2$s WITH ADMIN OPTION first.',
                                    quote_ident(r), quote_ident(current_user));
        END;
    END LOOP;
END
$grant$;

COMMIT;
