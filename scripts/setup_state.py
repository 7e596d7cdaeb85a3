"""What scripts/setup needs to know that bash is bad at; the standard library only (it runs
before pgrag's dependencies are installed, with the system Python or the new virtualenv's).

    setup_state.py check-server-dir        can the embedded server use its directory? (fail fast)
    setup_state.py satisfied VENV EXTRAS   exit 0 when VENV's stamp says EXTRAS are installed
    setup_state.py record VENV EXTRAS      write the stamp (only after a successful install)
    setup_state.py forget VENV             remove the stamp (before an install starts)
    setup_state.py repair                  remove half-installed distributions (VENV's python)
    setup_state.py has DISTRIBUTION        exit 0 when it is installed (by its metadata)

The stamp (``VENV/.pgrag-setup``) holds a digest of what the install depends on: pyproject.toml,
this script and scripts/setup, the virtualenv's Python version and the checkout's path, and
the extras installed with it. It is written last, so a setup killed half-way leaves none, and
the next run installs again, after ``repair`` has removed every distribution whose files an
interrupted pip left incomplete (pip would otherwise call it installed: `.venv/bin/mypy: No such
file or directory`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = ".pgrag-setup"
INPUTS = ("pyproject.toml", "scripts/setup", "scripts/setup_state.py")


def extras_of(text: str) -> list[str]:
    """``"dev,local"`` as a sorted list (``""``: none)."""
    return sorted({e.strip().lower() for e in text.split(",") if e.strip()})


def digest(venv: Path, root: Path = ROOT) -> str:
    """What an install into ``venv`` depends on, but the extras."""
    h = hashlib.sha256()
    for name in INPUTS:
        h.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    h.update(str(root).encode() + b"\0" + str(venv.resolve()).encode() + b"\0")
    h.update(python_version(venv).encode())
    return h.hexdigest()


def python_version(venv: Path) -> str:
    """The virtualenv's Python, as its pyvenv.cfg records it (no process started)."""
    cfg = venv / "pyvenv.cfg"
    lines = cfg.read_text(encoding="utf-8").splitlines() if cfg.exists() else []
    keys = ("version", "version_info", "home", "executable")
    return "\n".join(line.strip() for line in lines if line.split("=")[0].strip() in keys)


def read_stamp(venv: Path) -> dict[str, object] | None:
    try:
        value = json.loads((venv / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def satisfied(venv: Path, extras: str, root: Path = ROOT) -> bool:
    """Whether a completed setup with the same inputs installed (at least) these extras."""
    stamp = read_stamp(venv)
    if stamp is None or stamp.get("digest") != digest(venv, root):
        return False
    done = stamp.get("extras")
    return isinstance(done, list) and set(extras_of(extras)) <= set(done)


def record(venv: Path, extras: str, root: Path = ROOT) -> None:
    """Stamp ``venv`` as set up with ``extras`` (and those a stamp of the same inputs had)."""
    key = digest(venv, root)
    stamp = read_stamp(venv) or {}
    before = stamp.get("extras") if stamp.get("digest") == key else []
    done = set(extras_of(extras)) | set(before if isinstance(before, list) else [])
    tmp = venv / (STAMP + ".tmp")
    tmp.write_text(json.dumps({"digest": key, "extras": sorted(done)}) + "\n", encoding="utf-8")
    os.replace(tmp, venv / STAMP)


def forget(venv: Path) -> None:
    (venv / STAMP).unlink(missing_ok=True)


def broken(dists: Iterable[importlib.metadata.Distribution]) -> list[tuple[str, Path]]:
    """The distributions an interrupted install left incomplete: no name, no RECORD, or a file
    their RECORD lists missing (compiled ``.pyc`` files aside: Python writes them again)."""
    out = []
    for dist in dists:
        where = getattr(dist, "_path", None)  # the .dist-info directory
        if not isinstance(where, Path) or not where.name.endswith(".dist-info"):
            continue
        name = dist.metadata["Name"] if (where / "METADATA").exists() else None
        files = dist.files if (where / "RECORD").exists() else None
        if not name or files is None:
            out.append((name or where.name, where))
            continue
        for f in files:
            if f.suffix == ".pyc":
                continue
            if not Path(str(dist.locate_file(f))).exists():
                out.append((name, where))
                break
    return out


def repair(paths: Sequence[str] | None = None) -> list[str]:
    """Remove the metadata of every broken distribution on ``paths`` (default: this Python's
    site-packages), so that pip installs it again; the names removed."""
    if paths is None:
        paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    found = broken(importlib.metadata.distributions(path=list(paths)))
    for _, where in found:
        shutil.rmtree(where, ignore_errors=True)
    return [name for name, _ in found]


def server_dir_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why the embedded server could not use its directory, or None (nothing to check when a
    DSN or libpq's PG* variables say another server is used)."""
    sys.path.insert(0, str(ROOT))
    from pgrag import config
    from pgrag.db.dsn import LIBPQ_ENV
    from pgrag.db.server import default_dir, directory_problem

    env = dict(os.environ if environ is None else environ)
    settings = config.from_env(env)
    if settings.dsn or any(env.get(name) for name in LIBPQ_ENV):
        return None
    return directory_problem(default_dir(settings.server_dir))


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "check-server-dir":
        problem = server_dir_problem()
        if problem:
            print(f"scripts/setup: {problem}", file=sys.stderr)
            return 1
        return 0
    if command == "satisfied" and len(args) == 2:
        return 0 if satisfied(Path(args[0]), args[1]) else 1
    if command == "record" and len(args) == 2:
        record(Path(args[0]), args[1])
        return 0
    if command == "forget" and len(args) == 1:
        forget(Path(args[0]))
        return 0
    if command == "repair" and not args:
        for name in repair():
            print(f"reinstalling {name} (an earlier install stopped half-way)", file=sys.stderr)
        return 0
    if command == "has" and len(args) == 1:
        try:
            importlib.metadata.distribution(args[0])
        except importlib.metadata.PackageNotFoundError:
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
