"""Ingest throughput: end-to-end `pgrag.ingest` beside embedding the same chunk texts alone.

Issue 5's target: on a corpus of at least 10,000 chunks, the whole ingest (read and parse the
files, chunk, embed, write, build the index, fold the keyword statistics) runs at >= 0.9x the
throughput of only embedding the same texts with the same model, measured in the same run.

Corpus: SQuAD v1.1 dev's paragraphs (../shared/data/fetch-squad.sh), one file per article and
edition, five editions; editions 0-2 are Markdown (the article a `#` title, each paragraph under
its own `##` heading), editions 3-4 are HTML with a navigation bar, a header and a footer to
drop. The edition is in every title, so no two chunks embed the same text: nothing is reused,
the ingest embeds every chunk, as the peer does.

Peer: the exact texts the ingest embeds (heading path and chunk), got from pgrag's own
chunker, embedded by the same model object in batches of the ingest's size. The corpus is
split in two halves and the runs take turns (embed A, ingest A, embed B, ingest B) so that
background load on a shared machine falls on both alike.

    .venv/bin/python benchmarks/ingest_throughput.py            # ~20 minutes on 2 cores
    .venv/bin/python benchmarks/ingest_throughput.py --editions 1 --json   # a quick look
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import fresh_database, log

import pgrag
from pgrag.embeddings.local import configured_embedder
from pgrag.ingest.loaders import load_files
from pgrag.ingest.plan import chunk_limits, prepare_chunks

MARKER = "pgrag benchmark: ingest_throughput"
SQUAD = Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json"
BATCH = 64


def write_corpus(root: Path, squad: dict[str, Any], editions: int, articles: int | None) -> int:
    files = 0
    for edition in range(editions):
        for a, article in enumerate(squad["data"][:articles]):
            title = f"{article['title'].replace('_', ' ')} (edition {edition + 1})"
            paragraphs = [p["context"] for p in article["paragraphs"]]
            if edition < 3:
                body = "\n\n".join(
                    f"## Passage {i + 1}\n\n{text}" for i, text in enumerate(paragraphs)
                )
                (root / f"e{edition}-{a:03d}.md").write_text(f"# {title}\n\n{body}\n")
            else:
                body = "\n".join(
                    f"<h2>Passage {i + 1}</h2>\n<p>{html.escape(text)}</p>"
                    for i, text in enumerate(paragraphs)
                )
                (root / f"e{edition}-{a:03d}.html").write_text(
                    f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head>"
                    "<body><nav><a href='/'>Home</a> <a href='/wiki'>Wiki</a></nav>"
                    "<header class='site-header'>Encyclopedia</header>"
                    f"<main><h1>{html.escape(title)}</h1>\n{body}\n</main>"
                    "<footer>Text under CC BY-SA</footer></body></html>\n"
                )
            files += 1
    return files


def embed_texts(paths: list[Path], embedder: Any) -> list[str]:
    """What the ingest will embed for these files: pgrag's chunker, its heading context."""
    limit, overlap = chunk_limits(None, embedder)  # a new collection's
    texts = []
    for _, item in load_files(paths):
        assert not isinstance(item, Exception), item
        texts += [c.embed_text for c in prepare_chunks(item, embedder, limit, overlap)]
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_ingest")
    parser.add_argument("--editions", type=int, default=5, help="copies of SQuAD dev (1-5)")
    parser.add_argument("--articles", type=int, help="use only the first N articles (smoke test)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not SQUAD.exists():
        sys.exit(f"{SQUAD} is missing: run ../shared/data/fetch-squad.sh")
    squad = json.loads(SQUAD.read_text())
    dsn = fresh_database(args.dsn, args.database, MARKER)

    work = Path(tempfile.mkdtemp(prefix="pgrag-ingest-bench-"))
    try:
        files = write_corpus(work, squad, args.editions, args.articles)
        names = sorted(work.iterdir())
        halves = [names[: len(names) // 2], names[len(names) // 2 :]]
        db = pgrag.connect(dsn)
        embedder = configured_embedder(db)
        embedder.embed(["warm up the model"])
        seconds = {"embed": 0.0, "ingest": 0.0}
        chunks = {"embed": 0, "ingest": 0}
        for h, half in enumerate(halves, start=1):
            texts = embed_texts(half, embedder)
            log(f"half {h}: embedding {len(texts)} texts alone")
            t0 = time.perf_counter()
            for i in range(0, len(texts), BATCH):
                embedder.embed(texts[i : i + BATCH])
            seconds["embed"] += time.perf_counter() - t0
            chunks["embed"] += len(texts)
            log(f"half {h}: pgrag.ingest of {len(half)} files")
            t0 = time.perf_counter()
            report = pgrag.ingest(db, half, collection="throughput", batch_chunks=BATCH)
            seconds["ingest"] += time.perf_counter() - t0
            assert not report.failed, report.failed[:3]
            assert report.chunks_embedded == report.chunks_written == len(texts), (
                report.summary(),
                len(texts),
            )
            chunks["ingest"] += report.chunks_written
        rate = {k: chunks[k] / seconds[k] for k in seconds}
        result = {
            "files": files,
            "chunks": chunks["ingest"],
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "chunks_per_s": {k: round(v, 2) for k, v in rate.items()},
            "ratio": round(rate["ingest"] / rate["embed"], 3),
            "model": embedder.name,
            "cpus": os.cpu_count(),
        }
        db.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['files']} files, {result['chunks']} chunks ({result['model']})")
        print(f"embedding alone: {seconds['embed']:.1f} s, {rate['embed']:.2f} chunks/s")
        print(f"pgrag ingest:    {seconds['ingest']:.1f} s, {rate['ingest']:.2f} chunks/s")
        print(f"ratio: {result['ratio']:.3f} (target >= 0.9)")


if __name__ == "__main__":
    main()
