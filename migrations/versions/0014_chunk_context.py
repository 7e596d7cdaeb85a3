"""Contextual retrieval (issue 18): a context line beside each chunk.

- chunks.context: one short line a language model wrote to situate the chunk within its
  document (``pgrag ingest --contextual``, pgrag/ingest/contextual.py). The chunk is embedded
  and keyword-indexed as its context and its text (the keyword trigger reads
  pgrag.chunk_words, sql/functions/keyword.sql); search results and prompts show the chunk's
  own text.
- chunks.context_for: the content hash of the document version the context was asked for. A
  chunk whose context_for is its document's content hash needs no new context (NULL context
  then: the model's reply was of no use); NULL: never asked (a plain ingest, or the model
  failed), so a later ``--contextual`` ingest of the unchanged document asks for it.

Columns of pgrag.chunks, not a side table: a context is read and written with its chunk's row,
so the chunk's row-level security policy and grants cover it as they cover the chunk's text,
deleting the chunk takes it along, the keyword trigger sees it in the same transition tables,
and copies of a document (dedup) carry it. Two nullable columns without a default change only
the catalog: the table is not rewritten.

The downgrade first clears the contexts (the keyword index forgets their words through this
release's trigger), then drops the columns and pgrag.chunk_words; a downgrade through pgrag
keeps the contexts aside for the next upgrade (pgrag/db/roundtrip.py).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def upgrade() -> None:
    _sql("ALTER TABLE pgrag.chunks ADD COLUMN context text, ADD COLUMN context_for text;")


def downgrade() -> None:
    _sql(
        """
        UPDATE pgrag.chunks SET context = NULL WHERE context IS NOT NULL;
        ALTER TABLE pgrag.chunks DROP COLUMN context_for, DROP COLUMN context;
        -- This revision's release added it (sql/functions/keyword.sql); 0013's did not have it.
        -- (0013's release puts its own keyword_sync back when its `pgrag db upgrade` runs.)
        DROP FUNCTION IF EXISTS pgrag.chunk_words(tsvector, text, text);
        """
    )
