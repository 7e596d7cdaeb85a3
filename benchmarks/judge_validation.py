"""Validate the LLM judge (`pgrag eval answers --judge`) before trusting it.

The judge's verdicts come from an `eval answers --judge --json --cases` run (its cases carry
each answer, the lexical support score and the judge's metrics). This script

- ``show``: prints each judged answer with the passages it cites and SQuAD's accepted answers,
  for a person to label by reading;
- ``report``: compares the judge with those labels (``--labels``, a JSON file of
  ``{qid: {"answer": SHORT, "faithful": bool, "correct": bool}}``), with SQuAD's gold and
  with the lexical support score (:mod:`pgrag.answer.support`) on the same answers.

Agreement is the share of answers on which two verdicts agree, with Cohen's kappa (agreement
beyond chance). The verdicts compared:

- *faithful* (labelled): every claim of the answer is supported by the passages it cites. The
  judge says so when its faithfulness is 1.0; the lexical score when its support is >= 0.8.
- *correct* (gold): the short answer contains one of SQuAD's accepted answers (normalised).
  Compared with the judge's verdict on the short-answer claim (the first claim), which asks
  whether the cited passages support it as the answer to the question.
- *context recall* (gold): the question's own paragraph was among the passages. Compared with
  the judge's context recall (it finds the reference answer in the passages).

    PGRAG_LLM_GGUF=$(scripts/get-model) pgrag eval answers squad-dev-v1.1.json --questions 100 \\
        --seed 0 -k 4 --budget 800 --judge --judge-sample 20 --json --cases > run.json
    python benchmarks/judge_validation.py show run.json --squad squad-dev-v1.1.json
    python benchmarks/judge_validation.py report run.json --labels benchmarks/judge_labels.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pgrag.evaluation.answer_metrics import normalize  # noqa: E402
from pgrag.evaluation.datasets import load_squad_answers  # noqa: E402

LEXICAL_FAITHFUL = 0.8


def judged_cases(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The judged cases of the run's (last) generator that gave an answer."""
    cases = run["results"][-1]["cases"]
    return [c for c in cases if c.get("judgement") and not c["abstained"]]


def kappa(a: list[bool], b: list[bool]) -> float | None:
    """Cohen's kappa of two binary verdicts (None when chance agreement is total)."""
    n = len(a)
    if not n:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return None if chance == 1 else round((observed - chance) / (1 - chance), 4)


def agreement(name: str, a: list[bool], b: list[bool]) -> dict[str, Any]:
    n = len(a)
    return {
        "comparison": name,
        "n": n,
        "agreement": round(sum(x == y for x, y in zip(a, b, strict=True)) / n, 4) if n else None,
        "kappa": kappa(a, b),
        "positives": [sum(a), sum(b)],
    }


def correct(case: dict[str, Any]) -> bool:
    said = normalize(f"{case.get('short_answer') or ''} {case['answer']}")
    return any(normalize(r) and normalize(r) in said for r in case["references"])


def show(run: dict[str, Any], squad: Path) -> None:
    corpus = load_squad_answers(squad).retrieval.corpus
    for c in judged_cases(run):
        print("=" * 100)
        print(f"qid {c['qid']}  answerable={c['answerable']}  gold={c['gold']}")
        print(f"Q: {c['question']}")
        print(f"short: {c.get('short_answer')!r}\nanswer: {c['answer']}")
        print(f"accepted: {c['references'][:3]}")
        for g in c["cited"]:
            print(f"--- cited {g}: {corpus[g].text}")
        j = c["judgement"]
        print(f"judge: faithfulness {j['faithfulness']} claims {j['claims']}")
        print(f"lexical support {c.get('support')}")


def report(run: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    cases = judged_cases(run)
    labelled = [c for c in cases if c["qid"] in labels]
    stale = [
        c["qid"]
        for c in labelled
        if (labels[c["qid"]].get("answer") or None) != (c.get("short_answer") or None)
    ]
    if stale:
        raise SystemExit(f"labels were written for other answers: {', '.join(stale)}")
    human = [bool(labels[c["qid"]]["faithful"]) for c in labelled]
    judge = [c["judgement"]["faithfulness"] == 1.0 for c in labelled]
    lexical = [(c.get("support") or 0.0) >= LEXICAL_FAITHFUL for c in labelled]
    rows = [
        agreement("faithful: judge vs hand labels", judge, human),
        agreement(
            f"faithful: lexical support >= {LEXICAL_FAITHFUL} vs hand labels", lexical, human
        ),
        agreement("faithful: judge vs lexical", judge, lexical),
    ]
    with_short = [c for c in cases if c["judgement"]["claims"] and c.get("short_answer")]
    rows.append(
        agreement(
            "correct: judge (short answer supported) vs SQuAD gold",
            [c["judgement"]["claims"][0]["p_yes"] >= 0.5 for c in with_short],
            [correct(c) for c in with_short],
        )
    )
    hand_correct = [bool(labels[c["qid"]]["correct"]) for c in labelled]
    rows.append(
        agreement(
            "correct: SQuAD gold vs hand labels", [correct(c) for c in labelled], hand_correct
        )
    )
    everything = [c for c in run["results"][-1]["cases"] if c.get("judgement")]
    recall = [c for c in everything if c["judgement"]["context_recall"] is not None]
    rows.append(
        agreement(
            "context recall: judge vs gold paragraph in prompt",
            [c["judgement"]["context_recall"] == 1.0 for c in recall],
            [c["gold"] in c["given"] for c in recall],
        )
    )
    return {"labelled": len(labelled), "judged_answers": len(cases), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["show", "report"])
    parser.add_argument("run", type=Path, help="eval answers --judge --json --cases output")
    parser.add_argument("--squad", type=Path, help="(show) squad-dev-v1.1.json")
    parser.add_argument("--labels", type=Path, help="(report) the hand labels, JSON")
    args = parser.parse_args()
    run = json.loads(args.run.read_text(encoding="utf-8"))
    if args.mode == "show":
        if args.squad is None:
            parser.error("show needs --squad")
        show(run, args.squad)
        return
    if args.labels is None:
        parser.error("report needs --labels")
    out = report(run, json.loads(args.labels.read_text(encoding="utf-8")))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
