"""Sizing at scale: N chunks over C collections of unequal sizes.

Issue 21 (items 2 and 4): what a database of a million chunks costs and how its searches
behave, measured so that the sizing guide (docs/scale.md#sizing) can project from it, and so
that a partitioned layout can be compared with today's on the same data.

The corpus (deterministic: numpy, fixed seed): N chunks (default 1,000,000) in C collections
(default 120) whose sizes follow Zipf (size of the i-th ∝ 1/i: the largest ~186k chunks, the
smallest ~1.6k at the defaults), 10 chunks a document. Each chunk has 24 pseudo-words drawn
Zipf–Mandelbrot from a 50,000-word vocabulary (keyword_scale.py's generator) and a synthetic
384-d vector from hnsw_recall.py's clustered mixture (nearest-neighbour similarities like
all-MiniLM-L6-v2's). Every collection uses the same model, registered as pgrag registers the
default one. (The figures in docs/scale.md#sizing were measured with the release before
partitions, all vectors in one table under one HNSW index; benchmarks/partition_bench.py
migrates that database and compares the two layouts.)

Load: documents, chunks (the keyword trigger on, set-wise per COPY batch) and vectors are
COPYed with the model's HNSW index dropped; the index is then built once by
`pgrag.ensure_model_index` (m = 16, ef_construction = 128) with --maintenance-work-mem, timed,
its notices kept (pgvector says when the graph outgrows that memory); keyword statistics are
folded (`keyword_maintain_v2`), then VACUUM ANALYZE. Sizes of every table and index are read
from the catalog.

Searches, per size class (the 3 smallest collections, 3 near the median, the 3 largest),
--queries each, k = 10, one connection, after a warm-up: `search_v5` hybrid (a query of 3-5
words of one of the collection's chunks, with a vector from the mixture), vector only and
keyword only; p50/p95 per arm, vector recall@10 against numpy's exact top 10 over that
collection's vectors, and whether the HNSW index was used (its idx_scan counter around each
class's vector calls) or the exact path.

Ingest at scale: `pgrag.ingest_documents` of --ingest documents (one chunk each, with their
own vectors) into a collection of its own in the loaded database (the model's HNSW index over
the whole corpus live), against the same ingest into a collection of a fresh, empty database,
taking turns.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_bench.py                     # 1M, kept
    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_bench.py --reuse             # no reload
    PYTHONPATH=$PWD .venv/bin/python benchmarks/scale_bench.py --chunks 50000 \\
        --collections 100 --database pgrag_bench_scale_small --queries 50
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _bench import Phases, create_database, database_exists, drop_database, latency, log, mb
from hnsw_recall import draw as draw_vectors
from hnsw_recall import make_mixture, register_vector
from keyword_scale import draw as draw_words
from keyword_scale import make_vocabulary, zipf_cdf
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.dsn import resolve_dsn

GENERATOR = 1  # bump when the corpus changes, so --reuse reloads
MARKER = "pgrag scale benchmark (benchmarks/scale_bench.py); safe to drop"
WORDS_PER_CHUNK = 24
CHUNKS_PER_DOCUMENT = 10
BATCH = 50_000
WARMUP = 30
CLASS_SIZE = 3  # collections per size class
SEARCH = "SELECT chunk_id FROM pgrag.search_v5(%(c)s, %(t)s, %(q)s::vector, k => 10)"


def collection_sizes(chunks: int, collections: int) -> list[int]:
    """Zipf sizes (1/i), largest first, summing to ``chunks``, each at least 100."""
    weights = 1.0 / np.arange(1, collections + 1)
    sizes = np.maximum(np.floor(weights / weights.sum() * chunks).astype(np.int64), 100)
    sizes[0] += chunks - int(sizes.sum())
    return [int(s) for s in sizes]


def corpus_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "benchmark": "scale_bench",
        "generator": GENERATOR,
        "chunks": args.chunks,
        "collections": args.collections,
        "seed": args.seed,
    }


def name_of(i: int) -> str:
    return f"tenant{i:04d}"


# -- load ----------------------------------------------------------------------------------


def create_collections(dsn: str, sizes: list[int], settings: dict[str, Any]) -> int:
    """The collections, through pgrag (registering the default model as ingest does); the
    model's id. Its empty HNSW index is dropped: built once after the load."""
    import pgrag
    from pgrag.collections import ensure_collection

    with pgrag.connect(dsn) as db:
        for i in range(len(sizes)):
            ensure_collection(db, name_of(i))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgrag.collections SET settings = %(s)s::jsonb WHERE name = %(n)s",
            {"s": json.dumps(settings), "n": name_of(0)},
        )
        row = conn.execute("SELECT DISTINCT model_id FROM pgrag.collections").fetchall()
        assert len(row) == 1, row
        model = int(row[0][0])
        conn.execute(
            sql.SQL("DROP INDEX IF EXISTS {}").format(
                sql.Identifier("pgrag", f"chunk_embeddings_hnsw_{model}")
            )
        )
    return model


def load(
    dsn: str,
    args: argparse.Namespace,
    sizes: list[int],
    vocabulary: list[str],
    model: int,
    phases: Phases,
) -> None:
    mix = make_mixture(args.seed, 2_000)
    rng = np.random.default_rng([args.seed, 11])
    cdf = zipf_cdf(len(vocabulary), 25.0)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        ids = dict(conn.execute("SELECT name, id FROM pgrag.collections").fetchall())
        t_copy = t_vec = 0.0
        index = 0  # the chunk's number over the whole corpus: its `page`, and its vector's seed
        for i, size in enumerate(sizes):
            cid = ids[name_of(i)]
            documents = -(-size // CHUNKS_PER_DOCUMENT)
            t0 = time.perf_counter()
            with conn.cursor().copy(
                "COPY pgrag.documents (collection_id, source, content_hash) FROM STDIN"
            ) as copy:
                for d in range(documents):
                    source = f"{name_of(i)}/doc{d:07d}"
                    copy.write_row((cid, source, hashlib.sha256(source.encode()).hexdigest()))
            doc_ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM pgrag.documents WHERE collection_id = %(c)s ORDER BY source",
                    {"c": cid},
                )
            ]
            for start in range(0, size, BATCH):
                n = min(BATCH, size - start)
                ranks = draw_words(rng, cdf, n * WORDS_PER_CHUNK).reshape(n, WORDS_PER_CHUNK)
                with conn.cursor().copy(
                    "COPY pgrag.chunks (document_id, collection_id, ordinal, content, page,"
                    " token_count, content_hash, text_config) FROM STDIN"
                ) as copy:
                    for j in range(n):
                        text = " ".join(vocabulary[r] for r in ranks[j])
                        doc, ordinal = divmod(start + j, CHUNKS_PER_DOCUMENT)
                        copy.write_row(
                            (
                                doc_ids[doc],
                                cid,
                                ordinal,
                                text,
                                index + start + j,
                                WORDS_PER_CHUNK,
                                hashlib.sha256(text.encode()).hexdigest(),
                                "english",
                            )
                        )
            t1 = time.perf_counter()
            t_copy += t1 - t0
            rows = conn.execute(
                "SELECT id, page FROM pgrag.chunks WHERE collection_id = %(c)s ORDER BY page",
                {"c": cid},
            ).fetchall()
            vectors = chunk_vectors(mix, args.seed, index, size)
            with conn.cursor().copy(
                "COPY pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int4", "int8", "vector", "int4"])
                for (chunk_id, _), v in zip(rows, vectors, strict=True):
                    copy.write_row((model, chunk_id, v, cid))
            conn.commit()
            t_vec += time.perf_counter() - t1
            index += size
            if i % 10 == 0 or i == len(sizes) - 1:
                log(f"    {name_of(i)}: {index:>10,} / {args.chunks:,} chunks")
        phases.add("COPY documents + chunks (keyword trigger)", t_copy)
        phases.add("COPY vectors (binary)", t_vec)


def chunk_vectors(mix: Any, seed: int, first: int, n: int) -> np.ndarray:
    """The vectors of chunks first .. first + n - 1 (the same on every run)."""
    return draw_vectors(mix, n, np.random.default_rng([seed, 12, first]))


def build(dsn: str, model: int, args: argparse.Namespace, phases: Phases) -> list[str]:
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute(
            sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(args.maintenance_work_mem))
        )
        phases.run(
            "build HNSW index (ensure_model_index)",
            lambda: conn.execute("SELECT pgrag.ensure_model_index(%(m)s)", {"m": model}),
        )
        names = [r[0] for r in conn.execute("SELECT name FROM pgrag.collections ORDER BY id")]

        def fold() -> None:
            for name in names:
                conn.execute("SELECT pgrag.keyword_maintain_v2(%(n)s)", {"n": name})

        phases.run("fold keyword statistics", fold)
        phases.run("VACUUM ANALYZE", lambda: conn.execute("VACUUM (ANALYZE)"))
    return notices


def sizes_on_disk(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'pgrag' AND c.relkind IN ('r', 'i')"
        "   AND pg_relation_size(c.oid) > 8 * 1024 * 1024 ORDER BY 2 DESC"
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


# -- searches ------------------------------------------------------------------------------


def size_classes(sizes: list[int]) -> dict[str, list[int]]:
    order = list(range(len(sizes)))  # largest first
    middle = len(order) // 2
    return {
        "small": order[-CLASS_SIZE:],
        "median": order[middle - 1 : middle - 1 + CLASS_SIZE],
        "large": order[:CLASS_SIZE],
    }


def hnsw_scans(conn: psycopg.Connection[Any], model: int) -> int:
    """Scans of the model's HNSW index: the shared one (the release before partitions), or
    each collection's partition's (<partition>_hnsw_<model>)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE schemaname = 'pgrag'"
        " AND (indexrelname = %(i)s OR indexrelname LIKE %(p)s)",
        {"i": f"chunk_embeddings_hnsw_{model}", "p": f"chunk_embeddings_c%_hnsw_{model}"},
    ).fetchone()
    return int(row[0]) if row else 0


def chunks_of(conn: psycopg.Connection[Any], name: str) -> list[tuple[int, int, str]]:
    """(chunk id, page, content) of each of a collection's chunks."""
    rows = conn.execute(
        "SELECT h.id, h.page, h.content FROM pgrag.chunks h"
        " JOIN pgrag.collections c ON c.id = h.collection_id"
        " WHERE c.name = %(n)s AND h.page IS NOT NULL",  # (not the ingest rounds' documents)
        {"n": name},
    ).fetchall()
    return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]


# -- ingest at scale -------------------------------------------------------------------------


def ingest_rate(dsn: str, fresh: str, collection: str, args: argparse.Namespace) -> dict[str, Any]:
    """Documents/s of pgrag.ingest_documents into ``collection`` (a collection of its own,
    so the measured ones stay as loaded, sharing the model's live index with the whole
    corpus) and into a collection of an empty database, taking turns, --rounds each."""
    import pgrag
    from pgrag.ingest.loaders import from_text

    mix = make_mixture(args.seed, 2_000)
    run = time.strftime("%Y%m%dT%H%M%S")
    out: dict[str, list[float]] = {"populated": [], "empty": []}
    for round_ in range(args.rounds):
        vectors = draw_vectors(mix, args.ingest, np.random.default_rng([args.seed, 31, round_]))
        for where, target, name in (("populated", dsn, collection), ("empty", fresh, "fresh")):
            docs = [
                from_text(
                    f"ingest-{run}-r{round_}/{where}/{i}",  # (new documents on every run)
                    f"added document {round_} {i} about depot {i % 97}",
                    vector=v,
                )
                for i, v in enumerate(vectors)
            ]
            with pgrag.connect(target) as db:
                if where == "empty" and round_ == 0:
                    pgrag.ingest_documents(db, docs[:1], collection=name)  # (the model's index)
                    docs = docs[1:]
                t0 = time.perf_counter()
                pgrag.ingest_documents(db, docs, collection=name)
                out[where].append(len(docs) / (time.perf_counter() - t0))
    return {
        "documents": args.ingest,
        "rounds": args.rounds,
        "populated_docs_per_s": out["populated"],
        "empty_docs_per_s": out["empty"],
        "ratio_median": float(np.median(out["populated"]) / np.median(out["empty"])),
    }


# -- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_scale_1m")
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--collections", type=int, default=120)
    parser.add_argument("--queries", type=int, default=100, help="per collection measured")
    parser.add_argument("--ingest", type=int, default=1_000, help="documents per ingest round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--maintenance-work-mem", default="3GB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep a database with this corpus")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    if args.collections < 9 or args.chunks < args.collections * 100:
        parser.error("--collections must be at least 9, with at least 100 chunks each")

    base = resolve_dsn(args.dsn)
    admin = make_conninfo(base, dbname="postgres")
    dsn = make_conninfo(base, dbname=args.database)
    settings = corpus_settings(args)
    sizes = collection_sizes(args.chunks, args.collections)
    phases = Phases()
    exists, _ = database_exists(admin, args.database)
    loaded = False
    if exists and args.reuse:
        migrate.upgrade(dsn)
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT settings FROM pgrag.collections WHERE name = %(n)s", {"n": name_of(0)}
            ).fetchone()
        loaded = row is not None and row[0] == settings
        if not loaded:
            log(f"{args.database} does not hold this corpus; reloading")
    notices: list[str] = []
    if not loaded:
        drop_database(admin, args.database, MARKER)
        create_database(admin, args.database, MARKER)
        phases.run("migrate to head", lambda: migrate.upgrade(dsn))
        with psycopg.connect(dsn) as conn:
            vocabulary = make_vocabulary(conn, 50_000, args.seed)
        model = phases.run("create collections", lambda: create_collections(dsn, sizes, settings))
        load(dsn, args, sizes, vocabulary, model, phases)
        notices = build(dsn, model, args, phases)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        model = int(conn.execute("SELECT DISTINCT model_id FROM pgrag.collections").fetchone()[0])  # type: ignore[index]
        on_disk = sizes_on_disk(conn)
        server = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
        pgvector = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()[0]  # type: ignore[index]
        classes = {}
        for label, members in size_classes(sizes).items():
            log(f"searching the {label} collections")
            rows = {m: chunks_of(conn, name_of(m)) for m in members}
            classes[label] = measure_class(conn, args, members, sizes, rows, model)
    fresh_name = f"{args.database}_empty"
    drop_database(admin, fresh_name, MARKER)
    create_database(admin, fresh_name, MARKER)
    fresh = make_conninfo(base, dbname=fresh_name)
    migrate.upgrade(fresh)
    log("ingesting at scale and into an empty database")
    try:
        ingest = ingest_rate(dsn, fresh, "ingest_at_scale", args)
    finally:
        drop_database(admin, fresh_name, MARKER)
    result = {
        "settings": settings,
        "sizes": {"largest": sizes[0], "median": sizes[len(sizes) // 2], "smallest": sizes[-1]},
        "server": server,
        "pgvector": pgvector,
        "maintenance_work_mem": args.maintenance_work_mem,
        "load_seconds": phases.seconds,
        "hnsw_notices": notices,
        "on_disk_bytes": on_disk,
        "classes": classes,
        "ingest": ingest,
    }
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    print_summary(result)


def measure_class(
    conn: psycopg.Connection[Any],
    args: argparse.Namespace,
    members: list[int],
    sizes: list[int],
    rows_of: dict[int, list[tuple[int, int, str]]],
    model: int,
) -> dict[str, Any]:
    """Hybrid, vector and keyword calls on each of ``members``, taking turns per query."""
    mix = make_mixture(args.seed, 2_000)
    rng = np.random.default_rng([args.seed, 21, members[0]])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    ms: dict[str, list[float]] = {"hybrid": [], "vector": [], "keyword": []}
    overlaps: list[float] = []
    index_calls = 0
    for m in members:
        stored = chunk_vectors(mix, args.seed, int(starts[m]), sizes[m])
        page_of = {r[0]: r[1] for r in rows_of[m]}  # chunk id -> its number over the corpus
        texts = [r[2] for r in rows_of[m]]
        queries = draw_vectors(mix, args.queries + WARMUP, rng)
        words = []
        for _ in range(args.queries + WARMUP):
            chunk = texts[int(rng.integers(len(texts)))].split()
            words.append(" ".join(rng.choice(chunk, int(rng.integers(3, 6)), replace=False)))
        before = hnsw_scans(conn, model)
        for j, (q, t) in enumerate(zip(queries, words, strict=True)):
            for mode in ("hybrid", "vector", "keyword"):
                params = {
                    "c": name_of(m),
                    "t": None if mode == "vector" else t,
                    "q": None if mode == "keyword" else q,
                }
                t0 = time.perf_counter()
                rows = conn.execute(SEARCH, params).fetchall()
                elapsed = (time.perf_counter() - t0) * 1000
                if j < WARMUP:
                    continue
                ms[mode].append(elapsed)
                if mode == "vector":
                    sims = stored @ q
                    exact = set((np.argpartition(-sims, 10)[:10] + int(starts[m])).tolist())
                    got = {page_of.get(r[0], -1) for r in rows}
                    overlaps.append(len(got & exact) / 10)
        index_calls += hnsw_scans(conn, model) - before
    return {
        "collections": [name_of(m) for m in members],
        "chunks": [sizes[m] for m in members],
        **{f"{mode}_ms": latency(v) for mode, v in ms.items()},
        "vector_recall_at_10": float(np.mean(overlaps)),
        "vector_arm_calls": 2 * (args.queries + WARMUP) * len(members),  # hybrid + vector
        "hnsw_index_scans": index_calls,
    }


def print_summary(result: dict[str, Any]) -> None:
    out = sys.stderr
    print("\nload:", file=out)
    for name, seconds in result["load_seconds"].items():
        print(f"  {name:<42} {seconds:9.1f} s", file=out)
    print("on disk:", file=out)
    for name, n in result["on_disk_bytes"].items():
        print(f"  {name:<42} {mb(n):>12}", file=out)
    print(
        "\n| collections | chunks | hybrid p50 / p95 ms | vector p50 / p95 | keyword p50 / p95"
        " | recall@10 | HNSW scans / calls with a vector arm |",
        file=out,
    )
    print("|---|---|---|---|---|---:|---|", file=out)
    for label, c in result["classes"].items():
        cells = [
            f"{c[f'{m}_ms']['p50_ms']:.2f} / {c[f'{m}_ms']['p95_ms']:.2f}"
            for m in ("hybrid", "vector", "keyword")
        ]
        print(
            f"| {label} | {', '.join(f'{n:,}' for n in c['chunks'])} | {' | '.join(cells)}"
            f" | {c['vector_recall_at_10']:.4f}"
            f" | {c['hnsw_index_scans']} / {c['vector_arm_calls']} |",
            file=out,
        )
    ing = result["ingest"]
    print(
        f"\ningest docs/s: populated {[round(x) for x in ing['populated_docs_per_s']]},"
        f" empty {[round(x) for x in ing['empty_docs_per_s']]}; ratio {ing['ratio_median']:.2f}",
        file=out,
    )


if __name__ == "__main__":
    main()
