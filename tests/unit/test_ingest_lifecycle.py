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


def test_write_batches_hold_more_documents_that_bring_their_own_vectors() -> None:
    # Batches bound what is embedded between commits: documents with their own vectors (one
    # chunk each, nothing to embed) count for 1/OWN_VECTOR_SHARE of a chunk; whole documents
    # are never split, and nothing is lost or repeated.
    from types import SimpleNamespace

    from pgrag.ingest.embed import OWN_VECTOR_SHARE, batches

    def doc(name: str, chunks: int, vector: bool) -> Any:
        file = SimpleNamespace(source=name, vector=[0.1] if vector else None)
        return SimpleNamespace(file=file, chunks=[object()] * chunks)

    own = [doc(f"v{i}", 1, True) for i in range(100)]
    sizes = [len(b) for b in batches(own, 4)]
    assert sizes == [4 * OWN_VECTOR_SHARE] * 3 + [100 - 3 * 4 * OWN_VECTOR_SHARE]
    plain = [doc(f"p{i}", 3, False) for i in range(5)]
    assert [[d.file.source for d in b] for b in batches(plain, 4)] == [
        ["p0", "p1"], ["p2", "p3"], ["p4"]
    ]  # fmt: skip
    mixed = plain[:2] + own[:OWN_VECTOR_SHARE]
    out = list(batches(mixed, 4))
    assert [d for b in out for d in b] == mixed and len(out) == 2
