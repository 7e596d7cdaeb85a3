-- name: name_session
-- The service's sessions are told apart in pg_stat_activity (and cancelled by their pid).
SELECT set_config('application_name', 'pgrag serve', false);

-- name: ping
-- /readyz: the database answers.
SELECT 1;

-- name: role_power
-- Whether the service's role is a superuser or owns schema pgrag (then row-level security
-- does not filter its own reads): it is warned at start.
SELECT current_user, r.rolsuper,
       pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')
  FROM pg_catalog.pg_roles r, pg_catalog.pg_namespace n
 WHERE r.rolname = current_user AND n.nspname = 'pgrag';
