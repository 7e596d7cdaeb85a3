"""Semantic against fixed chunking on long documents: SQuAD v1.1 dev, one document per article.

Issue 19 item 6. Each of SQuAD v1.1 dev's 48 articles becomes ONE plain-text document, its
paragraphs in order separated by blank lines (on average about 43 paragraphs, 5,900 words), so
the chunker has to decide where to cut a long text: the fixed chunker packs whole sentences up
to the chunk size across paragraph ends; the semantic one (``chunking="semantic"``,
pgrag.text.semantic) cuts where adjacent sentences stop resembling each other. Semantic chunks
come out smaller (a cut at a change of subject leaves the rest of a chunk's room unused), and
smaller chunks alone change retrieval; so a third collection is a control: the fixed chunker
with its chunk size (and overlap) scaled so that its chunks' mean size is the semantic ones'.
The same documents go into three collections of the default database (``pgrag.connect()``):
``bench-semantic-fixed``, ``bench-semantic-semantic`` and ``bench-semantic-fixed-small``, each
dropped first if it exists (only these names are ever dropped) and ingested in the same run,
in that order, after the model is loaded.

Relevance is judged by the answer, which holds the same for any chunking. A result is a hit
for a question when it is a chunk of the question's article whose text contains one of the
question's answers (``answers[].text``, whitespace normalised): the question has one relevant
unit, its answer, so nDCG@10 is 1/log2(1 + rank of the first hit), Recall@10 whether a hit is
in the top 10, MRR@10 1/rank. The answer is searched only in the question's own article: a
short answer such as "two" is in many chunks of other articles. A stricter reading, "sentence",
asks that the chunk hold the whole sentence(s) the first answer's span (``answer_start``) lies
in, not just the same words elsewhere in the article.

Reported (a table, or ``--json``): for each collection, its chunks (count, mean and largest
token count), the ingest's seconds and chunks embedded, and for each arm of
``pgrag.search_v5`` (keyword, vector, hybrid, k = 10) nDCG@10, Recall@10 and MRR@10 under both
readings, with the paired differences semantic - fixed and semantic - fixed-small, each with a
95% bootstrap interval (1,000 resamples of the questions).

    ../shared/data/fetch-squad.sh        # the data, once
    .venv/bin/python benchmarks/semantic_chunking.py            # about 25 min on 2 busy cores
    .venv/bin/python benchmarks/semantic_chunking.py --questions 500 --articles 5   # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from _bench import log

import pgrag
from pgrag.collections import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_TOKENS, ensure_collection
from pgrag.embeddings.local import configured_embedder
from pgrag.ingest.loaders import from_text
from pgrag.retrieval.search import SearchSettings, call_sql
from pgrag.text.chunking import split_sentences

PREFIX = "bench-semantic-"
RUNS = ("fixed", "semantic", "fixed-small")  # collection PREFIX + run
ARMS = ("keyword", "vector", "hybrid")
K = 10


def default_squad() -> Path:
    base = os.environ.get("PGRAG_BENCH_DATA") or str(Path.home() / ".cache" / "pgrag-bench")
    return Path(base) / "squad-dev-v1.1.json"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def answer_sentences(context: str, start: int, answer: str) -> str | None:
    """The sentence(s) of ``context`` (as the chunker splits it, joined as it joins them) that
    the answer span starting at ``start`` lies in; None when they cannot be located."""
    sentences = split_sentences(context)
    flat = _norm(context)
    begin = len(_norm(context[:start] + "x")) - 1  # the span's start in the normalised text
    end = begin + len(_norm(answer))
    found, at = [], 0
    for sentence in sentences:
        pos = flat.find(sentence, at)
        if pos < 0:
            return None
        if pos < end and begin < pos + len(sentence):
            found.append(sentence)
        at = pos + len(sentence)
    return " ".join(found) or None


def load(path: Path, articles: int | None) -> tuple[list[Any], list[dict[str, Any]]]:
    """The documents (one per article) and the questions, each with its article's source,
    its answers and the sentence(s) of its first answer."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    if articles is not None:
        data = data[:articles]
    documents, questions = [], []
    for a, article in enumerate(data):
        source = f"squad-article-{a:02d}"
        title = article["title"].replace("_", " ")
        paragraphs = [p["context"].strip() for p in article["paragraphs"]]
        documents.append(from_text(source, "\n\n".join(paragraphs), title=title, format="text"))
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                first = qa["answers"][0]
                questions.append(
                    {
                        "question": qa["question"],
                        "source": source,
                        "answers": sorted({_norm(x["text"]) for x in qa["answers"]}),
                        "sentence": answer_sentences(
                            p["context"], first["answer_start"], first["text"]
                        ),
                    }
                )
    return documents, questions


def drop(db: pgrag.Database, name: str) -> None:
    assert name.startswith(PREFIX)
    db.conn.execute("DELETE FROM pgrag.collections WHERE name = %s", (name,))
    db.conn.commit()


def chunk_stats(db: pgrag.Database, name: str) -> dict[str, Any]:
    row = db.conn.execute(
        "SELECT count(*), avg(c.token_count), max(c.token_count), min(c.token_count)"
        " FROM pgrag.chunks c JOIN pgrag.collections k ON k.id = c.collection_id"
        " WHERE k.name = %s",
        (name,),
    ).fetchone()
    db.conn.commit()
    assert row is not None
    return {
        "chunks": int(row[0]),
        "mean_tokens": round(float(row[1]), 1),
        "max_tokens": int(row[2]),
        "min_tokens": int(row[3]),
    }


def first_hit(rows: list[tuple[str, str]], question: dict[str, Any], strict: bool) -> int | None:
    for rank, (source, text) in enumerate(rows, 1):
        if source != question["source"]:
            continue
        flat = _norm(text)
        if strict:
            if question["sentence"] is not None and question["sentence"] in flat:
                return rank
        elif any(answer in flat for answer in question["answers"]):
            return rank
    return None


def scores(ranks: list[int | None]) -> dict[str, list[float]]:
    return {
        "ndcg10": [1 / math.log2(r + 1) if r else 0.0 for r in ranks],
        "recall10": [1.0 if r else 0.0 for r in ranks],
        "mrr10": [1 / r if r else 0.0 for r in ranks],
    }


def bootstrap(diffs: list[float], rounds: int = 1000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval of the mean of paired differences."""
    import numpy as np

    d = np.asarray(diffs)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(rounds, len(d)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, default=default_squad())
    parser.add_argument("--articles", type=int, default=None, help="the first N articles only")
    parser.add_argument("--questions", type=int, default=None, help="a sample of N questions")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.squad.is_file():
        sys.exit(f"{args.squad}: no such file; run ../shared/data/fetch-squad.sh")
    documents, questions = load(args.squad, args.articles)
    if args.questions is not None and args.questions < len(questions):
        questions = random.Random(0).sample(questions, args.questions)
    located = sum(q["sentence"] is not None for q in questions)
    log(f"{len(documents)} documents, {len(questions)} questions ({located} sentences located)")

    db = pgrag.connect()
    embedder = configured_embedder(db)
    embedder.embed(["warm up"])  # (the model's load is in neither ingest's time)
    out: dict[str, Any] = {
        "documents": len(documents),
        "questions": len(questions),
        "sentences_located": located,
        "collections": {},
    }
    for run in RUNS:
        name = PREFIX + run
        chunking = "semantic" if run == "semantic" else "fixed"
        drop(db, name)
        sizes = {}
        if run == "fixed-small":
            # The chunk size whose fixed chunks are, on average, as large as the semantic ones.
            fixed, semantic = (out["collections"][PREFIX + r] for r in ("fixed", "semantic"))
            scale = semantic["mean_tokens"] / fixed["mean_tokens"]
            sizes = {
                "chunk_tokens": round(DEFAULT_CHUNK_TOKENS * scale),
                "chunk_overlap": round(DEFAULT_CHUNK_OVERLAP * scale),
            }
            ensure_collection(db, name, embedder)
            db.conn.execute(
                "UPDATE pgrag.collections SET chunk_tokens = %(chunk_tokens)s,"
                " chunk_overlap = %(chunk_overlap)s WHERE name = %(name)s",
                {**sizes, "name": name},
            )
            db.conn.commit()
        log(f"ingesting into {name} (chunking={chunking} {sizes or ''})")
        t0 = time.perf_counter()
        report = pgrag.ingest_documents(db, documents, collection=name, chunking=chunking)
        seconds = time.perf_counter() - t0
        if report.failed:
            sys.exit(f"{name}: {report.summary()}")
        out["collections"][name] = {
            "chunking": chunking,
            **sizes,
            "ingest_s": round(seconds, 1),
            "chunks_embedded": report.chunks_embedded,
            **chunk_stats(db, name),
        }
        log(f"  {seconds:.1f} s, {out['collections'][name]}")

    log("embedding the questions")
    vectors = embedder.embed([q["question"] for q in questions])
    from psycopg.types.json import Jsonb

    settings = SearchSettings()
    statement = call_sql(settings, columns="source, text")
    options = settings.arguments()
    per: dict[str, dict[str, dict[str, list[float]]]] = {}  # collection, arm, reading -> ...
    cur = db.conn.cursor()
    for run in RUNS:
        name = PREFIX + run
        for arm in ARMS:
            t0 = time.perf_counter()
            loose: list[int | None] = []
            strict: list[int | None] = []
            for i, q in enumerate(questions):
                params = {
                    "collection": name,
                    "query": None if arm == "vector" else q["question"],
                    "embedding": None if arm == "keyword" else vectors[i],
                    "k": K,
                    "filter": Jsonb({}),
                    **options,
                }
                rows = cur.execute(statement, params).fetchall()
                loose.append(first_hit(rows, q, strict=False))
                strict.append(first_hit(rows, q, strict=True))
            db.conn.commit()
            per[f"{run} {arm} answer"] = scores(loose)
            per[f"{run} {arm} sentence"] = scores(strict)
            log(f"  {name} {arm}: {time.perf_counter() - t0:.1f} s")
    db.close()

    results: dict[str, Any] = {}
    for arm in ARMS:
        for reading in ("answer", "sentence"):
            row: dict[str, Any] = {}
            for metric in ("ndcg10", "recall10", "mrr10"):
                values = {run: per[f"{run} {arm} {reading}"][metric] for run in RUNS}
                cell: dict[str, Any] = {run: round(sum(v) / len(v), 4) for run, v in values.items()}
                for other in ("fixed", "fixed-small"):
                    pairs = zip(values[other], values["semantic"], strict=True)
                    diffs = [b - a for a, b in pairs]
                    low, high = bootstrap(diffs)
                    cell[f"semantic - {other}"] = round(sum(diffs) / len(diffs), 4)
                    cell[f"ci95 vs {other}"] = [round(low, 4), round(high, 4)]
                row[metric] = cell
            results[f"{arm} {reading}"] = row
    out["results"] = results
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['documents']} documents, {out['questions']} questions")
    for name, c in out["collections"].items():
        print(
            f"{name:26} {c['chunks']:6} chunks (mean {c['mean_tokens']} tokens, max"
            f" {c['max_tokens']}), ingest {c['ingest_s']} s, {c['chunks_embedded']} embedded"
        )
    print(
        f"{'arm, reading':18} {'metric':9} {'fixed':>7} {'semantic':>9} {'small':>7}"
        f" {'sem-fixed':>10} {'95% CI':>18} {'sem-small':>10} {'95% CI':>18}"
    )
    for key, row in results.items():
        for metric, v in row.items():
            a, b = v["ci95 vs fixed"], v["ci95 vs fixed-small"]
            print(
                f"{key:18} {metric:9} {v['fixed']:7.4f} {v['semantic']:9.4f}"
                f" {v['fixed-small']:7.4f} {v['semantic - fixed']:+10.4f}"
                f" [{a[0]:+.4f}, {a[1]:+.4f}] {v['semantic - fixed-small']:+10.4f}"
                f" [{b[0]:+.4f}, {b[1]:+.4f}]"
            )


if __name__ == "__main__":
    main()
