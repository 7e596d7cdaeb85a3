"""Answer checks in the question log, and a calibrated abstention threshold per model.

- queries.checks: what ``ask`` found when it checked an answer: the retrieval confidence and
  the threshold in effect, invalid citations, each sentence's citations and support score,
  the faithfulness estimate, and the tokenizer that counted the prompt budget.
- embedding_models.min_confidence: the retrieval confidence below which ``ask`` abstains for
  collections whose active model this is; written by ``pgrag eval answers --save`` (NULL: no
  threshold).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE pgrag.queries ADD COLUMN checks jsonb;
        ALTER TABLE pgrag.embedding_models ADD COLUMN min_confidence double precision
            -- finite (NaN sorts above 'Infinity' in PostgreSQL, so it fails this too)
            CHECK (min_confidence > '-Infinity' AND min_confidence < 'Infinity');
        """
    )


def downgrade() -> None:
    op.execute(
        """
        ALTER TABLE pgrag.embedding_models DROP COLUMN min_confidence;
        ALTER TABLE pgrag.queries DROP COLUMN checks;
        """
    )
