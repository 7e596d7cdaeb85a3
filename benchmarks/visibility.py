"""Search under selective access: k results and latency when a caller may see 1%, 10% or 50%.

Issue 4's targets: with 1%, 10% and 50% of a collection visible, search_v5 returns
min(k, visible matches) rows, its results agree with exact search over what the caller may see
at recall@10 >= 0.95, and on >= 100k chunks its p50 latency at 1% visibility is at most 3 x the
unfiltered latency.

The corpus (deterministic: numpy, fixed seed): N chunks (default 100,000), 10 per document,
each document readable by one of 100 tenants (principal tenant:NN, chosen at random, so every
tenant holds ~1% of the collection, scattered over the vector space) and carrying
{"tenant": "tNN"} in its metadata. Vectors are hnsw_recall.py's clustered 384-d mixture; texts
are 40 words drawn from a Zipf vocabulary of 20,000, so BM25 has common and rare terms.
Queries: new vectors from the mixture, and 3 words taken from a random stored chunk.

Callers: the unrestricted owner (unfiltered, the baseline) and a login role in pgrag_app that
sets pgrag.principals per transaction to 1, 10 or 50 tenants; plus the owner with a metadata
filter that admits 1% ({"tenant": "t00"}). Each caller runs every query as hybrid (k = 10;
latency), vector only and keyword only (each checked against exact search over the visible
chunks: numpy cosine for vectors, search_v5 with postings_per_term => NULL, i.e. every posting
read, for BM25). Callers are interleaved in blocks of 50 queries, so noise on this shared machine
hits all of them alike; latency is the search statement's, client side.

A peer for contrast, what most tools do: the owner's plain HNSW query for the top 40 by distance
(pgvector's default, no iterative scan), then the 1% caller's rows kept in the application.

    .venv/bin/python benchmarks/visibility.py              # 100k chunks, database kept
    .venv/bin/python benchmarks/visibility.py --reuse      # measure again without reloading
    .venv/bin/python benchmarks/visibility.py --chunks 20000 --queries 100 --no-keep
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from typing import Any

import numpy as np
import psycopg
from _bench import Phases, create_database, database_exists, drop_database, latency, log
from hnsw_recall import DIMENSION, draw, make_mixture, register_vector
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from pgrag.db import schema as migrate
from pgrag.db.dsn import resolve_dsn

COLLECTION = "vis"
MARKER = "pgrag visibility benchmark (benchmarks/visibility.py); safe to drop"
TENANTS = 100
CHUNKS_PER_DOCUMENT = 10
WORDS_PER_CHUNK = 40
VOCABULARY = 20_000
BATCH = 20_000
BLOCK = 50
K = 10
ROLE = "pgrag_bench_visibility_app"
LEVELS = {"1%": 1, "10%": 10, "50%": 50}
SEARCH = (
    "SELECT chunk_id, source FROM pgrag.search_v5(%(c)s, %(t)s, %(q)s::vector, k => %(k)s::int,"
    " filter => %(f)s::jsonb)"
)
EXACT_BM25 = (
    "SELECT chunk_id FROM pgrag.search_v5(%(c)s, %(t)s, NULL, k => %(k)s::int,"
    " filter => %(f)s::jsonb, postings_per_term => NULL)"
)


def corpus(args: argparse.Namespace) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(vectors, texts, tenant of each document)."""
    mix = make_mixture(args.seed, 2_000)
    rng = np.random.default_rng([args.seed, 11])
    vectors = np.concatenate(
        [draw(mix, min(BATCH, args.chunks - i), rng) for i in range(0, args.chunks, BATCH)]
    )
    ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
    p = 1 / (ranks + 2.7)
    words = rng.choice(VOCABULARY, size=(args.chunks, WORDS_PER_CHUNK), p=p / p.sum())
    texts = [" ".join(f"w{w}" for w in row) for row in words]
    tenants = rng.integers(0, TENANTS, -(-args.chunks // CHUNKS_PER_DOCUMENT))
    return vectors, texts, tenants


def load(dsn: str, vectors: np.ndarray, texts: list[str], tenants: np.ndarray) -> None:
    n = len(texts)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        cid = conn.execute(
            "INSERT INTO pgrag.collections (name) VALUES (%(n)s) RETURNING id", {"n": COLLECTION}
        ).fetchone()[0]
        model = conn.execute(
            "SELECT pgrag.register_model('synthetic-mixture-384', 'benchmark', %(d)s,"
            " 'cosine', true)",
            {"d": DIMENSION},
        ).fetchone()[0]
        conn.execute("UPDATE pgrag.collections SET model_id = %s WHERE id = %s", (model, cid))
        conn.execute(
            sql.SQL("DROP INDEX {}").format(
                sql.Identifier("pgrag", f"chunk_embeddings_hnsw_{model}")
            )
        )
        with conn.cursor().copy(
            "COPY pgrag.documents (collection_id, source, content_hash, principals, metadata)"
            " FROM STDIN"
        ) as copy:
            for d, t in enumerate(tenants):
                source = f"doc{d:07d}"
                copy.write_row(
                    (
                        cid,
                        source,
                        hashlib.sha256(source.encode()).hexdigest(),
                        [f"tenant:{t:02d}"],
                        json.dumps({"tenant": f"t{t:02d}"}),
                    )
                )
        doc_ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM pgrag.documents WHERE collection_id = %s ORDER BY source", (cid,)
            )
        ]
        for start in range(0, n, BATCH):
            with conn.cursor().copy(
                "COPY pgrag.chunks (id, document_id, collection_id, ordinal, content,"
                " token_count, content_hash, text_config) FROM STDIN"
            ) as copy:
                for i in range(start, min(start + BATCH, n)):
                    d, ordinal = divmod(i, CHUNKS_PER_DOCUMENT)
                    copy.write_row(
                        (
                            i + 1,
                            doc_ids[d],
                            cid,
                            ordinal,
                            texts[i],
                            WORDS_PER_CHUNK,
                            str(i),
                            "english",
                        )
                    )
            with conn.cursor().copy(
                "COPY pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int4", "int8", "vector", "int4"])
                for i in range(start, min(start + BATCH, n)):
                    copy.write_row((model, i + 1, vectors[i], cid))
            log(f"    chunks {min(start + BATCH, n):>9,} / {n:,}")
        conn.execute("SELECT setval(pg_get_serial_sequence('pgrag.chunks', 'id'), %s)", (n,))
        conn.commit()
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SELECT pgrag.ensure_model_index(%s)", (model,))
        conn.execute("SELECT * FROM pgrag.keyword_maintain_v2(%s)", (COLLECTION,))
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def ensure_role(admin: str, dsn: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(ROLE)))
        conn.execute(sql.SQL("GRANT pgrag_app TO {}").format(sql.Identifier(ROLE)))
    return make_conninfo(dsn, user=ROLE)


class Caller:
    """One kind of caller: who it reads as and what it may see."""

    def __init__(
        self,
        name: str,
        conn: psycopg.Connection[Any],
        principals: str | None,
        filt: dict[str, Any],
        visible: np.ndarray,
    ) -> None:
        self.name, self.conn, self.principals, self.filter = name, conn, principals, filt
        self.visible = visible  # boolean per chunk index (chunk id - 1)
        self.ms: list[float] = []
        self.counts: list[int] = []
        self.vector_recall: list[float] = []
        self.keyword_recall: list[float] = []
        self.leaks = 0

    def run(self, statement: str, params: dict[str, Any]) -> tuple[list[int], float]:
        with self.conn.transaction():
            if self.principals is not None:
                self.conn.execute(
                    "SELECT set_config('pgrag.principals', %s, true)", (self.principals,)
                )
            t0 = time.perf_counter()
            rows = self.conn.execute(statement, params).fetchall()
            ms = (time.perf_counter() - t0) * 1000
        ids = [r[0] for r in rows]
        self.leaks += sum(not self.visible[i - 1] for i in ids)
        return ids, ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_visibility")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep a database with this corpus")
    parser.add_argument("--keep", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", action="store_true", help="results as JSON on stdout")
    args = parser.parse_args()
    if args.chunks < 10_000 or args.queries < BLOCK:
        parser.error(f"--chunks must be at least 10,000 and --queries at least {BLOCK}")

    base = resolve_dsn(args.dsn)
    admin = make_conninfo(base, dbname="postgres")
    dsn = make_conninfo(base, dbname=args.database)
    phases = Phases()
    log("generating the corpus")
    vectors, texts, tenants = corpus(args)
    marker = f"{MARKER} chunks={args.chunks} seed={args.seed}"
    exists, comment = database_exists(admin, args.database)
    if not (exists and args.reuse and comment == marker):
        if exists:
            drop_database(
                admin, args.database, comment if comment and comment.startswith(MARKER) else MARKER
            )
        create_database(admin, args.database, marker)
        phases.run("migrate", lambda: migrate.upgrade(dsn))
        phases.run("load + index", lambda: load(dsn, vectors, texts, tenants))
    else:
        migrate.upgrade(dsn)
    app_dsn = ensure_role(admin, dsn)

    rng = np.random.default_rng([args.seed, 21])
    mix = make_mixture(args.seed, 2_000)
    queries = draw(mix, args.queries, np.random.default_rng([args.seed, 22]))
    word_queries = [
        " ".join(rng.choice(texts[int(rng.integers(len(texts)))].split(), 3, replace=False))
        for _ in range(args.queries)
    ]
    tenant_of_chunk = np.repeat(tenants, CHUNKS_PER_DOCUMENT)[: len(texts)]

    owner = psycopg.connect(dsn)
    app = psycopg.connect(app_dsn)
    for c in (owner, app):
        register_vector(c)
    everyone = np.ones(len(texts), dtype=bool)
    callers = [Caller("unfiltered", owner, None, {}, everyone)]
    for name, t in LEVELS.items():
        callers.append(
            Caller(
                name,
                app,
                ",".join(f"tenant:{i:02d}" for i in range(t)),
                {},
                tenant_of_chunk < t,
            )
        )
    callers.append(Caller("filter 1%", owner, None, {"tenant": "t00"}, tenant_of_chunk == 0))

    # Warm up every caller's plans and caches.
    for c in callers:
        for i in range(10):
            c.run(
                SEARCH,
                {
                    "c": COLLECTION,
                    "t": word_queries[i],
                    "q": queries[i],
                    "k": K,
                    "f": Jsonb(c.filter),
                },
            )

    normed = vectors  # unit vectors: cosine similarity is the dot product
    log(f"measuring {len(callers)} callers x {args.queries} queries")
    for start in range(0, args.queries, BLOCK):
        for c in callers:
            for i in range(start, min(start + BLOCK, args.queries)):
                params = {"c": COLLECTION, "k": K, "f": Jsonb(c.filter)}
                ids, ms = c.run(SEARCH, {**params, "t": word_queries[i], "q": queries[i]})
                c.ms.append(ms)
                c.counts.append(len(ids))
                # vector only, against exact cosine over the visible chunks
                vids, _ = c.run(SEARCH, {**params, "t": None, "q": queries[i]})
                vis = np.nonzero(c.visible)[0]
                sims = normed[vis] @ queries[i]
                exact = vis[np.argsort(-sims)[:K]] + 1
                c.vector_recall.append(len(set(vids) & set(exact.tolist())) / min(K, len(vis)))
                # keyword only, against exact BM25 (every posting read) for the same caller
                kids, _ = c.run(SEARCH, {**params, "t": word_queries[i], "q": None})
                kexact, _ = c.run(EXACT_BM25, {**params, "t": word_queries[i]})
                if kexact:
                    c.keyword_recall.append(len(set(kids) & set(kexact)) / len(kexact))
        log(f"  {min(start + BLOCK, args.queries):>5} / {args.queries}")

    # The peer: top 40 by plain HNSW (no iterative scan), then the 1% caller's rows kept.
    peer_counts = []
    with owner.transaction():
        owner.execute("SET LOCAL hnsw.iterative_scan = off")
        owner.execute("SET LOCAL hnsw.ef_search = 40")
        model = owner.execute(
            "SELECT model_id FROM pgrag.collections WHERE name = %s", (COLLECTION,)
        ).fetchone()[0]
        for q in queries:
            rows = owner.execute(
                sql.SQL(
                    "SELECT chunk_id FROM pgrag.chunk_embeddings WHERE model_id = {m}"
                    " ORDER BY embedding::vector({d}) <=> %s::vector LIMIT 40"
                ).format(m=sql.Literal(model), d=sql.Literal(DIMENSION)),
                (q,),
            ).fetchall()
            peer_counts.append(min(K, sum(tenant_of_chunk[r[0] - 1] == 0 for r in rows)))
    owner.close()
    app.close()

    base_p50 = latency(callers[0].ms)["p50_ms"]
    result: dict[str, Any] = {"chunks": len(texts), "queries": args.queries, "k": K, "callers": {}}
    for c in callers:
        lat = latency(c.ms)
        result["callers"][c.name] = {
            "visible_chunks": int(c.visible.sum()),
            "p50_ms": round(lat["p50_ms"], 2),
            "p95_ms": round(lat["p95_ms"], 2),
            "p50_vs_unfiltered": round(lat["p50_ms"] / base_p50, 2),
            "short_results": sum(n < K for n in c.counts),
            "vector_recall@10": round(float(np.mean(c.vector_recall)), 4),
            "keyword_recall@10": round(float(np.mean(c.keyword_recall)), 4),
            "rows_not_visible": c.leaks,
        }
    result["peer_post_filter_1%"] = {
        "mean_results": round(float(np.mean(peer_counts)), 2),
        "queries_short_of_k": sum(n < K for n in peer_counts),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"\n{len(texts):,} chunks, {args.queries} queries, k = {K} (hybrid for latency)")
        print(
            f"{'caller':<12}{'visible':>9}{'p50 ms':>9}{'p95 ms':>9}{'x unfilt':>10}"
            f"{'short':>7}{'vec R@10':>10}{'kw R@10':>9}{'leaks':>7}"
        )
        for name, r in result["callers"].items():
            print(
                f"{name:<12}{r['visible_chunks']:>9,}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}"
                f"{r['p50_vs_unfiltered']:>10.2f}{r['short_results']:>7}"
                f"{r['vector_recall@10']:>10.4f}{r['keyword_recall@10']:>9.4f}"
                f"{r['rows_not_visible']:>7}"
            )
        peer = result["peer_post_filter_1%"]
        print(
            f"peer (HNSW top 40, then filter to 1%): {peer['mean_results']} results on average,"
            f" {peer['queries_short_of_k']} of {args.queries} queries short of k"
        )
    if not args.keep:
        drop_database(admin, args.database, marker)


if __name__ == "__main__":
    main()
