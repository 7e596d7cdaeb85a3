"""One search engine, one grant_roles(), internal functions without version suffixes.

From this revision on, every function body lives once, in sql/functions/*.sql, and is
re-applied by every upgrade (pgrag/db/schema.py, called from migrations/env.py); migrations
hold DDL only. This migration prepares a database of revision 0009 for that:

- drops search_v1 and search_v2 (earlier rankings), search_with_model_v1 (the engine replaces
  it), ensure_model_index_v1/v2 and grant_roles_v1..v4 (one ensure_model_index and one
  grant_roles now);
- renames the internal functions to their names without a suffix (principals_v1 becomes
  session_principals, acl_id_v1 acl_for, ensure_model_index_v3 ensure_model_index, the others
  drop their _vN). A rename keeps the function itself, so the triggers, CHECK constraints and
  the generated tsv column that use one keep using it;
- re-creates the row-level security policies, so that their text names the new functions.
Public entry points keep their names: search_v5 (search_v3 and search_v4 become deprecated
wrappers over the engine), documents_v1, collections_v1, section_chunks_v1, sync_row_v1,
chunk_text_v1, keyword_maintain_v2, activate_model_v1, retire_model_v1.

The downgrade renames the functions back and restores revision 0009's bodies from
migrations/history/ (the function files the earlier migrations ran, kept byte for byte).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

HISTORY = Path(__file__).resolve().parents[1] / "history"

DROPPED = (
    "search_v1",
    "search_v2",
    "search_with_model_v1",
    "ensure_model_index_v1",
    "ensure_model_index_v2",
    "grant_roles_v4",
    "grant_roles_v3",
    "grant_roles_v2",
    "grant_roles_v1",
)

RENAMED = {
    "principals_valid_v1": "principals_valid",
    "principals_canonical_v1": "principals_canonical",
    "acl_id_v1": "acl_for",
    "unrestricted_role_v1": "unrestricted_role",
    "principals_v1": "session_principals",
    "visible_acls_v1": "visible_acls",
    "unrestricted_v1": "unrestricted",
    "documents_acl_v1": "documents_acl",
    "documents_acl_changed_v1": "documents_acl_changed",
    "chunks_acl_v1": "chunks_acl",
    "chunks_acl_changed_v1": "chunks_acl_changed",
    "chunk_embeddings_acl_v1": "chunk_embeddings_acl",
    "metadata_time_v1": "metadata_time",
    "filter_compare_v1": "filter_compare",
    "filter_check_v1": "filter_check",
    "filter_match_v1": "filter_match",
    "keyword_sync_v2": "keyword_sync",
    "keyword_truncate_v1": "keyword_truncate",
    "chunk_tsvector_v1": "chunk_tsvector",
    "register_model_v1": "register_model",
    "model_index_ddl_v1": "model_index_ddl",
    "ensure_model_index_v3": "ensure_model_index",
    "model_missing_v1": "model_missing",
    "retire_model_vectors_v1": "retire_model_vectors",
    "collection_model_changed_v1": "collection_model_changed",
    "documents_body_v1": "documents_body",
    "embedding_enqueue_v1": "embedding_enqueue",
    "documents_sync_v1": "documents_sync",
    "documents_hand_over_v1": "documents_hand_over",
    "documents_materialize_v1": "documents_materialize",
    "documents_deleted_v1": "documents_deleted",
    "documents_access_dedup_v1": "documents_access_dedup",
    "documents_renamed_v1": "documents_renamed",
    "status_v1": "status",
    "query_cache_scope_v1": "query_cache_scope",
    "query_cache_get_v1": "query_cache_get",
    "query_cache_put_v1": "query_cache_put",
}

# Functions this revision adds (their bodies come from sql/functions/ after the upgrade).
ADDED = ("search_engine", "grant_roles", "release")

ACL_TABLES = (
    "documents",
    "chunks",
    "chunk_embeddings",
    "keyword_postings",
    "keyword_df",
    "keyword_totals",
)

# The policies of migration 0003, in the names of a revision (their text is frozen here).
POLICIES = """
DROP POLICY visible ON pgrag.{t};
CREATE POLICY visible ON pgrag.{t}
    USING ((SELECT pgrag.{unrestricted}()) OR acl_id = ANY ((SELECT pgrag.{visible}())::integer[]))
    WITH CHECK ((SELECT pgrag.{unrestricted}()) OR acl_id = ANY ((SELECT pgrag.{visible}())::integer[]));
"""
OTHER_POLICIES = """
DROP POLICY visible ON pgrag.acls;
CREATE POLICY visible ON pgrag.acls
    USING ((SELECT pgrag.{unrestricted}()) OR principals && (SELECT pgrag.{principals}()))
    WITH CHECK ((SELECT pgrag.{unrestricted}()) OR principals && (SELECT pgrag.{principals}()));
DROP POLICY own ON pgrag.queries;
CREATE POLICY own ON pgrag.queries
    USING ((SELECT pgrag.{unrestricted}())
           OR (db_user = current_user AND principals <@ (SELECT pgrag.{principals}())))
    WITH CHECK ((SELECT pgrag.{unrestricted}())
                OR (db_user = current_user AND principals <@ (SELECT pgrag.{principals}())));
"""

# The function files revision 0009's functions came from, in the order the migrations ran them
# (the two keyword files of 0002 were superseded in 0003, except keyword_truncate_v1).
HISTORY_FILES = (
    "chunk_tsvector_v1.sql",
    "ensure_model_index_v1.sql",
    "register_model_v1.sql",
    "search_v1.sql",
    "keyword_sync_v1.sql",
    "search_v2.sql",
    "ensure_model_index_v2.sql",
    "access_v1.sql",
    "filter_v1.sql",
    "keyword_sync_v2.sql",
    "keyword_maintain_v2.sql",
    "search_v3.sql",
    "search_v4.sql",
    "dedup_v1.sql",
    "sections_v1.sql",
    "dedup_rename_v1.sql",
    "models_v1.sql",
    "sync_v1.sql",
    "search_with_model_v1.sql",
    "search_v5.sql",
)
SEARCH_WITH_MODEL_V1 = (
    "pgrag.search_with_model_v1(text, text, vector, integer, jsonb, integer, integer, integer,"
    " double precision, double precision, double precision, integer, integer)"
)


def _sql(statements: object) -> None:
    # Straight to psycopg without parameters, as in 0001: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def _vector_on_search_path() -> None:
    _sql(
        "SELECT set_config('search_path', format('%I, ', n.nspname)"
        " || current_setting('search_path'), true)"
        " FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        " WHERE e.extname = 'vector'"
    )
    _sql("SELECT '[1]'::vector")  # load pgvector, so hnsw.* SET clauses validate


def _functions(names: list[str]) -> dict[str, str]:
    """Each named function of schema pgrag with its signature, from the catalog (each has one;
    pgvector's schema is on the search_path, so its types are written out bare)."""
    rows = (
        op.get_bind()
        .connection.driver_connection.execute(
            "SELECT p.proname, p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.pronamespace = 'pgrag'::regnamespace AND p.proname = ANY (%(n)s)",
            {"n": names},
        )
        .fetchall()
    )
    return {name: signature for name, signature in rows}


def _drop(names: tuple[str, ...]) -> None:
    from psycopg import sql

    for signature in _functions(list(names)).values():
        _sql(sql.SQL("DROP FUNCTION {}").format(sql.SQL(signature)))


def _rename(pairs: dict[str, str]) -> None:
    from psycopg import sql

    found = _functions(list(pairs))
    missing = set(pairs) - set(found)
    if missing:
        from pgrag.errors import SchemaError

        raise SchemaError(
            f"this database is not what revision 0009 installed: functions {sorted(missing)}"
            " are missing, so 0010 cannot rename them; restore them from a backup (or from"
            " migrations/history/ of pgrag 0.1) and run `pgrag db upgrade` again"
        )
    for old, signature in found.items():
        _sql(
            sql.SQL("ALTER FUNCTION {} RENAME TO {}").format(
                sql.SQL(signature), sql.Identifier(pairs[old])
            )
        )


def _policies(unrestricted: str, visible: str, principals: str) -> None:
    names = {"unrestricted": unrestricted, "visible": visible, "principals": principals}
    _sql(
        "".join(POLICIES.format(t=t, **names) for t in ACL_TABLES) + OTHER_POLICIES.format(**names)
    )


def upgrade() -> None:
    _vector_on_search_path()
    _drop(DROPPED)
    _rename(RENAMED)
    _policies("unrestricted", "visible_acls", "session_principals")


def downgrade() -> None:
    _vector_on_search_path()
    _drop(ADDED)
    _rename({new: old for old, new in RENAMED.items()})
    for name in HISTORY_FILES:
        text = (HISTORY / name).read_text(encoding="utf-8")
        _sql(text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    # keyword_sync_v1.sql also defines keyword_sync_v1, which 0003 dropped.
    _sql("DROP FUNCTION pgrag.keyword_sync_v1()")
    _sql(f"REVOKE EXECUTE ON FUNCTION {SEARCH_WITH_MODEL_V1} FROM PUBLIC")
    _policies("unrestricted_v1", "visible_acls_v1", "principals_v1")
    _sql("SELECT pgrag.grant_roles_v4()")
