"""Alembic environment for pgrag's own schema.

pgrag drives Alembic from code (``pgrag.db.schema``): the connection comes in through
``config.attributes["connection"]``, so the CLI, the tests and a user's own ops pipeline run
exactly the same migrations. pgrag keeps its revision in its own version table
(``alembic_version_pgrag``, in the schema where the first upgrade found its current schema),
so an application with its own Alembic history can run pgrag's
beside it in the same database.
"""

from __future__ import annotations

from alembic import context

from pgrag.db import schema

VERSION_TABLE = schema.VERSION_TABLE

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only when someone runs plain `alembic` here
    raise RuntimeError(
        "run pgrag's migrations with `pgrag db upgrade` or pgrag.db.schema.upgrade()"
    )

if context.is_offline_mode():  # pragma: no cover
    raise RuntimeError("pgrag's migrations need a live connection (offline SQL is not supported)")

context.configure(
    connection=connection,
    version_table=VERSION_TABLE,
    # Found (or chosen) by pgrag.db.schema, so every later run finds the same table whatever
    # the search_path of the role that runs it.
    version_table_schema=context.config.attributes.get("version_table_schema"),
    # One transaction for the whole run, up or down: PostgreSQL's DDL is transactional, so
    # `pgrag db upgrade` from base to head (or a downgrade that an application's view blocks
    # half-way) either completes or leaves the schema exactly as it was.
    transaction_per_migration=False,
)
raw = connection.connection.driver_connection
before = schema.revision_of(raw)
with context.begin_transaction():
    context.run_migrations()
    # From revision 0010 on, the functions are sql/functions/'s, re-applied here; an upgrade
    # also puts back what a downgrade kept aside (pgrag/db/roundtrip.py). In the migrations'
    # transaction: all or nothing.
    schema.finish(raw, before, schema.revision_of(raw))
