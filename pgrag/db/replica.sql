-- name: read_only
-- A replica's read is read-only, whatever the server (a read DSN that names a primary by
-- mistake still writes nothing).
SET TRANSACTION READ ONLY;

-- name: primary_position
-- Where the primary's WAL is now: a read that must see every write committed so far waits
-- for the replica to have replayed this far. The insert position, not the write position:
-- with synchronous_commit off a commit returns before its record is written, and the write
-- position can still be short of it. (With the WAL segment size: see replica.record_end.)
SELECT pg_current_wal_insert_lsn(),
       (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size');

-- name: primary_flushed
-- Where the primary's WAL is flushed to: what the lag check marks (with the segment size, as
-- primary_position).
SELECT pg_current_wal_flush_lsn(),
       (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size');

-- name: replayed_positions
-- Whether this server has replayed the primary's WAL up to %(a)s, and up to %(b)s (a server
-- not in recovery: always).
SELECT NOT pg_is_in_recovery() OR coalesce(pg_last_wal_replay_lsn() >= %(a)s::pg_lsn, false),
       NOT pg_is_in_recovery() OR coalesce(pg_last_wal_replay_lsn() >= %(b)s::pg_lsn, false);

-- name: replayed
-- Whether this server has the primary's writes up to %(target)s: a standby once it has
-- replayed that far; a server not in recovery (a primary named as the replica) always.
SELECT NOT pg_is_in_recovery()
    OR coalesce(pg_last_wal_replay_lsn() >= %(target)s::pg_lsn, false);

-- name: describe
-- What a new replica connection is: whether it is a standby, who it reads as (the session's
-- login role, which pgrag's access rules go by, and the role it acts as now, which a DSN's
-- options can set), and whether its database holds pgrag's schema.
SELECT pg_is_in_recovery(), session_user::text, current_user::text,
       to_regnamespace('pgrag') IS NOT NULL;

-- name: roles
-- A primary session's login role and the role it acts as: a replica's session must match.
SELECT session_user::text, current_user::text;
