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
    # (the vectors have triggers, not foreign keys, since 0015: a table with one foreign key)
    "ALTER TABLE pgrag.keyword_df DISABLE TRIGGER ALL": (
        "foreign-key triggers of",
        "pgrag.keyword_df",
        "2 disabled: rows can break their foreign keys",
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
        "is drift_owner, not postgres (who owns schema pgrag)",
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


def test_who_owns_pgrag_is_not_guessed_when_schema_and_objects_disagree(
    dsn: str, admin_dsn: str
) -> None:
    # Given the schema, or most of its objects, another role could be the rightful owner or the
    # thief: check names both, and repair gives nothing to either.
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS drift_thief")
        conn.execute("CREATE ROLE drift_thief")
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER SCHEMA pgrag OWNER TO drift_thief")
        owners = [d for d in drift.check_database(dsn) if d.kind == "owner of"]
        assert [(d.name, d.repairable) for d in owners] == [("schema pgrag", False)]
        assert owners[0].problem.startswith("is drift_thief, but postgres owns ")
        done, left = repair.repair_database(dsn)
        assert not any("gave" in line for line in done), done
        assert [d.kind for d in left] == ["owner of"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(
                "SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'pgrag'"
            ).fetchone() == ("drift_thief",)
            conn.execute("ALTER SCHEMA pgrag OWNER TO postgres")
            # Every function given away: most objects are the other role's now.
            conn.execute(
                "DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT oid FROM pg_proc"
                " WHERE pronamespace = 'pgrag'::regnamespace LOOP"
                " EXECUTE format('ALTER FUNCTION %s OWNER TO drift_thief', f); END LOOP; END $$"
            )
        owners = [d for d in drift.check_database(dsn) if d.kind == "owner of"]
        assert [(d.name, d.repairable) for d in owners] == [("schema pgrag", False)]
        assert owners[0].problem.startswith("is postgres, but drift_thief owns ")
        done, _ = repair.repair_database(dsn)
        assert not any(line.startswith("gave") for line in done), done
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("REASSIGN OWNED BY drift_thief TO postgres")
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
        # (built on the whole table: the partitioned index's definition says ON ONLY)
        wrong_one = definition.replace("vector_cosine_ops", "vector_l2_ops")
        conn.execute(wrong_one.replace(" ON ONLY ", " ON "))  # type: ignore[arg-type]
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


BROKEN_WRITES = {
    # what breaks ingest or deletes, or copies rows out, without touching a function body
    "ALTER SEQUENCE pgrag.chunks_id_seq RESTART WITH 1": ("sequence", "pgrag.chunks_id_seq"),
    "ALTER SEQUENCE pgrag.documents_id_seq MAXVALUE 31": ("sequence", "pgrag.documents_id_seq"),
    "ALTER TABLE pgrag.collections ALTER COLUMN id SET GENERATED BY DEFAULT": (
        "column",
        "pgrag.collections.id",
    ),
    "ALTER TABLE pgrag.chunks REPLICA IDENTITY NOTHING": ("table", "pgrag.chunks"),
    "ALTER TABLE pgrag.queries SET (autovacuum_enabled = false)": ("table", "pgrag.queries"),
}


def test_what_breaks_writes_is_found_and_repaired(db: pgrag.Database, corpus: Path) -> None:
    pgrag.ingest(db, [corpus], collection="docs")
    db.conn.rollback()
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        for statement in BROKEN_WRITES:
            conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("CREATE PUBLICATION drift_leak FOR TABLE pgrag.documents")
    try:
        found = {(d.kind, d.name): d for d in drift.check_database(db.dsn)}
        for statement, key in BROKEN_WRITES.items():
            assert key in found, (statement, sorted(found))
        assert "every insert fails" in found[("sequence", "pgrag.chunks_id_seq")].problem
        assert "max 31 (not 9223372036854775807)" in (
            found[("sequence", "pgrag.documents_id_seq")].problem
        )
        leak = found[("publication", "drift_leak")]
        assert not leak.repairable and "sends pgrag.documents" in leak.problem
        done, left = repair.repair_database(db.dsn)
        assert [(d.kind, d.name) for d in left] == [("publication", "drift_leak")], done
        report = pgrag.ingest(db, [corpus / "office.txt"], collection="more")
        assert report.chunks_written > 0 and not report.failed
        with db.conn.transaction():
            db.conn.execute("DELETE FROM pgrag.documents WHERE source LIKE '%%office.txt'")
    finally:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("DROP PUBLICATION drift_leak")


def test_a_dropped_identity_comes_back_with_its_sequence(db: pgrag.Database, corpus: Path) -> None:
    pgrag.ingest(db, [corpus], collection="docs")
    db.conn.rollback()
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgrag.chunks ALTER COLUMN id DROP IDENTITY")
    found = {(d.kind, d.name): d for d in drift.check_database(db.dsn)}
    assert found[("column", "pgrag.chunks.id")].repairable
    assert found[("sequence", "pgrag.chunks_id_seq")].repairable
    done, left = repair.repair_database(db.dsn)
    assert left == [], [d.describe() for d in left]
    assert any(line.startswith("moved sequence pgrag.chunks_id_seq past ") for line in done)
    report = pgrag.ingest(db, [corpus / "office.txt"], collection="more")
    assert report.chunks_written > 0 and not report.failed


def test_names_that_need_quoting_are_repaired(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('CREATE VIEW pgrag."Docs" AS SELECT source, title FROM pgrag.documents')
        conn.execute('GRANT SELECT ON pgrag."Docs" TO pgrag_reader')
        conn.execute('CREATE INDEX "Evil" ON pgrag.documents (title)')
        conn.execute('CREATE TABLE public."Kid" () INHERITS (pgrag.role_principals)')
        conn.execute('CREATE POLICY "All Rows" ON pgrag.chunks USING (true)')
        conn.execute("ALTER TABLE pgrag.chunks DISABLE ROW LEVEL SECURITY")
    try:
        names = {d.name for d in drift.check_database(dsn)}
        assert {'pgrag."Docs"', 'pgrag."Evil"', '"Kid"', 'pgrag.chunks."All Rows"'} <= names
        done, left = repair.repair_database(dsn)
        assert left == [], [d.describe() for d in left]
        assert (
            'dropped view pgrag."Docs"' in done
            and 'detached "Kid" from pgrag.role_principals' in done
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute('DROP TABLE IF EXISTS public."Kid"')


def test_a_step_that_fails_is_named_and_the_others_are_done(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE pgrag.role_principals DROP CONSTRAINT role_principals_principal_check"
        )
        conn.execute("INSERT INTO pgrag.role_principals VALUES ('pgrag_reader', 'bad principal')")
        conn.execute("ALTER TABLE pgrag.chunks DISABLE ROW LEVEL SECURITY")
        conn.execute("CREATE FUNCTION pgrag.evil() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$")
        conn.execute("CREATE VIEW public.uses_evil AS SELECT pgrag.evil()")
    try:
        done, left = repair.repair_database(dsn)
        assert "enabled row-level security on pgrag.chunks" in done
        (constraint,) = [line for line in done if "re-created constraint" in line]
        assert constraint.startswith("not done: re-created constraint") and "violated" in constraint
        (function,) = [line for line in done if "dropped function" in line]
        assert function.startswith("not done: dropped function pgrag.evil()")
        assert "view uses_evil depends on function pgrag.evil()" in function
        assert {(d.kind, d.name) for d in left} == {
            ("constraint", "pgrag.role_principals.role_principals_principal_check"),
            ("function", "pgrag.evil()"),
        }
        result = CliRunner().invoke(cli, ["--dsn", dsn, "db", "repair"])
        assert result.exit_code == 1 and "could not be repaired" in result.stderr
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP VIEW public.uses_evil")


def test_a_model_index_with_other_build_options_is_rebuilt(
    db: pgrag.Database, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus / "office.txt"], collection="docs")
    (model_id,) = db.conn.execute(
        "SELECT model_id FROM pgrag.collections WHERE name = 'docs'"
    ).fetchone()
    index = f"pgrag.chunk_embeddings_hnsw_{model_id}"
    (definition,) = db.conn.execute("SELECT pg_get_indexdef(%s::regclass)", (index,)).fetchone()
    db.conn.rollback()
    weak = definition.replace("m='16', ef_construction='128'", "m='2', ef_construction='4'")
    weak = weak.replace(" ON ONLY ", " ON ")  # (on the whole table, every partition's too)
    assert weak != definition
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {index}")  # type: ignore[arg-type]
        conn.execute(weak)  # type: ignore[arg-type]
    (found,) = [d for d in drift.check_database(db.dsn) if d.name.startswith(index)]
    assert "is built with m=2, ef_construction=4, not m=16, ef_construction=128" in found.problem
    done, left = repair.repair_database(db.dsn)
    assert left == [] and any(line.startswith(f"built {index}") for line in done)


def test_a_database_setting_that_stops_pgrag_triggers_is_named(dsn: str) -> None:
    database = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {database} SET session_replication_role = replica")  # type: ignore[arg-type]
    try:
        (found,) = [d for d in drift.check_database(dsn) if d.kind == "database setting"]
        assert found.name == "session_replication_role=replica (for everyone)"
        assert not found.repairable and "triggers do not fire" in found.problem
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {database} RESET session_replication_role")  # type: ignore[arg-type]


@pytest.fixture
def owner_dsn(admin_dsn: str) -> Any:
    """A database owned by a login role that is not a superuser (as on a managed service)."""
    import uuid

    from psycopg import sql

    name = f"drift_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(name), sql.Identifier(name)
            )
        )
    with psycopg.connect(make_conninfo(admin_dsn, dbname=name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    dsn = make_conninfo(admin_dsn, dbname=name, user=name)
    from pgrag.db import schema

    schema.upgrade(dsn)
    yield dsn
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_what_only_a_superuser_can_undo_is_reported_as_not_done(
    owner_dsn: str, admin_dsn: str
) -> None:
    superuser = make_conninfo(owner_dsn, user="postgres")
    owner = str(psycopg.conninfo.conninfo_to_dict(owner_dsn)["user"])
    with psycopg.connect(superuser, autocommit=True) as conn:
        # The owner may administer pgrag_writer (as the role that created it would), but the
        # membership below is the superuser's grant: from PostgreSQL 16 on, the owner's REVOKE
        # only warns (before, an admin could revoke any grant of the role).
        grantor_counts = conn.info.server_version >= 160000
        options = "ADMIN OPTION, INHERIT FALSE, SET FALSE" if grantor_counts else "ADMIN OPTION"
        conn.execute(
            psycopg.sql.SQL("GRANT pgrag_writer TO {} WITH {}").format(
                psycopg.sql.Identifier(owner), psycopg.sql.SQL(options)
            )
        )
        conn.execute("GRANT pgrag_writer TO pgrag_reader")
        conn.execute("DROP ROLE IF EXISTS drift_other")
        conn.execute("CREATE ROLE drift_other")
        conn.execute("ALTER FUNCTION pgrag.collections_v1() OWNER TO drift_other")
        conn.execute("GRANT EXECUTE ON FUNCTION pgrag.collections_v1() TO drift_other")
        conn.execute("ALTER TABLE pgrag.chunks DISABLE ROW LEVEL SECURITY")
    try:
        found = drift.check_database(owner_dsn)
        (role,) = [d for d in found if d.kind == "role"]
        assert role.problem == "is a member of pgrag_writer, so it reads everything"
        assert not role.repairable and "a superuser takes that away" in (role.fix or "")
        done, left = repair.repair_database(owner_dsn)
        # What the owner may not do is named with the server's reason; the rest is done.
        assert "enabled row-level security on pgrag.chunks" in done
        (line,) = [line for line in done if "pgrag_writer from pgrag_reader" in line]
        if grantor_counts:
            # (PostgreSQL only warns, and revokes nothing: the warning is the reason.)
            assert line.startswith("not done: revoked pgrag_writer from pgrag_reader (")
            assert 'has not been granted membership in role "pgrag_writer"' in line
        else:
            assert line == "revoked pgrag_writer from pgrag_reader", line
        # The file that holds the function it may not replace is not applied; the others are.
        (applied,) = [line for line in done if "sql/functions/access.sql" in line]
        assert applied == (
            "not done, for lack of the right: re-applied sql/functions/access.sql"
            " (must be owner of function collections_v1)"
        ), applied
        assert "re-applied sql/functions/search.sql" in done
        (gave,) = [line for line in done if "collections_v1" in line and "back to" in line]
        assert gave.startswith("not done, for lack of the right: gave function")
        # (Before 16 the owner's ADMIN OPTION let repair revoke its own membership too.)
        assert {d.kind for d in left} == ({"role", "owner of"} if grantor_counts else {"owner of"})
    finally:
        with psycopg.connect(superuser, autocommit=True) as conn:
            conn.execute("REVOKE pgrag_writer FROM pgrag_reader")
            conn.execute(
                psycopg.sql.SQL("REASSIGN OWNED BY drift_other TO {}").format(
                    psycopg.sql.Identifier(owner)
                )
            )
            conn.execute("DROP OWNED BY drift_other")
            conn.execute("DROP ROLE drift_other")


def test_a_function_create_or_replace_cannot_replace_does_not_stop_the_others(
    tenants: dict[str, Any],
) -> None:
    dsn, reader = tenants["dsn"], tenants["reader"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Another return type: CREATE OR REPLACE of models.sql fails on it ...
        conn.execute("DROP FUNCTION pgrag.retire_model_vectors(integer, integer, integer)")
        conn.execute(
            "CREATE FUNCTION pgrag.retire_model_vectors(integer, integer, integer)"
            " RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$"
        )
        # ... and must not keep access.sql from putting the session's principals back.
        conn.execute(
            "CREATE OR REPLACE FUNCTION pgrag.visible_acls() RETURNS integer[] LANGUAGE sql"
            " STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
            " AS $$ SELECT NULL::integer[] $$"
        )
        # pgrag.release() replaced by one that returns something else entirely.
        conn.execute("DROP FUNCTION pgrag.release()")
        conn.execute(
            "CREATE FUNCTION pgrag.release() RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$"
        )
    assert _visible_documents(reader) == 3
    found = {(d.kind, d.name) for d in drift.check_database(dsn)}
    assert ("functions", "of schema pgrag") in found
    assert ("function", "pgrag.retire_model_vectors(integer,integer,integer)") in found
    done, left = repair.repair_database(dsn)
    assert left == [], [d.describe() for d in left]
    assert "dropped pgrag.retire_model_vectors(integer,integer,integer) to create it again" in done
    assert _visible_documents(reader) == 1
    assert pgrag.db.schema.state(dsn).up_to_date


def test_what_hides_pgrag_tables_behind_another_is_found_and_undone(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.par (LIKE pgrag.documents)")
        conn.execute("ALTER TABLE pgrag.documents INHERIT public.par")
        conn.execute('CREATE STATISTICS pgrag."St" ON source, title FROM pgrag.documents')
        conn.execute('CREATE DOMAIN pgrag."D" AS integer')
        conn.execute("ALTER SEQUENCE pgrag.chunks_id_seq RENAME TO foo")
        conn.execute("ALTER TABLE pgrag.documents ALTER COLUMN id DROP IDENTITY")
        conn.execute("CREATE SEQUENCE public.s")
        conn.execute("ALTER TABLE pgrag.documents ALTER COLUMN id SET DEFAULT nextval('public.s')")
    try:
        found = {(d.kind, d.name): d.problem for d in drift.check_database(dsn)}
        assert found[("table", "pgrag.documents")].startswith("inherits from par: every read")
        assert ("statistics", 'pgrag."St"') in found and ("type", 'pgrag."D"') in found
        assert found[("sequence", "pgrag.chunks_id_seq")] == "was renamed to pgrag.foo"
        assert ("relation", "pgrag.foo") not in found
        done, left = repair.repair_database(dsn)
        assert left == [], [d.describe() for d in left]
        assert "renamed sequence pgrag.foo back to pgrag.chunks_id_seq" in done
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM pg_inherits").fetchone() == (0,)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP TABLE public.par")
            conn.execute("DROP SEQUENCE public.s")


def test_a_session_that_runs_as_a_replica_is_named(dsn: str) -> None:
    replica = make_conninfo(dsn, options="-c session_replication_role=replica")
    (found,) = [d for d in drift.check_database(replica) if d.kind == "setting"]
    assert found.problem.startswith("is replica for this role here (from the client)")
    assert not found.repairable
