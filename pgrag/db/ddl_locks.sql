-- name: show_lock_timeout
-- The session's lock_timeout, to put back.
SELECT current_setting('lock_timeout');

-- name: set_lock_timeout
-- The session's lock_timeout (a duration such as '200ms', or '0').
SELECT set_config('lock_timeout', %(ms)s, false);
