"""What the Python layer adds to a search: ``pgrag.search`` against the bare SQL call it makes.

Issue 19 (item 4) asks that the Python layer add at most 1.2x to the bare ``search_v5`` call.
On the collection ``pgrag eval retrieval`` builds from SQuAD v1.1 dev (``eval-squad-dev-v1.1``;
built here the same way when missing), for a seeded sample of questions, one at a time, k = 10:

- **keyword**: ``SELECT <columns> FROM pgrag.search_v5(collection, question, NULL, k => 10)``
  through psycopg (the statement ``pgrag.search`` runs, parameters bound, rows fetched) beside
  ``pgrag.search(db, question, mode="keyword")``;
- **hybrid**: the same with the question's vector, computed once before the timed runs, beside
  ``pgrag.search(db, question)`` with its query embedding already in the in-process cache (a
  warm-up pass fills it), so that both sides search with a vector they already have.

The two sides take turns, a block of 100 questions at a time, so that a shared machine's
background load falls on both alike; the ratio of medians is reported, with min/median/max of
the per-block ratios.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/search_overhead.py --questions 1000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _bench import log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.embeddings.local import configured_embedder  # noqa: E402
from pgrag.evaluation.datasets import load_squad  # noqa: E402
from pgrag.evaluation.retrieval import collection_name, ingest_dataset  # noqa: E402
from pgrag.retrieval.search import COLUMNS, search  # noqa: E402

BLOCK = 100
K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--squad", type=Path, default=Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json"
    )
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dataset = load_squad(args.squad)
    collection = collection_name(dataset)
    db = pgrag.connect()
    ingest_dataset(db, dataset, collection)
    qids = sorted(dataset.queries)
    random.Random(args.seed).shuffle(qids)
    texts = [dataset.queries[q] for q in qids[: args.questions]]
    vectors = configured_embedder(db).embed(texts)
    bare_sql = f"SELECT {COLUMNS} FROM pgrag.search_v5(%s, %s, %s, k => %s)"  # noqa: S608 - constant
    cur = db.conn.cursor()

    def bare(i: int, hybrid: bool) -> int:
        rows = cur.execute(
            bare_sql, (collection, texts[i], vectors[i] if hybrid else None, K)
        ).fetchall()
        db.conn.commit()  # (pgrag.search ends its transaction too)
        return len(rows)

    def layer(i: int, hybrid: bool) -> int:
        mode = "hybrid" if hybrid else "keyword"
        return len(search(db, texts[i], collection=collection, k=K, mode=mode))

    log("warm-up: every question once through each side (fills the query-embedding cache)")
    for i in range(len(texts)):
        bare(i, True)
        layer(i, True)
    report: dict[str, Any] = {"collection": collection, "questions": len(texts)}
    for hybrid in (False, True):
        name = "hybrid" if hybrid else "keyword"
        times: dict[str, list[float]] = {"bare": [], "layer": []}
        block_ratios = []
        for start in range(0, len(texts), BLOCK):
            block: dict[str, list[float]] = {"bare": [], "layer": []}
            for side, run in (("bare", bare), ("layer", layer)):
                for i in range(start, min(start + BLOCK, len(texts))):
                    t = time.perf_counter()
                    run(i, hybrid)
                    block[side].append(time.perf_counter() - t)
            for side in times:
                times[side] += block[side]
            ratio = statistics.median(block["layer"]) / statistics.median(block["bare"])
            block_ratios.append(ratio)
        p50 = {side: statistics.median(t) * 1000 for side, t in times.items()}
        report[name] = {
            "bare p50 ms": round(p50["bare"], 3),
            "pgrag.search p50 ms": round(p50["layer"], 3),
            "ratio": round(p50["layer"] / p50["bare"], 3),
            "per-block ratio min/median/max": [
                round(min(block_ratios), 3),
                round(statistics.median(block_ratios), 3),
                round(max(block_ratios), 3),
            ],
        }
        log(f"{name}: {report[name]}")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
