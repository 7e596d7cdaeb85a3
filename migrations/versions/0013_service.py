"""What `pgrag serve` keeps in PostgreSQL (issue 17).

- api_keys: the service's API keys, each bound to principals and scopes. Only the sha256 of
  the whole key is stored; ``id`` is the 8-character key id that listings show and the key
  itself carries (``pgrag_<id>_<secret>``). No restricted role gets any privilege on it: the
  service verifies a key through pgrag.api_key_v1 (sql/functions/keys.sql, SECURITY DEFINER,
  granted to pgrag_app), and `pgrag keys` manages them as the owner of schema pgrag.

The downgrade drops the table and the function.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def upgrade() -> None:
    _sql(
        """
        CREATE TABLE pgrag.api_keys (
            id           text PRIMARY KEY
                         CONSTRAINT api_keys_id_check CHECK (id ~ '^[a-z0-9]{8}$'),
            name         text CONSTRAINT api_keys_name_check CHECK (char_length(name) <= 200),
            key_hash     bytea NOT NULL UNIQUE
                         CONSTRAINT api_keys_key_hash_check CHECK (octet_length(key_hash) = 32),
            principals   text[] NOT NULL
                         CONSTRAINT api_keys_principals_check
                         CHECK (pgrag.principals_valid(principals) AND cardinality(principals) > 0),
            scopes       text[] NOT NULL DEFAULT '{read}'
                         CONSTRAINT api_keys_scopes_check
                         CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['read', 'write']),
            created_at   timestamptz NOT NULL DEFAULT now(),
            expires_at   timestamptz,
            revoked_at   timestamptz,
            last_used_at timestamptz
        );
        """
    )


def downgrade() -> None:
    _sql(
        """
        DROP FUNCTION IF EXISTS pgrag.api_key_v1(bytea);
        DROP TABLE pgrag.api_keys;
        -- 0013's release added it in sql/functions/sections.sql (no DDL of its own): revision
        -- 0012 did not have it.
        DROP FUNCTION IF EXISTS pgrag.document_chunks_v1(text, text, bigint, integer);
        """
    )
