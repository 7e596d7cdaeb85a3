"""halfvec vs vector HNSW indexes: recall, size, build time and latency, in one run.

Issue 6 asks for an option to keep a model's vectors at half precision, with its effect on
recall measured. `pgrag models add ... --index-type halfvec` builds the model's partial HNSW
index on `embedding::halfvec(DIM)` (2 bytes a dimension instead of 4), and `search_v5` compares
the query with it as halfvec. This script measures both index types on the same vectors:

- the 200,000 clustered 384-d vectors of `benchmarks/hnsw_recall.py` (its database,
  pgrag_bench_hnsw, loaded by that script; upgraded here to head);
- a second model row, `index_type = 'halfvec'`, attached to the collection and given copies of
  the same vectors;
- both HNSW indexes dropped and built again here, one after the other, with the same settings
  (ensure_model_index: m = 16, ef_construction = 128; maintenance_work_mem = 1GB), timed;
- the same 1,000 queries through `pgrag.search_v5(collection, NULL, q, k => k, model => ...)`
  for each model, alternating per query so that drift on a shared machine hits both alike,
  each result set compared with numpy's exact top k over the float32 vectors.

Ratios (halfvec / vector) are what to compare; absolute times drift on this machine.

    .venv/bin/python benchmarks/hnsw_recall.py --reuse     # loads pgrag_bench_hnsw if needed
    .venv/bin/python benchmarks/halfvec_recall.py
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import psycopg
from _bench import latency, log, mb
from hnsw_recall import (
    COLLECTION,
    DIMENSION,
    chunk_index,
    corpus_settings,
    exact_top,
    loaded_model,
    make_vectors,
    recall,
    register_vector,
)
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.dsn import resolve_dsn

HALF = "synthetic-mixture-384-halfvec"
KS = (10, 100)
STATEMENT = (
    "SELECT chunk_id FROM pgrag.search_v5(%(c)s, NULL, %(q)s::vector, k => %(k)s::int,"
    " model => %(m)s)"
)


def half_model(conn: psycopg.Connection[Any], vector_model: int) -> int:
    """The halfvec model row, attached to the collection, holding copies of the vectors."""
    row = conn.execute("SELECT id FROM pgrag.embedding_models WHERE name = %s", (HALF,)).fetchone()
    if row is None:
        row = conn.execute(
            "INSERT INTO pgrag.embedding_models (name, provider, dimension, distance,"
            " normalized, index_type) VALUES (%s, 'benchmark', %s, 'cosine', true, 'halfvec')"
            " RETURNING id",
            (HALF, DIMENSION),
        ).fetchone()
    assert row is not None
    half = int(row[0])
    conn.execute(
        "INSERT INTO pgrag.collection_models (collection_id, model_id, status)"
        " SELECT id, %s, 'building' FROM pgrag.collections WHERE name = %s"
        " ON CONFLICT DO NOTHING",
        (half, COLLECTION),
    )
    counts = conn.execute(
        "SELECT count(*) FILTER (WHERE model_id = %s), count(*) FILTER (WHERE model_id = %s)"
        " FROM pgrag.chunk_embeddings WHERE model_id IN (%s, %s)",
        (vector_model, half, vector_model, half),
    ).fetchone()
    assert counts is not None
    if counts[1] != counts[0]:
        log(f"copying {counts[0]} vectors to the halfvec model")
        conn.execute(f"DROP INDEX IF EXISTS pgrag.chunk_embeddings_hnsw_{half}")
        conn.execute("DELETE FROM pgrag.chunk_embeddings WHERE model_id = %s", (half,))
        conn.execute(
            "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
            " SELECT %s, chunk_id, embedding, collection_id FROM pgrag.chunk_embeddings"
            " WHERE model_id = %s",
            (half, vector_model),
        )
    return half


def rebuild(conn: psycopg.Connection[Any], model: int) -> dict[str, Any]:
    conn.execute(f"DROP INDEX IF EXISTS pgrag.chunk_embeddings_hnsw_{model}")
    conn.execute("SET maintenance_work_mem = '1GB'")
    t0 = time.perf_counter()
    conn.execute("SELECT pgrag.ensure_model_index(%s)", (model,))
    seconds = time.perf_counter() - t0
    row = conn.execute(
        "SELECT pg_get_indexdef(c.oid), pg_relation_size(c.oid) FROM pg_class c"
        " WHERE c.oid = to_regclass(%s)",
        (f"pgrag.chunk_embeddings_hnsw_{model}",),
    ).fetchone()
    assert row is not None
    return {"build_s": round(seconds, 1), "definition": row[0], "bytes": row[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_hnsw")
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--clusters", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = resolve_dsn(args.dsn)
    dsn = make_conninfo(base, dbname=args.database)
    migrate.upgrade(dsn)
    log("generating vectors")
    stored, queries, warmup = make_vectors(args)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        model = loaded_model(conn, corpus_settings(args))
        if model is None:
            raise SystemExit(
                f"{args.database} does not hold the vectors; run"
                " `.venv/bin/python benchmarks/hnsw_recall.py --reuse` first"
            )
        name = conn.execute("SELECT name FROM pgrag.embedding_models WHERE id = %s", (model,))
        vector_name = name.fetchone()[0]  # type: ignore[index]
        half = half_model(conn, model)
        conn.execute("VACUUM (ANALYZE) pgrag.chunk_embeddings")
        builds = {}
        for label, m in (("vector", model), ("halfvec", half)):
            log(f"building the {label} index")
            builds[label] = rebuild(conn, m)
        index = chunk_index(conn, args.vectors)
        names = {"vector": vector_name, "halfvec": HALF}
        log("warm-up")
        for q in warmup:
            for label in names:
                conn.execute(STATEMENT, {"c": COLLECTION, "q": q, "k": 10, "m": names[label]})
        results: dict[str, Any] = {"builds": builds, "k": {}}
        for k in KS:
            exact, _, _ = exact_top(stored, queries, k)
            hits: dict[str, list[list[int]]] = {label: [] for label in names}
            ms: dict[str, list[float]] = {label: [] for label in names}
            log(f"measuring k = {k}: {len(queries)} queries per index type")
            for i, q in enumerate(queries):
                order = list(names) if i % 2 == 0 else list(reversed(names))
                for label in order:
                    t0 = time.perf_counter()
                    rows = conn.execute(
                        STATEMENT, {"c": COLLECTION, "q": q, "k": k, "m": names[label]}
                    ).fetchall()
                    ms[label].append((time.perf_counter() - t0) * 1000)
                    hits[label].append([r[0] for r in rows])
            results["k"][k] = {
                label: {**recall(hits[label], index, exact), **latency(ms[label])}
                for label in names
            }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    v, h = builds["vector"], builds["halfvec"]
    print(
        f"index size: vector {mb(v['bytes'])}, halfvec {mb(h['bytes'])}"
        f" (ratio {h['bytes'] / v['bytes']:.3f})"
    )
    print(
        f"index build: vector {v['build_s']} s, halfvec {h['build_s']} s"
        f" (ratio {h['build_s'] / v['build_s']:.3f})"
    )
    print("| k | index | recall@k | min | all k found | p50 ms | p95 ms | p50 ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for k, by in results["k"].items():
        for label in ("vector", "halfvec"):
            r = by[label]
            ratio = r["p50_ms"] / by["vector"]["p50_ms"]
            print(
                f"| {k} | {label} | {r['recall']:.4f} | {r['min_recall']:.2f} |"
                f" {r['perfect']:.3f} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {ratio:.3f} |"
            )


if __name__ == "__main__":
    main()
