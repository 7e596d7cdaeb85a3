"""What row-level security costs a keyword search: the same queries as a superuser (no policies
apply), as the owner's kind of unrestricted role (pgrag_writer: one InitPlan per table read), and as
a pgrag_app session naming a principal (both InitPlans), on a collection that is all public.

    .venv/bin/python benchmarks/rls_overhead.py --dsn DSN --collection eval-squad-dev-v1.1 \\
        --questions ~/.cache/pgrag-bench/squad-dev-v1.1.json

Sessions take turns in blocks of 200 queries (k = 10, keyword only); the search statement alone
is timed; q/s per session and the ratio to the superuser's are printed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROLES = {"writer": "pgrag_bench_rls_writer", "app": "pgrag_bench_rls_app"}
BLOCK = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True, help="a superuser connection to the database")
    parser.add_argument("--collection", required=True)
    parser.add_argument("--questions", required=True, type=Path, help="SQuAD JSON")
    parser.add_argument("--queries", type=int, default=4000)
    args = parser.parse_args()
    data = json.loads(args.questions.read_text())
    questions = [
        qa["question"] for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]
    ][: args.queries]
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        for (kind, role), group in zip(ROLES.items(), ("pgrag_writer", "pgrag_app"), strict=True):
            if (
                conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
                is None
            ):
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role))
            )
    sessions = {
        "superuser": (psycopg.connect(args.dsn, autocommit=True), None),
        "pgrag_writer": (
            psycopg.connect(make_conninfo(args.dsn, user=ROLES["writer"]), autocommit=True),
            None,
        ),
        "pgrag_app as alice": (
            psycopg.connect(make_conninfo(args.dsn, user=ROLES["app"])),
            "alice",
        ),
    }
    statement = "SELECT chunk_id FROM pgrag.search_v5(%s, %s, k => 10)"
    seconds = dict.fromkeys(sessions, 0.0)
    counts = dict.fromkeys(sessions, 0)
    for name, (conn, who) in sessions.items():  # warm-up
        for q in questions[:100]:
            if who:
                with conn.transaction():
                    conn.execute("SELECT set_config('pgrag.principals', %s, true)", (who,))
                    conn.execute(statement, (args.collection, q)).fetchall()
            else:
                conn.execute(statement, (args.collection, q)).fetchall()
    for start in range(0, len(questions), BLOCK):
        block = questions[start : start + BLOCK]
        for name, (conn, who) in sessions.items():
            for q in block:
                # Only the search statement is timed; the app's set_config (one round trip
                # per transaction) is not.
                if who:
                    with conn.transaction():
                        conn.execute("SELECT set_config('pgrag.principals', %s, true)", (who,))
                        t0 = time.perf_counter()
                        rows = conn.execute(statement, (args.collection, q)).fetchall()
                        seconds[name] += time.perf_counter() - t0
                else:
                    t0 = time.perf_counter()
                    rows = conn.execute(statement, (args.collection, q)).fetchall()
                    seconds[name] += time.perf_counter() - t0
                counts[name] += bool(rows)
    base = len(questions) / seconds["superuser"]
    print(f"{len(questions)} SQuAD questions, keyword only, k = 10, one at a time")
    for name in sessions:
        qps = len(questions) / seconds[name]
        print(
            f"  {name:<20} {qps:8.0f} q/s  {qps / base:5.2f} x superuser"
            f"  ({counts[name]} with results)"
        )


if __name__ == "__main__":
    main()
