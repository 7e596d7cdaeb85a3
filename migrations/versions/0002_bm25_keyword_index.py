"""BM25 keyword index (postings and exact statistics, kept by a trigger), search_v2, and
ensure_model_index_v2 (HNSW graphs built with ef_construction 128).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Released migrations are frozen: never edit one after it has shipped; add a new one.
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The function files this migration ran, kept unchanged in migrations/history/.
HISTORY = Path(__file__).resolve().parents[1] / "history"


def sql_file(name: str) -> str:
    return (HISTORY / name.removeprefix("functions/")).read_text(encoding="utf-8")


SCHEMA = """
-- One row per (collection, lexeme, chunk). No foreign key to chunks: the trigger removes a
-- chunk's postings when the chunk goes, and a per-row foreign key check would double the cost
-- of loading millions of postings. Lexemes compare bytewise (COLLATE "C"): they are matched for
-- equality only, and "C" keeps the indexes small and fast whatever the database's collation.
CREATE TABLE pgrag.keyword_postings (
    collection_id integer NOT NULL,
    lexeme        text COLLATE "C" NOT NULL,
    chunk_id      bigint NOT NULL,
    tf            integer NOT NULL,          -- occurrences of the lexeme in the chunk
    dl            integer NOT NULL,          -- the chunk's length in indexed words
    impact        real NOT NULL,             -- BM25 tf part at the reference average length
    -- Probed for one chunk's impact when candidates are rescored: index-only.
    PRIMARY KEY (collection_id, lexeme, chunk_id) INCLUDE (impact)
);
-- A term's postings, best first: what every keyword search reads (index-only).
CREATE INDEX keyword_postings_impact_idx
    ON pgrag.keyword_postings (collection_id, lexeme, impact DESC) INCLUDE (chunk_id);

-- Signed deltas, summed at query time and folded by keyword_maintain_v1.
CREATE TABLE pgrag.keyword_df (
    collection_id integer NOT NULL REFERENCES pgrag.collections (id) ON DELETE CASCADE,
    lexeme        text COLLATE "C" NOT NULL,
    df            bigint NOT NULL
);
CREATE INDEX keyword_df_lexeme_idx ON pgrag.keyword_df (collection_id, lexeme) INCLUDE (df);

CREATE TABLE pgrag.keyword_totals (
    collection_id integer NOT NULL REFERENCES pgrag.collections (id) ON DELETE CASCADE,
    chunks        bigint NOT NULL,
    length        bigint NOT NULL
);
CREATE INDEX keyword_totals_collection_idx ON pgrag.keyword_totals (collection_id)
    INCLUDE (chunks, length);

CREATE TABLE pgrag.keyword_settings (
    collection_id integer PRIMARY KEY REFERENCES pgrag.collections (id) ON DELETE CASCADE,
    impact_avgdl  double precision NOT NULL CHECK (impact_avgdl > 0),
    refreshed_at  timestamptz
);
"""

TRIGGERS = """
CREATE TRIGGER chunks_keyword_insert AFTER INSERT ON pgrag.chunks
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_sync_v1();
CREATE TRIGGER chunks_keyword_update AFTER UPDATE ON pgrag.chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_sync_v1();
CREATE TRIGGER chunks_keyword_delete AFTER DELETE ON pgrag.chunks
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_sync_v1();
CREATE TRIGGER chunks_keyword_truncate AFTER TRUNCATE ON pgrag.chunks
    FOR EACH STATEMENT EXECUTE FUNCTION pgrag.keyword_truncate_v1();
"""

# The chunks already stored, indexed in one pass with the trigger's own arithmetic.
BACKFILL = """
-- No chunk may be written between the backfill's snapshot and the triggers' creation.
LOCK TABLE pgrag.chunks IN SHARE MODE;

INSERT INTO pgrag.keyword_settings (collection_id, impact_avgdl)
SELECT c.collection_id, greatest(avg(l.n), 1)
  FROM pgrag.chunks c,
       LATERAL (SELECT sum(coalesce(array_length(u.positions, 1), 1)) AS n FROM unnest(c.tsv) u) l
 GROUP BY c.collection_id;

WITH terms AS MATERIALIZED (
         SELECT c.collection_id, c.id AS chunk_id, u.lexeme,
                coalesce(array_length(u.positions, 1), 1) AS tf,
                sum(coalesce(array_length(u.positions, 1), 1)) OVER (PARTITION BY c.id) AS dl
           FROM pgrag.chunks c, unnest(c.tsv) u),
     postings AS (
         INSERT INTO pgrag.keyword_postings (collection_id, lexeme, chunk_id, tf, dl, impact)
         SELECT t.collection_id, t.lexeme, t.chunk_id, t.tf, t.dl,
                t.tf / (t.tf + 1.5 * (0.25 + 0.75 * t.dl / s.impact_avgdl))
           FROM terms t JOIN pgrag.keyword_settings s ON s.collection_id = t.collection_id)
INSERT INTO pgrag.keyword_df (collection_id, lexeme, df)
SELECT t.collection_id, t.lexeme, count(*) FROM terms t GROUP BY t.collection_id, t.lexeme;

INSERT INTO pgrag.keyword_totals (collection_id, chunks, length)
SELECT c.collection_id, count(*), coalesce(sum(l.n), 0)
  FROM pgrag.chunks c,
       LATERAL (SELECT sum(coalesce(array_length(u.positions, 1), 1)) AS n FROM unnest(c.tsv) u) l
 GROUP BY c.collection_id;
"""


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
    _sql("SELECT '[1]'::vector")  # load pgvector so search_v2's hnsw.* SET clauses validate
    _sql(SCHEMA)
    _sql(sql_file("functions/keyword_sync_v1.sql"))
    _sql(sql_file("functions/keyword_maintain_v1.sql"))
    _sql(BACKFILL)
    _sql(TRIGGERS)
    _sql(sql_file("functions/search_v2.sql"))
    _sql(sql_file("functions/ensure_model_index_v2.sql"))


def downgrade() -> None:
    _vector_on_search_path()
    _sql(
        """
        DROP FUNCTION pgrag.search_v2(text, text, vector, integer, jsonb, integer, integer,
                                      integer, double precision, double precision,
                                      double precision, integer);
        DROP TRIGGER chunks_keyword_insert ON pgrag.chunks;
        DROP TRIGGER chunks_keyword_update ON pgrag.chunks;
        DROP TRIGGER chunks_keyword_delete ON pgrag.chunks;
        DROP TRIGGER chunks_keyword_truncate ON pgrag.chunks;
        DROP FUNCTION pgrag.ensure_model_index_v2(integer);
        DROP FUNCTION pgrag.keyword_maintain_v1(text, double precision);
        DROP FUNCTION pgrag.keyword_sync_v1();
        DROP FUNCTION pgrag.keyword_truncate_v1();
        DROP TABLE pgrag.keyword_settings, pgrag.keyword_totals, pgrag.keyword_df,
                   pgrag.keyword_postings;
        """
    )
