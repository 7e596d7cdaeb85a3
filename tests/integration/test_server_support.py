"""Which servers pgrag runs on, and what it says on the others (docs/postgres-versions.md).

These tests read the version of the server they run against and expect what pgrag promises
for it: on the embedded server (PostgreSQL 18, pgvector 0.8.6) they check the supported path;
scripts/test-matrix also runs them on PostgreSQL 12 (refused), 13, 15, 16 and on pgvector 0.7.4
(refused), each a server built independently of pgrag (scripts/pg_matrix.py).
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.db import schema as migrate

pytestmark = pytest.mark.matrix


def _server(dsn: str) -> tuple[int, str, str | None]:
    """server_version_num, server_version, and the pgvector release the server offers."""
    with psycopg.connect(dsn) as conn:
        number, name = conn.execute(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version')"
        ).fetchone()
        row = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    return number, name, None if row is None else row[0]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _installed(dsn: str) -> tuple[object, ...]:
    """What an upgrade leaves in the database (schema pgrag, pgvector, pgrag's version table
    in any schema) and in the cluster (pgrag's roles)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT to_regnamespace('pgrag') IS NOT NULL,"
            " EXISTS (SELECT FROM pg_extension WHERE extname = 'vector'),"
            " EXISTS (SELECT FROM pg_class WHERE relname = 'alembic_version_pgrag'),"
            " ARRAY(SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'pgrag%' ORDER BY 1)"
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_db_upgrade_runs_or_refuses_first_naming_both_versions(empty_dsn: str) -> None:
    number, name, pgvector = _server(empty_dsn)
    *_, roles = before = _installed(empty_dsn)
    nothing = (False, False, False, roles)  # (roles are the cluster's: other tests' stay)
    assert before == nothing
    result = CliRunner().invoke(cli, ["db", "upgrade"], env={"PGRAG_DSN": empty_dsn})
    if number < 130000:
        assert result.exit_code == 1, result.output
        assert f"PostgreSQL {name} is too old" in result.output
        assert "PostgreSQL 13 or later" in result.output
        assert _installed(empty_dsn) == nothing
    elif pgvector is None or _release(pgvector) < (0, 8):
        assert result.exit_code == 1, result.output
        if pgvector is None:
            assert "does not have the pgvector extension" in result.output
        else:
            assert f"pgvector {pgvector} is too old" in result.output
            assert "pgvector 0.8 or later" in result.output
        assert _installed(empty_dsn) == nothing
    else:
        assert result.exit_code == 0, result.output
        assert migrate.state(empty_dsn).up_to_date


def test_a_server_older_than_13_is_refused_before_anything_changes(empty_dsn: str) -> None:
    # On any server: current_setting() in a schema ahead of pg_catalog on the search_path
    # plays PostgreSQL 12 (scripts/test-matrix also runs the real one).
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE SCHEMA fake")
        conn.execute(
            "CREATE FUNCTION fake.current_setting(name text) RETURNS text LANGUAGE sql AS $$"
            " SELECT CASE name WHEN 'server_version_num' THEN '120022'"
            " WHEN 'server_version' THEN '12.22' ELSE pg_catalog.current_setting(name) END $$"
        )
    before = _installed(empty_dsn)
    faked = make_conninfo(empty_dsn, options="-c search_path=fake,pg_catalog")
    with pytest.raises(pgrag.SchemaError, match=r"PostgreSQL 12\.22 is too old") as err:
        migrate.upgrade(faked)
    assert "13 or later" in str(err.value) and "Nothing was changed" in str(err.value)
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("DROP SCHEMA fake CASCADE")
    assert _installed(empty_dsn) == before and not any(before[:3])


def test_a_filtered_hnsw_search_keeps_k_results_only_through_iterative_scans(
    empty_dsn: str,
) -> None:
    """What search_v5's k-guarantee rests on: pgvector 0.8's hnsw.iterative_scan. Without it a
    selective filter leaves fewer than k of the ef_search candidates the graph gives; with it
    the scan goes on until k rows pass. On pgvector 0.7 the setting does not exist."""
    _, _, pgvector = _server(empty_dsn)
    assert pgvector is not None, "this test needs a server that offers pgvector"
    rng = np.random.default_rng(5)
    rows = [(i, int(i % 50 == 0), str(rng.normal(size=8).tolist())) for i in range(3000)]
    query = str(rng.normal(size=8).tolist())
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, rare int, v vector(8))")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", rows)
        conn.execute("CREATE INDEX ON items USING hnsw (v vector_l2_ops)")
        conn.execute("ANALYZE items")
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET hnsw.ef_search = 40")

        def filtered() -> int:
            found = conn.execute(
                "SELECT id FROM items WHERE rare = 1 ORDER BY v <-> %s::vector LIMIT 10", (query,)
            ).fetchall()
            assert all(id_ % 50 == 0 for (id_,) in found)
            return len(found)

        plan = conn.execute(
            "EXPLAIN SELECT id FROM items WHERE rare = 1 ORDER BY v <-> %s::vector LIMIT 10",
            (query,),
        ).fetchall()
        assert any("items_v_idx" in line for (line,) in plan), plan
        assert filtered() < 10  # 60 of 3000 rows pass: about 1 of the 40 candidates
        if _release(pgvector) >= (0, 8):
            conn.execute("SET hnsw.iterative_scan = relaxed_order")
            assert filtered() == 10
        else:
            with pytest.raises(psycopg.Error, match="hnsw.iterative_scan"):
                conn.execute("SET hnsw.iterative_scan = relaxed_order")
