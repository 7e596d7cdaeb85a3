"""One huge Markdown file: `pgrag.ingest` of it beside embedding its chunks alone.

Issue 16's target: one huge file ingests at >= 0.9x the throughput of only embedding the same
chunk texts with the same model, in the same process; and its progress moves by chunks while
that one file is written.

Corpus: one generated Markdown file (--mb megabytes, default 5): a `#` title, then `##`
sections of paragraphs of words drawn from a Zipf-distributed vocabulary of 30,000 made-up
words (seeded, so every run writes the same file; no two chunks alike, so the ingest embeds
every chunk, as the peer does). With --stream (the default) the file is read the way a file
over the whole-read limit (50 MB) is: streamed, chunked a line at a time and written group by
group in one transaction -- the path a 60 MB file takes -- by lowering that limit for this
process; --no-stream reads it whole.

Peer: the exact texts the ingest embeds (heading context and chunk, from pgrag's own chunker),
embedded by the same model object in batches of the ingest's size.

    .venv/bin/python benchmarks/huge_file.py                   # 5 MB, streamed, 2 rounds
    .venv/bin/python benchmarks/huge_file.py --mb 0.3 --json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _bench import fresh_database, log

import pgrag
from pgrag.embeddings.local import configured_embedder
from pgrag.ingest import loaders
from pgrag.ingest.plan import chunk_limits, prepare_chunk
from pgrag.text.chunking import chunk_lines

MARKER = "pgrag benchmark: huge_file"
BATCH = 64


def write_file(path: Path, megabytes: float, seed: int = 16) -> int:
    """A Markdown file of about ``megabytes`` MB; its size in bytes."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(30_000)]
    weights = [1 / (rank + 1) for rank in range(len(vocab))]
    target = int(megabytes * 2**20)
    size = 0
    section = 0
    with path.open("w") as fh:
        fh.write("# A very large handbook\n\n")
        while size < target:
            section += 1
            parts = [f"## Section {section}\n"]
            for _ in range(rng.randint(2, 8)):
                sentences = []
                for _ in range(rng.randint(2, 6)):
                    words = rng.choices(vocab, weights, k=rng.randint(6, 24))
                    sentences.append(" ".join(words).capitalize() + ".")
                parts.append(" ".join(sentences) + "\n")
            block = "\n".join(parts) + "\n"
            fh.write(block)
            size += len(block)
    return path.stat().st_size


def embed_texts(path: Path, embedder: Any) -> list[str]:
    """What the ingest will embed for this file: pgrag's chunker, its heading context."""
    limit, overlap = chunk_limits(None, embedder)  # a new collection's
    [(_, item)] = list(loaders.load_files([path]))
    assert not isinstance(item, Exception), item
    headings: dict[str, str] = {}
    counter = embedder.tokens
    with path.open(encoding="utf-8") as fh:
        return [
            prepare_chunk(chunk, item, counter, headings).embed_text
            for chunk in chunk_lines(fh, counter, limit=limit, overlap=overlap, markdown=True)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_huge_file")
    parser.add_argument("--mb", type=float, default=5.0, help="size of the file in MB")
    parser.add_argument(
        "--stream",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stream the file as one over the whole-read limit is (default) or read it whole",
    )
    parser.add_argument("--rounds", type=int, default=2, help="turns of embed, then ingest")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    dsn = fresh_database(args.dsn, args.database, MARKER)
    work = Path(tempfile.mkdtemp(prefix="pgrag-huge-file-bench-"))
    try:
        path = work / "handbook.md"
        size = write_file(path, args.mb)
        if args.stream:
            loaders.MAX_BYTES = min(loaders.MAX_BYTES, size - 1)
        db = pgrag.connect(dsn)
        embedder = configured_embedder(db)
        embedder.embed(["warm up the model"])
        texts = embed_texts(path, embedder)
        embed_s = ingest_s = 0.0
        moves: list[float] = []
        for r in range(args.rounds):
            # Turns (embed, ingest, embed, ingest...), so that background load on a shared
            # machine falls on both alike; each ingest into a new collection embeds it all.
            log(f"round {r + 1}: {size / 2**20:.1f} MB, {len(texts)} chunks: embedding alone")
            t0 = time.perf_counter()
            for i in range(0, len(texts), BATCH):
                embedder.embed(texts[i : i + BATCH])
            embed_s += time.perf_counter() - t0
            log(f"round {r + 1}: pgrag.ingest of the file")
            moves = []
            t0 = time.perf_counter()
            report = pgrag.ingest(
                db,
                [path],
                collection=f"huge-{r + 1}",
                batch_chunks=BATCH,
                progress=lambda n, moves=moves, t0=t0: moves.append(time.perf_counter() - t0),
            )
            last = time.perf_counter() - t0
            ingest_s += last
            assert not report.failed, report.failed
            assert report.chunks_embedded == report.chunks_written == len(texts), (
                report.summary(),
                len(texts),
            )
            log(f"round {r + 1}: {report.summary()}")
        db.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "megabytes": round(size / 2**20, 2),
        "streamed": args.stream,
        "chunks": len(texts),
        "rounds": args.rounds,
        "seconds": {"embed": round(embed_s, 1), "ingest": round(ingest_s, 1)},
        "chunks_per_s": {
            "embed": round(args.rounds * len(texts) / embed_s, 2),
            "ingest": round(args.rounds * len(texts) / ingest_s, 2),
        },
        "ratio": round(embed_s / ingest_s, 3),
        # in the last round: the progress callback's calls while the one file was written,
        # and the longest wait between two of them (or from the start to the first)
        "progress_updates": len(moves),
        "longest_gap_s": round(max(np.diff([0.0, *moves])), 1) if moves else None,
        "after_last_update_s": round(last - moves[-1], 1) if moves else None,
        "model": embedder.name,
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['megabytes']} MB, {len(texts)} chunks, {args.rounds} rounds"
            f" ({result['model']})"
        )
        print(f"embedding alone: {embed_s:.1f} s, {result['chunks_per_s']['embed']} chunks/s")
        print(f"pgrag ingest:    {ingest_s:.1f} s, {result['chunks_per_s']['ingest']} chunks/s")
        print(
            f"progress: {len(moves)} updates, longest gap {result['longest_gap_s']} s,"
            f" {result['after_last_update_s']} s after the last"
        )
        print(f"ratio: {result['ratio']:.3f} (target >= 0.9)")


if __name__ == "__main__":
    main()
