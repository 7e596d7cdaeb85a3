"""The one search engine (0.2) against release 0.1's search functions: same rows, and speed.

The database `pgrag eval retrieval` loaded (its first collection) is copied, and the copy is
downgraded to revision 0009, where search_v5 is release 0.1's (a plpgsql function over
search_with_model_v1 / search_v4 / search_v3). The same SQuAD questions then go through
`search_v5` in both databases, keyword-only, vector-only and hybrid, alternating database per
question (so background load hits both alike), on one connection each; the first 200 calls of
each are warm-up. Every question's rows (chunk ids, ranks, scores) must be identical.

    .venv/bin/python benchmarks/engine_vs_0_1.py --database pgrag --queries 3000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.dsn import resolve_dsn
from pgrag.embeddings.local import default_embedder

SQUAD = Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json"
COPY = "pgrag_bench_release_0_1"
QUERY = "SELECT chunk_id, rank, round(score::numeric, 12) FROM pgrag.search_v5(%s, %s, %s, k => 10)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--database", default="pgrag")
    parser.add_argument("--squad", type=Path, default=SQUAD)
    parser.add_argument("--queries", type=int, default=3000)
    args = parser.parse_args()
    admin = resolve_dsn(args.dsn)
    new = make_conninfo(admin, dbname=args.database)
    old = make_conninfo(admin, dbname=COPY)
    migrate.upgrade(new)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(COPY))
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(COPY), sql.Identifier(args.database)
            )
        )
    migrate.downgrade(old, "0009", confirm=True)
    data = json.loads(args.squad.read_text())
    questions = [q["question"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]][
        : args.queries
    ]
    vectors = default_embedder().embed(questions)
    seconds: dict[tuple[str, str], list[float]] = {}
    differ = 0
    with psycopg.connect(new, autocommit=True) as a, psycopg.connect(old, autocommit=True) as b:
        register_vector(a)
        register_vector(b)
        row = a.execute("SELECT name FROM pgrag.collections ORDER BY id LIMIT 1").fetchone()
        assert row is not None, f"{args.database} has no collection"
        for i, (question, vector) in enumerate(zip(questions, vectors, strict=True)):
            v = np.asarray(vector, dtype=np.float32)
            for mode, text, emb in (
                ("keyword", question, None),
                ("vector", None, v),
                ("hybrid", question, v),
            ):
                rows = {}
                order = (("0.2", a), ("0.1", b)) if i % 2 else (("0.1", b), ("0.2", a))
                for release, conn in order:
                    t0 = time.perf_counter()
                    rows[release] = conn.execute(QUERY, (row[0], text, emb)).fetchall()
                    seconds.setdefault((release, mode), []).append(time.perf_counter() - t0)
                differ += rows["0.1"] != rows["0.2"]
    print(f"{len(questions)} questions x 3 modes; rows that differ between releases: {differ}")
    for mode in ("keyword", "vector", "hybrid"):
        p50 = {r: statistics.median(seconds[(r, mode)][200:]) * 1000 for r in ("0.1", "0.2")}
        print(
            f"{mode:8} p50 0.1 {p50['0.1']:.3f} ms, 0.2 {p50['0.2']:.3f} ms,"
            f" ratio 0.2/0.1 {p50['0.2'] / p50['0.1']:.3f}"
        )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(COPY)))


if __name__ == "__main__":
    main()
