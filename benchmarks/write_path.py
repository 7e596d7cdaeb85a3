"""The write path with precomputed vectors: pgrag's ingest beside pgvector's COPY recipe.

Issue 19 (item 3): ingest with precomputed vectors at >= 0.5x the pgvector COPY recipe's
documents/s, index builds included, measured in one run. Data: SQuAD v1.1 dev's 2,067
paragraphs (``../shared/data/fetch-squad.sh``), each a document (title and text), or with
--data the documents of any set `pgrag eval retrieval` reads (a BEIR directory or a SQuAD
file), each with its all-MiniLM-L6-v2 vector computed once before the timed runs (cached
next to the data). Each
run gets a fresh database (migrated to head for pgrag), and the runs take turns, --rounds times:

- **recipe**: pgvector-python's recipe: ``CREATE TABLE items (id bigserial, content text,
  embedding vector(384))``, binary ``COPY``, then ``CREATE INDEX ... USING hnsw (embedding
  vector_cosine_ops)`` (m 16, ef_construction 64) and ``USING gin (to_tsvector('english',
  content))``: the indexes its hybrid search needs;
- **pgrag**: ``pgrag.ingest_documents`` of ``from_text(..., vector=v)`` (each paragraph one
  chunk with its vector: nothing is embedded) into a new collection, which chunks, writes,
  maintains the BM25 postings and statistics, and builds the model's HNSW index (m 16,
  ef_construction 128);
- **pgrag re-ingest**: the same documents again (all unchanged: planned and skipped).

With --into-existing, pgrag's collection holds one document before the timed ingest, so the
model's index is live during the load (a first load builds it after).

Reported: seconds and documents/s per run (median of the rounds), and pgrag / recipe.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/write_path.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from _bench import fresh_database, log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.evaluation.datasets import load_dataset  # noqa: E402
from pgrag.ingest.loaders import from_text  # noqa: E402

MARKER = "pgrag benchmark: write_path"
SQUAD = Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json"


def paragraph_vectors(texts: list[str], path: Path) -> np.ndarray:
    if path.exists():
        cached = np.load(path)
        if cached.shape[0] == len(texts):
            return cached
    from pgrag.embeddings.local import default_embedder

    log(f"embedding {len(texts)} paragraphs once (cached in {path})")
    vectors = np.asarray(default_embedder().embed(texts), dtype=np.float32)
    np.save(path, vectors)
    return vectors


def recipe(dsn: str, texts: list[str], vectors: np.ndarray) -> float:
    from pgvector.psycopg import register_vector

    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute(
            "CREATE TABLE items (id bigserial PRIMARY KEY, content text, embedding vector(384))"
        )
        with conn.cursor().copy(
            "COPY items (content, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "vector"])
            for text, vector in zip(texts, vectors, strict=True):
                copy.write_row([text, vector])
        conn.execute(
            "CREATE INDEX ON items USING hnsw (embedding vector_cosine_ops)"
            " WITH (m = 16, ef_construction = 64)"
        )
        conn.execute("CREATE INDEX ON items USING gin (to_tsvector('english', content))")
    return time.perf_counter() - t0


def pgrag_ingest(
    dsn: str, docs: list[tuple[str, str, str]], vectors: np.ndarray, seed: bool = False
) -> float:
    db = pgrag.connect(dsn)
    try:
        if seed:  # --into-existing: the collection (and the model's index) hold one document
            pgrag.ingest_documents(
                db, [from_text("seed", "A seed document.", vector=vectors[0])], collection="squad"
            )
        t0 = time.perf_counter()
        report = pgrag.ingest_documents(
            db,
            (
                from_text(source, text, title=title, vector=vector)
                for (source, title, text), vector in zip(docs, vectors, strict=True)
            ),
            collection="squad",
        )
        seconds = time.perf_counter() - t0
    finally:
        db.close()
    assert not report.failed and report.chunks_embedded == 0, report
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        "--squad",
        type=Path,
        default=SQUAD,
        help="a SQuAD file or BEIR directory (default: SQuAD v1.1 dev)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", help="server (default: PGRAG_DSN, PG*, the embedded server)")
    parser.add_argument(
        "--into-existing",
        action="store_true",
        help="pgrag ingests into a collection that already holds one document (its model's"
        " index live), not a new one",
    )
    args = parser.parse_args()

    dataset = load_dataset(args.data)
    docs = [(f"{dataset.name}:{d.id}", d.title, d.text) for d in dataset.corpus.values()]
    cache = (
        args.data / "paragraph-vectors.npy"
        if args.data.is_dir()
        else args.data.with_name("squad-dev-paragraph-vectors.npy")
        if args.data == SQUAD
        else args.data.with_name(args.data.stem + "-paragraph-vectors.npy")
    )
    vectors = paragraph_vectors([f"{title}\n{text}" for _, title, text in docs], cache)
    seconds: dict[str, list[float]] = {"recipe": [], "pgrag": [], "pgrag re-ingest": []}
    for r in range(args.rounds):
        dsn = fresh_database(args.dsn, "pgrag_bench_write_recipe", MARKER)
        seconds["recipe"].append(recipe(dsn, [t for _, _, t in docs], vectors))
        dsn = fresh_database(args.dsn, "pgrag_bench_write_pgrag", MARKER)
        seconds["pgrag"].append(pgrag_ingest(dsn, docs, vectors, seed=args.into_existing))
        seconds["pgrag re-ingest"].append(pgrag_ingest(dsn, docs, vectors))
        log(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items()))
    n = len(docs)
    report: dict[str, Any] = {"data": dataset.name, "documents": n, "rounds": args.rounds}
    for name, values in seconds.items():
        median = statistics.median(values)
        report[name] = {
            "seconds (median)": round(median, 3),
            "documents/s": round(n / median, 1),
            "all seconds": [round(v, 3) for v in values],
        }
    recipe_rate = report["recipe"]["documents/s"]
    report["pgrag / recipe"] = round(report["pgrag"]["documents/s"] / recipe_rate, 3)
    report["pgrag re-ingest / recipe"] = round(
        report["pgrag re-ingest"]["documents/s"] / recipe_rate, 3
    )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
