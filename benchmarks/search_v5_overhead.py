"""What search_v5 adds to a keyword-only call it hands to search_v4, on SQuAD's questions.

The same questions go through `pgrag.search_v4(c, q, k => 10)` and
`pgrag.search_v5(c, q, k => 10)`, alternating per question, in one session, on the collection
`pgrag eval retrieval` loaded (default database squad_v4, its first collection). The first 200
calls of each are warm-up.

    .venv/bin/python benchmarks/search_v5_overhead.py --database squad_v4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.connect import resolve_dsn

SQUAD = Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--database", default="squad_v4")
    parser.add_argument("--squad", type=Path, default=SQUAD)
    parser.add_argument("--queries", type=int, default=3000)
    args = parser.parse_args()
    dsn = make_conninfo(resolve_dsn(args.dsn), dbname=args.database)
    migrate.upgrade(dsn)
    data = json.loads(args.squad.read_text())
    questions = [q["question"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]][
        : args.queries
    ]
    seconds: dict[str, list[float]] = {"search_v4": [], "search_v5": []}
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT name FROM pgrag.collections ORDER BY id LIMIT 1").fetchone()
        assert row is not None, f"{args.database} has no collection"
        for i, question in enumerate(questions):
            for name in ("search_v4", "search_v5") if i % 2 else ("search_v5", "search_v4"):
                t0 = time.perf_counter()
                conn.execute(
                    f"SELECT chunk_id FROM pgrag.{name}(%s, %s, k => 10)",  # noqa: S608
                    (row[0], question),
                ).fetchall()
                seconds[name].append(time.perf_counter() - t0)
    for name, values in seconds.items():
        kept = values[200:]
        print(
            f"{name}: p50 {statistics.median(kept) * 1000:.3f} ms, {len(kept) / sum(kept):.0f} q/s"
        )
    ratio = statistics.median(seconds["search_v5"][200:]) / statistics.median(
        seconds["search_v4"][200:]
    )
    print(f"p50 ratio search_v5 / search_v4: {ratio:.3f}")


if __name__ == "__main__":
    main()
