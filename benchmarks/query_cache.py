"""The query-embedding cache: what a repeated question saves, in a new process and in one.

Issue 6 asks that a repeated question skip the encoder. Two measurements, on the handbook
(examples/handbook) in a fresh database, with the bundled all-MiniLM-L6-v2:

- **A new process per question** (the terminal: `pgrag search "..."`): wall time of the
  command for a question never asked (the model is loaded and run) and for the same question
  asked again (its vector comes from `pgrag.query_embedding_cache`; torch is never imported),
  alternating, `--rounds` of each.
- **One process** (a Python program or a server): `pgrag.search` time for a question whose
  vector is in the in-process cache, in the database cache only, or in neither (encoded).

Medians and their ratios to the uncached case are printed; absolute times drift on this shared
machine, ratios much less.

    .venv/bin/python benchmarks/query_cache.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from _bench import fresh_database, log

import pgrag
from pgrag.embeddings import query_cache

ROOT = Path(__file__).resolve().parents[1]
MARKER = "pgrag query_cache benchmark (benchmarks/query_cache.py); safe to drop"


def cli_seconds(dsn: str, question: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [str(Path(sys.executable).parent / "pgrag"), "--dsn", dsn, "search", question,
         "-c", "handbook", "-k", "3"],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    dsn = fresh_database(args.dsn, "pgrag_bench_query_cache", MARKER)
    db = pgrag.connect(dsn)
    pgrag.ingest(db, [ROOT / "examples" / "handbook"], collection="handbook")

    log(f"new process per question: {args.rounds} rounds")
    fresh, repeated = [], []
    for i in range(args.rounds):
        question = f"How many vacation days do I get in year {i}?"
        fresh.append(cli_seconds(dsn, question))
        repeated.append(cli_seconds(dsn, question))
    log(f"one process: {args.queries} questions")
    times: dict[str, list[float]] = {"encoded": [], "database": [], "memory": []}
    pgrag.search(db, "warm-up", collection="handbook")
    for i in range(args.queries):
        question = f"What is the refund window for plan number {i}?"
        for case in ("encoded", "memory"):
            t0 = time.perf_counter()
            pgrag.search(db, question, collection="handbook", k=3)
            times[case].append(time.perf_counter() - t0)
        query_cache.clear_memory()
        t0 = time.perf_counter()
        pgrag.search(db, question, collection="handbook", k=3)
        times["database"].append(time.perf_counter() - t0)
    db.close()

    def med(v: list[float]) -> float:
        return statistics.median(v)

    print("| case | median | ratio to uncached |")
    print("|---|---:|---:|")
    print(f"| `pgrag search`, new question (model loaded) | {med(fresh):.2f} s | 1.000 |")
    print(
        f"| `pgrag search`, same question again (database cache) | {med(repeated):.2f} s"
        f" | {med(repeated) / med(fresh):.3f} |"
    )
    base = med(times["encoded"])
    for case, label in (
        ("encoded", "`pgrag.search`, encoded"),
        ("database", "`pgrag.search`, database cache"),
        ("memory", "`pgrag.search`, in-process cache"),
    ):
        print(f"| {label} | {med(times[case]) * 1000:.2f} ms | {med(times[case]) / base:.3f} |")


if __name__ == "__main__":
    main()
