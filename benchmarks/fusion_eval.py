"""Fusion functions compared on data they were not tuned on (issue 19, item 1).

For every question of a dataset (SQuAD v1.1 .json or a BEIR directory, such as the ones
benchmarks/build_docs_set.py builds from software manuals) each arm of ``pgrag.search_v5`` is
asked once for its 100 best chunks with their scores (BM25 for the keyword arm, cosine distance
for the vector arm), and the fusion functions are then computed from those lists, here, in
Python, so that dozens of settings cost no more searches:

- ``rrf``: Reciprocal Rank Fusion, sum of w / (rrf_k + rank) (search_v5's default: rrf_k 5,
  vector 0.5, keyword 1.0; the textbook one: 60, 1, 1);
- ``convex-mm``: alpha x vector + (1 - alpha) x keyword, each arm's scores min-max normalised
  over its list (absent from a list: 0);
- ``convex-tm``: the same with theoretical-min normalisation (Bruch et al. 2023: BM25 / its
  top score; cosine similarity shifted by its floor, (s + 1) / (top + 1));
- ``convex-z``: each arm's scores as z-scores over its list (absent: the list's lowest);
- ``convex-mm-adaptive``: convex-mm with alpha moved per question by how much more sharply one
  arm's top result stands out than the other's.

Parameters are chosen by grid search on a tuning split and reported on a held-out split:
SQuAD's articles alternate between the two halves (questions of one article never in both);
a BEIR set is reported with the parameters tuned on SQuAD's tuning half (pure transfer: nothing
from the set is used to choose them), and alongside, with the parameters ``pgrag tune`` would
choose from pseudo-questions drawn from the collection itself (no labels).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fusion_eval.py \\
        ~/.cache/pgrag-bench/squad-dev-v1.1.json ~/.cache/pgrag-bench/cmake-docs \\
        --questions 1000 --out fusion-eval.json

The per-arm lists are cached next to --out (``<out>.lists.json``), so a second run with other
fusion functions reads no database at all.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from _bench import log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pgrag.evaluation.metrics import ndcg_at  # noqa: E402
from pgrag.retrieval import fusion, tuning  # noqa: E402

DEPTH = 100  # fetched per arm
DEPTH_FUSED = 40  # fused: what search_v5 fuses at k = 10 (max(4k, 40) per arm)
K = 10

Lists = dict[str, Any]  # {"keyword": [[chunk, doc, score]...], "vector": [[chunk, doc, dist]...]}


def arm_lists(db: Any, collection: str, texts: list[str], vectors: Any) -> list[Lists]:
    sql_kw = (
        "SELECT chunk_id, metadata ->> 'doc_id', keyword_score FROM pgrag.search_v5("
        "%s, %s, NULL, k => %s, fallback_chunks => 0)"
    )
    sql_vec = (
        "SELECT chunk_id, metadata ->> 'doc_id', vector_distance FROM pgrag.search_v5("
        "%s, NULL, %s, k => %s)"
    )
    out = []
    for i, text in enumerate(texts):
        kw = db.conn.execute(sql_kw, (collection, text, DEPTH)).fetchall()
        vec = db.conn.execute(sql_vec, (collection, vectors[i], DEPTH)).fetchall()
        out.append({"keyword": [list(r) for r in kw], "vector": [list(r) for r in vec]})
        if i % 200 == 0:
            log(f"  lists {i}/{len(texts)}")
    db.conn.commit()
    return out


def fused_docs(lists: Lists, method: str, params: dict[str, float]) -> list[str]:
    kw = [(c, s) for c, _, s in lists["keyword"][:DEPTH_FUSED]]
    vec = [(c, d) for c, _, d in lists["vector"][:DEPTH_FUSED]]
    doc_of = {c: d for c, d, _ in lists["keyword"]} | {c: d for c, d, _ in lists["vector"]}
    ranked = fusion.fuse(kw, vec, method, **params)
    seen: dict[str, None] = {}
    for c, _ in ranked:
        seen.setdefault(doc_of[c], None)
    return list(seen)


def score(
    items: list[tuple[Lists, dict[str, int]]], method: str, params: dict[str, float]
) -> float:
    if not items:
        return math.nan
    return sum(
        ndcg_at(fused_docs(lists, method, params), qrels, K) for lists, qrels in items
    ) / len(items)


GRIDS: dict[str, list[dict[str, float]]] = {
    "keyword": [{}],
    "vector": [{}],
    "rrf": [
        {"rrf_k": rk, "vector_weight": wv, "keyword_weight": 1.0}
        for rk in (1, 5, 10, 20, 60)
        for wv in (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
    ],
    "convex-mm": [{"alpha": a / 20} for a in range(21)],
    "convex-tm": [{"alpha": a / 20} for a in range(21)],
    "convex-z": [{"alpha": a / 20} for a in range(21)],
    "convex-mm-adaptive": [
        {"alpha": a / 20, "adapt": g} for a in range(2, 19, 2) for g in (0.0, 0.5, 1.0, 2.0)
    ],
}
TUNE_METHODS = ("convex-mm", "convex-z")
FIXED = {
    "rrf-default": ("rrf", {"rrf_k": 5, "vector_weight": 0.5, "keyword_weight": 1.0}),
    "rrf-60": ("rrf", {"rrf_k": 60, "vector_weight": 1.0, "keyword_weight": 1.0}),
}


def tune(items: list[tuple[Lists, dict[str, int]]], method: str) -> tuple[dict[str, float], float]:
    best: tuple[float, dict[str, float]] = (-1.0, {})
    for params in GRIDS[method]:
        s = score(items, method, params)
        if s > best[0] + 1e-9:
            best = (s, params)
    return best[1], best[0]


def bootstrap(a: list[float], b: list[float], seed: int = 0, n: int = 2000) -> tuple[float, float]:
    rng = random.Random(seed)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    means = sorted(sum(rng.choice(diffs) for _ in diffs) / len(diffs) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n)]


def per_query(
    items: list[tuple[Lists, dict[str, int]]], method: str, params: dict[str, float]
) -> list[float]:
    return [ndcg_at(fused_docs(lists, method, params), qrels, K) for lists, qrels in items]


# Questions made without a model, as `pgrag tune` first made them (measured and rejected:
# docs/benchmarks.md): a sentence of a sampled chunk, reduced three ways.
STYLES = ("half", "answerless", "window")
_WORD = re.compile(r"\S+")


def pseudo_question(sentence: str, rng: random.Random, style: str) -> str:
    """``half`` keeps a random half of the sentence's words; ``answerless`` first drops what a
    question would ask for (numbers, capitalised words after the first, the longest word), then
    keeps a random 60% of the rest; ``window`` keeps a run of 6-10 consecutive words."""
    words = _WORD.findall(sentence)
    if style == "window":
        n = min(len(words), rng.randint(6, 10))
        start = rng.randrange(len(words) - n + 1)
        return " ".join(words[start : start + n])
    if style == "answerless":
        longest = max(range(len(words)), key=lambda i: len(words[i]))
        words = [
            w
            for i, w in enumerate(words)
            if i != longest and not any(c.isdigit() for c in w) and not (i and w[:1].isupper())
        ]
        n = max(min(3, len(words)), round(0.6 * len(words)))
        return " ".join(words[i] for i in sorted(rng.sample(range(len(words)), n)))
    keep = sorted(rng.sample(range(len(words)), max(3, len(words) // 2)))
    return " ".join(words[i] for i in keep)


def pseudo_questions(
    db: Any, collection: str, n: int, *, seed: int, style: str
) -> list[tuning.WrittenQuestion]:
    """Up to ``n`` such questions from a seeded sample of the collection's chunks (sentences
    of 6-40 words), each with its chunk."""
    from pgrag.text.chunking import split_sentences

    rows = db.conn.execute(
        tuning.Q.sample_chunks, {"collection": collection, "n": 4 * n, "seed": str(seed)}
    ).fetchall()
    db.conn.commit()
    rng = random.Random(seed)
    out = []
    for chunk_id, _title, content in rows:
        sentences = [s for s in split_sentences(content) if 6 <= len(_WORD.findall(s)) <= 40]
        if not sentences:
            continue
        text = pseudo_question(rng.choice(sentences), rng, style)
        if len(_WORD.findall(text)) >= 3:
            out.append(tuning.WrittenQuestion(text, int(chunk_id)))
        if len(out) == n:
            break
    return out


def simulated_tune(rows: list[tuple[str, Lists, dict[str, int]]]) -> list[dict[str, Any]]:
    out = []
    method, default = tuning.METHOD, tuning.DEFAULT_VECTOR_WEIGHT
    for half in (0, 1):
        tune_on = [(lists, q) for qid, lists, q in rows if _number(qid) % 2 == half]
        report_on = [(lists, q) for qid, lists, q in rows if _number(qid) % 2 != half]
        scores = {w: score(tune_on, method, {"alpha": w}) for w in tuning.GRID}
        weight, best = tuning.choose(scores, default)
        gains = [
            b - a
            for a, b in zip(
                per_query(tune_on, method, {"alpha": default}),
                per_query(tune_on, method, {"alpha": best}),
                strict=True,
            )
        ]
        gain, low = sum(gains) / len(gains), tuning.bootstrap_low(gains)
        recorded = weight if gain >= tuning.MIN_GAIN and low > 0 else default
        out.append(
            {
                "tuned on": len(tune_on),
                "reported on": len(report_on),
                "best weight": best,
                "gain on the tuning half": round(gain, 4),
                "its interval from": round(low, 4),
                "recorded": recorded,
                "other half at the default": round(score(report_on, method, {"alpha": default}), 4),
                "other half at the recorded": round(
                    score(report_on, method, {"alpha": recorded}), 4
                ),
                "other half at the best": round(score(report_on, method, {"alpha": best}), 4),
            }
        )
    return out


def _number(qid: str) -> int:
    digits = "".join(c for c in qid if c.isdigit())
    return int(digits) if digits else hash(qid)


def temperatures(
    items: list[tuple[Lists, dict[str, int]]], method: str, params: dict[str, float]
) -> dict[str, float]:
    """Mean negative log-likelihood of the relevant passage under softmax(score / T) over the
    fused top 10, for questions whose passage is there, at each T."""
    out = {}
    for t in (0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5):
        nll, n = 0.0, 0
        for lists, qrels in items:
            kw = [(c, s) for c, _, s in lists["keyword"][:DEPTH_FUSED]]
            vec = [(c, d) for c, _, d in lists["vector"][:DEPTH_FUSED]]
            doc_of = {c: d for c, d, _ in lists["keyword"]} | {c: d for c, d, _ in lists["vector"]}
            top = fusion.fuse(kw, vec, method, **params)[:K]
            hi = max(s for _, s in top)
            weights = [(doc_of[c], math.exp((s - hi) / t)) for c, s in top]
            rel = sum(w for d, w in weights if d in qrels)
            if rel > 0:
                nll -= math.log(rel / sum(w for _, w in weights))
                n += 1
        out[str(t)] = round(nll / n, 4) if n else math.nan
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+", type=Path)
    parser.add_argument("--questions", type=int, default=1000, help="per dataset (seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dev",
        default="cmake-docs",
        help="the development set (beside SQuAD's tuning half) that chooses the method",
    )
    parser.add_argument(
        "--pseudo", type=int, default=200, help="pseudo-questions per collection, as pgrag tune"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    cache_path = args.out.with_suffix(".lists.json")
    cache: dict[str, Any] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    data: dict[str, list[tuple[str, Lists, dict[str, int]]]] = {}
    pseudo: dict[str, Any] = {}
    db = None
    for path in args.datasets:
        from pgrag.evaluation.datasets import load_dataset
        from pgrag.evaluation.retrieval import collection_name, ingest_dataset

        dataset = load_dataset(path.expanduser())
        qids = sorted(dataset.queries)
        random.Random(args.seed).shuffle(qids)
        qids = qids[: args.questions]
        key = f"{dataset.name}:{args.seed}:{len(qids)}"
        if key not in cache:
            if db is None:
                import pgrag
                from pgrag.embeddings.local import configured_embedder

                db = pgrag.connect()
            collection = collection_name(dataset)
            t = time.perf_counter()
            ingest_dataset(db, dataset, collection)
            log(f"{dataset.name}: collection {collection} ready in {time.perf_counter() - t:.0f} s")
            texts = [dataset.queries[q] for q in qids]
            vectors = configured_embedder(db).embed(texts)
            lists = arm_lists(db, collection, texts, vectors)
            cache[key] = {
                "qids": qids,
                "lists": lists,
                "qrels": [dataset.qrels[q] for q in qids],
                "squad": path.suffix == ".json",
            }
            cache_path.write_text(json.dumps(cache))
        for style in STYLES if args.pseudo else ():
            pkey = f"{dataset.name}:pseudo:{args.seed}:{args.pseudo}:{style}"
            if pkey not in cache:
                if db is None:
                    import pgrag

                    db = pgrag.connect()
                from pgrag.embeddings.local import configured_embedder

                sample = pseudo_questions(
                    db, collection_name(dataset), args.pseudo, seed=args.seed, style=style
                )
                texts = [q.text for q in sample]
                vectors = configured_embedder(db).embed(texts)
                plists = tuning.arm_lists(db, collection_name(dataset), texts, vectors)
                cache[pkey] = {
                    "texts": texts,
                    "targets": [q.chunk_id for q in sample],
                    "lists": [[kw, vec] for kw, vec in plists],
                }
                cache_path.write_text(json.dumps(cache))
            pseudo.setdefault(dataset.name, {})[style] = cache[pkey]
        entry = cache[key]
        data[dataset.name] = [
            (q, lists, qrels)
            for q, lists, qrels in zip(entry["qids"], entry["lists"], entry["qrels"], strict=True)
        ]
        data[dataset.name + ":squad"] = entry["squad"]  # type: ignore[assignment]

    report: dict[str, Any] = {}
    squad_name = next((n for n in data if not n.endswith(":squad") and data[n + ":squad"]), None)
    tuned: dict[str, dict[str, float]] = {}
    if squad_name:
        rows = data[squad_name]
        # articles alternate between halves: the article index is the doc id's prefix
        half_a = [
            (lists, qrels)
            for q, lists, qrels in rows
            if int(next(iter(qrels)).split("-")[0]) % 2 == 0
        ]
        half_b = [
            (lists, qrels)
            for q, lists, qrels in rows
            if int(next(iter(qrels)).split("-")[0]) % 2 == 1
        ]
        report[squad_name] = {
            "tune questions": len(half_a),
            "report questions": len(half_b),
            "methods": {},
        }
        for method in GRIDS:
            params, tuned_score = tune(half_a, method)
            tuned[method] = params
            report[squad_name]["methods"][method] = {
                "params": params,
                "tuning half": round(tuned_score, 4),
                "held-out half": round(score(half_b, method, params), 4),
            }
        for name, (method, params) in FIXED.items():
            report[squad_name]["methods"][name] = {
                "params": params,
                "held-out half": round(score(half_b, method, params), 4),
            }
    for name, rows in data.items():
        if name.endswith(":squad") or name == squad_name:
            continue
        items = [(lists, qrels) for _, lists, qrels in rows]
        out: dict[str, Any] = {"questions": len(items), "methods": {}}
        base = per_query(items, "keyword", {})
        for method in GRIDS:
            params = tuned.get(method) or tune(items, method)[0]
            scores = per_query(items, method, params)
            best_params, oracle = tune(items, method)
            out["methods"][method] = {
                "params (tuned on SQuAD)": params,
                "nDCG@10": round(sum(scores) / len(scores), 4),
                "vs keyword 95% CI": [round(x, 4) for x in bootstrap(scores, base)],
                "oracle params (tuned on this set: not a result)": best_params,
                "oracle nDCG@10": round(oracle, 4),
            }
        for fixed, (method, params) in FIXED.items():
            scores = per_query(items, method, params)
            out["methods"][fixed] = {
                "params": params,
                "nDCG@10": round(sum(scores) / len(scores), 4),
            }
        report[name] = out
    for name, by_style in pseudo.items():
        rows = data[name]
        items = [(lists, qrels) for _, lists, qrels in rows]
        if name == squad_name:  # report on the held-out half only
            items = [
                (lists, qrels)
                for _, lists, qrels in rows
                if int(next(iter(qrels)).split("-")[0]) % 2 == 1
            ]
        report[name]["pgrag tune"] = {}
        for style, entry in by_style.items():
            for method in TUNE_METHODS:
                scores = tuning.sweep(
                    [tuple(x) for x in entry["lists"]], entry["targets"], method=method
                )
                weight, best = tuning.choose(
                    scores, current=tuned.get(method, {}).get("alpha", 0.4)
                )
                report[name]["pgrag tune"][f"{style} {method}"] = {
                    "pseudo-questions": len(entry["targets"]),
                    "examples": entry["texts"][:3],
                    "sample nDCG@10 by weight": {
                        f"{w:.2f}": round(v, 4) for w, v in scores.items()
                    },
                    "sample's best weight": best,
                    "recorded weight": weight,
                    "real at the sample's best": round(score(items, method, {"alpha": best}), 4),
                    "real at the recorded weight": round(
                        score(items, method, {"alpha": weight}), 4
                    ),
                    "real at the default": round(
                        score(items, method, {"alpha": tuned.get(method, {}).get("alpha", 0.4)}), 4
                    ),
                }
    # pgrag tune on questions of the same kind as the set's (the model wrote both): the set's
    # questions split in two by id; each half decides as pgrag tune does (the best weight,
    # recorded only with a gain >= 0.01 whose bootstrap interval is above 0, halfway from the
    # default), and the other half reports it.
    for name, rows in data.items():
        if name.endswith(":squad") or name == squad_name:
            continue
        report[name]["pgrag tune on half of the questions"] = simulated_tune(rows)
    if squad_name:
        tuning_half = [
            (lists, qrels)
            for _, lists, qrels in data[squad_name]
            if int(next(iter(qrels)).split("-")[0]) % 2 == 0
        ]
        report[squad_name]["temperature (NLL of the relevant passage, tuning half)"] = {
            method: temperatures(tuning_half, method, tuned[method])
            for method in TUNE_METHODS
            if method in tuned
        }
    # The protocol's choice: each method at its SQuAD-tuned parameters, scored by the mean of
    # its nDCG@10 on SQuAD's tuning half and on the development set (--dev); the others are
    # held out.
    if squad_name and args.dev:
        dev = next((n for n in report if n.startswith(args.dev)), None)
        if dev:
            means = {
                m: (
                    report[squad_name]["methods"][m]["tuning half"]
                    + report[dev]["methods"][m]["nDCG@10"]
                )
                / 2
                for m in GRIDS
            }
            report["choice"] = {
                "development": [f"{squad_name} tuning half", dev],
                "mean nDCG@10": {m: round(v, 4) for m, v in means.items()},
                "chosen": max(means, key=lambda m: means[m]),
            }
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
