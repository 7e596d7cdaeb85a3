-- The login role `pgrag serve` and `pgrag worker` run as (docs/serve-deploy.md#the-database-role):
-- not the owner of schema pgrag, not a superuser. Run after `pgrag db upgrade` (which creates
-- the NOLOGIN roles pgrag_app and pgrag_writer), as the owner, with psql:
--
--   psql -v ON_ERROR_STOP=1 -v password='...' -f docker/service-role.sql
--
-- pgrag_app: its per-request pgrag.principals are trusted (the service names each caller's).
-- pgrag_writer: uploads and deletes (/v1/documents) and `pgrag worker`'s embedding queue.
-- A read-only deployment (no uploads, no worker on this role) grants pgrag_app only.
SELECT format('CREATE ROLE pgrag_service LOGIN PASSWORD %L', :'password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pgrag_service') \gexec
ALTER ROLE pgrag_service WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD :'password';
GRANT pgrag_app, pgrag_writer TO pgrag_service;
