"""What a long `$in` list costs a filter: the evaluator released before filters were compiled
(each row walks the list) against today's (the list compiled once into a lookup object), on
the same rows in the same session.

    .venv/bin/python benchmarks/filter_in_list.py --dsn DSN [--rows 5000]

DSN is a database at pgrag's current schema (nothing is written to it: the rows are a temporary
table). For each list size, both evaluators count the rows a {"n": {"$in": [...]}} filter (and
its $nin) admits; the counts must agree, and the milliseconds and their ratio are printed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "integration" / "filter_reference.sql"
SIZES = (10, 100, 1000, 10000)


def _ms(conn: psycopg.Connection[Any], query: str, params: Sequence[Any]) -> tuple[int, float]:
    t0 = time.perf_counter()
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0]), (time.perf_counter() - t0) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rows", type=int, default=5000)
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(REFERENCE.read_text())
        conn.execute(
            "CREATE TEMP TABLE meta AS SELECT jsonb_build_object('n', i, 'tags',"
            " jsonb_build_array(i %% 7, 'x' || (i %% 11))) AS m FROM generate_series(1, %s) i",
            (args.rows,),
        )
        print(f"{args.rows} rows; milliseconds per count (old / compiled, ratio)")
        results = []
        for size in SIZES:
            values = list(range(args.rows - size // 2, args.rows - size // 2 + size))
            for op in ("$in", "$nin"):
                f = Jsonb({"n": {op: values}})
                old_n, old_ms = _ms(
                    conn,
                    "SELECT count(*) FROM meta WHERE pg_temp.filter_match_reference(m, %s)",
                    (f,),
                )
                new_n, new_ms = _ms(
                    conn,
                    "WITH f AS MATERIALIZED (SELECT pgrag.filter_check(%s) AS c)"
                    " SELECT count(*) FROM meta, f WHERE pgrag.filter_match(m, f.c)",
                    (f,),
                )
                assert old_n == new_n, (size, op, old_n, new_n)
                ratio = old_ms / new_ms
                print(f"  {op:<4} {size:>6} values: {old_ms:10.1f} / {new_ms:8.1f}  x{ratio:8.1f}")
                results.append(
                    {"op": op, "values": size, "old_ms": old_ms, "new_ms": new_ms, "rows": old_n}
                )
        print(json.dumps(results))


if __name__ == "__main__":
    main()
