"""Upload directories: named for the service's process, and those a killed service left behind
(its pid no longer running) removed at the next start, never a running one's or another
user's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgrag.service.uploads import remove_stale_upload_directories, upload_directory

pytestmark = pytest.mark.skipif(os.name != "posix", reason="processes are tested by pid on POSIX")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # noqa: S603 - our own interpreter
    child.wait()  # (reaped: its pid names no process)
    return child.pid


def test_a_request_directory_is_named_for_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with upload_directory() as tmp:
        path = Path(tmp)
        assert path.parent == tmp_path
        assert path.name.startswith(f"pgrag-upload-{os.getpid()}-")
        assert path.stat().st_mode & 0o777 == 0o700
        # A running service's directory is never stale.
        assert remove_stale_upload_directories(tmp_path) == []
        assert path.exists()
    assert not path.exists()


def test_only_directories_of_processes_gone_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"pgrag-upload-{_dead_pid()}-k1ll3d"
    (dead / "0").mkdir(parents=True)
    (dead / "0" / "salaries.md").write_text("everyone's salary")
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:  # noqa: S603
        try:
            kept = [
                tmp_path / f"pgrag-upload-{os.getpid()}-mine",  # this process's
                tmp_path / f"pgrag-upload-{alive.pid}-running",  # another running service's
                tmp_path / "pgrag-upload-old5tyle",  # no pid in the name: not judged
                tmp_path / "something-else-1-x",
            ]
            for path in kept:
                path.mkdir()
            not_a_directory = tmp_path / f"pgrag-upload-{_dead_pid()}-file"
            not_a_directory.write_text("not a directory")
            removed = remove_stale_upload_directories(tmp_path)
        finally:
            alive.kill()
    assert removed == [dead] and not dead.exists()
    assert all(path.is_dir() for path in kept) and not_a_directory.is_file()
