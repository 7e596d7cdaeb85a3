"""Vector-arm recall at scale: search_v5's HNSW results beside exact nearest neighbours.

Issue 3's target: with pgrag's default settings the dense arm's recall@10 against exact search is
at least 0.98 (search_v5 sizes hnsw.ef_search for k and the depth). This script measures it where
the index matters: N synthetic 384-d vectors (default 200,000) in one collection, 1,000 queries
through `pgrag.search_v5(collection, NULL, query_vector, k => k)` for k = 10 and 100, each result
set compared with the exact top k computed in numpy over all N vectors (recall@k = mean overlap
/ k). Latency is the SQL call's, client-side, after a warm-up; numpy's exact search of the same
query is timed beside it for reference. A sweep over vector_depth (10, 40 = the default for
k=10, 100, 200, 400; ef_search = 2 x depth, at least 200) shows where the default sits on
the recall/latency curve. One query's nested plan (auto_explain) shows the partial HNSW index at
work, and a sample of calls is checked for the exact fallback (the plan's exact branch must not
run: it would make recall look perfect).

Vectors (deterministic: numpy, fixed seed) look like sentence embeddings, hierarchically
clustered: 100 topics, 2,000 clusters, 20,000 sub-clusters of lognormal popularity; each vector
is normalize(sqrt(r) * (topic + cluster + sub-cluster) + sqrt(e) * noise), the four components
nearly orthogonal unit directions, e (the noise share) drawn per sub-cluster from
[0.15, 0.45] and r = (1 - e) / 3. Pairs in one sub-cluster then sit near cosine 0.75, in one
cluster near 0.5, in one topic near 0.25, unrelated near 0. At 200k vectors a vector's nearest
neighbour has cosine ~0.6-0.85 (median ~0.73) and its tenth ~0.5-0.83; all-MiniLM-L6-v2 on
SQuAD's 2,589 dev passages gives nearest 0.55-0.84 (median 0.71), tenth 0.38-0.67, unrelated
pairs -0.11-0.20 (5th-95th percentiles). Queries are new draws from the same mixture, not copies
of stored vectors. The distribution is printed with the results.

Load path: documents, chunks (content 'v<i>', through the keyword trigger) and chunk_embeddings
are COPYed (vectors in binary) with the model's HNSW index dropped, then the index is built once
by pgrag.ensure_model_index with maintenance_work_mem = 1GB (timed), then VACUUM ANALYZE:
the same index pgrag's bulk ingest builds.

The database (default pgrag_bench_hnsw, on --dsn / PGRAG_DSN / PG* / the embedded server) is
kept for reruns; --reuse measures again without reloading when it holds the same vectors.

    .venv/bin/python benchmarks/hnsw_recall.py                   # 200k vectors, kept
    .venv/bin/python benchmarks/hnsw_recall.py --reuse           # measure again, no reload
    .venv/bin/python benchmarks/hnsw_recall.py --vectors 20000 --queries 200 \\
        --database pgrag_bench_hnsw_small --no-keep
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from _bench import (
    Phases,
    Timings,
    create_database,
    database_exists,
    drop_database,
    latency,
    log,
    mb,
)
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.dsn import resolve_dsn

COLLECTION = "hnsw"
MODEL = ("synthetic-mixture-384", "benchmark")  # name, provider
DIMENSION = 384
CHUNKS_PER_DOCUMENT = 10
BATCH = 50_000
WARMUP_QUERIES = 100
KS = (10, 100)
DEPTHS = (10, 40, 100, 200, 400)
FALLBACK_SAMPLE = 20  # calls per k checked for the exact fallback
GENERATOR = 1  # bump when the vector generator changes, so --reuse reloads
MARKER = "pgrag hnsw_recall benchmark (benchmarks/hnsw_recall.py); safe to drop"
TARGET_RECALL = 0.98

SEARCH = "SELECT chunk_id FROM pgrag.search_v5(%(c)s, NULL, %(q)s::vector, k => %(k)s::int"
DEFAULT = SEARCH + ")"
WITH_DEPTH = SEARCH + ", vector_depth => %(d)s::int)"

# -- vectors -------------------------------------------------------------------------------


@dataclass
class Mixture:
    topics: np.ndarray  # unit directions
    clusters: np.ndarray
    subclusters: np.ndarray
    topic_of_cluster: np.ndarray
    cluster_of_sub: np.ndarray
    sub_cdf: np.ndarray  # sub-cluster popularity
    noise_share: np.ndarray  # per sub-cluster


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIMENSION), dtype=np.float32)
    rows: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return rows


def make_mixture(seed: int, clusters: int) -> Mixture:
    rng = np.random.default_rng([seed, 0])
    topics, subs = max(clusters // 20, 1), clusters * 10
    weights = rng.lognormal(0.0, 1.0, subs)
    return Mixture(
        topics=unit_rows(rng, topics),
        clusters=unit_rows(rng, clusters),
        subclusters=unit_rows(rng, subs),
        topic_of_cluster=rng.integers(0, topics, clusters),
        cluster_of_sub=rng.integers(0, clusters, subs),
        sub_cdf=np.cumsum(weights) / weights.sum(),
        noise_share=rng.uniform(0.15, 0.45, subs).astype(np.float32),
    )


def draw(mix: Mixture, n: int, rng: np.random.Generator) -> np.ndarray:
    """n unit vectors (float32) from the mixture."""
    s = np.minimum(np.searchsorted(mix.sub_cdf, rng.random(n)), len(mix.sub_cdf) - 1)
    c = mix.cluster_of_sub[s]
    e = mix.noise_share[s][:, None]
    noise = rng.standard_normal((n, DIMENSION), dtype=np.float32) / np.sqrt(DIMENSION)
    x = (
        np.sqrt((1 - e) / 3)
        * (mix.topics[mix.topic_of_cluster[c]] + mix.clusters[c] + mix.subclusters[s])
        + np.sqrt(e) * noise
    )
    out: np.ndarray = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return out


def make_vectors(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stored vectors, measured queries, warm-up queries)."""
    mix = make_mixture(args.seed, args.clusters)
    rng = np.random.default_rng([args.seed, 1])
    stored = np.concatenate(
        [draw(mix, min(BATCH, args.vectors - i), rng) for i in range(0, args.vectors, BATCH)]
    )
    queries = draw(mix, args.queries, np.random.default_rng([args.seed, 2]))
    warmup = draw(mix, WARMUP_QUERIES, np.random.default_rng([args.seed, 3]))
    return stored, queries, warmup


def percentiles(a: np.ndarray | list[float]) -> list[float]:
    return [round(float(x), 3) for x in np.percentile(a, [5, 25, 50, 75, 95])]


def similarity_profile(
    stored: np.ndarray, query_top: np.ndarray, rng: np.random.Generator
) -> dict[str, list[float]]:
    """Cosine percentiles (5/25/50/75/95): queries' 1st/10th/100th neighbours, stored vectors'
    own nearest neighbour (a sample of 500), and unrelated pairs."""
    sample = rng.choice(len(stored), min(500, len(stored)), replace=False)
    nearest = []
    for part in np.array_split(sample, max(len(sample) // 100, 1)):
        sims = stored[part] @ stored.T
        sims[np.arange(len(part)), part] = -2.0  # not itself
        nearest.append(sims.max(axis=1))
    a, b = rng.integers(0, len(stored), (2, 100_000))
    profile = {
        "query_nn1": percentiles(query_top[:, 0]),
        "query_nn10": percentiles(query_top[:, 9]),
        "stored_nn1": percentiles(np.concatenate(nearest)),
        "random_pairs": percentiles(np.einsum("ij,ij->i", stored[a], stored[b])),
    }
    if query_top.shape[1] >= 100:
        profile["query_nn100"] = percentiles(query_top[:, 99])
    return profile


def exact_top(
    stored: np.ndarray, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Per query: the exact top-k indexes and similarities (best first), and ms per search."""
    ids = np.empty((len(queries), k), dtype=np.int64)
    sims = np.empty((len(queries), k), dtype=np.float32)
    ms = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        s = stored @ q
        top = np.argpartition(-s, k)[:k]
        top = top[np.argsort(-s[top], kind="stable")]
        ms.append((time.perf_counter() - t0) * 1000)
        ids[i], sims[i] = top, s[top]
    return ids, sims, ms


# -- database ------------------------------------------------------------------------------


def corpus_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "benchmark": "hnsw_recall",
        "generator": GENERATOR,
        "vectors": args.vectors,
        "clusters": args.clusters,
        "seed": args.seed,
    }


def register_vector(conn: psycopg.Connection[Any]) -> None:
    """pgvector's psycopg adapter, for the extension's type in whatever schema it lives."""
    from pgvector.psycopg.vector import register_vector_info
    from psycopg.types import TypeInfo

    row = conn.execute(
        "SELECT format('%I.vector', n.nspname) FROM pg_extension e"
        " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()
    assert row is not None, "the vector extension is missing"
    info = TypeInfo.fetch(conn, row[0])
    assert info is not None
    register_vector_info(conn, info)


def loaded_model(conn: psycopg.Connection[Any], settings: dict[str, Any]) -> int | None:
    """The collection's model id when it holds exactly the vectors asked for."""
    row = conn.execute(
        "SELECT c.model_id, c.settings,"
        "       (SELECT count(*) FROM pgrag.chunk_embeddings e WHERE e.model_id = c.model_id)"
        "  FROM pgrag.collections c WHERE c.name = %(n)s",
        {"n": COLLECTION},
    ).fetchone()
    if row is None or row[0] is None or row[1] != settings or row[2] != settings["vectors"]:
        return None
    return int(row[0])


def chunk_index(conn: psycopg.Connection[Any], n: int) -> np.ndarray:
    """chunk id -> vector index (-1 elsewhere); a chunk's content is 'v<index>'."""
    rows = conn.execute(
        "SELECT c.id, substr(c.content, 2)::int FROM pgrag.chunks c"
        " JOIN pgrag.collections l ON l.id = c.collection_id WHERE l.name = %(n)s",
        {"n": COLLECTION},
    ).fetchall()
    assert len(rows) == n, f"expected {n} chunks, found {len(rows)}"
    ids = np.array(rows, dtype=np.int64)
    index = np.full(int(ids[:, 0].max()) + 1, -1, dtype=np.int64)
    index[ids[:, 0]] = ids[:, 1]
    return index


def load(dsn: str, args: argparse.Namespace, stored: np.ndarray, phases: Phases) -> int:
    """Collection, model, documents, chunks and vectors, in one transaction; returns the model."""
    n = len(stored)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        row = conn.execute(
            "INSERT INTO pgrag.collections (name, settings) VALUES (%(n)s, %(s)s::jsonb)"
            " RETURNING id",
            {"n": COLLECTION, "s": json.dumps(corpus_settings(args))},
        ).fetchone()
        assert row is not None
        cid = int(row[0])
        row = conn.execute(
            "SELECT pgrag.register_model(%(name)s, %(provider)s, %(dim)s, 'cosine', true)",
            {"name": MODEL[0], "provider": MODEL[1], "dim": DIMENSION},
        ).fetchone()
        assert row is not None
        model = int(row[0])
        conn.execute(
            "UPDATE pgrag.collections SET model_id = %(m)s WHERE id = %(c)s", {"m": model, "c": cid}
        )
        # Registering built the (empty) index; built once after the COPY instead, as bulk ingest.
        conn.execute(
            sql.SQL("DROP INDEX {}").format(
                sql.Identifier("pgrag", f"chunk_embeddings_hnsw_{model}")
            )
        )

        def copy_documents() -> None:
            with conn.cursor().copy(
                "COPY pgrag.documents (collection_id, source, content_hash) FROM STDIN"
            ) as copy:
                for d in range(-(-n // CHUNKS_PER_DOCUMENT)):
                    source = f"doc{d:08d}"
                    copy.write_row((cid, source, hashlib.sha256(source.encode()).hexdigest()))

        phases.run("COPY documents", copy_documents)
        doc_ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM pgrag.documents WHERE collection_id = %(c)s ORDER BY source",
                {"c": cid},
            )
        ]

        def copy_chunks() -> None:
            for start in range(0, n, BATCH):
                with conn.cursor().copy(
                    "COPY pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
                    " content_hash, text_config) FROM STDIN"
                ) as copy:
                    for i in range(start, min(start + BATCH, n)):
                        doc, ordinal = divmod(i, CHUNKS_PER_DOCUMENT)
                        text = f"v{i}"
                        digest = hashlib.sha256(text.encode()).hexdigest()
                        copy.write_row((doc_ids[doc], cid, ordinal, text, 1, digest, "english"))

        phases.run("COPY chunks (keyword trigger on)", copy_chunks)
        index = chunk_index(conn, n)
        chunk_of = np.empty(n, dtype=np.int64)
        chunk_of[index[index >= 0]] = np.nonzero(index >= 0)[0]

        def copy_vectors() -> None:
            for start in range(0, n, BATCH):
                with conn.cursor().copy(
                    "COPY pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                    " FROM STDIN (FORMAT BINARY)"
                ) as copy:
                    copy.set_types(["int4", "int8", "vector", "int4"])
                    for i in range(start, min(start + BATCH, n)):
                        copy.write_row((model, int(chunk_of[i]), stored[i], cid))
                log(f"    vectors {min(start + BATCH, n):>9,} / {n:,}")

        phases.run("COPY chunk_embeddings (binary)", copy_vectors)
        phases.run("commit", conn.commit)
    return model


def build_index(dsn: str, model: int, phases: Phases) -> list[str]:
    """pgrag.ensure_model_index with 1GB of maintenance_work_mem; the server's notices."""
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SET maintenance_work_mem = '1GB'")
        phases.run(
            "build HNSW index (ensure_model_index)",
            lambda: conn.execute("SELECT pgrag.ensure_model_index(%(m)s)", {"m": model}),
        )
        phases.run(
            "VACUUM ANALYZE",
            lambda: conn.execute(
                "VACUUM (ANALYZE) pgrag.collections, pgrag.embedding_models, pgrag.documents,"
                " pgrag.chunks, pgrag.chunk_embeddings, pgrag.keyword_postings,"
                " pgrag.keyword_df, pgrag.keyword_totals"
            ),
        )
    return notices


def index_info(conn: psycopg.Connection[Any], model: int) -> dict[str, Any]:
    name = f"chunk_embeddings_hnsw_{model}"
    row = conn.execute(
        "SELECT pg_get_indexdef(c.oid), pg_relation_size(c.oid), c.reloptions"
        "  FROM pg_class c WHERE c.oid = to_regclass(%(i)s)",
        {"i": f"pgrag.{name}"},
    ).fetchone()
    assert row is not None, f"index {name} is missing"
    table = conn.execute("SELECT pg_relation_size('pgrag.chunk_embeddings')").fetchone()
    assert table is not None
    return {
        "name": name,
        "definition": row[0],
        "bytes": row[1],
        "options": row[2] or "pgvector defaults (m = 16, ef_construction = 64)",
        "table_bytes": table[0],
    }


# -- measuring -----------------------------------------------------------------------------


def run_queries(
    conn: psycopg.Connection[Any], statement: str, queries: np.ndarray, params: dict[str, Any]
) -> tuple[list[list[int]], list[float]]:
    """Chunk ids returned per query and ms per call."""
    hits, ms = [], []
    with conn.cursor() as cur:
        for q in queries:
            t0 = time.perf_counter()
            cur.execute(statement, {**params, "q": q})
            rows = cur.fetchall()
            ms.append((time.perf_counter() - t0) * 1000)
            hits.append([r[0] for r in rows])
    return hits, ms


def recall(hits: list[list[int]], index: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    k = exact.shape[1]
    overlaps = np.array(
        [
            len(set(index[h].tolist()) & set(e)) / k
            for h, e in zip(hits, exact.tolist(), strict=True)
        ]
    )
    return {
        "recall": float(overlaps.mean()),
        "min_recall": float(overlaps.min()),
        "perfect": float((overlaps == 1).mean()),
        "short_results": sum(len(h) < k for h in hits),
    }


EF_VALUES = (10, 20, 40, 64, 100, 150, 200)
RECIPE = (
    "SELECT chunk_id FROM pgrag.chunk_embeddings WHERE model_id = %(m)s"
    " ORDER BY embedding::vector({d}) <=> %(q)s::vector LIMIT 10"
)


def ef_sweep(
    conn: psycopg.Connection[Any],
    model: int,
    queries: np.ndarray,
    index: np.ndarray,
    exact: np.ndarray,
    block: int = 100,
    depth: int | None = None,
) -> dict[str, Any]:
    """search_v5 (k = 10; vector_depth ``depth``, default 40) at each pgrag.ef_search and
    the recipe's bare statement at each hnsw.ef_search, the two taking turns a block of
    queries at a time; then, for each search_v5 point, the recipe's fastest point with at
    least its recall, and the ratio of their p50 latencies."""
    recipe = sql.SQL(RECIPE).format(d=sql.Literal(DIMENSION)).as_string(conn)
    runs: dict[str, dict[int, tuple[list[list[int]], list[float]]]] = {"pgrag": {}, "recipe": {}}
    for ef in EF_VALUES:
        hits: dict[str, list[list[int]]] = {"pgrag": [], "recipe": []}
        ms: dict[str, list[float]] = {"pgrag": [], "recipe": []}
        for start in range(0, len(queries), block):
            part = queries[start : start + block]
            conn.execute("SELECT set_config('pgrag.ef_search', %s, false)", (str(ef),))
            statement, params = DEFAULT, {"c": COLLECTION, "k": 10}
            if depth is not None:
                statement, params = WITH_DEPTH, {**params, "d": depth}
            h, t = run_queries(conn, statement, part, params)
            hits["pgrag"] += h
            ms["pgrag"] += t
            conn.execute("SELECT set_config('pgrag.ef_search', '', false)")
            conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef),))
            h, t = run_queries(conn, recipe, part, {"m": model})
            hits["recipe"] += h
            ms["recipe"] += t
            conn.execute("RESET hnsw.ef_search")
        for name in runs:
            runs[name][ef] = (hits[name], ms[name])
    points = {
        name: {
            ef: {**recall(h, index, exact), "p50_ms": latency(t)["p50_ms"]}
            for ef, (h, t) in by_ef.items()
        }
        for name, by_ef in runs.items()
    }
    ratios = []
    for ef, p in points["pgrag"].items():
        peers = [
            (q["p50_ms"], e) for e, q in points["recipe"].items() if q["recall"] >= p["recall"]
        ]
        if peers:
            p50, peer_ef = min(peers)
            ratios.append(
                {
                    "pgrag ef": ef,
                    "recall": p["recall"],
                    "recipe ef (fastest with at least that recall)": peer_ef,
                    "p50 ratio": p["p50_ms"] / p50,
                }
            )
    return {
        "search_v5 vector_depth": depth if depth is not None else 40,
        "points": {n: {str(e): v for e, v in d.items()} for n, d in points.items()},
        "equal recall": ratios,
    }


def ef_search(k: int, depth: int | None) -> int:
    """What search_v5 sets: depth = vector_depth or max(4k, 40); ef_search = 2 x depth, at
    least 200, at most 1000."""
    d = max(depth if depth is not None else max(4 * k, 40), k)
    return min(max(2 * d, 200), 1000)


def nested_plans(
    dsn: str, statement: str, queries: np.ndarray, params: dict[str, Any]
) -> list[str]:
    """The vector arm's executed plan (auto_explain, nested statements) for each query."""
    plans: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting in (
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_analyze = on",
            "auto_explain.log_timing = off",
            "auto_explain.log_level = notice",
        ):
            conn.execute(f"SET {setting}")
        for q in queries:
            notices.clear()
            conn.execute(statement, {**params, "q": q}).fetchall()
            # The index scan's statement, and the exact scan's when the index came back short.
            plan = [p for p in notices if "array_agg(h.id ORDER BY h.dist, h.id)" in p]
            assert 1 <= len(plan) <= 2, f"expected one or two vector-arm plans, got {len(plan)}"
            plans.append("\n".join(plan))
    return plans


def plan_check(plan: str, model: int) -> dict[str, bool]:
    """Did the HNSW index feed the results, and did anything else scan chunk_embeddings?"""
    # The exact statement (ORDER BY distance + 0) scans chunk_embeddings some other way; it
    # runs only as the fallback, when the index scan came back short.
    # (the collection's partition, chunk_embeddings_c<ID>, and its index of the model's)
    scans = [line for line in plan.splitlines() if re.search(r" on chunk_embeddings_c\d+ ", line)]
    hnsw = f"_hnsw_{model} "
    return {
        "hnsw_index": any(hnsw in s and "never executed" not in s for s in scans),
        "exact_branch_ran": any(hnsw not in s and "never executed" not in s for s in scans),
    }


def vector_arm_plan(plan: str) -> str:
    """The plan part of an auto_explain notice, query vectors elided."""
    start = re.search(r"^\S[^\n]*\(cost=", plan, re.MULTILINE)
    text = plan[start.start() :] if start else plan
    return re.sub(r"'\[[^\]]{60,}\]'", f"'[query: {DIMENSION} values]'", text)


def server_info(conn: psycopg.Connection[Any]) -> dict[str, str]:
    names = [
        "server_version",
        "shared_buffers",
        "effective_cache_size",
        "work_mem",
        "jit",
        "hnsw.max_scan_tuples",
        "hnsw.scan_mem_multiplier",
    ]
    conn.execute("SELECT '[1]'::vector")  # load pgvector, so its settings are known
    rows = conn.execute(
        "SELECT n, current_setting(n, true) FROM unnest(%(n)s::text[]) n", {"n": names}
    ).fetchall()
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {**dict(rows), "pgvector": row[0] if row else "?", "cpus": str(os.cpu_count())}


def iter_cases(k_values: tuple[int, ...]) -> Iterator[tuple[str, int, int | None]]:
    for k in k_values:
        yield f"default k={k}", k, None
    for depth in DEPTHS:
        yield f"depth {depth}", 10, depth


# -- report --------------------------------------------------------------------------------


def print_table(result: dict[str, Any]) -> None:
    c = result["corpus"]
    print(
        f"vectors     {c['vectors']:,} x {DIMENSION}-d (mixture of {c['clusters']:,} clusters),"
        f" {result['queries']:,} queries, seed {c['seed']}"
    )
    print("cosine      percentiles 5/25/50/75/95")
    for name, values in result["similarity"].items():
        print(f"  {name:<14} " + " ".join(f"{v:6.3f}" for v in values))
    srv = result["server"]
    print("server      " + ", ".join(f"{k} {v}" for k, v in srv.items()))
    if result["load_seconds"]:
        print(f"load        {sum(result['load_seconds'].values()):,.1f} s in all")
        for name, secs in result["load_seconds"].items():
            print(f"  {name:<40} {secs:9.2f} s")
    else:
        print("load        reused (--reuse): nothing loaded this run")
    ix = result["index"]
    print(
        f"index       {ix['name']}: {mb(ix['bytes'])} (table {mb(ix['table_bytes'])}),"
        f" {ix['options']}"
    )
    print(f"  {ix['definition']}")
    for notice in result["build_notices"]:
        print(f"  build notice: {notice}")
    print(
        f"\nvector arm via search_v5 (vector only), {result['warmup']} warm-up queries;"
        " recall against numpy's exact top k; ms per call, client side"
    )
    print(
        f"{'case':<14} {'k':>4} {'depth':>5} {'ef':>4} | {'recall':>6} {'min':>5} {'all':>5} |"
        f" {'p50':>6} {'p95':>6} {'mean':>6} {'max':>7} | {'short':>5}"
    )
    for name, r in result["cases"].items():
        lat = r["latency"]
        print(
            f"{name:<14} {r['k']:>4} {r['depth']:>5} {r['ef_search']:>4} |"
            f" {r['recall']:6.4f} {r['min_recall']:5.2f} {r['perfect']:5.2f} |"
            f" {lat['p50_ms']:6.2f} {lat['p95_ms']:6.2f} {lat['mean_ms']:6.2f} {lat['max_ms']:7.2f}"
            f" | {r['short_results']:>5}"
        )
    print(
        "(recall: mean |HNSW top k & exact top k| / k; min: worst query; all: fraction of"
        " queries with every exact neighbour; ef: hnsw.ef_search set by search_v5;"
        " short: calls that returned fewer than k rows)"
    )
    for k, lat in result["numpy_exact"].items():
        print(
            f"numpy exact k={k}: p50 {lat['p50_ms']:.2f} ms, p95 {lat['p95_ms']:.2f} ms"
            f" (matrix-vector product over all {c['vectors']:,} vectors + partial sort)"
        )
    if result["sql_exact_agrees"] is not None:
        print(f"numpy exact top 10 = SQL exact top 10 for {result['sql_exact_agrees']}")
    fb = result["fallback"]
    print(
        f"plans       HNSW index used in {fb['hnsw_index']} of {fb['checked']} sampled calls;"
        f" exact fallback ran in {fb['exact_branch_ran']}"
    )
    print("vector-arm plan of one query (default k=10, auto_explain, analyze without timing):")
    for line in result["plan_k10"].splitlines():
        print(f"  {line}")
    print(f"target      {result['target']}")


# -- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_hnsw", help="dedicated database")
    parser.add_argument("--vectors", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--clusters", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep a database with these vectors")
    parser.add_argument(
        "--keep",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the database afterwards (default), for --reuse",
    )
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    parser.add_argument(
        "--ef-sweep",
        action="store_true",
        help="also: search_v5 at each pgrag.ef_search beside the pgvector recipe's bare"
        " ORDER BY ... LIMIT 10 at each hnsw.ef_search, taking turns (k = 10)",
    )
    parser.add_argument(
        "--sweep-depth",
        type=int,
        metavar="N",
        help="with --ef-sweep: search_v5's vector_depth (default: its own, 40 at k = 10)",
    )
    args = parser.parse_args()
    if args.sweep_depth is not None and not 10 <= args.sweep_depth <= 10_000:
        parser.error("--sweep-depth must be between 10 and 10000 (at least k = 10)")
    if args.vectors < 1000 or args.queries < 1 or args.clusters < 1:
        parser.error("--vectors must be at least 1000; --queries and --clusters positive")

    base = resolve_dsn(args.dsn)
    admin = make_conninfo(base, dbname="postgres")
    dsn = make_conninfo(base, dbname=args.database)
    settings = corpus_settings(args)
    phases = Phases()
    t_start = time.perf_counter()

    log("generating vectors")
    stored, queries, warmup = make_vectors(args)
    exists, _ = database_exists(admin, args.database)
    model: int | None = None
    if exists and args.reuse:
        migrate.upgrade(dsn)
        with psycopg.connect(dsn) as conn:
            model = loaded_model(conn, settings)
        if model is None:
            log(f"{args.database} does not hold these vectors ({settings}); reloading")
    load_seconds: Timings | None = None
    notices: list[str] = []
    if model is None:
        drop_database(admin, args.database, MARKER)
        log(f"creating database {args.database}")
        create_database(admin, args.database, MARKER)
        phases.run("migrate to head", lambda: migrate.upgrade(dsn))
        model = load(dsn, args, stored, phases)
        notices = build_index(dsn, model, phases)
        load_seconds = dict(phases.seconds)
    else:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT to_regclass(%(i)s)", {"i": f"pgrag.chunk_embeddings_hnsw_{model}"}
            ).fetchone()
        if row is None or row[0] is None:
            log("the HNSW index is missing; building it")
            notices = build_index(dsn, model, phases)

    log("exact search (numpy)")
    exact: dict[int, np.ndarray] = {}
    numpy_ms: dict[int, dict[str, float]] = {}
    top_sims = np.empty((len(queries), 0))
    for k in KS:
        ids, sims, ms = exact_top(stored, queries, k)
        exact[k], numpy_ms[k] = ids, latency(ms)
        top_sims = sims
    similarity = similarity_profile(stored, top_sims, np.random.default_rng([args.seed, 4]))

    params = {"c": COLLECTION}
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        index = chunk_index(conn, args.vectors)
        info = index_info(conn, model)
        server = server_info(conn)
        # The SQL exact search agrees with numpy's (same float32 vectors, cosine distance).
        agree = 0
        for i, q in enumerate(queries[:5]):
            rows = conn.execute(
                sql.SQL(
                    "SELECT chunk_id FROM pgrag.chunk_embeddings WHERE model_id = %(m)s"
                    " ORDER BY (embedding::vector({d}) <=> %(q)s::vector) + 0 LIMIT 10"
                ).format(d=sql.Literal(DIMENSION)),
                {"m": model, "q": q},
            ).fetchall()
            agree += set(index[[r[0] for r in rows]].tolist()) == set(exact[10][i].tolist())
        log(f"warm-up: {len(warmup)} queries at each k")
        for k in KS:
            run_queries(conn, DEFAULT, warmup, {**params, "k": k})
        knob = (
            ef_sweep(conn, model, queries, index, exact[10], depth=args.sweep_depth)
            if args.ef_sweep
            else None
        )
        cases: dict[str, Any] = {}
        for name, k, depth in iter_cases(KS):
            log(f"measuring {name}: {len(queries)} queries")
            statement = DEFAULT if depth is None else WITH_DEPTH
            hits, ms = run_queries(conn, statement, queries, {**params, "k": k, "d": depth})
            cases[name] = {
                "k": k,
                "depth": depth if depth is not None else max(4 * k, 40),
                "ef_search": ef_search(k, depth),
                **recall(hits, index, exact[k][:, :k]),
                "latency": latency(ms),
            }

    log(f"checking plans: {FALLBACK_SAMPLE} calls at each k")
    checks = []
    plan_k10 = ""
    for k in KS:
        plans = nested_plans(dsn, DEFAULT, queries[:FALLBACK_SAMPLE], {**params, "k": k})
        checks += [plan_check(p, model) for p in plans]
        if k == 10:
            plan_k10 = vector_arm_plan(plans[0])
    fallback = {
        "checked": len(checks),
        "hnsw_index": sum(c["hnsw_index"] for c in checks),
        "exact_branch_ran": sum(c["exact_branch_ran"] for c in checks),
    }

    r10 = cases["default k=10"]["recall"]
    met = "met" if r10 >= TARGET_RECALL else "missed"
    result = {
        "corpus": settings,
        "queries": len(queries),
        "warmup": len(warmup),
        "similarity": similarity,
        "server": server,
        "load_seconds": load_seconds,
        "index": info,
        "build_notices": notices,
        "cases": cases,
        "numpy_exact": {str(k): v for k, v in numpy_ms.items()},
        "sql_exact_agrees": f"{agree} of 5 queries",
        "fallback": fallback,
        "ef_sweep": knob,
        "plan_k10": plan_k10,
        "target": f"recall@10 >= {TARGET_RECALL} at search_v5's defaults: {met} ({r10:.4f})",
        "wall_seconds": time.perf_counter() - t_start,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
        if knob:
            print(
                "\nef_search sweep, k = 10, search_v5 vector_depth"
                f" {knob['search_v5 vector_depth']} (recall@10 against exact; p50 ms):"
            )
            for name, by_ef in knob["points"].items():
                for ef, p in by_ef.items():
                    print(
                        f"  {name:<7} ef {ef:>4}: recall {p['recall']:.4f}  p50 {p['p50_ms']:.2f}"
                    )
            for r in knob["equal recall"]:
                print(
                    f"  pgrag ef {r['pgrag ef']} (recall {r['recall']:.4f}) / recipe ef"
                    f" {r['recipe ef (fastest with at least that recall)']}:"
                    f" p50 x{r['p50 ratio']:.2f}"
                )
    if not args.keep:
        log(f"dropping database {args.database} (--no-keep)")
        drop_database(admin, args.database, MARKER)


if __name__ == "__main__":
    main()
