"""scripts/setup: a finished install is stamped, an interrupted one is repaired by the next
run, a run with nothing changed skips pip, and a server directory the server cannot use stops
it before the install.

The runs are real ``bash scripts/setup`` runs on a copy of the files it reads, into a real
virtualenv (made without pip, so in milliseconds) whose ``pip`` is a fake: a module that logs
its arguments and writes distributions as pip does, or stops half-way as a killed pip does.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PIP = """
import os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if "download" in args:
    sys.exit(1)  # no local torch wheel: (the fake) PyTorch index then
site = Path(__file__).resolve().parent.parent
bin_dir = Path(sys.prefix) / "bin"
if "-e" in args:
    info = site / "mypy-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\\nName: mypy\\nVersion: 1.0\\n")
    if os.environ.get("FAKE_PIP_DIE"):
        os.kill(os.getpid(), 9)  # killed before the console script and RECORD are written
    (bin_dir / "mypy").write_text("#!/bin/sh\\n")
    rel = os.path.relpath(bin_dir / "mypy", site)
    (info / "RECORD").write_text(
        f"{rel},,\\nmypy-1.0.dist-info/METADATA,,\\nmypy-1.0.dist-info/RECORD,,\\n"
    )
"""


def _state() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setup_state", ROOT / "scripts/setup_state.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The files scripts/setup reads, copied (pgrag itself: check-server-dir imports it)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup", "scripts/setup_state.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, root / name)
    shutil.copytree(ROOT / "pgrag", root / "pgrag", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def fake_venv(checkout: Path) -> Path:
    """A virtualenv with no packages but a fake pip and a (metadata-only) torch."""
    where = checkout / ".venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    site = next(where.glob("lib/python*/site-packages"))
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text("")
    (site / "pip" / "__main__.py").write_text(FAKE_PIP)
    torch = site / "torch-2.13.0.dist-info"
    torch.mkdir()
    (torch / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n")
    (torch / "RECORD").write_text("torch-2.13.0.dist-info/METADATA,,\n")
    return where


def setup(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "VIRTUAL_ENV"))}
    clean.update({"PGRAG_DSN": "postgresql://elsewhere/db", "PYTHON": sys.executable, **env})
    clean.update(FAKE_PIP_LOG=str(checkout / "pip.log"))
    return subprocess.run(
        ["bash", str(checkout / "scripts/setup"), *args],
        cwd=checkout,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def pip_calls(checkout: Path) -> list[str]:
    log = checkout / "pip.log"
    return log.read_text().splitlines() if log.exists() else []


def test_an_interrupted_setup_is_repaired_and_a_finished_one_is_not_repeated(
    checkout: Path, fake_venv: Path
) -> None:
    killed = setup(checkout, "dev", FAKE_PIP_DIE="1")
    assert killed.returncode != 0
    assert not (fake_venv / ".pgrag-setup").exists()
    assert not (fake_venv / "bin" / "mypy").exists()  # what the issue saw: exit 127 later

    again = setup(checkout, "dev")
    assert again.returncode == 0, again.stderr
    assert "reinstalling mypy" in again.stderr
    assert (fake_venv / "bin" / "mypy").exists()
    assert pip_calls(checkout)[-1] == "--disable-pip-version-check install --quiet -e .[dev]"
    assert (fake_venv / ".pgrag-setup").exists()

    calls = len(pip_calls(checkout))
    unchanged = setup(checkout, "dev")
    assert unchanged.returncode == 0, unchanged.stderr
    assert "nothing changed" in unchanged.stderr
    assert len(pip_calls(checkout)) == calls  # pip not run
    assert setup(checkout).returncode == 0  # fewer extras than installed: nothing to do
    assert len(pip_calls(checkout)) == calls

    # A change to what the install depends on runs pip again.
    with (checkout / "pyproject.toml").open("a") as f:
        f.write("\n# changed\n")
    changed = setup(checkout, "dev")
    assert changed.returncode == 0, changed.stderr
    assert len(pip_calls(checkout)) == calls + 1


def test_a_server_directory_the_server_cannot_use_stops_setup_before_the_install(
    checkout: Path, tmp_path: Path
) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    # As root the server's OS user must enter every parent (o+x); otherwise this user must
    # be able to write where the directory is to be made.
    closed.chmod(0o700 if os.geteuid() == 0 else 0o500)
    try:
        result = setup(checkout, "dev", PGRAG_DSN="", PGRAG_SERVER_DIR=str(closed / "pgrag"))
    finally:
        closed.chmod(0o700)
    assert result.returncode == 1
    assert result.stderr.startswith("scripts/setup: the embedded server")
    assert "PGRAG_SERVER_DIR" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (checkout / ".venv").exists() and pip_calls(checkout) == []


def test_the_stamp_covers_the_inputs_and_the_extras(checkout: Path, fake_venv: Path) -> None:
    state = _state()
    assert not state.satisfied(fake_venv, "", checkout)
    state.record(fake_venv, "test", checkout)
    assert state.satisfied(fake_venv, "", checkout) and state.satisfied(fake_venv, "test", checkout)
    assert not state.satisfied(fake_venv, "dev", checkout)
    state.record(fake_venv, "dev", checkout)
    assert state.satisfied(fake_venv, "test,dev", checkout)
    (checkout / "scripts/setup").write_text("#!/usr/bin/env bash\n# another setup\n")
    assert not state.satisfied(fake_venv, "", checkout)


def test_broken_distributions_are_found(tmp_path: Path) -> None:
    state = _state()
    site = tmp_path / "site"
    for name, record in (("whole", "whole.py,,\n"), ("partial", "gone.py,,\n"), ("norecord", None)):
        info = site / f"{name}-1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1\n")
        if record is not None:
            (info / "RECORD").write_text(record + "x/__pycache__/x.cpython-311.pyc,,\n")
    (site / "whole.py").write_text("")
    assert sorted(state.repair([str(site)])) == ["norecord", "partial"]
    assert sorted(p.name for p in site.iterdir()) == ["whole-1.dist-info", "whole.py"]
