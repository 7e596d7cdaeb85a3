"""Files made by other programs (issue 20's check: "office suites' own exports, real mail"),
ingested as a user would, and each outcome counted: read, skipped with a warning, failed.

The files come from where this machine may fetch them, and none is committed:

- **Word and PowerPoint files made by Word and PowerPoint** (Windows and Mac, several
  versions), plus some written by the libraries themselves: the test files in the source
  distributions of python-docx and python-pptx, from the package index;
- **Excel workbooks made by Excel and by other programs**: xlsx2csv's test files (its source
  distribution), including deliberately odd ones (no cell ids, inline strings, namespaces);
- **mail written by many mailers, and deliberately odd messages**: CPython's own email test
  messages (`test_email/data/msg_*.txt`, Debian's `libpython3.11-testsuite`), saved as .eml.

Per source: files, documents read, warnings, failures (each failure's line printed), so that a
regression in a format shows as a count that moved and a line that names the file.

    apt-get install libpython3.11-testsuite          # the mail (optional)
    PYTHONPATH=$PWD .venv/bin/python benchmarks/foreign_files.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from _bench import fresh_database, log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402

MARKER = "pgrag benchmarks/foreign_files.py"
SDISTS = {  # source distribution -> suffixes of the files taken from it
    "python-docx==1.2.0": (".docx",),
    "python-pptx==1.0.2": (".pptx",),
    "xlsx2csv==0.8.6": (".xlsx", ".xlsm"),
}
MAIL = Path(f"/usr/lib/python{sys.version_info.major}.{sys.version_info.minor}/test/test_email")


def fetch(spec: str, cache: Path, into: Path, suffixes: tuple[str, ...]) -> int:
    """The files of ``suffixes`` in a source distribution (pip download, cached)."""
    name = spec.split("==")[0].replace("-", "_").lower()
    found = [p for p in cache.glob("*.tar.gz") if p.name.lower().startswith(name)]
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
            + [spec, "-d", str(cache)],
            check=True,
        )
        found = [p for p in cache.glob("*.tar.gz") if p.name.lower().startswith(name)]
    count = 0
    with tarfile.open(found[0]) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.lower().endswith(suffixes):
                data = archive.extractfile(member)
                if data is not None:
                    (into / member.name.replace("/", "_")).write_bytes(data.read())
                    count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="server (default: PGRAG_DSN, PG*, the embedded server)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/pgrag-bench/sdists")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)

    dsn = fresh_database(args.dsn, "pgrag_bench_foreign", MARKER)
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders: dict[str, Path] = {}
        for spec, suffixes in SDISTS.items():
            folder = folders[spec] = Path(tmp) / spec.split("==")[0]
            folder.mkdir()
            log(f"{spec}: {fetch(spec, args.cache, folder, suffixes)} files")
        if (MAIL / "data").is_dir():
            folder = folders["CPython test_email"] = Path(tmp) / "mail"
            folder.mkdir()
            for message in sorted((MAIL / "data").glob("msg_*.txt")):
                shutil.copy(message, folder / f"{message.stem}.eml")
        else:
            log(f"no {MAIL}: apt-get install libpython3.11-testsuite for the mail")
        db = pgrag.connect(dsn)
        try:
            for source, folder in folders.items():
                warnings: list[str] = []
                done = pgrag.ingest(
                    db,
                    [folder],
                    collection=folder.name,
                    on_warning=lambda label, why, w=warnings: w.append(f"{label}: {why}"),
                )
                report[source] = {
                    "files": sum(1 for _ in folder.iterdir()),
                    "documents read": done.count("added"),
                    "stored once (same text as another)": done.count("duplicate"),
                    "warnings": len(warnings),
                    "failed": len(done.failed),
                    "failures": [f"{Path(f.path).name}: {f.reason}" for f in done.failed],
                }
        finally:
            db.close()
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
