"""The embedded PostgreSQL launcher's directory, as the settings give it. Starting, stopping
and recovering real servers: tests/integration/test_embedded_server.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from pgrag.db.server import EmbeddedServer


def test_the_server_directory_comes_from_the_settings_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag.db.server import default_dir

    monkeypatch.setenv("PGRAG_SERVER_DIR", str(tmp_path / "from-env"))
    # The value given is used; none given is pgrag's own directory, not the environment's.
    assert default_dir(str(tmp_path / "given")) == tmp_path / "given"
    assert default_dir(None) != tmp_path / "from-env"
    assert default_dir(None) == default_dir("")
    # A server made without a directory reads PGRAG_SERVER_DIR (the CLI's `pgrag server`).
    assert EmbeddedServer().directory == tmp_path / "from-env"


def test_directory_problem_names_what_is_in_the_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag.db import server

    monkeypatch.setattr(server, "_is_root", lambda: False)
    assert server.directory_problem(tmp_path / "new" / "server") is None
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    problem = server.directory_problem(blocker / "server")
    assert problem is not None and f"{blocker} is not a directory" in problem

    monkeypatch.setattr(server, "_is_root", lambda: True)
    # Not under tmp_path: its parents are closed to other users already.
    closed = Path(tempfile.mkdtemp(prefix="closed dir ", dir=tempfile.gettempdir()))
    try:
        closed.chmod(0o700)
        problem = server.directory_problem(closed / "pgrag")
        assert problem is not None and "cannot reach" in problem
        assert f"`chmod o+x '{closed}'`" in problem  # pasted into a shell: that directory
        closed.chmod(0o711)
        assert server.directory_problem(closed / "pgrag") is None
    finally:
        closed.rmdir()
