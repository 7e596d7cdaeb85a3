"""A downgrade and an upgrade on a populated database lose nothing the upgrade can restore
(pgrag.db.roundtrip), and a downgrade names what it removes before doing it.

The database holds what a team's has: documents from files and one written with SQL, role
mappings, a second model being built (with some of its vectors), chunks waiting in the queue,
a calibrated threshold, a model indexed at half precision, and logged answers with their
checks. Rows are counted at every step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from pgvector.psycopg import register_vector

import pgrag
from pgrag.cli import cli
from pgrag.db import drift
from pgrag.db import schema as migrate
from pgrag.errors import InputError

COUNTS = {
    "documents": "SELECT count(*) FROM pgrag.documents",
    "chunks": "SELECT count(*) FROM pgrag.chunks",
    "vectors": "SELECT count(*) FROM pgrag.chunk_embeddings",
    "role mappings": "SELECT count(*) FROM pgrag.role_principals",
    "model links": "SELECT count(*) FROM pgrag.collection_models",
    "building links": "SELECT count(*) FROM pgrag.collection_models WHERE status = 'building'",
    "orphaned vectors": (
        "SELECT count(*) FROM pgrag.chunk_embeddings e JOIN pgrag.chunks c ON c.id = e.chunk_id"
        " WHERE NOT EXISTS (SELECT 1 FROM pgrag.collection_models m"
        "  WHERE m.collection_id = c.collection_id AND m.model_id = e.model_id)"
    ),
    "unqueued chunks": (
        "SELECT count(*) FROM pgrag.chunks c JOIN pgrag.collection_models m"
        "   ON m.collection_id = c.collection_id AND m.status IN ('active', 'standby')"
        " WHERE NOT EXISTS (SELECT 1 FROM pgrag.chunk_embeddings e"
        "                    WHERE e.chunk_id = c.id AND e.model_id = m.model_id)"
        "   AND NOT EXISTS (SELECT 1 FROM pgrag.embedding_queue q"
        "                    WHERE q.chunk_id = c.id AND q.model_id = m.model_id)"
    ),
    "queued": "SELECT count(*) FROM pgrag.embedding_queue",
    "thresholds": "SELECT count(*) FROM pgrag.embedding_models WHERE min_confidence = 0.42",
    "halfvec models": "SELECT count(*) FROM pgrag.embedding_models WHERE index_type = 'halfvec'",
    "bodies": "SELECT count(*) FROM pgrag.documents WHERE body IS NOT NULL",
    "answer checks": "SELECT count(*) FROM pgrag.queries WHERE checks IS NOT NULL",
    "keyword calibrations": "SELECT count(*) FROM pgrag.keyword_settings WHERE impact_avgdl = 7.5",
    "postings": "SELECT count(*) FROM pgrag.keyword_postings",
    "impacts at the calibration": (
        "SELECT count(*) FROM pgrag.keyword_postings"
        " WHERE abs(impact - tf / (tf + 1.5 * (0.25 + 0.75 * dl / 7.5))) < 1e-6"
    ),
    "contexts": "SELECT count(*) FROM pgrag.chunks WHERE context = 'Zyxwv quokka context line.'",
    "postings of a context word": (
        "SELECT count(*) FROM pgrag.keyword_postings WHERE lexeme = 'quokka'"
    ),
}
# What does not exist at an earlier revision is not counted there.
SINCE = {
    "keyword calibrations": "0002",
    "postings": "0002",
    "impacts at the calibration": "0002",
    "role mappings": "0003",
    "model links": "0008",
    "building links": "0008",
    "orphaned vectors": "0008",
    "unqueued chunks": "0008",
    "queued": "0008",
    "halfvec models": "0008",
    "bodies": "0008",
    "thresholds": "0009",
    "answer checks": "0009",
    "contexts": "0014",
    "postings of a context word": "0002",
}


def _counts(dsn: str) -> dict[str, int]:
    revision = migrate.current(dsn) or ""
    with psycopg.connect(dsn) as conn:
        return {
            name: conn.execute(query).fetchone()[0]  # type: ignore[arg-type]
            for name, query in COUNTS.items()
            if revision >= SINCE.get(name, "0001")
        }


@pytest.fixture
def populated(db: pgrag.Database, corpus: Path, admin_dsn: str) -> str:
    pgrag.ingest(db, [corpus], collection="docs")
    conn = db.conn
    with conn.transaction():
        for role in ("rt_alice", "rt_bob"):
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(f"CREATE ROLE {role}")  # noqa: S608 - constant names
        conn.execute(
            "INSERT INTO pgrag.role_principals VALUES ('rt_alice', 'group:hr'),"
            " ('rt_alice', 'alice'), ('rt_bob', 'group:sales')"
        )
        coll, active = conn.execute(
            "SELECT id, model_id FROM pgrag.collections WHERE name = 'docs'"
        ).fetchone()
        conn.execute(
            "UPDATE pgrag.embedding_models SET min_confidence = 0.42 WHERE id = %s", (active,)
        )
        # Keyword impacts calibrated at a reference length the corpus no longer has (as
        # keyword_maintain leaves them until the average drifts past its threshold).
        conn.execute("UPDATE pgrag.keyword_settings SET impact_avgdl = 7.5")
        conn.execute(
            "UPDATE pgrag.keyword_postings SET impact = tf / (tf + 1.5 * (0.25 + 0.75 * dl / 7.5))"
        )
        # A second model, being built: half of its vectors are there, at half precision.
        (second,) = conn.execute(
            "INSERT INTO pgrag.embedding_models (name, provider, dimension, index_type)"
            " VALUES ('second', 'test', 8, 'halfvec') RETURNING id"
        ).fetchone()
        conn.execute(
            "INSERT INTO pgrag.collection_models (collection_id, model_id, status)"
            " VALUES (%s, %s, 'building')",
            (coll, second),
        )
        register_vector(conn)
        chunk_ids = [r[0] for r in conn.execute("SELECT id FROM pgrag.chunks ORDER BY id")]
        for chunk_id in chunk_ids[: len(chunk_ids) // 2]:
            conn.execute(
                "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " VALUES (%s, %s, %s, %s)",
                (second, chunk_id, np.ones(8, dtype=np.float32), coll),
            )
        conn.execute("SELECT pgrag.ensure_model_index(%s)", (second,))
        # A document written with SQL: chunked in the database, queued for both models.
        conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, title, body, content_hash)"
            " VALUES (%s, 'kb/1', 'Parking', 'Visitors park in the north garage on level 2.', '')",
            (coll,),
        )
        conn.execute(
            "INSERT INTO pgrag.queries (question, principals, checks)"
            " VALUES ('q', '{public}', '{\"confidence\": 0.5}')"
        )
        # A chunk's context line (contextual ingest), in the keyword index with it.
        conn.execute(
            "UPDATE pgrag.chunks c SET context = 'Zyxwv quokka context line.',"
            " context_for = d.content_hash FROM pgrag.documents d"
            " WHERE d.id = c.document_id AND c.id = (SELECT min(id) FROM pgrag.chunks)"
        )
    return db.dsn


def test_a_round_trip_to_0001_loses_nothing_an_upgrade_can_restore(populated: str) -> None:
    dsn = populated
    before = _counts(dsn)
    assert before["role mappings"] == 3 and before["building links"] == 1
    assert before["queued"] > 0 and before["unqueued chunks"] == 0
    assert before["thresholds"] == before["halfvec models"] == before["bodies"] == 1
    assert before["answer checks"] == 1 and before["orphaned vectors"] == 0
    assert before["keyword calibrations"] == 1
    assert before["impacts at the calibration"] == before["postings"] > 0
    assert before["contexts"] == before["postings of a context word"] == 1

    # Named first, and refused without confirmation: nothing changes.
    with pytest.raises(InputError) as refused:
        migrate.downgrade(dsn, "0001")
    message = str(refused.value)
    for words in (
        "role mappings: 3 (kept for the next upgrade)",
        "links of collections to models that are not active (building, standby, retired): 1",
        "chunks queued for a vector",
        "calibrated abstention thresholds: 1",
        "keyword calibrations (each collection's reference length for impacts): 1 (kept",
        "--yes",
    ):
        assert words in message, message
    assert migrate.current(dsn) == migrate.head() and _counts(dsn) == before

    moved = migrate.downgrade(dsn, "0001", confirm=True)
    assert "role mappings: 3 (kept for the next upgrade)" in moved.removed
    assert (moved.before, moved.after) == (migrate.head(), "0001")
    at_0001 = _counts(dsn)
    assert migrate.current(dsn) == "0001"
    assert at_0001["documents"] == before["documents"] and at_0001["chunks"] == before["chunks"]
    assert at_0001["vectors"] == before["vectors"]

    migrate.upgrade(dsn)
    after = _counts(dsn)
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert drift.check_database(dsn) == []


def test_a_downgrade_one_step_at_a_time_and_back(populated: str) -> None:
    dsn = populated
    before = _counts(dsn)
    steps = []
    while (revision := migrate.current(dsn)) != "0001":
        migrate.downgrade(dsn, "-1", confirm=True)
        steps.append((revision, _counts(dsn)))
    for _, counts in steps:  # what every revision has, it keeps all the way down
        assert counts["documents"] == before["documents"]
        assert counts["chunks"] == before["chunks"]
    migrate.upgrade(dsn)
    assert _counts(dsn) == before


def test_the_cli_lists_what_a_downgrade_removes_and_needs_yes(populated: str) -> None:
    runner = CliRunner()
    refused = runner.invoke(cli, ["--dsn", populated, "db", "downgrade", "0007"])
    assert refused.exit_code == 1
    assert "would remove" in refused.stderr and "--yes" in refused.stderr
    assert migrate.current(populated) == migrate.head()
    done = runner.invoke(cli, ["--dsn", populated, "db", "downgrade", "0007", "--yes"])
    assert done.exit_code == 0, done.output
    assert f"downgraded pgrag's schema: {migrate.head()} -> 0007" in done.stdout
    assert "removed 3 " not in done.stderr  # role mappings stay below 0008
    assert "kept for the next upgrade" in done.stderr
    assert runner.invoke(cli, ["--dsn", populated, "db", "upgrade"]).exit_code == 0
    assert _counts(populated)["building links"] == 1


def test_to_base_everything_is_named_and_nothing_is_kept(populated: str) -> None:
    with pytest.raises(InputError, match=r"keyword postings: \d+ \(lost\)"):
        migrate.downgrade(populated, "base")
    migrate.downgrade(populated, "base", confirm=True)
    with psycopg.connect(populated) as conn:
        row: Any = conn.execute(
            "SELECT to_regnamespace('pgrag'), to_regnamespace('pgrag_saved')"
        ).fetchone()
    assert row == (None, None)


def test_a_pgrag_saved_made_by_another_role_is_neither_used_nor_restored(
    db: pgrag.Database, corpus: Path, admin_dsn: str
) -> None:
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    # A role that may create schemas in the database plants what an upgrade would restore:
    # a role mapping that lets it read group:hr's documents.
    pgrag.ingest(db, [corpus], collection="docs")
    db.conn.rollback()
    database = psycopg.conninfo.conninfo_to_dict(db.dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS rt_mallory")
        conn.execute("CREATE ROLE rt_mallory LOGIN IN ROLE pgrag_reader")
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO rt_mallory").format(sql.Identifier(database))
        )
    try:
        with psycopg.connect(make_conninfo(db.dsn, user="rt_mallory"), autocommit=True) as conn:
            conn.execute("CREATE SCHEMA pgrag_saved")
            conn.execute(
                "CREATE TABLE pgrag_saved.rows (kind text NOT NULL, data jsonb NOT NULL,"
                " saved_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute(
                "INSERT INTO pgrag_saved.rows (kind, data) VALUES ('role_mappings',"
                ' \'{"role_name": "rt_mallory", "principal": "group:hr"}\')'
            )
            conn.execute("GRANT USAGE, CREATE ON SCHEMA pgrag_saved TO PUBLIC")
            conn.execute("GRANT ALL ON pgrag_saved.rows TO PUBLIC")
        for move in (
            lambda: migrate.downgrade(db.dsn, "0009", confirm=True),
            lambda: migrate.downgrade(db.dsn, "base", confirm=True),
        ):
            with pytest.raises(
                pgrag.SchemaError, match="schema pgrag_saved is owned by rt_mallory"
            ):
                move()
            assert migrate.current(db.dsn) == migrate.head()
        # Were it there before an upgrade (planted while the database sat at 0009):
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("ALTER SCHEMA pgrag_saved RENAME TO planted")
        migrate.downgrade(db.dsn, "0009", confirm=True)
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("ALTER SCHEMA planted RENAME TO pgrag_saved")
        with pytest.raises(pgrag.SchemaError, match="neither keeps rows in it nor restores"):
            migrate.upgrade(db.dsn)
        assert migrate.current(db.dsn) == "0009"
        with psycopg.connect(db.dsn) as conn:
            assert conn.execute(
                "SELECT count(*) FROM pgrag.role_principals WHERE role_name = 'rt_mallory'"
            ).fetchone() == (0,)
    finally:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS pgrag_saved CASCADE")
            conn.execute("DROP SCHEMA IF EXISTS planted CASCADE")
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("REVOKE CREATE ON DATABASE {} FROM rt_mallory").format(
                    sql.Identifier(database)
                )
            )
            conn.execute("DROP ROLE rt_mallory")


def test_the_owner_and_a_superuser_can_share_a_round_trip(admin_dsn: str) -> None:
    import uuid

    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    name = f"rt_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(name), sql.Identifier(name)
            )
        )
    superuser = make_conninfo(admin_dsn, dbname=name)
    owner = make_conninfo(admin_dsn, dbname=name, user=name)
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    checks = "SELECT count(*) FROM pgrag.queries WHERE checks IS NOT NULL"
    try:
        migrate.upgrade(owner)
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgrag.queries (question, principals, checks)"
                " VALUES ('q', '{public}', '{\"confidence\": 0.5}')"
            )
        # The owner keeps rows aside (0009's answer checks); a superuser's upgrade restores them.
        assert "answer checks in the query log: 1 (kept for the next upgrade)" in (
            migrate.downgrade(owner, "0008", confirm=True).removed
        )
        migrate.upgrade(superuser)
        with psycopg.connect(owner) as conn:
            assert conn.execute(checks).fetchone() == (1,)
            assert conn.execute("SELECT to_regnamespace('pgrag_saved')").fetchone() == (None,)
        # A superuser keeps rows aside the owner may not read: the owner is told whose they are.
        migrate.downgrade(superuser, "0008", confirm=True)
        with pytest.raises(pgrag.SchemaError, match="is postgres's: run this as postgres"):
            migrate.upgrade(owner)
        assert migrate.current(owner) == "0008"
        migrate.upgrade(superuser)
        with psycopg.connect(owner) as conn:
            assert conn.execute(checks).fetchone() == (1,)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
