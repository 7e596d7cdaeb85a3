"""The embedded PostgreSQL launcher (pgrag.server) and `pgrag server ...`.

Every server lives in its own temporary directory under /tmp (not $HOME: as root the server
runs as the OS user ``pgrag``, which must traverse every parent) and is stopped in a finally.
Tests that do not need a fresh directory share one server per module; each of them starts by
calling ensure_running() (the fast path when it is up), so they do not depend on their order.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
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
from pgrag.db.server import SYSTEM_USER, EmbeddedServer, psql_path
from pgrag.errors import ServerError

FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _new_dir(long: bool = False) -> Path:
    # A long path does not leave room for run/.s.PGSQL.5432 in sun_path: the socket then
    # lives in /tmp/pgrag-<hash>.
    prefix = "pgrag-test-srv-" + ("x" * 90 if long else "")
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")).resolve()


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _cleanup(directory: Path) -> None:
    server = EmbeddedServer(directory)
    try:
        server.stop()
    finally:
        _remove(directory)
        if server.socket_dir.parent != directory:  # the /tmp fallback
            _remove(server.socket_dir)


def _server_uid() -> int:
    return pwd.getpwnam(SYSTEM_USER).pw_uid if os.geteuid() == 0 else os.geteuid()


SUPERUSER_CHECK = "select rolsuper from pg_roles where rolname = current_user"


def _psql(dsn: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(psql_path()), "-X", "-A", "-t", dsn, "-c", SUPERUSER_CHECK],
        capture_output=True,
        text=True,
        timeout=30,
        user=user,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )


def _nobody_available() -> bool:
    if os.geteuid() != 0 or not Path("/usr/bin/perl").exists():
        return False
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


# Another local user, trying to open the server's socket. perl (perl-base, essential on
# Debian) rather than psql or this virtualenv's python, which 'nobody' may not be able to reach.
CONNECT_AS_NOBODY = (
    'use IO::Socket::UNIX; IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!\\n";'
    ' print "connected\\n";'
)


def _nobody_connects(socket_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/usr/bin/perl", "-e", CONNECT_AS_NOBODY, str(socket_path)],
        capture_output=True,
        text=True,
        timeout=30,
        user="nobody",
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )


needs_nobody = pytest.mark.skipif(
    not _nobody_available(),
    reason="needs root, an OS user 'nobody' and /usr/bin/perl",
)


def _assert_private_socket(server: EmbeddedServer) -> None:
    st = os.lstat(server.socket_dir)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700, oct(st.st_mode)
    assert st.st_uid == _server_uid()
    sock = os.lstat(server.socket_dir / ".s.PGSQL.5432")
    assert stat.S_ISSOCK(sock.st_mode)
    assert stat.S_IMODE(sock.st_mode) == 0o700, oct(sock.st_mode)


def _assert_only_the_owner_connects(server: EmbeddedServer) -> None:
    """Trust authentication: whoever reaches the socket is superuser, so nobody else may."""
    dsn = server.status().dsn
    mine = _psql(dsn)
    assert mine.returncode == 0, mine.stderr
    assert mine.stdout.strip() == "t"
    theirs = _nobody_connects(server.socket_dir / ".s.PGSQL.5432")
    assert theirs.returncode != 0, f"'nobody' connected: {theirs.stdout!r}"
    assert "Permission denied" in theirs.stderr, theirs.stderr


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
def fresh_dir() -> Iterator[Callable[..., Path]]:
    made: list[Path] = []

    def make(long: bool = False) -> Path:
        made.append(_new_dir(long))
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


def test_status_exposes_the_bundled_psql(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    st = server.status()
    assert st.psql == psql_path()
    assert st.psql.is_file() and os.access(st.psql, os.X_OK)


def test_socket_and_its_directory_are_private(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    server.ensure_running()
    assert server.socket_dir == server.directory / "run"
    _assert_private_socket(server)


@needs_nobody
def test_other_os_users_cannot_connect(shared: tuple[EmbeddedServer, str]) -> None:
    server, _ = shared
    server.ensure_running()
    _assert_only_the_owner_connects(server)


def test_socket_directory_left_open_by_an_older_version_is_tightened(
    shared: tuple[EmbeddedServer, str],
) -> None:
    server, _ = shared
    server.ensure_running()
    pid = _pidfile_pid(server)
    server.socket_dir.chmod(0o755)  # what pgrag made before the socket was private

    server.ensure_running()

    assert stat.S_IMODE(os.lstat(server.socket_dir).st_mode) == 0o700
    assert _pidfile_pid(server) == pid, "tightening must not restart the server"


@pytest.mark.parametrize("first_line", ["-12345", "-unrelated", "0"])
def test_pidfile_with_a_non_positive_pid(
    shared: tuple[EmbeddedServer, str], first_line: str
) -> None:
    # postgres writes -PID while a standalone backend (initdb's bootstrap, --single) owns the
    # data directory; psutil rejects such PIDs with ValueError.
    server, _ = shared
    server.ensure_running()
    pidfile = server.data / "postmaster.pid"
    rest = pidfile.read_text().splitlines()[1:]
    assert server.stop() is True

    sleeper = _unrelated_process()
    try:
        if first_line == "-12345" and psutil.pid_exists(12345):
            pytest.skip("PID 12345 exists here")
        if first_line == "-unrelated":  # postgres itself would see a live process
            first_line = f"-{sleeper.pid}"
        pidfile.write_text("\n".join([first_line, *rest]) + "\n")

        st = server.status()
        assert not st.running and st.pid is None

        dsn = server.ensure_running()

        assert _select_one(dsn) == 1
        st = server.status()
        assert st.running and st.pid is not None and st.pid > 0
        assert sleeper.poll() is None, "the unrelated process must be left alone"
    finally:
        sleeper.kill()
        sleeper.wait()


# -- fresh directories ----------------------------------------------------------------------


def test_two_processes_start_one_server(fresh_dir: Callable[..., Path]) -> None:
    directory = fresh_dir()
    go = directory / "go"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pgrag.db.server import EmbeddedServer\n"
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


def test_cli_server_commands(fresh_dir: Callable[..., Path]) -> None:
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
        "psql": str(psql_path()),
        "replication": None,  # (neither a standby nor a primary with standbys)
        "replication_problem": False,
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
    stopped = runner.invoke(cli, ["server", "status"])
    assert stopped.exit_code == 3  # pg_ctl's "not running", for scripts
    assert "running:   no" in stopped.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another OS user")
def test_unreachable_server_dir_as_root_is_a_clear_error() -> None:
    closed = Path(tempfile.mkdtemp(prefix="pgrag-closed-", dir="/tmp"))  # mode 0700, root's
    try:
        with pytest.raises(ServerError, match=r"cannot reach .*chmod o\+x"):
            EmbeddedServer(closed / "server").ensure_running()
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_initdb_killed_half_way_is_redone(fresh_dir: Callable[..., Path]) -> None:
    directory = fresh_dir()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from pgrag.db.server import EmbeddedServer\n"
        "EmbeddedServer(Path(sys.argv[1]), settings={'fsync': 'off'}).ensure_running()\n"
    )
    # Its own session, so that killing the group also kills initdb and its bootstrap backend.
    proc = subprocess.Popen([sys.executable, "-c", code, str(directory)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(directory.glob("data*/PG_VERSION")):  # among initdb's first files
            assert proc.poll() is None, "ensure_running() ended before initdb was under way"
            assert time.monotonic() < deadline, "initdb never started"
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    server = EmbeddedServer(directory, settings=FAST_SETTINGS)
    assert not server.status().initialized, "a half-initialised data directory looks usable"

    dsn = server.ensure_running()

    assert _select_one(dsn) == 1
    assert server.status().initialized
    assert list(directory.glob("data.initdb-*")) == []


def test_leftover_initdb_directory_is_removed(fresh_dir: Callable[..., Path]) -> None:
    directory = fresh_dir()
    leftover = directory / "data.initdb-99999"
    (leftover / "base").mkdir(parents=True)
    (leftover / "PG_VERSION").write_text("18\n")
    server = EmbeddedServer(directory, settings=FAST_SETTINGS)
    assert not server.status().initialized

    assert _select_one(server.ensure_running()) == 1

    assert not leftover.exists()
    assert sorted(p.name for p in directory.glob("data*")) == ["data"]
    st = os.lstat(directory / "data")
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == _server_uid()


def test_long_server_path_puts_a_private_socket_directory_in_tmp(
    fresh_dir: Callable[..., Path],
) -> None:
    server = EmbeddedServer(fresh_dir(long=True), settings=FAST_SETTINGS)
    assert server.socket_dir.parent == Path(tempfile.gettempdir())
    assert server.socket_dir.name.startswith("pgrag-")
    assert not server.socket_dir.exists()

    dsn = server.ensure_running()

    assert _select_one(dsn) == 1
    _assert_private_socket(server)
    if _nobody_available():
        _assert_only_the_owner_connects(server)


def _symlink_to_a_lookalike(path: Path) -> None:
    # Everything about the target passes the checks: only the symlink itself must be refused.
    target = Path(tempfile.mkdtemp(prefix="pgrag-test-lookalike-", dir="/tmp"))
    os.chown(target, _server_uid(), -1)
    path.symlink_to(target)


def _directory_owned_by_someone_else(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can create a directory owned by another user")
    path.mkdir(mode=0o700)
    os.chown(path, pwd.getpwnam("nobody").pw_uid, -1)


def _directory_open_to_others(path: Path) -> None:
    path.mkdir()
    path.chmod(0o755)
    os.chown(path, _server_uid(), -1)


@pytest.mark.parametrize(
    "plant", [_symlink_to_a_lookalike, _directory_owned_by_someone_else, _directory_open_to_others]
)
def test_untrusted_socket_directory_in_tmp_is_refused(
    fresh_dir: Callable[..., Path], plant: Callable[[Path], None]
) -> None:
    server = EmbeddedServer(fresh_dir(long=True), settings=FAST_SETTINGS)
    assert not server.socket_dir.exists()
    target = None
    try:
        plant(server.socket_dir)  # what another local user could create first
        if server.socket_dir.is_symlink():
            target = server.socket_dir.resolve()

        with pytest.raises(ServerError) as raised:
            server.ensure_running()

        message = str(raised.value)
        assert str(server.socket_dir) in message
        assert "remove it" in message and "PGRAG_SERVER_DIR" in message
        assert not server.status().running
        assert _postmasters(server.data) == []
    finally:
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)


def test_a_large_log_is_rotated_at_start(shared: tuple[EmbeddedServer, str]) -> None:
    from pgrag.db.server import LOG_LIMIT

    server, _ = shared
    server.stop()
    with open(server.log, "ab") as fh:
        fh.write(b"x" * (LOG_LIMIT + 1))
    server.ensure_running()
    previous = server.log.with_name("postgres.log.1")
    assert previous.stat().st_size > LOG_LIMIT
    assert server.log.stat().st_size < LOG_LIMIT
    assert "ready to accept connections" in server.log.read_text()
