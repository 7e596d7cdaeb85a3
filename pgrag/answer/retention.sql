-- name: set_retention
-- A collection's question-log retention (NULL: no limit).
UPDATE pgrag.collections SET query_log_max_age = %(max_age)s, query_log_max_rows = %(max_rows)s
 WHERE id = %(id)s;

-- name: retention
-- A collection's question-log retention.
SELECT query_log_max_age, query_log_max_rows FROM pgrag.collections WHERE id = %(id)s;

-- name: prune
-- One bounded batch of the entries the retention no longer keeps; how many were removed.
SELECT pgrag.prune_queries(%(collection)s, %(batch)s);
