"""Partitioning by collection, probed before it is built: the vector arm over one shared HNSW
index (today) against LIST partitions (one per collection, each its own index) and HASH
partitions (16, collections sharing them), on scale_bench.py's million chunks.

Issue 21 (item 2) asks for partitioned tables "so one collection's search reads only its
partition, with per-partition HNSW indexes", the choice of LIST or HASH measured. Before
changing pgrag's schema, this measures what the change would buy for the arm it is for: the
collection's vectors are copied (collection_id, chunk_id, vector) into a LIST-partitioned and
a HASH-partitioned table in a schema of their own (`partition_probe`, in scale_bench's
database), each partition with an HNSW index built like pgrag's (m 16, ef_construction 128).
Then, for collections of several sizes, the same query vectors through:

- **shared**: today's statement shape, pgrag's model index over every collection's vectors,
  filtered to the collection (an iterative scan; pgvector 0.8, `hnsw.iterative_scan =
  relaxed_order`), joined to chunks for the collection as search_v5 joins;
- **list**: `WHERE collection_id = X ORDER BY embedding <=> q LIMIT 40` on the LIST table
  (partition pruning leaves one partition and its own index);
- **hash**: the same on the HASH table (the partition holds ~1/16 of the vectors, this
  collection's among them, filtered during the scan);

at `hnsw.ef_search` 200 (pgrag's default for k = 10), 40 rows (its depth), recall@10 of the
first 10 against numpy's exact top 10 over the collection. The three take turns per query.
Build times and index sizes are reported too. The probe schema is dropped at the end unless
--keep.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_bench.py          # the corpus, first
    PYTHONPATH=$PWD .venv/bin/python benchmarks/partition_probe.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import psycopg
from _bench import latency, log
from hnsw_recall import draw as draw_vectors
from hnsw_recall import make_mixture, register_vector
from psycopg import sql
from psycopg.conninfo import make_conninfo
from scale_bench import chunk_vectors, collection_sizes, name_of

from pgrag.db.dsn import resolve_dsn

HASH_PARTITIONS = 16
DEPTH = 40
EF = 200


def build(conn: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, float]:
    seconds: dict[str, float] = {}
    conn.execute("DROP SCHEMA IF EXISTS partition_probe CASCADE")
    conn.execute("CREATE SCHEMA partition_probe")
    ids = [r[0] for r in conn.execute("SELECT id FROM pgrag.collections ORDER BY id")]
    columns = sql.SQL("(collection_id int, chunk_id bigint, embedding vector(384))")
    conn.execute(
        sql.SQL("CREATE TABLE partition_probe.list_v {} PARTITION BY LIST (collection_id)").format(
            columns
        )
    )
    for cid in ids:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} PARTITION OF partition_probe.list_v FOR VALUES IN ({})"
            ).format(sql.Identifier("partition_probe", f"list_v_{cid}"), sql.Literal(cid))
        )
    conn.execute(
        sql.SQL("CREATE TABLE partition_probe.hash_v {} PARTITION BY HASH (collection_id)").format(
            columns
        )
    )
    for r in range(HASH_PARTITIONS):
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} PARTITION OF partition_probe.hash_v"
                " FOR VALUES WITH (MODULUS {}, REMAINDER {})"
            ).format(
                sql.Identifier("partition_probe", f"hash_v_{r}"),
                sql.Literal(HASH_PARTITIONS),
                sql.Literal(r),
            )
        )
    conn.commit()
    conn.execute(
        "SELECT set_config('maintenance_work_mem', %(m)s, false)", {"m": args.maintenance_work_mem}
    )
    for table in ("list_v", "hash_v"):
        target = sql.Identifier("partition_probe", table)
        t0 = time.perf_counter()
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT c.collection_id, ce.chunk_id, ce.embedding::vector(384)"
                "  FROM pgrag.chunk_embeddings ce JOIN pgrag.chunks c ON c.id = ce.chunk_id"
                " WHERE c.page IS NOT NULL"
            ).format(target)
        )
        conn.commit()
        seconds[f"copy {table}"] = time.perf_counter() - t0
        log(f"  copied {table}: {seconds[f'copy {table}']:.1f} s")
        t0 = time.perf_counter()
        # (on the parent: PostgreSQL builds each partition's index, one after another)
        conn.execute(
            sql.SQL(
                "CREATE INDEX ON {} USING hnsw (embedding vector_cosine_ops)"
                " WITH (m = 16, ef_construction = 128)"
            ).format(target)
        )
        conn.commit()
        seconds[f"HNSW {table}"] = time.perf_counter() - t0
        log(f"  indexed {table}: {seconds[f'HNSW {table}']:.1f} s")
        conn.execute(sql.SQL("ANALYZE {}").format(target))
        conn.commit()
    return seconds


def index_bytes(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_inherits h"
        " JOIN pg_index i ON i.indrelid = h.inhrelid"
        " WHERE h.inhparent = %(t)s::regclass",
        {"t": f"partition_probe.{table}"},
    ).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--database", default="pgrag_bench_scale_1m")
    parser.add_argument("--chunks", type=int, default=1_000_000, help="as scale_bench loaded")
    parser.add_argument("--collections", type=int, default=120, help="as scale_bench loaded")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--maintenance-work-mem", default="3GB")
    parser.add_argument("--reuse", action="store_true", help="keep a probe schema already built")
    parser.add_argument("--keep", action="store_true", help="keep the probe schema afterwards")
    args = parser.parse_args()
    dsn = make_conninfo(resolve_dsn(args.dsn), dbname=args.database)
    sizes = collection_sizes(args.chunks, args.collections)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    mix = make_mixture(args.seed, 2_000)
    # collections by rank (0 = largest): sizes from ~186k down to ~1.6k
    ranks = sorted(
        {r for r in (0, 2, 5, 10, 20, 40) if r < args.collections} | {args.collections - 1}
    )
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        built: dict[str, float] = {}
        exists = conn.execute("SELECT to_regclass('partition_probe.list_v')").fetchone()
        if not (args.reuse and exists and exists[0]):
            log("building the partitioned copies")
            built = build(conn, args)
        sizes_on_disk = {t: index_bytes(conn, t) for t in ("list_v", "hash_v")}
        model = conn.execute("SELECT DISTINCT model_id FROM pgrag.collections").fetchone()
        assert model is not None
        shared_index = conn.execute(
            "SELECT pg_relation_size(%(i)s::regclass)",
            {"i": f"pgrag.chunk_embeddings_hnsw_{model[0]}"},
        ).fetchone()
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.execute("SELECT set_config('hnsw.ef_search', %(ef)s, false)", {"ef": str(EF)})
        conn.commit()
        statements: dict[str, Any] = {
            # (the model's id written in, as search_v5 writes it, for its partial index)
            "shared": sql.SQL(
                "SELECT ce.chunk_id FROM pgrag.chunk_embeddings ce"
                " JOIN pgrag.chunks c ON c.id = ce.chunk_id"
                " WHERE ce.model_id = {} AND c.collection_id = %(c)s"
                " ORDER BY ce.embedding::vector(384) <=> %(q)s::vector(384) LIMIT %(n)s"
            ).format(sql.Literal(int(model[0]))),
            "list": (
                "SELECT chunk_id FROM partition_probe.list_v WHERE collection_id = %(c)s"
                " ORDER BY embedding <=> %(q)s::vector(384) LIMIT %(n)s"
            ),
            "hash": (
                "SELECT chunk_id FROM partition_probe.hash_v WHERE collection_id = %(c)s"
                " ORDER BY embedding <=> %(q)s::vector(384) LIMIT %(n)s"
            ),
        }
        results = []
        for rank in ranks:
            name = name_of(rank)
            row = conn.execute(
                "SELECT id FROM pgrag.collections WHERE name = %(n)s", {"n": name}
            ).fetchone()
            assert row is not None
            cid = int(row[0])
            pages = dict(
                conn.execute(
                    "SELECT id, page FROM pgrag.chunks WHERE collection_id = %(c)s"
                    " AND page IS NOT NULL",
                    {"c": cid},
                ).fetchall()
            )
            stored = chunk_vectors(mix, args.seed, int(starts[rank]), sizes[rank])
            queries = draw_vectors(mix, args.queries + 10, np.random.default_rng([args.seed, 41]))
            ms: dict[str, list[float]] = {k: [] for k in statements}
            found: dict[str, list[float]] = {k: [] for k in statements}
            for j, q in enumerate(queries):
                exact = set((np.argpartition(-(stored @ q), 10)[:10] + int(starts[rank])).tolist())
                for how, statement in statements.items():
                    t0 = time.perf_counter()
                    rows = conn.execute(statement, {"c": cid, "q": q, "n": DEPTH}).fetchall()
                    elapsed = (time.perf_counter() - t0) * 1000
                    conn.commit()
                    if j < 10:
                        continue  # (warm-up)
                    ms[how].append(elapsed)
                    top = {pages.get(r[0], -1) for r in rows[:10]}
                    found[how].append(len(top & exact) / 10)
            result = {
                "collection": name,
                "chunks": sizes[rank],
                **{f"{k}_ms": latency(v) for k, v in ms.items()},
                **{f"{k}_recall": float(np.mean(v)) for k, v in found.items()},
            }
            results.append(result)
            log(
                f"  {name} ({sizes[rank]:,}): "
                + ", ".join(
                    f"{k} {result[f'{k}_ms']['p50_ms']:.2f} ms / {result[f'{k}_recall']:.3f}"
                    for k in statements
                )
            )
        if not args.keep:
            conn.execute("DROP SCHEMA partition_probe CASCADE")
            conn.commit()
    out = {
        "build_seconds": built,
        "index_bytes": {"shared": int(shared_index[0]) if shared_index else 0, **sizes_on_disk},
        "results": results,
    }
    print(json.dumps(out, indent=2))
    print(
        "\n| collection | chunks | shared p50 / p95 ms, recall | LIST | HASH (16) |",
        file=sys.stderr,
    )
    print("|---|---:|---|---|---|", file=sys.stderr)
    for r in results:
        cells = [
            f"{r[f'{k}_ms']['p50_ms']:.2f} / {r[f'{k}_ms']['p95_ms']:.2f}, {r[f'{k}_recall']:.3f}"
            for k in statements
        ]
        print(
            f"| {r['collection']} | {r['chunks']:,} | " + " | ".join(cells) + " |", file=sys.stderr
        )


if __name__ == "__main__":
    main()
