"""Reading files for ingest: an unreadable file is a one-line error. Ingest over time, on a real
database: tests/integration/test_ingest_lifecycle.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pgrag.errors import InputError
from pgrag.ingest.loaders import load_path


def test_permission_denied_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root, who may read anything: the operating system's refusal is simulated.
    path = tmp_path / "secret.md"
    path.write_text("# Secret\n")
    real_open = Path.open

    def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    [(label, item)] = list(load_path(path))
    assert isinstance(item, InputError) and str(item).startswith("permission denied")
