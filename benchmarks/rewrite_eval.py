"""Query rewriting measured: plain hybrid search against HyDE and multi-query, on SQuAD v1.1 dev.

Each question of a seeded sample of SQuAD v1.1 dev (`../shared/data/fetch-squad.sh`, or
--squad) is searched (k = 10) over the collection `pgrag eval retrieval` builds from its 2,067
paragraphs (`eval-squad-dev-v1.1`; ingested here the same way when it is missing), in one run,
question by question, by every method:

- **plain**: `pgrag.search`, hybrid (what a search without a rewrite does);
- **hyde**: `rewrite="hyde"`, the default: the model writes a short passage (at most 80
  tokens) and the vector arm searches with the mean of its embedding and the question's;
- **hyde-passage**: HyDE with the passage's embedding alone (`with_question=False`); it reuses
  hyde's passage for the question (the model is not asked twice) and is charged its time;
- **multi**: `rewrite="multi"`: the model writes --paraphrases questions (one call, at most
  40 tokens each); the question and each paraphrase are searched and fused with RRF (k = 60).

The model is the configured one (`PGRAG_LLM_GGUF`, or `PGRAG_LLM_BASE_URL`), as `pgrag search
--rewrite` uses it. Reported per method: nDCG@10, Recall@10 and MRR@10 over the question's
paragraph, the latency of the whole search (the model's call included; p50 and p95) and of the
model's call alone, how often it fell back to the question as asked, the tokens the model read
and wrote, and against plain: the mean change of nDCG@10 with a paired bootstrap 95% interval
and the questions it improved and worsened. The query-embedding cache is off and its
in-process level cleared before every search, so each method embeds what it searches with.

    PGRAG_LLM_GGUF=/work/cache/model/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        PYTHONPATH=$PWD .venv/bin/python benchmarks/rewrite_eval.py --questions 200 \\
        --out rewrite-eval.json

A smoke run: `--questions 5` (add `--articles 2` to search a collection of the first two
articles' paragraphs only, ingested in seconds).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _bench import latency, log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.embeddings import query_cache  # noqa: E402
from pgrag.evaluation.datasets import RetrievalDataset, load_squad  # noqa: E402
from pgrag.evaluation.metrics import mrr_at, ndcg_at, recall_at  # noqa: E402
from pgrag.evaluation.retrieval import collection_name  # noqa: E402
from pgrag.ingest.loaders import from_text  # noqa: E402
from pgrag.llm.configured import label  # noqa: E402
from pgrag.llm.local import config_from_settings  # noqa: E402
from pgrag.retrieval.expansion import QueryRewrite, expanded_search, rewrite_client  # noqa: E402
from pgrag.retrieval.search import search  # noqa: E402

METHODS = ("plain", "hyde", "hyde-passage", "multi")
K = 10


class Recorded:
    """A chat client that records each call (its time, what it read and wrote) and answers a
    prompt it has seen before from memory, so two HyDE variants share one passage; a reply
    from memory is charged the time the model took to write it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.memory: dict[str, tuple[str, float]] = {}
        self.last: dict[str, Any] = {}

    def count(self, text: str) -> int | None:
        counter = getattr(self.client, "count_tokens", None)
        return None if counter is None else int(counter(text))

    def complete(self, messages: list[dict[str, str]], *, on_token: Any = None) -> str:
        key = json.dumps(messages)
        if key in self.memory:
            reply, ms = self.memory[key]
            self.last = {"llm_ms": ms, "remembered": True, "reply": reply}
            return reply
        t0 = time.perf_counter()
        try:
            reply = self.client.complete(messages)
        finally:
            ms = (time.perf_counter() - t0) * 1000
            self.last = {"llm_ms": ms, "remembered": False, "reply": None}
        self.memory[key] = (reply, ms)
        prompt = "\n".join(m["content"] for m in messages)
        self.last |= {
            "reply": reply,
            "prompt_tokens": self.count(prompt),
            "output_tokens": self.count(reply),
            "output_chars": len(reply),
        }
        return reply


def ensure_collection(db: pgrag.Database, dataset: RetrievalDataset, collection: str) -> None:
    """Ingest the paragraphs into ``collection`` as `pgrag eval retrieval` does, unless it
    holds documents already."""
    from pgrag.collections import list_collections

    present = {c["name"]: c for c in list_collections(db)}
    if collection in present and present[collection].get("documents", 1):
        return
    log(f"collection {collection!r} is missing: ingesting {len(dataset.corpus)} paragraphs")
    t0 = time.perf_counter()
    pgrag.ingest_documents(
        db,
        (
            from_text(f"{dataset.name}:{d.id}", d.text, title=d.title, metadata={"doc_id": d.id})
            for d in dataset.corpus.values()
        ),
        collection=collection,
    )
    log(f"  ingested in {time.perf_counter() - t0:.0f} s")


def restrict(dataset: RetrievalDataset, articles: int) -> RetrievalDataset:
    """The first ``articles`` articles' paragraphs and their questions."""
    corpus = {i: d for i, d in dataset.corpus.items() if int(i.split("-")[0]) < articles}
    qrels = {q: r for q, r in dataset.qrels.items() if set(r) <= set(corpus)}
    queries = {q: dataset.queries[q] for q in qrels}
    return RetrievalDataset(name=dataset.name, corpus=corpus, queries=queries, qrels=qrels)


def doc_ids(results: list[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for r in results:
        doc = (r.metadata or {}).get("doc_id")
        if doc is not None:
            seen.setdefault(doc, None)
    return list(seen)


def bootstrap(deltas: list[float], seed: int, rounds: int = 10_000) -> tuple[float, float]:
    """A paired bootstrap 95% interval of the mean of ``deltas``."""
    values = np.asarray(deltas)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(rounds, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def run(args: argparse.Namespace) -> dict[str, Any]:
    db = pgrag.connect(args.dsn)
    db.query_cache = False  # every search embeds what it searches with
    config = config_from_settings(db.settings)
    if config is None:
        raise SystemExit("set PGRAG_LLM_GGUF (or PGRAG_LLM_BASE_URL): the rewrites need a model")
    dataset = load_squad(args.squad)
    collection = args.collection or collection_name(dataset)
    if args.articles:
        dataset = restrict(dataset, args.articles)
        collection = args.collection or f"{collection_name(dataset)}-articles{args.articles}"
    ensure_collection(db, dataset, collection)
    ids = sorted(dataset.queries)
    sample = random.Random(args.seed).sample(ids, min(args.questions, len(ids)))
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown or "plain" not in methods:
        raise SystemExit(f"--methods: choose among {', '.join(METHODS)}, plain included")
    rewrites = {
        "hyde": QueryRewrite("hyde"),
        "hyde-passage": QueryRewrite("hyde", with_question=False),
        "multi": QueryRewrite("multi", paraphrases=args.paraphrases),
    }
    t_load = time.perf_counter()
    clients = {
        name: Recorded(rewrite_client(db, spec)) for name, spec in rewrites.items()
    }  # (a local model is loaded once, here)
    clients["hyde-passage"] = clients["hyde"]  # the same prompt: one passage per question
    load_s = time.perf_counter() - t_load
    log(
        f"{len(sample)} questions (seed {args.seed}) over {collection!r}, k = {K}, model"
        f" {label(config)}; methods {', '.join(methods)}"
    )

    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    started = time.perf_counter()
    for n, qid in enumerate(sample, 1):
        question, judged = dataset.queries[qid], dataset.qrels[qid]
        for method in methods:
            query_cache.clear_memory()
            t0 = time.perf_counter()
            record: dict[str, Any] = {"id": qid}
            if method == "plain":
                results = search(db, question, collection=collection, k=K)
                ms = (time.perf_counter() - t0) * 1000
            else:
                client = clients[method]
                expanded = expanded_search(
                    db, question, rewrites[method], client=client, collection=collection, k=K
                )
                ms = (time.perf_counter() - t0) * 1000
                results = expanded.results
                llm = client.last
                if llm.get("remembered"):
                    ms += llm["llm_ms"]  # the passage hyde's search had the model write
                record |= {
                    "llm_ms": round(llm.get("llm_ms", 0.0), 1),
                    "fallback": expanded.fell_back,
                    "generated": expanded.generated,
                    **{
                        key: llm[key]
                        for key in ("prompt_tokens", "output_tokens", "output_chars")
                        if key in llm and not llm.get("remembered")
                    },
                }
            ranked = doc_ids(results)
            record |= {
                "ms": round(ms, 1),
                "ndcg10": ndcg_at(ranked, judged, K),
                "recall10": recall_at(ranked, judged, K),
                "mrr10": mrr_at(ranked, judged, K),
            }
            rows[method].append(record)
        if n == 1 or n % 10 == 0 or n == len(sample):
            spent = time.perf_counter() - started
            left = spent / n * (len(sample) - n)
            log(f"  {n}/{len(sample)} questions, {spent:.0f} s, about {left / 60:.0f} min left")
    db.close()
    return summary(args, collection, label(config), load_s, sample, rows)


def summary(
    args: argparse.Namespace,
    collection: str,
    model: str,
    load_s: float,
    sample: list[str],
    rows: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    plain = rows["plain"]
    out: dict[str, Any] = {
        "collection": collection,
        "questions": len(sample),
        "seed": args.seed,
        "k": K,
        "paraphrases": args.paraphrases,
        "model": model,
        "model_load_s": round(load_s, 1),
        "methods": {},
    }
    for method, records in rows.items():

        def mean(key: str, records: list[dict[str, Any]] = records) -> float | None:
            values = [r[key] for r in records if r.get(key) is not None]
            return float(np.mean(values)) if values else None

        entry: dict[str, Any] = {
            "ndcg10": mean("ndcg10"),
            "recall10": mean("recall10"),
            "mrr10": mean("mrr10"),
            **{f"search_{k}": round(v, 1) for k, v in latency([r["ms"] for r in records]).items()},
        }
        if method != "plain":
            entry |= {
                "llm_p50_ms": round(float(np.median([r["llm_ms"] for r in records])), 1),
                "fallbacks": sum(bool(r["fallback"]) for r in records),
                "prompt_tokens_mean": mean("prompt_tokens"),
                "output_tokens_mean": mean("output_tokens"),
                "output_chars_mean": mean("output_chars"),
            }
            deltas = [r["ndcg10"] - p["ndcg10"] for r, p in zip(records, plain, strict=True)]
            low, high = bootstrap(deltas, args.seed)
            entry |= {
                "ndcg10_delta": float(np.mean(deltas)),
                "ndcg10_delta_ci95": [low, high],
                "better": sum(d > 1e-9 for d in deltas),
                "worse": sum(d < -1e-9 for d in deltas),
            }
        out["methods"][method] = entry
    out["per_question"] = rows if args.per_question else None
    return out


def markdown(result: dict[str, Any]) -> str:
    def num(value: Any, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = [
        f"{result['questions']} SQuAD v1.1 dev questions (seed {result['seed']}),"
        f" k = {result['k']}, collection `{result['collection']}`, model {result['model']}",
        "",
        "| method | nDCG@10 | R@10 | MRR@10 | Δ nDCG@10 vs plain (95% CI) | better / worse |"
        " search p50 ms | p95 ms | model p50 ms | fallbacks | tokens in / out |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method, m in result["methods"].items():
        delta = "-"
        if "ndcg10_delta" in m:
            low, high = m["ndcg10_delta_ci95"]
            delta = f"{m['ndcg10_delta']:+.3f} ({low:+.3f} … {high:+.3f})"
        tokens = "-"
        if m.get("output_tokens_mean") is not None:
            tokens = f"{num(m['prompt_tokens_mean'], 0)} / {num(m['output_tokens_mean'], 0)}"
        elif m.get("output_chars_mean") is not None:
            tokens = f"- / {num(m['output_chars_mean'], 0)} chars"
        lines.append(
            f"| {method} | {num(m['ndcg10'])} | {num(m['recall10'])} | {num(m['mrr10'])} |"
            f" {delta} | {m.get('better', '-')} / {m.get('worse', '-')} |"
            f" {num(m['search_p50_ms'], 0)} | {num(m['search_p95_ms'], 0)} |"
            f" {num(m.get('llm_p50_ms'), 0)} | {m.get('fallbacks', '-')} | {tokens} |"
        )
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
    parser.add_argument("--questions", type=int, default=200, help="questions in the sample")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--paraphrases", type=int, default=3, help="multi-query's N")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument(
        "--articles", type=int, default=0, help="only the first N articles (a smoke run)"
    )
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument("--per-question", action="store_true", help="keep every question's row")
    args = parser.parse_args(argv)
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
