"""The embedded PostgreSQL launcher (pgrag.server) and `pgrag server ...`.

Every server lives in its own temporary directory under /tmp (not $HOME: as root the server
runs as the OS user ``pgrag``, which must traverse every parent) and is stopped in a finally.
Tests that do not need a fresh directory share one server per module; each of them starts by
calling ensure_running() (the fast path when it is up), so they do not depend on their order.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from click.testing import CliRunner

from pgrag.cli import cli
from pgrag.server import SYSTEM_USER, EmbeddedServer, psql_path

FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _new_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pgrag-test-srv-", dir="/tmp")).resolve()


def _cleanup(directory: Path) -> None:
    try:
        EmbeddedServer(directory).stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _pidfile_pid(server: EmbeddedServer) -> int:
    return int((server.data / "postmaster.pid").read_text().splitlines()[0])


def _postmasters(data: Path) -> list[int]:
    """PIDs of live postmasters serving ``data`` (backends rename themselves "postgres: ...")."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or not cmdline:
            continue
        if Path(cmdline[0]).name == "postgres" and str(data) in cmdline:
            found.append(proc.info["pid"])
    return found


def _select_one(dsn: str) -> int:
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        row = conn.execute("select 1").fetchone()
        assert row is not None
        return int(row[0])


def _unrelated_process() -> subprocess.Popen[bytes]:
    # Owned by the server's OS user when we are root: postgres only treats a lock file as
    # stale when kill(pid, 0) fails with ESRCH or EPERM, so a root-owned process would not
    # reproduce "the PID now belongs to someone else" (EPERM counts as stale).
    user = SYSTEM_USER if os.geteuid() == 0 else None
    return subprocess.Popen(["sleep", "60"], user=user)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[EmbeddedServer, str]]:
    directory = _new_dir()
    server = EmbeddedServer(directory, settings=FAST_SETTINGS)
    try:
        assert not server.status().initialized
        dsn = server.ensure_running()  # initdb + start on a fresh directory
        yield server, dsn
    finally:
        _cleanup(directory)


@pytest.fixture
def fresh_dir() -> Iterator[Callable[[], Path]]:
    made: list[Path] = []

    def make() -> Path:
        made.append(_new_dir())
        return made[-1]

    try:
        yield make
    finally:
        for directory in made:
            _cleanup(directory)


# -- one shared server ----------------------------------------------------------------------


def test_fresh_directory_is_initialised_and_started(shared: tuple[EmbeddedServer, str]) -> None:
    server, dsn = shared
    st = server.status()
    assert st.initialized and st.running
    assert st.pid is not None and st.pid == _pidfile_pid(server)
    assert st.dsn == dsn == server.dsn()
    assert (server.directory / "postgres.log").exists()
    with psycopg.connect(dsn) as conn:
        version = conn.execute("select version()").fetchone()
        assert version is not None and "PostgreSQL 18" in version[0]
        assert conn.execute("select current_database()").fetchone() == ("pgrag",)
        row = conn.execute(
            "select default_version from pg_available_extensions where name = 'vector'"
        ).fetchone()
    assert row is not None, "pgvector is not available in the embedded server"
    major_minor = tuple(int(p) for p in row[0].split(".")[:2])
    assert major_minor >= (0, 8), row[0]


def test_second_instance_reuses_the_running_server(shared: tuple[EmbeddedServer, str]) -> None:
    server, dsn = shared
    server.ensure_running()
    pid = _pidfile_pid(server)
    with psycopg.connect(dsn) as conn:
        started = conn.execute("select pg_postmaster_start_time()").fetchone()

    t0 = time.monotonic()
    again = EmbeddedServer(server.directory).ensure_running()
    elapsed = time.monotonic() - t0

    assert again == dsn
    assert _pidfile_pid(server) == pid
    assert EmbeddedServer(server.directory).status().pid == pid
    with psycopg.connect(again) as conn:
        assert conn.execute("select pg_postmaster_start_time()").fetchone() == started
    assert elapsed < 5, f"reusing a running server took {elapsed:.1f}s"


def test_dsn_works_with_the_bundled_psql(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    dsn = server.ensure_running()
    psql = psql_path()
    assert psql.is_file()
    result = subprocess.run(
        [str(psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", dsn, "-c", "select 1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_recovers_after_the_postmaster_is_killed(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    server.ensure_running()
    old_pid = _pidfile_pid(server)
    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server.status().running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.status().running

    dsn = server.ensure_running()  # retries while orphaned backends let go of shared memory

    st = server.status()
    assert st.running and st.pid is not None and st.pid != old_pid
    assert _select_one(dsn) == 1
    assert _postmasters(server.data) == [st.pid]


def test_recovers_from_a_pidfile_naming_an_unrelated_live_process(
    shared: tuple[EmbeddedServer, str],
) -> None:
    server, _ = shared
    server.ensure_running()
    pidfile = server.data / "postmaster.pid"
    old = pidfile.read_text().splitlines()
    assert server.stop() is True

    sleeper = _unrelated_process()
    try:
        # What a reboot or a new container leaves: the recorded PID is alive, but not postgres.
        pidfile.write_text("\n".join([str(sleeper.pid), *old[1:]]) + "\n")
        assert psutil.pid_exists(sleeper.pid)
        assert server.status().running is False and server.status().pid is None

        dsn = server.ensure_running()

        assert _select_one(dsn) == 1
        st = server.status()
        assert st.running and st.pid not in (None, sleeper.pid)
        assert sleeper.poll() is None, "the unrelated process must be left alone"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_lock_holder_killed_with_sigkill_does_not_block(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    server.ensure_running()
    assert server.stop() is True  # so the next ensure_running() must take the lock

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            "fh = open(sys.argv[1], 'a+')\n"
            "fcntl.flock(fh, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(600)\n",
            str(server.directory / "server.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    outcome: dict[str, object] = {}

    def start() -> None:
        try:
            outcome["dsn"] = EmbeddedServer(server.directory, FAST_SETTINGS).ensure_running()
        except BaseException as err:  # reported by the assertions below
            outcome["error"] = err

    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        waiter = threading.Thread(target=start, daemon=True)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive(), f"ensure_running() did not wait for the lock: {outcome}"

        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        waiter.join(60)
        assert not waiter.is_alive(), "ensure_running() is stuck after the lock holder died"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["dsn"] == server.dsn()
    assert _select_one(server.dsn()) == 1


def test_stop(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    server.ensure_running()
    pid = _pidfile_pid(server)
    assert server.stop() is True
    assert server.stop() is False
    st = server.status()
    assert st.initialized and not st.running and st.pid is None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (server.data / "postmaster.pid").exists()
    server.ensure_running()  # leave the shared server as the other tests expect it


# -- fresh directories ----------------------------------------------------------------------


def test_two_processes_start_one_server(fresh_dir: Callable[[], Path]) -> None:
    directory = fresh_dir()
    go = directory / "go"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pgrag.server import EmbeddedServer\n"
        "server = EmbeddedServer(Path(sys.argv[1]), settings={'fsync': 'off'})\n"
        "print('ready', flush=True)\n"
        "while not Path(sys.argv[2]).exists():\n"
        "    time.sleep(0.005)\n"
        "print(server.ensure_running(), flush=True)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(directory), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for p in procs:  # both imported and waiting: they call ensure_running() together
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    dsns = {out.strip() for out, _ in outputs}
    assert dsns == {EmbeddedServer(directory).dsn()}
    assert _select_one(dsns.pop()) == 1
    data = directory / "data"
    assert len(_postmasters(data)) == 1
    log = (directory / "postgres.log").read_text()
    assert log.count("starting PostgreSQL") == 1, log[-2000:]
    assert "FATAL" not in log, log[-2000:]


def test_cli_server_commands(fresh_dir: Callable[[], Path]) -> None:
    directory = fresh_dir()
    runner = CliRunner(env={"PGRAG_SERVER_DIR": str(directory)})

    before = runner.invoke(cli, ["server", "status", "--json"])
    assert before.exit_code == 0, before.output
    st = json.loads(before.stdout)
    assert st["running"] is False and st["initialized"] is False and st["pid"] is None
    assert st["directory"] == str(directory)

    start = runner.invoke(cli, ["server", "start"])
    assert start.exit_code == 0, start.output
    dsn = start.stdout.strip()
    assert dsn == EmbeddedServer(directory).dsn()
    assert dsn.startswith("postgresql://") and str(directory / "run") in dsn
    assert _select_one(dsn) == 1

    only_dsn = runner.invoke(cli, ["server", "status", "--dsn"])
    assert only_dsn.exit_code == 0
    assert only_dsn.stdout.strip() == dsn
    assert only_dsn.stderr == ""

    as_json = runner.invoke(cli, ["server", "status", "--json"])
    assert as_json.exit_code == 0
    st = json.loads(as_json.stdout)
    pid = int((directory / "data" / "postmaster.pid").read_text().splitlines()[0])
    assert st == {
        "directory": str(directory),
        "initialized": True,
        "running": True,
        "pid": pid,
        "dsn": dsn,
    }

    human = runner.invoke(cli, ["server", "status"])
    assert human.exit_code == 0
    assert f"yes (pid {pid})" in human.stdout
    assert f'psql "{dsn}"' in human.stdout

    stop = runner.invoke(cli, ["server", "stop"])
    assert stop.exit_code == 0
    assert stop.stderr.strip() == "stopped"
    again = runner.invoke(cli, ["server", "stop"])
    assert again.exit_code == 0
    assert again.stderr.strip() == "not running"

    down = runner.invoke(cli, ["server", "status", "--dsn"])
    assert down.exit_code == 0
    assert down.stdout.strip() == dsn
    assert "not running" in down.stderr
    assert json.loads(runner.invoke(cli, ["server", "status", "--json"]).stdout)["running"] is False
