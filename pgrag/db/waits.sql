-- name: blockers
-- The sessions a backend waits for, who each is, and what the backend waits to lock: a
-- table, a row, rows a transaction wrote and has not committed, a model's index build, or (for
-- a CREATE INDEX CONCURRENTLY) a transaction that began before it.
SELECT b.pid,
       coalesce(nullif(a.application_name, ''), 'a session')
         || coalesce(' as ' || a.usename::text, '')
         || CASE WHEN a.state LIKE 'idle in transaction%%' THEN ', idle in a transaction'
                 ELSE '' END,
       w.what,
       nullif(left(regexp_replace(a.query, '\s+', ' ', 'g'), 80), '')
  FROM unnest(pg_blocking_pids(%(pid)s)) AS b(pid)
  LEFT JOIN pg_stat_activity a ON a.pid = b.pid
 CROSS JOIN LATERAL (
       SELECT coalesce(string_agg(DISTINCT CASE l.locktype
                  WHEN 'relation' THEN 'a lock on ' || l.relation::regclass::text
                  WHEN 'tuple' THEN 'a row of ' || l.relation::regclass::text
                  WHEN 'transactionid' THEN 'rows it changed and has not committed'
                  -- (CREATE INDEX CONCURRENTLY waits for every older transaction to end,
                  -- even a read-only one.)
                  WHEN 'virtualxid' THEN 'a transaction older than the index build'
                  WHEN 'advisory' THEN
                      CASE WHEN l.classid = hashtext('pgrag.model_index')::oid AND l.objsubid = 2
                           THEN 'the build of embedding model ' || l.objid || '''s index'
                           ELSE 'advisory lock ' || l.classid || '/' || l.objid END
                  ELSE 'a ' || l.locktype || ' lock' END, ', '), 'a lock') AS what
         FROM pg_locks l WHERE l.pid = %(pid)s AND NOT l.granted) w
 ORDER BY b.pid;
