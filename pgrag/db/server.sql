-- name: database_exists
-- A row when the database called %(name)s exists.
SELECT 1 FROM pg_database WHERE datname = %(name)s;

-- name: create_database
-- Create pgrag's database on the embedded server.
CREATE DATABASE {database};

-- name: standby_slot
-- Whether the replication slot of a standby exists on this primary, and whether a standby
-- streams from it now.
SELECT active FROM pg_replication_slots WHERE slot_name = %(slot)s;

-- name: drop_standby_slot
-- A standby's slot that nothing streams from (left by an earlier standby in that directory).
SELECT pg_drop_replication_slot(%(slot)s);

-- name: slot_wal_limit
-- How much WAL a replication slot may hold back on this primary (-1: no limit), and whether
-- that is PostgreSQL's default rather than someone's setting.
SELECT setting::bigint, source = 'default' FROM pg_settings
 WHERE name = 'max_slot_wal_keep_size';

-- name: limit_slot_wal
-- A standby's slot keeps the WAL it has not taken, so a standby stopped for a while catches up
-- after it; at most this much, so one that is gone for good does not fill the primary's disk.
ALTER SYSTEM SET max_slot_wal_keep_size = '1GB';

-- name: reload
SELECT pg_reload_conf();

-- name: standby_state
-- Whether this server is a standby; if so, its WAL receiver's state ('streaming' while it
-- receives), the primary it streams from, how long ago it replayed its last transaction, and
-- whether its replay is paused ('pause requested', 'paused').
SELECT pg_is_in_recovery(),
       (SELECT status FROM pg_stat_wal_receiver),
       (SELECT coalesce(sender_host, '?') || coalesce(':' || sender_port, '')
          FROM pg_stat_wal_receiver),
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8,
       CASE WHEN pg_is_in_recovery()
            THEN nullif(pg_get_wal_replay_pause_state(), 'not paused') END;

-- name: standby_slots
-- The slots of standbys `pgrag server standby` made from this server: whether one streams
-- now, whether the WAL it needs is still here ('lost': no longer), and how much it holds back.
SELECT slot_name::text, active, wal_status,
       pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn))
  FROM pg_replication_slots
 WHERE slot_name LIKE 'pgrag\_standby\_%'
 ORDER BY slot_name;
