"""search_v4: a keyword fallback so that a search with query text finds something when only stop
words or unindexed words matched, and a leaner statement for unrestricted keyword-only calls;
grant_roles_v2 grants it to pgrag's roles.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# The function files this migration ran, kept unchanged in migrations/history/.
HISTORY = Path(__file__).resolve().parents[1] / "history"


def sql_file(name: str) -> str:
    return (HISTORY / name.removeprefix("functions/")).read_text(encoding="utf-8")


SEARCH_V4 = (
    "pgrag.search_v4(text, text, vector, integer, jsonb, integer, integer, integer,"
    " double precision, double precision, double precision, integer, integer)"
)


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters, as in 0001: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def _vector_on_search_path() -> None:
    _sql(
        "SELECT set_config('search_path', format('%I, ', n.nspname)"
        " || current_setting('search_path'), true)"
        " FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        " WHERE e.extname = 'vector'"
    )


def upgrade() -> None:
    _vector_on_search_path()
    _sql(sql_file("functions/search_v4.sql"))
    # A SECURITY DEFINER entry point: granted to pgrag's roles, not to PUBLIC.
    _sql(f"REVOKE EXECUTE ON FUNCTION {SEARCH_V4} FROM PUBLIC; SELECT pgrag.grant_roles_v2();")


def downgrade() -> None:
    _vector_on_search_path()
    _sql(f"DROP FUNCTION pgrag.grant_roles_v2(); DROP FUNCTION {SEARCH_V4};")
