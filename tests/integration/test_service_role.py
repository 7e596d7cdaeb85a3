"""docker/service-role.sql, run with psql as the compose file runs it, makes a login role that
`pgrag serve` can run as: ready, searching, answering (the question logged) under a caller's
principals, and no more than pgrag_app and pgrag_writer may do. Run twice, it changes nothing
(the compose one-shot runs at every `up`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgrag
from pgrag.db.server import psql_path
from tests.serving import served

SQL = Path(__file__).resolve().parents[2] / "docker" / "service-role.sql"


def _run_script(dsn: str, password: str) -> None:
    params = conninfo_to_dict(dsn)
    uri = make_conninfo(**{k: v for k, v in params.items() if v is not None})
    subprocess.run(  # noqa: S603
        [str(psql_path()), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"password={password}"]
        + ["-f", str(SQL), "-d", uri],
        check=True,
        capture_output=True,
        text=True,
    )


def _attributes(dsn: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT rolcanlogin, rolsuper, rolbypassrls, rolcreaterole,"
            " pg_has_role('pgrag_service', 'pgrag_app', 'MEMBER'),"
            " pg_has_role('pgrag_service', 'pgrag_writer', 'MEMBER')"
            " FROM pg_roles WHERE rolname = 'pgrag_service'"
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_the_service_role_serves_under_a_callers_principals(
    db: Any, dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "public.md").write_text("# Parcels\n\nParcels to Norway take five working days.\n")
    (tmp_path / "hr.md").write_text("# Salaries\n\nSalary bands are reviewed every March.\n")
    pgrag.ingest(db, [tmp_path / "public.md"], collection="handbook")
    pgrag.ingest(db, [tmp_path / "hr.md"], collection="handbook", allow=["group:hr"])
    _run_script(dsn, "first secret")
    _run_script(dsn, "second secret")  # again: no error, same role
    assert _attributes(dsn) == (True, False, False, False, True, True)
    service_dsn = make_conninfo(dsn, user="pgrag_service", password="second secret")
    with psycopg.connect(service_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DROP TABLE pgrag.chunks")
    question = {"question": "When are salary bands reviewed?", "collection": "handbook"}
    with served(service_dsn, no_auth=True, local_principals=["alice"]) as s:
        ready = httpx.get(f"{s.url}/readyz")
        outsider = httpx.post(
            f"{s.url}/v1/search", json={"query": "salary bands", "collection": "handbook"}
        )
    with served(service_dsn, no_auth=True, local_principals=["group:hr"]) as s:
        insider = httpx.post(
            f"{s.url}/v1/search", json={"query": "salary bands", "collection": "handbook"}
        )
        answer = httpx.post(f"{s.url}/v1/ask", json=question)
    assert ready.status_code == 200, ready.text
    assert outsider.status_code == 200, outsider.text
    assert all(not h["source"].endswith("hr.md") for h in outsider.json()["results"])
    assert insider.json()["results"][0]["source"].endswith("hr.md")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["abstained"] is False and isinstance(body["query_id"], int)  # logged
    assert body["citations"][0]["source"].endswith("hr.md")


def _drop_roles(dsn: str, *roles: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for role in roles:
            conn.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.matrix
def test_an_administrator_that_is_not_a_superuser_makes_the_service_role(dsn: str) -> None:
    """As on RDS, Cloud SQL or Supabase: the owner has CREATEROLE but is no superuser. The
    script then sets only what it may (ALTER ROLE ... NOSUPERUSER takes a superuser even when
    nothing changes), says what to do when it may not grant pgrag_app, and a failed run
    leaves no role behind (one transaction)."""
    admin = "pgrag_test_createrole_admin"
    _drop_roles(dsn, "pgrag_service", admin)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {admin} LOGIN CREATEROLE")
        version = conn.info.server_version
    admin_dsn = make_conninfo(dsn, user=admin)
    try:
        if version >= 160000:
            # Granting pgrag_app takes ADMIN OPTION on it from 16 (before, CREATEROLE was enough).
            with pytest.raises(subprocess.CalledProcessError) as failed:
                _run_script(admin_dsn, "first secret")
            assert f"role {admin} may not grant pgrag_app to pgrag_service" in failed.value.stderr
            assert f"GRANT pgrag_app TO {admin} WITH ADMIN OPTION" in failed.value.stderr
            with psycopg.connect(dsn, autocommit=True) as conn:
                left = conn.execute("SELECT FROM pg_roles WHERE rolname = 'pgrag_service'")
                assert left.fetchone() is None  # (rolled back with the failed grant)
                conn.execute(f"GRANT pgrag_app, pgrag_writer TO {admin} WITH ADMIN OPTION")
        _run_script(admin_dsn, "first secret")
        _run_script(admin_dsn, "second secret")  # again: no error, same role
        assert _attributes(dsn) == (True, False, False, False, True, True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            memberships = conn.execute(
                "SELECT count(*) FROM pg_auth_members WHERE member = 'pgrag_service'::regrole"
            ).fetchone()
        assert memberships == (2,)  # (granted once each, not again by the second run)

        # A role of that name made by someone else with a power that bypasses row-level
        # security: this administrator may not take it away, so the script stops, and changes
        # nothing; a superuser's run does take it away.
        _drop_roles(dsn, "pgrag_service")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE ROLE pgrag_service LOGIN BYPASSRLS CREATEDB")
        with pytest.raises(subprocess.CalledProcessError) as failed:
            _run_script(admin_dsn, "third secret")
        # ("permission denied to alter role" from 16; "must be superuser to change bypassrls
        # attribute" before)
        assert "permission denied" in failed.value.stderr or "must be superuser" in (
            failed.value.stderr
        )
        assert _attributes(dsn)[2] is True  # still BYPASSRLS
        _run_script(dsn, "third secret")
        assert _attributes(dsn) == (True, False, False, False, True, True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            createdb = conn.execute(
                "SELECT rolcreatedb FROM pg_roles WHERE rolname = 'pgrag_service'"
            ).fetchone()
        assert createdb == (False,)
    finally:
        _drop_roles(dsn, "pgrag_service", admin)


@pytest.mark.matrix
def test_a_service_role_that_exists_with_too_much_is_mended_or_refused(dsn: str) -> None:
    """What the script finds in an existing pgrag_service: REPLICATION (it could stream every
    row) and an expired password are taken away; a membership in another role (here one that
    reads every table) stops it, naming it; a membership granted WITH INHERIT FALSE (16 and
    later), which gives none of the role's privileges, is granted again usably; and an empty
    password is refused before anything changes."""
    _drop_roles(dsn, "pgrag_service")
    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.info.server_version
        conn.execute(
            "CREATE ROLE pgrag_service LOGIN REPLICATION VALID UNTIL '2000-01-01'"
            " CONNECTION LIMIT 0"
        )
    try:
        with pytest.raises(subprocess.CalledProcessError) as failed:
            _run_script(dsn, "")
        assert "no password for pgrag_service" in failed.value.stderr
        _run_script(dsn, "a secret")
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT rolreplication, rolvaliduntil IS NULL OR rolvaliduntil > now(),"
                " rolconnlimit FROM pg_roles WHERE rolname = 'pgrag_service'"
            ).fetchone()
            assert row == (False, True, -1)
            conn.execute("GRANT pg_read_all_stats TO pgrag_service")
        with pytest.raises(subprocess.CalledProcessError) as failed:
            _run_script(dsn, "a secret")
        assert "pgrag_service is also a member of pg_read_all_stats" in failed.value.stderr
        if version >= 160000:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("REVOKE pg_read_all_stats FROM pgrag_service")
                conn.execute("REVOKE pgrag_writer FROM pgrag_service")
                conn.execute("GRANT pgrag_writer TO pgrag_service WITH INHERIT FALSE")
                assert conn.execute(
                    "SELECT pg_has_role('pgrag_service', 'pgrag_writer', 'USAGE')"
                ).fetchone() == (False,)
            _run_script(dsn, "a secret")
            with psycopg.connect(dsn, autocommit=True) as conn:
                assert conn.execute(
                    "SELECT pg_has_role('pgrag_service', 'pgrag_writer', 'USAGE')"
                ).fetchone() == (True,)
    finally:
        _drop_roles(dsn, "pgrag_service")
