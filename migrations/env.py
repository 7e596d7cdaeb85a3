"""Alembic environment for pgrag's own schema.

pgrag drives Alembic from code (``pgrag.migrate``): the connection comes in through
``config.attributes["connection"]``, so the CLI, the tests and a user's own ops pipeline run
exactly the same migrations. pgrag keeps its revision in its own version table
(``alembic_version_pgrag``, in the schema where the first upgrade found its current schema),
so an application with its own Alembic history can run pgrag's
beside it in the same database.
"""

from __future__ import annotations

from alembic import context

VERSION_TABLE = "alembic_version_pgrag"

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
    # Found (or chosen) by pgrag.migrate, so every later run finds the same table whatever
    # the search_path of the role that runs it.
    version_table_schema=context.config.attributes.get("version_table_schema"),
    # One transaction for the whole run, up or down: PostgreSQL's DDL is transactional, so
    # `pgrag db upgrade` from base to head (or a downgrade that an application's view blocks
    # half-way) either completes or leaves the schema exactly as it was.
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
