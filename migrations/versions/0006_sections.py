"""Small-to-big retrieval: section_chunks_v1 returns the chunks of a retrieved chunk's
section, for prompts that hold whole sections; grant_roles_v3 grants it to pgrag's roles.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0006"
down_revision = "0005"
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
    _sql(sql_file("functions/sections_v1.sql"))
    # A SECURITY DEFINER entry point: granted to pgrag's roles, not to PUBLIC.
    _sql(
        "REVOKE EXECUTE ON FUNCTION pgrag.section_chunks_v1(bigint[], integer) FROM PUBLIC;"
        " SELECT pgrag.grant_roles_v3();"
    )


def downgrade() -> None:
    _sql(
        "DROP FUNCTION pgrag.grant_roles_v3();"
        " DROP FUNCTION pgrag.section_chunks_v1(bigint[], integer);"
    )
