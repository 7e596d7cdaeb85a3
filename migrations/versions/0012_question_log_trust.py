"""A question log that restricted roles cannot use to erase others' entries.

- pgrag.collection_visible(collection_id): whether the session may read some document of a
  collection (sql/functions/access.sql; created here too, since the policy below calls it and
  the function files are applied after the migrations).
- The question log's policy: a restricted session adds entries only to a collection it may read
  some document of (it could fill another tenant's log past its retention). Restricted roles
  lose INSERT on created_at, id and db_user (pgrag.grant_roles, re-run after every upgrade).
- queries (collection_id, id): a row limit keeps the newest entries by id, the sequence, which
  no session can set, not by created_at.
- pgrag.prune_queries gains `keep`, an entry it never removes (the one `ask` just logged):
  the old function is dropped here, and the function files, re-applied after the migrations,
  create the new one.
- collections.query_log_max_age at most 36500 days (100 years): a larger one made every prune
  fail with "timestamp out of range". A larger value already set becomes 36500 days.

The downgrade restores revision 0011's policy, constraint, index, prune_queries and the
grants on them.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLLECTION_VISIBLE = r"""
CREATE OR REPLACE FUNCTION pgrag.collection_visible(collection_id integer) RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_acls integer[] := pgrag.visible_acls();
BEGIN
    IF collection_visible.collection_id IS NULL THEN
        RETURN false;
    END IF;
    IF v_acls IS NULL THEN
        RETURN EXISTS (SELECT 1 FROM pgrag.collections c WHERE c.id = collection_visible.collection_id);
    END IF;
    RETURN EXISTS (SELECT 1 FROM pgrag.documents d
                    WHERE d.collection_id = collection_visible.collection_id
                      AND d.acl_id = ANY (v_acls));
END
$fn$;
"""

# Revision 0011's prune_queries (sql/functions/query_log.sql as 0011 shipped it).
OLD_PRUNE = r"""
CREATE OR REPLACE FUNCTION pgrag.prune_queries(collection text DEFAULT NULL,
                                               batch integer DEFAULT 1000)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_left bigint;
    v_done bigint := 0;
    v_n    bigint;
    r      record;
BEGIN
    IF batch IS NULL OR batch < 1 OR batch > 100000 THEN
        RAISE EXCEPTION 'prune_queries: batch must be 1 to 100000, not %', coalesce(batch::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_left := batch;
    FOR r IN
        SELECT c.id, c.query_log_max_age AS max_age, c.query_log_max_rows AS max_rows
          FROM pgrag.collections c
         WHERE (prune_queries.collection IS NULL OR c.name = prune_queries.collection)
           AND (c.query_log_max_age IS NOT NULL OR c.query_log_max_rows IS NOT NULL)
         ORDER BY c.id
    LOOP
        EXIT WHEN v_left <= 0;
        IF r.max_age IS NOT NULL THEN
            DELETE FROM pgrag.queries q
             WHERE q.id IN (SELECT o.id FROM pgrag.queries o
                             WHERE o.collection_id = r.id AND o.created_at < now() - r.max_age
                             ORDER BY o.created_at LIMIT v_left
                               FOR UPDATE SKIP LOCKED);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_done := v_done + v_n;
            v_left := v_left - v_n;
        END IF;
        IF r.max_rows IS NOT NULL AND v_left > 0 THEN
            DELETE FROM pgrag.queries q
             WHERE q.id IN (SELECT o.id FROM pgrag.queries o
                             WHERE o.collection_id = r.id
                             ORDER BY o.created_at DESC, o.id DESC
                             OFFSET r.max_rows LIMIT v_left
                               FOR UPDATE SKIP LOCKED);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_done := v_done + v_n;
            v_left := v_left - v_n;
        END IF;
    END LOOP;
    RETURN v_done;
END
$fn$;
"""


def _sql(statements: str) -> None:
    # Straight to psycopg without parameters: no colon or percent parsing.
    op.get_bind().connection.driver_connection.execute(statements)


def upgrade() -> None:
    _sql(COLLECTION_VISIBLE)
    _sql(
        """
        DROP FUNCTION IF EXISTS pgrag.prune_queries(text, integer);
        DROP POLICY own ON pgrag.queries;
        CREATE POLICY own ON pgrag.queries
            USING ((SELECT pgrag.unrestricted())
                   OR (db_user = current_user AND principals <@ (SELECT pgrag.session_principals())))
            WITH CHECK ((SELECT pgrag.unrestricted())
                        OR (db_user = current_user AND principals <@ (SELECT pgrag.session_principals())
                            AND pgrag.collection_visible(collection_id)));
        CREATE INDEX queries_collection_id_idx ON pgrag.queries (collection_id, id);
        UPDATE pgrag.collections SET query_log_max_age = interval '36500 days'
         WHERE query_log_max_age > interval '36500 days';
        ALTER TABLE pgrag.collections DROP CONSTRAINT collections_query_log_max_age_check,
            ADD CONSTRAINT collections_query_log_max_age_check
                CHECK (query_log_max_age > interval '0' AND query_log_max_age <= interval '36500 days');
        """
    )


def downgrade() -> None:
    _sql(
        """
        ALTER TABLE pgrag.collections DROP CONSTRAINT collections_query_log_max_age_check,
            ADD CONSTRAINT collections_query_log_max_age_check
                CHECK (query_log_max_age > interval '0');
        DROP INDEX pgrag.queries_collection_id_idx;
        DROP POLICY own ON pgrag.queries;
        CREATE POLICY own ON pgrag.queries
            USING ((SELECT pgrag.unrestricted())
                   OR (db_user = current_user AND principals <@ (SELECT pgrag.session_principals())))
            WITH CHECK ((SELECT pgrag.unrestricted())
                        OR (db_user = current_user AND principals <@ (SELECT pgrag.session_principals())));
        DROP FUNCTION pgrag.collection_visible(integer);
        DROP FUNCTION IF EXISTS pgrag.prune_queries(text, integer, bigint);
        """
    )
    _sql(OLD_PRUNE)
    # What revision 0011's grant_roles granted of these (a table-wide INSERT on the log, and
    # its prune_queries): revoking INSERT on the table revokes the column privileges too.
    _sql(
        """
        DO $do$
        DECLARE
            v_role text;
        BEGIN
            REVOKE EXECUTE ON FUNCTION pgrag.prune_queries(text, integer) FROM PUBLIC;
            FOREACH v_role IN ARRAY ARRAY['pgrag_reader', 'pgrag_app', 'pgrag_writer'] LOOP
                CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role);
                EXECUTE format('GRANT EXECUTE ON FUNCTION pgrag.prune_queries(text, integer)'
                               ' TO %I', v_role);
                CONTINUE WHEN v_role = 'pgrag_writer';
                EXECUTE format('REVOKE INSERT ON pgrag.queries FROM %I', v_role);
                EXECUTE format('GRANT INSERT ON pgrag.queries TO %I', v_role);
            END LOOP;
        END
        $do$;
        """
    )
