"""The embedded PostgreSQL launcher (pgrag.server) and `pgrag server ...`.

Every server lives in its own temporary directory under /tmp (not $HOME: as root the server
runs as the OS user ``pgrag``, which must traverse every parent) and is stopped in a finally.
Tests that do not need a fresh directory share one server per module; each of them starts by
calling ensure_running() (the fast path when it is up), so they do not depend on their order.
"""

from __future__ import annotations

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
