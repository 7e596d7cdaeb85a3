"""The embedded PostgreSQL launcher's directory, as the settings give it. Starting, stopping
and recovering real servers: tests/integration/test_embedded_server.py.
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
