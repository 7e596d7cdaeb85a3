-- Run once on the coordinator: Citus and pgvector in this database on every node, then the
-- workers joined. (The image creates the citus extension in POSTGRES_DB on each node.)
CREATE EXTENSION IF NOT EXISTS citus;
SELECT citus_set_coordinator_host('coordinator', 5432);
SELECT citus_add_node('worker1', 5432);
SELECT citus_add_node('worker2', 5432);
-- pgvector must exist on the workers before a table with a vector column is distributed;
-- Citus propagates CREATE EXTENSION from the coordinator once the workers are nodes.
CREATE EXTENSION IF NOT EXISTS vector;
SELECT * FROM citus_get_active_worker_nodes();
