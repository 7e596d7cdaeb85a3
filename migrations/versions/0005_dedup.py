"""Identical documents stored once per collection, and identical chunks embedded once.

- documents_hand_over_v1, documents_materialize_v1 and two triggers on documents
  (sql/functions/dedup_v1.sql) keep a duplicate's content whatever happens to its original.
- chunks_collection_hash_idx finds a stored vector by the chunk's content hash, so a chunk seen
  anywhere in the collection (a renamed or copied file) is not embedded again. It indexes the
  hash's first 16 hex digits (64 bits), not all 64, to stay small.

The index is built in the migration's transaction: about 4 s per million chunks here, during
which writes to chunks wait.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The function files this migration ran, kept unchanged in migrations/history/.
HISTORY = Path(__file__).resolve().parents[1] / "history"


def sql_file(name: str) -> str:
    return (HISTORY / name.removeprefix("functions/")).read_text(encoding="utf-8")


TRIGGERS = """
CREATE INDEX chunks_collection_hash_idx ON pgrag.chunks (collection_id, left(content_hash, 16));
-- Named to sort before the foreign keys' RI_ConstraintTrigger_a_* (see dedup_v1.sql).
CREATE TRIGGER "Documents_hand_over" AFTER DELETE ON pgrag.documents
    FOR EACH ROW EXECUTE FUNCTION pgrag.documents_deleted_v1();
CREATE TRIGGER documents_access_dedup AFTER UPDATE OF principals, acl_id ON pgrag.documents
    FOR EACH ROW WHEN (OLD.acl_id IS DISTINCT FROM NEW.acl_id)
    EXECUTE FUNCTION pgrag.documents_access_dedup_v1();
"""


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters, as in 0001: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def upgrade() -> None:
    _sql(sql_file("functions/dedup_v1.sql"))
    _sql(TRIGGERS)


def downgrade() -> None:
    # Lossless: every duplicate gets its own copy of the chunks before the triggers go.
    _sql(
        "SELECT pgrag.documents_materialize_v1(id) FROM pgrag.documents"
        " WHERE metadata ? 'duplicate_of'"
    )
    _sql(
        "DROP TRIGGER documents_access_dedup ON pgrag.documents;"
        ' DROP TRIGGER "Documents_hand_over" ON pgrag.documents;'
        " DROP INDEX pgrag.chunks_collection_hash_idx;"
        " DROP FUNCTION pgrag.documents_access_dedup_v1();"
        " DROP FUNCTION pgrag.documents_deleted_v1();"
        " DROP FUNCTION pgrag.documents_materialize_v1(bigint);"
        " DROP FUNCTION pgrag.documents_hand_over_v1(bigint, integer, text, bigint[]);"
    )
