"""Bulk-load benchmark: pgrag's ingest into the live HNSW index vs dropping it and building it
once (what releases before issue 16 did for large loads).

Runs pgrag.ingest twice over the same synthetic corpus, in one process, on one embedded
PostgreSQL, into two fresh databases:

  live   pgrag: every batch is COPYed into the table with its HNSW index live (searches of
         every collection of the model keep using it)
  bulk   the peer: the model's HNSW index dropped before the load (its build lock held
         meanwhile, so that ingest does not build it again at once), COPY, build it once

Embeddings come from a deterministic stand-in (seeded random unit vectors) so the numbers
measure the write path (chunking, COPY, indexing), not the 2-core CPU's model throughput.
Both runs end with the same rows and an HNSW index; the script checks that, and that the index
is used by search, then prints seconds and the ratio.

    .venv/bin/python benchmarks/bulk_load.py --docs 2000
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

import pgrag
from pgrag.db import schema as migrate
from pgrag.db.server import EmbeddedServer
from pgrag.embeddings.local import default_embedder

WORDS = (
    "refund invoice policy plan annual monthly customer support ticket severity response vpn "
    "password security incident backup retention export office parking guest kitchen travel "
    "expense receipt approval budget manager onboarding equipment laptop buddy schedule week "
    "holiday vacation sick leave portal request carry year data deletion cancellation region"
).split()


class StandInEmbedder:
    """Same name, size and tokenizer as the real model; vectors from a seeded RNG."""

    def __init__(self) -> None:
        real = default_embedder()
        self.name, self.provider = real.name, real.provider
        self.dimension, self.max_tokens = real.dimension, real.max_tokens
        self.distance, self.normalized = real.distance, real.normalized
        self._tokens = real.tokens

    @property
    def tokens(self):  # type: ignore[no-untyped-def]
        return self._tokens

    def embed(self, texts):  # type: ignore[no-untyped-def]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out


def make_corpus(root: Path, docs: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    for d in range(docs):
        sections = []
        for s in range(4):
            sentences = [
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "."
                for _ in range(rng.randint(6, 14))
            ]
            sections.append(f"## Section {s}\n\n" + " ".join(sentences))
        (root / f"doc{d:05d}.md").write_text(f"# Document {d}\n\n" + "\n\n".join(sections))


def run(admin: str, corpus: Path, name: str, drop: bool) -> tuple[float, int]:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(admin, dbname=name)
    migrate.upgrade(dsn)
    embedder = StandInEmbedder()
    db = pgrag.connect(dsn, embedder=embedder)
    with db.conn.transaction():
        model = db.conn.execute(
            "SELECT pgrag.register_model(%s, %s, %s, %s, %s, %s)",
            (
                embedder.name,
                embedder.provider,
                embedder.dimension,
                embedder.distance,
                embedder.normalized,
                embedder.max_tokens,
            ),
        ).fetchone()[0]
    with psycopg.connect(dsn, autocommit=True) as side:
        t0 = time.perf_counter()
        if drop:
            side.execute("SELECT pg_advisory_lock(hashtext('pgrag.model_index'), %s)", (model,))
            side.execute(f"DROP INDEX pgrag.chunk_embeddings_hnsw_{model}")
        report = pgrag.ingest(db, [corpus], collection="bench")
        if drop:
            side.execute("SET maintenance_work_mem = '512MB'")
            side.execute("SELECT pgrag.ensure_model_index(%s)", (model,))
            side.execute("ANALYZE pgrag.chunk_embeddings")
        elapsed = time.perf_counter() - t0
    model = db.conn.execute("SELECT model_id FROM pgrag.collections").fetchone()[0]
    assert (
        db.conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname = %s",
            (f"chunk_embeddings_hnsw_{model}",),
        ).fetchone()[0]
        == 1
    ), "HNSW index missing after load"
    db.conn.execute("SET enable_seqscan = off")
    hits = pgrag.search(db, "refund policy", collection="bench", mode="vector", k=10)
    assert len(hits) == 10
    db.close()
    return elapsed, report.chunks_written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000, help="synthetic Markdown documents")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgrag-bench-", dir="/tmp"))
    work.chmod(0o755)  # as root, the server runs as another OS user that must reach it
    server = EmbeddedServer(work / "server")
    try:
        admin = server.ensure_running().replace("/pgrag?", "/postgres?")
        corpus = work / "corpus"
        corpus.mkdir()
        make_corpus(corpus, args.docs)
        live_s, n_live = run(admin, corpus, "bench_live", drop=False)
        bulk_s, n_bulk = run(admin, corpus, "bench_bulk", drop=True)
        assert n_live == n_bulk
        print(f"documents: {args.docs}, chunks: {n_bulk}")
        print(f"live index (pgrag)   : {live_s:7.2f} s  ({n_live / live_s:8.0f} chunks/s)")
        print(f"drop, build (peer)   : {bulk_s:7.2f} s  ({n_bulk / bulk_s:8.0f} chunks/s)")
        print(f"live / drop-and-build: {live_s / bulk_s:.2f}x (same process, same server)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
