"""Document-level results measured: plain chunk search against ``group="document"`` on SQuAD.

Each question of a seeded sample of SQuAD v1.1 dev (`../shared/data/fetch-squad.sh`, or
--squad) is searched hybrid, k = 10, over the collection `pgrag eval retrieval` builds from its
2,067 paragraphs (`eval-squad-dev-v1.1`, one document per paragraph, its id in metadata
``doc_id``), twice:

- **plain**: `pgrag.search(db, q, k=10)`: ten chunks, of which several may be one paragraph's;
- **grouped**: `pgrag.search(db, q, k=10, group="document")`: up to ten distinct paragraphs,
  each with its best chunks (search_v5 asked for 12 chunks first, deeper if they hold fewer
  than 10 paragraphs; `--first-depth N` asks for N first instead, to compare).

Reported for each: the share of questions that got fewer than 10 distinct paragraphs, and
Recall@10, MRR@10 and nDCG@10 over paragraphs (the question's own paragraph is the one relevant
document); for grouped, how many searches and how deep it went; and the latency of the whole
`pgrag.search` call, both measured in the same run, taking turns question by question (the
first to go alternates), after an untimed pass that embeds every question once, so that both
find its vector in the in-process query cache and the timings are the searches' alone.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/document_results.py --questions 1000 \\
        --out document-results.json

A smoke run: `--questions 20`.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _bench import latency, log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.collections import list_collections  # noqa: E402
from pgrag.evaluation.datasets import load_squad  # noqa: E402
from pgrag.evaluation.metrics import mrr_at, ndcg_at, recall_at  # noqa: E402
from pgrag.evaluation.retrieval import collection_name  # noqa: E402

K = 10
METHODS = ("plain", "grouped")


def paragraphs(items: list[Any]) -> list[str]:
    """The distinct paragraph ids of ranked chunks or documents, in rank order."""
    seen: dict[str, None] = {}
    for item in items:
        doc = (item.metadata or {}).get("doc_id")
        if doc is not None:
            seen.setdefault(doc, None)
    return list(seen)


def run(args: argparse.Namespace) -> dict[str, Any]:
    db = pgrag.connect(args.dsn)
    dataset = load_squad(args.squad)
    collection = args.collection or collection_name(dataset)
    present = {c["name"]: c for c in list_collections(db)}
    if not present.get(collection, {}).get("documents"):
        raise SystemExit(
            f"collection {collection!r} is missing or empty: build it with"
            f" `pgrag eval retrieval {args.squad}`"
        )
    ids = sorted(dataset.queries)
    sample = random.Random(args.seed).sample(ids, min(args.questions, len(ids)))
    log(f"{len(sample)} questions (seed {args.seed}) over {collection!r}, k = {K}")

    def plain(question: str, timings: dict[str, float]) -> list[Any]:
        return pgrag.search(db, question, collection=collection, k=K, timings=timings)

    def grouped(question: str, timings: dict[str, float]) -> list[Any]:
        return pgrag.search(
            db, question, collection=collection, k=K, group="document", timings=timings
        )

    searchers: dict[str, Callable[[str, dict[str, float]], list[Any]]] = {
        "plain": plain,
        "grouped": grouped,
    }
    t0 = time.perf_counter()
    for qid in sample:  # untimed: embeds each question once (the query cache keeps it)
        plain(dataset.queries[qid], {})
    log(f"  warm-up (embedding every question) {time.perf_counter() - t0:.0f} s")

    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    started = time.perf_counter()
    for n, qid in enumerate(sample):
        question, judged = dataset.queries[qid], dataset.qrels[qid]
        order = METHODS if n % 2 == 0 else tuple(reversed(METHODS))
        for method in order:
            timings: dict[str, float] = {}
            t = time.perf_counter()
            results = searchers[method](question, timings)
            ms = (time.perf_counter() - t) * 1000
            ranked = paragraphs(results)
            rows[method].append(
                {
                    "id": qid,
                    "ms": ms,
                    "retrieve_ms": timings.get("retrieve_ms", 0.0),
                    "distinct": len(ranked),
                    "recall10": recall_at(ranked, judged, K),
                    "mrr10": mrr_at(ranked, judged, K),
                    "ndcg10": ndcg_at(ranked, judged, K),
                    "searches": timings.get("group_searches", 1),
                    "depth": timings.get("group_depth", K),
                }
            )
        if (n + 1) % 100 == 0:
            log(f"  {n + 1}/{len(sample)} questions, {time.perf_counter() - started:.0f} s")
    db.close()
    return summary(args, collection, sample, rows)


def summary(
    args: argparse.Namespace,
    collection: str,
    sample: list[str],
    rows: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "collection": collection,
        "questions": len(sample),
        "seed": args.seed,
        "k": K,
        "first_depth": args.first_depth,
        "methods": {},
    }
    for method, records in rows.items():
        entry: dict[str, Any] = {
            "fewer_than_k_documents": sum(r["distinct"] < K for r in records) / len(records),
            "mean_distinct_documents": float(np.mean([r["distinct"] for r in records])),
            "recall10": float(np.mean([r["recall10"] for r in records])),
            "mrr10": float(np.mean([r["mrr10"] for r in records])),
            "ndcg10": float(np.mean([r["ndcg10"] for r in records])),
            **{f"search_{k}": round(v, 2) for k, v in latency([r["ms"] for r in records]).items()},
            "retrieve_p50_ms": round(float(np.median([r["retrieve_ms"] for r in records])), 2),
        }
        if method == "grouped":
            entry["searches"] = dict(sorted(Counter(r["searches"] for r in records).items()))
            entry["depths"] = dict(sorted(Counter(int(r["depth"]) for r in records).items()))
        out["methods"][method] = entry
    plain, grouped = rows["plain"], rows["grouped"]
    p, g = out["methods"]["plain"], out["methods"]["grouped"]
    out["latency_ratio"] = {
        "p50": g["search_p50_ms"] / p["search_p50_ms"],
        "mean": g["search_mean_ms"] / p["search_mean_ms"],
        "median_of_paired": statistics.median(
            b["ms"] / a["ms"] for a, b in zip(plain, grouped, strict=True)
        ),
    }
    out["recall10_better"] = sum(
        b["recall10"] > a["recall10"] for a, b in zip(plain, grouped, strict=True)
    )
    out["recall10_worse"] = sum(
        b["recall10"] < a["recall10"] for a, b in zip(plain, grouped, strict=True)
    )
    out["per_question"] = rows if args.per_question else None
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['questions']} SQuAD v1.1 dev questions (seed {result['seed']}), hybrid,"
        f" k = {result['k']}, collection `{result['collection']}`"
        + (f", first depth {result['first_depth']}" if result["first_depth"] else ""),
        "",
        "| search | < 10 distinct paragraphs | mean distinct | Recall@10 | MRR@10 | nDCG@10 |"
        " p50 ms | p95 ms | mean ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, m in result["methods"].items():
        lines.append(
            f"| {method} | {m['fewer_than_k_documents']:.1%} | {m['mean_distinct_documents']:.2f}"
            f" | {m['recall10']:.3f} | {m['mrr10']:.3f} | {m['ndcg10']:.3f}"
            f" | {m['search_p50_ms']:.1f} | {m['search_p95_ms']:.1f} | {m['search_mean_ms']:.1f} |"
        )
    ratio = result["latency_ratio"]
    grouped = result["methods"]["grouped"]
    lines += [
        "",
        f"latency grouped / plain: p50 {ratio['p50']:.2f}, mean {ratio['mean']:.2f},"
        f" median of per-question ratios {ratio['median_of_paired']:.2f}",
        f"grouped searches per question: {grouped['searches']}; depths: {grouped['depths']}",
        f"Recall@10 better / worse than plain: {result['recall10_better']} /"
        f" {result['recall10_worse']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="default: PGRAG_DSN, PG*, else the embedded server")
    parser.add_argument(
        "--squad",
        type=Path,
        default=Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json",
        help="SQuAD v1.1 dev JSON (../shared/data/fetch-squad.sh prints its path)",
    )
    parser.add_argument("--collection", help="default: eval-squad-dev-v1.1, as pgrag eval does")
    parser.add_argument("--questions", type=int, default=1000, help="questions in the sample")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument(
        "--first-depth",
        type=int,
        help="grouped: ask search_v5 for this many chunks first (default: the library's, 12)",
    )
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument("--per-question", action="store_true", help="keep every question's row")
    args = parser.parse_args(argv)
    if args.first_depth is not None:
        from pgrag.retrieval import grouping

        depth = args.first_depth
        if not K <= depth <= grouping.MAX_DEPTH:
            parser.error(f"--first-depth must be between {K} and {grouping.MAX_DEPTH}")
        grouping.first_depth = lambda k, chunks_per_document=0: depth  # type: ignore[assignment]
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
        log(f"wrote {args.out}")
    else:
        out(text)
    log("\n" + markdown(result))


if __name__ == "__main__":
    main()
