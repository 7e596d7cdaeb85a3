"""Partitioned vectors against today's layout, on scale_bench.py's million chunks, in one run;
and the online migration between them, measured on that populated database.

Issue 21 (item 2): "p50/p95 of a small collection's hybrid search and HNSW recall@10,
partitioned vs today, in one run", and "an online migration from today's layout in batches
(searches keep working during it; killed, it resumes), measured on a populated database".

The source is scale_bench.py's database as the release before partitions left it (revision
0014: one pgrag.chunk_embeddings, one HNSW index over every collection's vectors, that release's
search_v5). It is copied (CREATE DATABASE ... TEMPLATE) and the copy is migrated as a user
would: `pgrag db partition` run as a subprocess and killed (SIGKILL) a third of the way through
its copy, then run again to the end (it resumes), with a second connection searching the copy
all the while (hybrid calls on a small and a median collection, counted, timed, every error
kept); then `pgrag db upgrade` switches over (timed: the moment writes wait). Then the same
queries go to both databases, taking turns per query (one server, one connection each): for
the 3 smallest, 3 median and 3 largest collections, `search_v5` hybrid, vector and keyword
calls (k = 10), p50/p95 per arm, vector recall@10 against numpy's exact top 10 over the
collection's vectors, and how many HNSW index scans each database made. Table and index sizes
of both are reported.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_bench.py   # the corpus (release at 0014)
    PYTHONPATH=$PWD .venv/bin/python benchmarks/partition_bench.py --out partition.json

The source must still be at revision 0014 (scale_bench.py --reuse upgrades it, which this
release refuses above 100,000 vectors until `pgrag db partition` ran: this benchmark is that
path). The copy is kept (--target) unless --drop.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _bench import Phases, database_exists, drop_database, latency, log, mb
from hnsw_recall import draw as draw_vectors
from hnsw_recall import make_mixture, register_vector
from psycopg import sql
from psycopg.conninfo import make_conninfo
from scale_bench import (
    CLASS_SIZE,
    SEARCH,
    WARMUP,
    chunk_vectors,
    chunks_of,
    collection_sizes,
    name_of,
    size_classes,
)

from pgrag.db import partition
from pgrag.db import schema as migrate
from pgrag.db.dsn import resolve_dsn

MARKER = "pgrag partition benchmark (benchmarks/partition_bench.py); safe to drop"


def hnsw_scans(conn: psycopg.Connection[Any]) -> int:
    """Scans of every HNSW index of schema pgrag (the shared one, or each partition's)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(s.idx_scan), 0) FROM pg_stat_user_indexes s"
        " JOIN pg_class c ON c.oid = s.indexrelid JOIN pg_am a ON a.oid = c.relam"
        " WHERE s.schemaname = 'pgrag' AND a.amname = 'hnsw'"
    ).fetchone()
    return int(row[0]) if row else 0


def vector_bytes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The vectors' table (all partitions) and its HNSW indexes, on disk."""
    row = conn.execute(
        "SELECT coalesce(sum(pg_relation_size(t.relid)), 0),"
        "       coalesce(sum((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i"
        "                      JOIN pg_class x ON x.oid = i.indexrelid"
        "                      JOIN pg_am a ON a.oid = x.relam"
        "                     WHERE i.indrelid = t.relid AND a.amname = 'hnsw')), 0)"
        "  FROM (SELECT relid FROM pg_partition_tree('pgrag.chunk_embeddings')"
        "        UNION SELECT 'pgrag.chunk_embeddings'::regclass) t"  # (a plain table: no tree)
        " WHERE (SELECT relkind FROM pg_class WHERE oid = t.relid) = 'r'"
    ).fetchone()
    assert row is not None
    return {"table": int(row[0]), "hnsw": int(row[1])}


def migrate_online(
    admin: str, source: str, target: str, dsn: str, args: argparse.Namespace, phases: Phases
) -> dict[str, Any]:
    """Copy the source, then partition the copy online (killed once, resumed) while a second
    connection searches it; then switch over."""
    drop_database(admin, target, MARKER)
    with psycopg.connect(admin, autocommit=True) as conn:
        phases.run(
            "copy the database (TEMPLATE)",
            lambda: conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(target), sql.Identifier(source)
                )
            ),
        )
        conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(target), sql.Literal(MARKER)
            )
        )
    with psycopg.connect(dsn) as conn:
        total = int(conn.execute("SELECT count(*) FROM pgrag.chunk_embeddings").fetchone()[0])  # type: ignore[index]
    # Searches on the copy all through the migration (the release before's search_v5 until the
    # switch, this one's after it).
    stop = threading.Event()
    during: list[float] = []
    errors: list[str] = []
    mix = make_mixture(args.seed, 2_000)
    sizes = collection_sizes(args.chunks, args.collections)

    def searcher() -> None:
        rng = np.random.default_rng([args.seed, 99])
        names = [name_of(len(sizes) - 1), name_of(len(sizes) // 2)]
        with psycopg.connect(dsn, autocommit=True) as conn:
            register_vector(conn)
            while not stop.is_set():
                q = draw_vectors(mix, 1, rng)[0]
                t0 = time.perf_counter()
                try:
                    conn.execute(
                        SEARCH, {"c": names[len(during) % 2], "t": "the of", "q": q}
                    ).fetchall()
                    during.append((time.perf_counter() - t0) * 1000)
                except psycopg.Error as err:
                    errors.append(" ".join(str(err).split())[:200])
                time.sleep(0.02)

    thread = threading.Thread(target=searcher, daemon=True)
    thread.start()
    env = {**os.environ, "PGRAG_DSN": dsn}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgrag.cli", "db", "partition", "--batch", str(args.batch)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed_at = 0
    with psycopg.connect(dsn, autocommit=True) as watch:
        while proc.poll() is None:
            if watch.execute("SELECT to_regclass('pgrag.partition_progress')").fetchone()[0]:  # type: ignore[index]
                row = watch.execute("SELECT copied FROM pgrag.partition_progress").fetchone()
                if row and row[0] >= total // 3:
                    proc.send_signal(signal.SIGKILL)
                    killed_at = int(row[0])
                    break
            time.sleep(0.2)
    proc.wait()
    phases.add("partition: first run, until killed", time.perf_counter() - t0)
    log(f"  killed after {killed_at:,} of {total:,} vectors; resuming")
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(f"{time.perf_counter() - t1:8.1f} s  {line}")
        log(f"    {line}")

    t1 = time.perf_counter()
    done = partition.run(dsn, batch=args.batch, on_progress=progress)
    phases.add("partition: resumed run (copy + indexes)", time.perf_counter() - t1)
    phases.run("db upgrade (switch over)", lambda: migrate.upgrade(dsn))
    stop.set()
    thread.join(60)
    return {
        "vectors": total,
        "killed_after": killed_at,
        "resumed_copied": done.copied,
        "indexes": done.indexes,
        "resumed_log": lines,
        "searches_during": len(during),
        "search_errors_during": errors,
        "search_ms_during": latency(during) if during else None,
    }


def compare(
    old: psycopg.Connection[Any], new: psycopg.Connection[Any], args: argparse.Namespace
) -> dict[str, Any]:
    sizes = collection_sizes(args.chunks, args.collections)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    mix = make_mixture(args.seed, 2_000)
    out: dict[str, Any] = {}
    for label, members in size_classes(sizes).items():
        log(f"searching the {label} collections in both")
        rng = np.random.default_rng([args.seed, 31, members[0]])
        ms: dict[str, dict[str, list[float]]] = {
            side: {"hybrid": [], "vector": [], "keyword": []} for side in ("today", "partitioned")
        }
        recall: dict[str, list[float]] = {"today": [], "partitioned": []}
        scans = {"today": -hnsw_scans(old), "partitioned": -hnsw_scans(new)}
        for m in members:
            rows = chunks_of(old, name_of(m))
            page_of = {r[0]: r[1] for r in rows}
            stored = chunk_vectors(mix, args.seed, int(starts[m]), sizes[m])
            texts = [r[2] for r in rows]
            queries = draw_vectors(mix, args.queries + WARMUP, rng)
            for j, q in enumerate(queries):
                chunk = texts[int(rng.integers(len(texts)))].split()
                words = " ".join(rng.choice(chunk, int(rng.integers(3, 6)), replace=False))
                sims = stored @ q
                exact = set((np.argpartition(-sims, 10)[:10] + int(starts[m])).tolist())
                for mode in ("hybrid", "vector", "keyword"):
                    params = {
                        "c": name_of(m),
                        "t": None if mode == "vector" else words,
                        "q": None if mode == "keyword" else q,
                    }
                    for side, conn in (("today", old), ("partitioned", new)):
                        t0 = time.perf_counter()
                        got = conn.execute(SEARCH, params).fetchall()
                        elapsed = (time.perf_counter() - t0) * 1000
                        if j < WARMUP:
                            continue
                        ms[side][mode].append(elapsed)
                        if mode == "vector":
                            found = {page_of.get(r[0], -1) for r in got}
                            recall[side].append(len(found & exact) / 10)
        scans["today"] += hnsw_scans(old)
        scans["partitioned"] += hnsw_scans(new)
        out[label] = {
            "collections": [name_of(m) for m in members],
            "chunks": [sizes[m] for m in members],
            **{
                side: {
                    **{f"{mode}_ms": latency(v) for mode, v in ms[side].items()},
                    "vector_recall_at_10": float(np.mean(recall[side])),
                    "hnsw_index_scans": scans[side],
                }
                for side in ("today", "partitioned")
            },
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--source", default="pgrag_bench_scale_1m")
    parser.add_argument("--target", default="pgrag_bench_scale_1m_partitioned")
    parser.add_argument("--chunks", type=int, default=1_000_000, help="scale_bench's --chunks")
    parser.add_argument("--collections", type=int, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", type=int, default=100, help="per collection measured")
    parser.add_argument("--batch", type=int, default=partition.BATCH)
    parser.add_argument("--reuse", action="store_true", help="compare with the kept --target")
    parser.add_argument("--drop", action="store_true", help="drop --target at the end")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    if args.collections < 3 * CLASS_SIZE:
        parser.error("--collections must be at least 9")
    base = resolve_dsn(args.dsn)
    admin = make_conninfo(base, dbname="postgres")
    source = make_conninfo(base, dbname=args.source)
    target = make_conninfo(base, dbname=args.target)
    if not database_exists(admin, args.source)[0]:
        sys.exit(f"no database {args.source}: run benchmarks/scale_bench.py first")
    with psycopg.connect(source) as conn:
        kind = conn.execute(
            "SELECT relkind FROM pg_class WHERE oid = 'pgrag.chunk_embeddings'::regclass"
        ).fetchone()
    if kind is None or kind[0] != "r":
        sys.exit(f"{args.source} is partitioned already: rebuild it with the release before")
    phases = Phases()
    migration = None
    if not (args.reuse and database_exists(admin, args.target)[0]):
        migration = migrate_online(admin, args.source, args.target, target, args, phases)
    with psycopg.connect(source, autocommit=True) as old, psycopg.connect(
        target, autocommit=True
    ) as new:
        register_vector(old)
        register_vector(new)
        sizes = {"today": vector_bytes(old), "partitioned": vector_bytes(new)}
        classes = compare(old, new, args)
        server = old.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
    if args.drop:
        drop_database(admin, args.target, MARKER)
    result = {
        "server": server,
        "phases_seconds": phases.seconds,
        "migration": migration,
        "vector_bytes": sizes,
        "classes": classes,
    }
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    summary(result)


def summary(result: dict[str, Any]) -> None:
    out = sys.stderr
    print("\nphases:", file=out)
    for name, seconds in result["phases_seconds"].items():
        print(f"  {name:<42} {seconds:9.1f} s", file=out)
    m = result["migration"]
    if m:
        print(
            f"searches during the migration: {m['searches_during']}, errors:"
            f" {len(m['search_errors_during'])}",
            file=out,
        )
    for side, b in result["vector_bytes"].items():
        print(f"{side:<12} vectors {mb(b['table'])}, HNSW {mb(b['hnsw'])}", file=out)
    print(f"\n{'class':<8}{'arm':<9}{'today p50/p95':>18}{'partitioned p50/p95':>24}", file=out)
    for label, c in result["classes"].items():
        for mode in ("hybrid", "vector", "keyword"):
            a, b = c["today"][f"{mode}_ms"], c["partitioned"][f"{mode}_ms"]
            print(
                f"{label:<8}{mode:<9}{a['p50_ms']:8.2f} /{a['p95_ms']:7.2f}"
                f"{b['p50_ms']:13.2f} /{b['p95_ms']:7.2f}",
                file=out,
            )
        print(
            f"{'':<8}recall@10 {c['today']['vector_recall_at_10']:.4f}"
            f" vs {c['partitioned']['vector_recall_at_10']:.4f}",
            file=out,
        )


if __name__ == "__main__":
    main()
