"""Agentic search and the RAG marginals with a local GGUF model (PGRAG_LLM_GGUF), on SQuAD dev.

Both parts run the model in-process through llama-cpp-python (pgrag[local]); the corpus is the
paragraphs of a few SQuAD v1.1 dev articles (`../shared/data/fetch-squad.sh`, or --squad), each
paragraph a document, as `pgrag eval` has them.

**(a) Questions that need two searches** (`TWO_HOP`, written by hand from those articles): the
question names one thing by a fact in one paragraph ("the team that won Super Bowl 50") and asks
for a fact about it that only another paragraph gives ("its head coach"). Each is asked with
`ask_agentic` (the model may call pgrag_search, at most --max-steps times) and, unless
--no-baseline, with plain `pgrag.ask` (one search) for comparison. The searches share one
passage budget (--budget, 1500 tokens), so the agent's first search takes only -k 3 passages
and leaves room for what it finds next; plain ask fills the same budget at once (--ask-k 8):
the comparison is searching again against retrieving more in one go. Reported per question and in
total: answer correct (not an abstention, and the answer -- its short answer when it has one --
contains an accepted answer, SQuAD-normalised), searches made, whether both gold paragraphs were
among the sources, seconds.

**(b) Yes/no questions scored with the RAG marginal** (`pgrag score` in-process, candidates
"Yes" and "No"). They are made from SQuAD questions deterministically (--seed): a question with
a short answer (at most four words) becomes "QUESTION Is the answer ANSWER?"; for every second
one ANSWER is instead the answer of another question of the same article with the same first
word (Who/When/...) that shares no word with the accepted answers, so half are "Yes" and half
"No". Reported: accuracy of the RAG-Sequence preference (and of the top passage alone), for
"Yes" and "No" apart, whether the question's own paragraph was among the k passages, seconds
per question.

    PGRAG_LLM_GGUF=/work/cache/model/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
    PYTHONPATH=. .venv-local/bin/python benchmarks/local_llm_eval.py --json > local_llm_eval.json

Needs llama-cpp-python (scripts/test-local's .venv-local has it). The model is loaded once and
shared by both parts (pgrag.llm.local.load_model).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from _bench import log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.answer.agentic import ask_agentic  # noqa: E402
from pgrag.answer.scoring import score_answers  # noqa: E402
from pgrag.evaluation.answer_metrics import normalize  # noqa: E402
from pgrag.evaluation.datasets import Doc, load_squad_answers  # noqa: E402
from pgrag.ingest.loaders import from_text  # noqa: E402
from pgrag.llm.local import LocalLLMConfig, config_from_settings  # noqa: E402

MARKER = "pgrag benchmark: local_llm_eval"
COLLECTION = "squad"
ARTICLES = (
    "Super_Bowl_50",
    "Apollo_program",
    "Steam_engine",
    "Doctor_Who",
    "Yuan_dynasty",
    "Martin_Luther",
)

# (question, accepted answers, the two paragraphs it needs: (article, paragraph index) for the
# fact that names the thing, then for the fact asked about it).
TWO_HOP: list[tuple[str, list[str], list[tuple[str, int]]]] = [
    (
        "Who was the head coach of the team that won Super Bowl 50?",
        ["Gary Kubiak", "Kubiak"],
        [("Super_Bowl_50", 0), ("Super_Bowl_50", 12)],
    ),
    (
        "How much did the stadium where Super Bowl 50 was played cost?",
        ["$1.2 billion", "1.2 billion"],
        [("Super_Bowl_50", 0), ("Super_Bowl_50", 7)],
    ),
    (
        "How many passing yards did the quarterback of the team that lost Super Bowl 50 throw"
        " for in the 2015 season?",
        ["3,837"],
        [("Super_Bowl_50", 0), ("Super_Bowl_50", 10)],
    ),
    (
        "To which vice president did the president elected in November 1960 send a memo about"
        " the space program?",
        ["Lyndon B. Johnson", "Johnson", "Lyndon Johnson"],
        [("Apollo_program", 6), ("Apollo_program", 8)],
    ),
    (
        "In which year did the engineer who developed an improved version of Newcomen's engine"
        " with a separate condenser patent a steam engine that produced continuous rotary"
        " motion?",
        ["1781"],
        [("Steam_engine", 37), ("Steam_engine", 7)],
    ),
    (
        "On which channel did the show whose original theme was composed by Ron Grainer"
        " originally run?",
        ["BBC One"],
        [("Doctor_Who", 33), ("Doctor_Who", 14)],
    ),
    (
        "To which city did the founder of the Yuan dynasty move the Mongol capital?",
        ["Khanbaliq"],
        [("Yuan_dynasty", 0), ("Yuan_dynasty", 9)],
    ),
    (
        "Where did the bishop to whom Luther sent the Ninety-Five Theses forward them?",
        ["Rome"],
        [("Martin_Luther", 11), ("Martin_Luther", 21)],
    ),
]


def squad_path(given: str | None) -> Path:
    """--squad, else where ../shared/data/fetch-squad.sh puts it (PGRAG_BENCH_DATA or
    ~/.cache/pgrag-bench)."""
    import os

    if given:
        return Path(given)
    folder = os.environ.get("PGRAG_BENCH_DATA") or str(Path.home() / ".cache/pgrag-bench")
    path = Path(folder) / "squad-dev-v1.1.json"
    if not path.exists():
        sys.exit(f"{path} is missing: run ../shared/data/fetch-squad.sh (or pass --squad)")
    return path


def article_ids(path: Path) -> dict[str, int]:
    """Article title (as in the file) -> its index, which names its paragraphs' documents
    ("a-p", pgrag.evaluation.datasets)."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    return {a["title"]: i for i, a in enumerate(payload["data"])}


def contains_answer(text: str, accepted: list[str]) -> bool:
    said = f" {normalize(text)} "
    return any(f" {normalize(a)} " in said for a in accepted if normalize(a))


# --- (a) ------------------------------------------------------------------------------------


def run_two_hop(
    db: Any,
    config: LocalLLMConfig,
    ids: dict[str, int],
    *,
    k: int,
    budget: int,
    max_steps: int,
    baseline: bool,
    ask_k: int,
) -> dict[str, Any]:
    rows = []
    for question, accepted, gold in TWO_HOP:
        gold_docs = [f"{ids[title]}-{p}" for title, p in gold]
        row: dict[str, Any] = {"question": question, "accepted": accepted}
        runs = [("agentic", True)] + ([("ask", False)] if baseline else [])
        for name, agentic in runs:
            t0 = time.perf_counter()
            if agentic:
                answer = ask_agentic(
                    db,
                    question,
                    config=config,
                    collection=COLLECTION,
                    k=k,
                    budget_tokens=budget,
                    max_steps=max_steps,
                    log=False,
                )
            else:
                answer = pgrag.ask(
                    db,
                    question,
                    collection=COLLECTION,
                    k=ask_k,
                    budget_tokens=budget,
                    llm=config,
                    log=False,
                    min_confidence=None,
                )
            seconds = time.perf_counter() - t0
            short = getattr(answer, "short_answer", None)  # (where ask gives a short answer)
            given = [s.result.source for s in answer.sources]
            row[name] = {
                "correct": not answer.abstained
                and contains_answer(f"{short or ''} {answer.answer}", accepted),
                "abstained": answer.abstained,
                "reason": answer.reason,
                "answer": answer.answer,
                "short_answer": short,
                "raw_answer": answer.raw_answer,
                "searches": int(answer.timings.get("searches", 0)),
                "gold_in_sources": [d in given for d in gold_docs],
                "seconds": round(seconds, 1),
            }
            log(
                f"  {name:<8} {'ok ' if row[name]['correct'] else 'no '}"
                f"searches {row[name]['searches']}  gold {row[name]['gold_in_sources']}"
                f"  {seconds:5.1f} s  {question[:60]}"
            )
        rows.append(row)
    summary = {}
    for name in ("agentic", "ask"):
        got = [r[name] for r in rows if name in r]
        if not got:
            continue
        summary[name] = {
            "n": len(got),
            "correct": sum(g["correct"] for g in got),
            "abstained": sum(g["abstained"] for g in got),
            "searched_again": sum(g["searches"] > 0 for g in got),
            "mean_searches": round(sum(g["searches"] for g in got) / len(got), 2),
            "both_gold_in_sources": sum(all(g["gold_in_sources"]) for g in got),
            "median_seconds": sorted(g["seconds"] for g in got)[len(got) // 2],
            "total_seconds": round(sum(g["seconds"] for g in got), 1),
        }
    return {"summary": summary, "questions": rows}


# --- (b) ------------------------------------------------------------------------------------


def yes_no_set(path: Path, titles: set[str], n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` yes/no questions, half "Yes" (see the module); deterministic for ``seed``."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    pool = []
    for a, article in enumerate(payload["data"]):
        if article["title"] not in titles:
            continue
        for p, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                answers = [x["text"] for x in qa["answers"]]
                first = qa["question"].split()[0].lower() if qa["question"].split() else ""
                if answers and len(answers[0].split()) <= 4 and qa["question"].endswith("?"):
                    pool.append(
                        {
                            "id": qa["id"],
                            "article": a,
                            "doc": f"{a}-{p}",
                            "question": qa["question"].strip(),
                            "answers": answers,
                            "kind": first,
                        }
                    )
    rng = random.Random(seed)
    rng.shuffle(pool)
    by_kind: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for q in pool:
        by_kind[(q["article"], q["kind"])].append(q)
    out: list[dict[str, Any]] = []
    for q in pool:
        if len(out) == n:
            break
        want_yes = len(out) % 2 == 0
        if want_yes:
            proposed = q["answers"][0]
        else:
            words = {w for a in q["answers"] for w in normalize(a).split()}
            others = [
                o["answers"][0]
                for o in by_kind[(q["article"], q["kind"])]
                if o["id"] != q["id"] and not words & set(normalize(o["answers"][0]).split())
            ]
            if not others:
                continue
            proposed = others[0]
        out.append(
            {
                **q,
                "asked": f"{q['question']} Is the answer {proposed.strip().rstrip('.')}?",
                "expected": "Yes" if want_yes else "No",
            }
        )
    return out


def run_yes_no(db: Any, config: LocalLLMConfig, cases: list[dict[str, Any]], k: int) -> Any:
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        scores = score_answers(
            db, case["asked"], ["Yes", "No"], collection=COLLECTION, k=k, llm=config
        )
        seconds = time.perf_counter() - t0
        top = scores.passages[0]
        top_pick = max(("Yes", "No"), key=top.loglik)
        by = {c.text: c for c in scores.candidates}
        rows.append(
            {
                "question": case["asked"],
                "expected": case["expected"],
                "best": scores.best,
                "correct": scores.best == case["expected"],
                "top_passage_pick": top_pick,
                "top_passage_correct": top_pick == case["expected"],
                "p_yes": round(by["Yes"].probability, 4),
                "gold_in_passages": any(p.source == case["doc"] for p in scores.passages),
                "seconds": round(seconds, 2),
            }
        )
        log(
            f"  {'ok ' if rows[-1]['correct'] else 'no '} expected {case['expected']:<3}"
            f" p(Yes) {by['Yes'].probability:.3f}  {seconds:5.1f} s  {case['asked'][:60]}"
        )
    n = len(rows)

    def share(items: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(r[key] for r in items) / len(items), 3) if items else None

    yes = [r for r in rows if r["expected"] == "Yes"]
    no = [r for r in rows if r["expected"] == "No"]
    seconds = sorted(r["seconds"] for r in rows)
    return {
        "summary": {
            "n": n,
            "accuracy": share(rows, "correct"),
            "accuracy_yes": share(yes, "correct"),
            "accuracy_no": share(no, "correct"),
            "top_passage_accuracy": share(rows, "top_passage_correct"),
            "gold_in_passages": share(rows, "gold_in_passages"),
            "picked_yes": sum(r["best"] == "Yes" for r in rows),
            "median_seconds": seconds[n // 2] if rows else None,
            "mean_seconds": round(sum(seconds) / n, 2) if rows else None,
        },
        "questions": rows,
    }


# --- main -------------------------------------------------------------------------------------


def ingest(db: Any, corpus: dict[str, Doc], articles: set[int]) -> int:
    docs = [d for d in corpus.values() if int(d.id.split("-")[0]) in articles]
    pgrag.ingest_documents(
        db, (from_text(d.id, d.text, title=d.title) for d in docs), collection=COLLECTION
    )
    return len(docs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_local_llm")
    parser.add_argument("--reuse", action="store_true", help="keep the loaded database if there")
    parser.add_argument("--squad", help="squad-dev-v1.1.json (default: fetch-squad.sh's)")
    parser.add_argument("--part", choices=["a", "b", "both"], default="both")
    parser.add_argument("-k", type=int, default=3, help="(a) first search's passages (3)")
    parser.add_argument("--budget", type=int, default=1500, help="(a) prompt tokens for passages")
    parser.add_argument("--ask-k", type=int, default=8, help="(a) plain ask's passages (8)")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true", help="(a) without plain ask")
    parser.add_argument("-n", type=int, default=24, help="(b) yes/no questions (default 24)")
    parser.add_argument("--score-k", type=int, default=5, help="(b) passages scored (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from _bench import database_exists, fresh_database
    from psycopg.conninfo import make_conninfo

    from pgrag.config import from_env
    from pgrag.db.dsn import resolve_dsn

    config = config_from_settings(from_env())
    if not isinstance(config, LocalLLMConfig):
        sys.exit("set PGRAG_LLM_GGUF to the model's .gguf file (and no PGRAG_LLM_BASE_URL)")
    path = squad_path(args.squad)
    ids = article_ids(path)
    dataset = load_squad_answers(path)
    base = resolve_dsn(args.dsn)
    exists, comment = database_exists(make_conninfo(base, dbname="postgres"), args.database)
    t0 = time.perf_counter()
    if args.reuse and exists and comment == MARKER:
        db = pgrag.connect(make_conninfo(base, dbname=args.database))
    else:
        db = pgrag.connect(fresh_database(args.dsn, args.database, MARKER))
        count = ingest(db, dataset.retrieval.corpus, {ids[t] for t in ARTICLES})
        log(f"ingested {count} paragraphs in {time.perf_counter() - t0:.0f} s")
    report: dict[str, Any] = {
        "dataset": "SQuAD v1.1 dev",
        "articles": list(ARTICLES),
        "generator": config.label,
        "n_ctx": config.n_ctx,
        "n_threads": config.n_threads,
    }
    try:
        t_load = time.perf_counter()
        from pgrag.llm.local import load_model

        load_model(config)
        report["load_model_seconds"] = round(time.perf_counter() - t_load, 1)
        if args.part in ("a", "both"):
            log(f"(a) {len(TWO_HOP)} questions that need two searches")
            report["two_hop"] = {
                "k": args.k,
                "ask_k": args.ask_k,
                "budget_tokens": args.budget,
                "max_steps": args.max_steps,
                **run_two_hop(
                    db,
                    config,
                    ids,
                    k=args.k,
                    budget=args.budget,
                    max_steps=args.max_steps,
                    baseline=not args.no_baseline,
                    ask_k=args.ask_k,
                ),
            }
        if args.part in ("b", "both"):
            cases = yes_no_set(path, set(ARTICLES), args.n, args.seed)
            log(f"(b) {len(cases)} yes/no questions scored with the RAG marginal")
            report["yes_no"] = {
                "k": args.score_k,
                "seed": args.seed,
                **run_yes_no(db, config, cases, args.score_k),
            }
    finally:
        db.close()
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['generator']} (loaded in {report['load_model_seconds']} s)")
    if "two_hop" in report:
        print(
            f"(a) two-search questions, k={args.k}, budget {args.budget},"
            f" at most {args.max_steps} searches"
        )
        for name, s in report["two_hop"]["summary"].items():
            print(
                f"  {name:<8} correct {s['correct']}/{s['n']}  abstained {s['abstained']}"
                f"  searched again {s['searched_again']}  both gold paragraphs"
                f" {s['both_gold_in_sources']}  median {s['median_seconds']} s"
            )
    if "yes_no" in report:
        s = report["yes_no"]["summary"]
        print(
            f"(b) yes/no, k={args.score_k}: RAG-Sequence accuracy {s['accuracy']} (yes"
            f" {s['accuracy_yes']}, no {s['accuracy_no']}), top passage alone"
            f" {s['top_passage_accuracy']}, gold paragraph retrieved {s['gold_in_passages']},"
            f" median {s['median_seconds']} s per question"
        )


if __name__ == "__main__":
    main()
