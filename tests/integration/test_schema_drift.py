"""`pgrag db check` names every object that differs from this release; `pgrag db repair`
restores them (pgrag.db.drift).

The tampering is what an operator's hand (or an attacker with the owner's password) does:
a function replaced, row-level security switched off, a policy dropped or added, an index
dropped, a trigger disabled, a privilege granted, an object added to schema pgrag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.db import drift, repair

TAMPERING = {
    # what is done by hand -> (kind, name, problem) that check must report
    "CREATE OR REPLACE FUNCTION pgrag.visible_acls() RETURNS integer[] LANGUAGE sql STABLE"
    " SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT NULL::integer[] $$": (
        "function",
        "pgrag.visible_acls()",
        "differs from this release",
    ),
    "ALTER TABLE pgrag.chunks DISABLE ROW LEVEL SECURITY": (
        "row-level security",
        "pgrag.chunks",
        "should be enabled",
    ),
    "DROP POLICY own ON pgrag.queries": ("policy", "pgrag.queries.own", "missing"),
    "CREATE POLICY everyone ON pgrag.documents USING (true)": (
        "policy",
        "pgrag.documents.everyone",
        "not part of pgrag (unexpected)",
    ),
    "DROP INDEX pgrag.keyword_postings_impact_idx": (
        "index",
        "pgrag.keyword_postings_impact_idx",
        "missing",
    ),
    "ALTER TABLE pgrag.documents DISABLE TRIGGER documents_acl": (
        "trigger",
        "pgrag.documents.documents_acl",
        "disabled or in another firing mode",
    ),
    "GRANT SELECT ON pgrag.chunks TO pgrag_reader": (
        "grant",
        "SELECT on relation pgrag.chunks",
        "pgrag_reader has it (unexpected)",
    ),
    "CREATE FUNCTION pgrag.everything() RETURNS SETOF text LANGUAGE sql SECURITY DEFINER"
    " AS $$ SELECT content FROM pgrag.chunks $$": (
        "function",
        "pgrag.everything()",
        "not part of pgrag (unexpected)",
    ),
    "ALTER TABLE pgrag.collections DROP CONSTRAINT collections_name_check": (
        "constraint",
        "pgrag.collections.collections_name_check",
        "missing",
    ),
    "CREATE VIEW pgrag.all_chunks AS SELECT * FROM pgrag.chunks": (
        "relation",
        "pgrag.all_chunks",
        "not part of pgrag (unexpected)",
    ),
    "REVOKE EXECUTE ON FUNCTION pgrag.documents_v1(text) FROM pgrag_app": (
        "grant",
        "EXECUTE on function pgrag.documents_v1(text)",
        "pgrag_app lacks it",
    ),
}


@pytest.fixture
def tenants(db: pgrag.Database, corpus: Path, admin_dsn: str) -> dict[str, Any]:
    """Public documents and a tenant's, and a login role that reads as pgrag_reader."""
    pgrag.ingest(db, [corpus / "office.txt"], collection="t")
    pgrag.ingest(db, [corpus / "policies"], collection="t", allow=["tenant:acme"])
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'drift_reader'").fetchone():
            conn.execute("CREATE ROLE drift_reader LOGIN IN ROLE pgrag_reader")
    return {"reader": make_conninfo(db.dsn, user="drift_reader"), "dsn": db.dsn}


def _visible_documents(reader_dsn: str) -> int:
    with psycopg.connect(reader_dsn) as conn:
        return len(conn.execute("SELECT * FROM pgrag.documents_v1('t')").fetchall())


def _found(dsn: str) -> set[tuple[str, str, str]]:
    return {(d.kind, d.name, d.problem) for d in drift.check_database(dsn)}


def test_a_fresh_database_has_no_drift(dsn: str) -> None:
    assert drift.check_database(dsn) == []


def test_check_names_each_tampered_object_and_repair_restores_them(
    tenants: dict[str, Any],
) -> None:
    dsn, reader = tenants["dsn"], tenants["reader"]
    assert _visible_documents(reader) == 1  # office.txt: the tenant's two are hidden
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in TAMPERING:
            conn.execute(statement)  # type: ignore[arg-type]
    assert _visible_documents(reader) == 3, "the tampered function should leak (and does)"
    found = _found(dsn)
    for statement, expected in TAMPERING.items():
        assert expected in found, (statement, sorted(found))

    result = CliRunner().invoke(cli, ["--dsn", dsn, "db", "check"])
    assert result.exit_code == 1
    assert "pgrag.visible_acls(): differs from this release" in result.stdout
    assert result.stderr.startswith("error: ") and "pgrag db repair" in result.stderr
    assert len(result.stdout.splitlines()) == len(found)

    repair = CliRunner().invoke(cli, ["--dsn", dsn, "db", "repair"])
    assert repair.exit_code == 0, repair.output
    assert "dropped function pgrag.everything()" in repair.stdout
    assert "enabled row-level security on pgrag.chunks" in repair.stdout
    assert "repaired: nothing differs from this release" in repair.stdout
    assert drift.check_database(dsn) == []
    assert _visible_documents(reader) == 1
    with psycopg.connect(reader) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT count(*) FROM pgrag.chunks")
    assert CliRunner().invoke(cli, ["--dsn", dsn, "db", "check"]).exit_code == 0


def test_a_dropped_column_is_named_and_left_for_a_backup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgrag.queries DROP COLUMN checks")
    found = drift.check_database(dsn)
    assert [(d.kind, d.name, d.problem, d.repairable) for d in found] == [
        ("column", "pgrag.queries.checks", "missing", False)
    ]
    done, left = repair.repair_database(dsn)
    assert [d.name for d in left] == ["pgrag.queries.checks"]
    result = CliRunner().invoke(cli, ["--dsn", dsn, "db", "repair"])
    assert result.exit_code == 1 and "could not be repaired" in result.stderr


def test_a_missing_model_index_and_unqueued_chunks_are_found_and_fixed(
    db: pgrag.Database, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus], collection="docs")
    with db.conn.transaction():
        (model_id,) = db.conn.execute(
            "SELECT model_id FROM pgrag.collections WHERE name = 'docs'"
        ).fetchone()
        db.conn.execute(f"DROP INDEX pgrag.chunk_embeddings_hnsw_{model_id}")  # noqa: S608
        # Vectors lost by hand (or by a round trip of an older pgrag): nothing would embed them.
        db.conn.execute(
            "DELETE FROM pgrag.chunk_embeddings WHERE chunk_id IN"
            " (SELECT id FROM pgrag.chunks ORDER BY id LIMIT 2)"
        )
    kinds = {(d.kind, d.problem.split(" ", 1)[-1]) for d in drift.check_database(db.dsn)}
    assert ("index", "invalid") in {(k, p.rsplit(" ", 1)[-1]) for k, p in kinds}
    assert any(k == "chunks of" for k, _ in kinds)
    done, left = repair.repair_database(db.dsn)
    assert left == []
    assert any(line.startswith(f"built pgrag.chunk_embeddings_hnsw_{model_id}") for line in done)
    assert any("queued 2 (chunk, model) pairs" in line for line in done)
    assert db.conn.execute("SELECT count(*) FROM pgrag.embedding_queue").fetchone() == (2,)
    db.conn.rollback()


def test_check_on_another_revision_says_so_and_repair_refuses(dsn: str) -> None:
    from pgrag.db import schema

    schema.downgrade(dsn, "0009")
    found = drift.check_database(dsn)
    assert len(found) == 1 and "run `pgrag db upgrade`" in found[0].problem
    with pytest.raises(pgrag.SchemaError, match="pgrag db upgrade"):
        repair.repair_database(dsn)


def test_a_table_pgrag_did_not_create_is_named_kept_and_closed_to_its_roles(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pgrag.notes (t text)")
        conn.execute("INSERT INTO pgrag.notes VALUES ('mine')")
        conn.execute("GRANT SELECT ON pgrag.notes TO pgrag_reader")
    found = {(d.kind, d.name): d for d in drift.check_database(dsn)}
    table = found[("relation", "pgrag.notes")]
    assert not table.repairable and "move it out of schema pgrag" in table.describe()
    assert ("grant", "SELECT on relation pgrag.notes") in found
    done, left = repair.repair_database(dsn)
    assert "revoked SELECT on pgrag.notes from pgrag_reader" in done
    assert [d.name for d in left] == ["pgrag.notes"]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT t FROM pgrag.notes").fetchall() == [("mine",)]


def test_repair_never_puts_this_release_over_a_newer_ones_functions(dsn: str) -> None:
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE OR REPLACE FUNCTION pgrag.release() RETURNS jsonb LANGUAGE sql"
                " IMMUTABLE AS {}"
            ).format(sql.Literal("""SELECT '{"digest": "0", "version": "99.0.0"}'::jsonb"""))
        )
    (functions,) = [d for d in drift.check_database(dsn) if d.kind == "functions"]
    assert not functions.repairable and "upgrade pgrag itself" in functions.problem
    with pytest.raises(pgrag.SchemaError, match="upgrade pgrag itself"):
        repair.repair_database(dsn)
    result = CliRunner().invoke(cli, ["--dsn", dsn, "db", "repair"])
    assert result.exit_code == 1 and "upgrade pgrag itself" in result.stderr


def test_check_on_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    dsn = f"postgresql://nobody@/nowhere?host={tmp_path}"
    result = CliRunner().invoke(cli, ["--dsn", dsn, "db", "check"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot connect to PostgreSQL")
    assert len(result.stderr.strip().splitlines()) == 1


HIDDEN = {
    # what a superuser (or the owner) can do that no function body shows -> a drift check reports
    "CREATE RULE keep AS ON DELETE TO pgrag.documents DO INSTEAD NOTHING": (
        "rule",
        "pgrag.documents.keep",
        "not part of pgrag (unexpected)",
    ),
    "ALTER TABLE pgrag.chunk_embeddings DISABLE TRIGGER ALL": (
        "foreign-key triggers of",
        "pgrag.chunk_embeddings",
        "4 disabled: rows can break their foreign keys",
    ),
    "CREATE TABLE public.shadow () INHERITS (pgrag.documents)": (
        "table",
        "shadow",
        "inherits from pgrag.documents: its rows show in every read of it",
    ),
    "ALTER DEFAULT PRIVILEGES IN SCHEMA pgrag GRANT SELECT ON TABLES TO pgrag_reader": (
        "default privileges",
        "of postgres in schema pgrag",
        "grant SELECT on new tables to pgrag_reader",
    ),
    "ALTER TABLE pgrag.documents ALTER COLUMN principals DROP DEFAULT": (
        "column",
        "pgrag.documents.principals",
        "default differs from this release",
    ),
    "ALTER TABLE pgrag.embedding_queue SET UNLOGGED": (
        "table",
        "pgrag.embedding_queue",
        "is UNLOGGED: a crash empties it",
    ),
    "CREATE OPERATOR pgrag.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = texteq)": (
        "operator",
        "pgrag.===(text,text)",
        "not part of pgrag (unexpected)",
    ),
    "GRANT pgrag_writer TO pgrag_reader": (
        "role",
        "pgrag_reader",
        "is a member of pgrag_writer, so it reads everything",
    ),
    "REVOKE EXECUTE ON FUNCTION pgrag.release() FROM PUBLIC": (
        "grant",
        "EXECUTE on function pgrag.release()",
        "PUBLIC lacks it",
    ),
    "CREATE ROLE drift_owner; ALTER TABLE pgrag.acls OWNER TO drift_owner": (
        "owner of",
        "table pgrag.acls",
        "is drift_owner, not postgres (who owns pgrag's other objects)",
    ),
}


def test_what_no_function_body_shows_is_found_and_repaired(dsn: str, admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS drift_owner")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in HIDDEN:
            conn.execute(statement)  # type: ignore[arg-type]
    found = _found(dsn)
    for statement, expected in HIDDEN.items():
        assert expected in found, (statement, sorted(found))
    done, left = repair.repair_database(dsn)
    assert left == [], [d.describe() for d in left]
    assert drift.check_database(dsn) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_inherits").fetchone() == (0,)
        assert conn.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = 'pgrag.embedding_queue'::regclass"
        ).fetchone() == ("p",)
        assert not conn.execute(
            "SELECT pg_has_role('pgrag_reader', 'pgrag_writer', 'MEMBER')"
        ).fetchone()[0]
        conn.execute("DROP TABLE public.shadow")
        conn.execute("DROP ROLE drift_owner")


def test_a_schema_given_away_is_reported_as_the_schemas_owner(dsn: str, admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS drift_thief")
        conn.execute("CREATE ROLE drift_thief")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SCHEMA pgrag OWNER TO drift_thief")
    found = {(d.kind, d.name, d.problem) for d in drift.check_database(dsn)}
    assert (
        "owner of",
        "schema pgrag",
        "is drift_thief, not postgres (who owns pgrag's other objects)",
    ) in found
    done, left = repair.repair_database(dsn)
    assert left == [] and "gave schema pgrag back to postgres (from drift_thief)" in done, done
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE drift_thief")


def test_a_model_index_built_otherwise_and_a_stray_one_are_found_and_fixed(
    db: pgrag.Database, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus / "office.txt"], collection="docs")
    (model_id,) = db.conn.execute(
        "SELECT model_id FROM pgrag.collections WHERE name = 'docs'"
    ).fetchone()
    db.conn.rollback()
    index = f"chunk_embeddings_hnsw_{model_id}"
    (definition,) = db.conn.execute(
        "SELECT pg_get_indexdef(%s::regclass)", (f"pgrag.{index}",)
    ).fetchone()
    db.conn.rollback()
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(f"DROP INDEX pgrag.{index}")  # noqa: S608
        conn.execute(definition.replace("vector_cosine_ops", "vector_l2_ops"))  # type: ignore[arg-type]
        conn.execute(
            "CREATE INDEX chunk_embeddings_hnsw_9999 ON pgrag.chunk_embeddings USING hnsw"
            " ((embedding::vector(3)) vector_cosine_ops) WHERE model_id = 9999"
        )
    found = {(d.kind, d.name.split(" ")[0], d.problem) for d in drift.check_database(db.dsn)}
    wrong = [p for k, n, p in found if n == f"pgrag.{index}"]
    assert wrong and "vector_l2_ops" in wrong[0] and "searches do not use it" in wrong[0]
    assert (
        "index",
        "pgrag.chunk_embeddings_hnsw_9999",
        "belongs to no model a collection uses",
    ) in found
    done, left = repair.repair_database(db.dsn)
    assert left == [], [d.describe() for d in left]
    (rebuilt,) = db.conn.execute(
        "SELECT pg_get_indexdef(%s::regclass)", (f"pgrag.{index}",)
    ).fetchone()
    assert "vector_cosine_ops" in rebuilt
    assert db.conn.execute("SELECT to_regclass('pgrag.chunk_embeddings_hnsw_9999')").fetchone() == (
        None,
    )
    db.conn.rollback()
