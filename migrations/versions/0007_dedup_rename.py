"""Copies of a document follow it when plain SQL renames it (or moves it to another
collection): sql/functions/dedup_rename_v1.sql.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The function files this migration ran, kept unchanged in migrations/history/.
HISTORY = Path(__file__).resolve().parents[1] / "history"


def sql_file(name: str) -> str:
    return (HISTORY / name.removeprefix("functions/")).read_text(encoding="utf-8")


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters, as in 0001: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def upgrade() -> None:
    _sql(sql_file("functions/dedup_rename_v1.sql"))
    _sql(
        "CREATE TRIGGER documents_renamed AFTER UPDATE OF source, collection_id"
        " ON pgrag.documents FOR EACH ROW"
        " WHEN (OLD.source IS DISTINCT FROM NEW.source"
        "       OR OLD.collection_id IS DISTINCT FROM NEW.collection_id)"
        " EXECUTE FUNCTION pgrag.documents_renamed_v1();"
    )


def downgrade() -> None:
    _sql(
        "DROP TRIGGER documents_renamed ON pgrag.documents;"
        " DROP FUNCTION pgrag.documents_renamed_v1();"
    )
