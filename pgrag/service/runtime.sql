-- name: name_session
-- The service's sessions are told apart in pg_stat_activity (and cancelled by their pid).
SELECT set_config('application_name', 'pgrag serve', false);

-- name: ping
-- /readyz: the database answers.
SELECT 1;
