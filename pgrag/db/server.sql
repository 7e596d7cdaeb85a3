-- name: database_exists
-- A row when the database called %(name)s exists.
SELECT 1 FROM pg_database WHERE datname = %(name)s;

-- name: create_database
-- Create pgrag's database on the embedded server.
CREATE DATABASE {database};
