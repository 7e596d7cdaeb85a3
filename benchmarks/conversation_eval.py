"""Follow-up questions in a conversation: retrieval with and without rewriting them first.

The set is built from SQuAD v1.1 dev (`../shared/data/fetch-squad.sh`, or --squad), each
paragraph a document of one collection, as `pgrag eval retrieval` has it. A conversation is
two questions on one Wikipedia article:

1. a SQuAD question that names the article's subject ("Which NFL team represented the AFC at
   Super Bowl 50?"), asked with `pgrag.ask` (the offline reader) in a stored conversation;
2. another SQuAD question on the same article with that name replaced by the pronoun the
   article uses for it ("Where was it held?", from "Where was Super Bowl 50 held?"): *the
   follow-up*. Its relevant document is the paragraph the original was written on.

Each follow-up is searched (hybrid, k=10) as

- **as asked**: no rewrite (what a RAG without conversations searches);
- **previous + follow-up**: the previous question and the follow-up concatenated (the usual
  rewrite-free baseline);
- **heuristic, messages only**: pgrag's heuristic (pgrag/answer/rewrite.py) given the history as
  chat messages (no sources, so without the cited source's title);
- **heuristic**: the same with the stored conversation, whose answer's cited source title is
  one more cue: what `ask(conversation_id=...)` does without a model;
- **LLM stand-in**: the model path of the rewrite (`standalone_query` with a chat client, the
  prompt pgrag sends) against a local stand-in that answers with the original SQuAD question,
  i.e. a perfect rewrite: the ceiling a real model's rewrite can reach;
- **original question**: the SQuAD question itself, searched directly (the same ceiling,
  without the model path).

Control turns check that the rewrite leaves a change of subject alone: a question from another
article, with no pronoun, asked after turn 1. Reported: hit@1, hit@5, hit@10, MRR@10 and
nDCG@10 of the follow-ups (one relevant paragraph each), and for the control turns the same
metrics and how many questions each method changed.

    PYTHONPATH=. .venv/bin/python benchmarks/conversation_eval.py --json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _bench import log

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pgrag  # noqa: E402
from pgrag.answer import conversation  # noqa: E402
from pgrag.answer.rewrite import heuristic_rewrite, standalone_query  # noqa: E402
from pgrag.evaluation.datasets import Doc, load_squad  # noqa: E402
from pgrag.evaluation.metrics import mrr_at, ndcg_at  # noqa: E402
from pgrag.ingest.loaders import from_text  # noqa: E402
from pgrag.llm.chat import ChatClient, LLMConfig  # noqa: E402

MARKER = "pgrag benchmark: conversation_eval"
COLLECTION = "squad"
K = 10
PRONOUNS = {  # subject, possessive, object
    "it": ("it", "its", "it"),
    "he": ("he", "his", "him"),
    "she": ("she", "her", "her"),
    "they": ("they", "their", "them"),
}
PREPOSITIONS = set(
    """of in on at to by for from with into through about against during after before under
    over between among within without near""".split()
)
METHODS = (
    "as asked",
    "previous + follow-up",
    "heuristic, messages only",
    "heuristic",
    "LLM stand-in",
    "original question",
)


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


def subject(title: str) -> str:
    return re.sub(r"\s*\(.*?\)\s*", " ", title).strip()


# The articles' subjects that are people or plural (written by hand: counting pronouns in an
# article mistakes Super Bowl 50 for a man); every other subject is "it".
PEOPLE = {"Nikola Tesla": "he", "Martin Luther": "he", "Genghis Khan": "he"}
PLURAL = {"Normans", "Huguenot"}
# A mention replaced by a pronoun must be a noun phrase of its own: the next word is one of
# these (or punctuation), not a noun it modifies ("the Doctor Who theme", "Huguenot Church").
AFTER = set(
    """is was were are has have had did does do in of to for and on at from with by that which
    who when where after before during since as or but first last ever""".split()
)
# ... and the word before it is one of these (or none): "centripetal force", "Middle Rhine"
# and "Sky+ Box" name something else.
BEFORE = set(
    """of in on at to by for from with into through about against during after before under
    over between among within without near is was were are did does do has had have and or
    what when where which who how why whom whose that reached""".split()
)
# Subjects that are common nouns: "it" would not name them in a real conversation.
COMMON = {"Force", "Teacher", "Construction", "Pharmacy", "Geology"}
PER_ARTICLE = 20  # follow-ups per article at most, so that no article dominates


def pronoun_of(name: str) -> str:
    if name in PEOPLE:
        return PEOPLE[name]
    return "they" if name in PLURAL else "it"


def proper(name: str) -> bool:
    """Whether an article's subject is a name (each word capitalised or a number)."""
    return all(w[:1].isupper() or w.isdigit() for w in name.split())


def mentions(name: str, pronoun: str) -> list[str]:
    """How questions name the subject: the whole name, a person's surname, a plural."""
    out = [name]
    parts = name.split()
    if pronoun in ("he", "she") and len(parts) >= 2 and len(parts[-1]) > 3:
        out.append(parts[-1])
    if pronoun == "they" and not name.endswith("s"):
        out.insert(0, name + "s")
    return out


def follow_up(question: str, names: list[str], pronoun: str) -> str | None:
    """``question`` with its one mention of the subject replaced by a pronoun; None when it
    has no mention, or more than one."""
    subj, poss, obj = PRONOUNS[pronoun]
    for name in names:
        first = f"[{name[0].upper()}{name[0].lower()}]"  # "southern California" too
        pattern = re.compile(
            rf"\b(?:[Tt]he\s+)?{first}{re.escape(name[1:])}(?P<poss>'s|’s)?(?![\w+-])"
        )
        found = list(pattern.finditer(question))
        if len(found) != 1:
            continue
        m = found[0]
        before = question[: m.start()].split()[-1:]
        after = re.match(r"\s*([A-Za-z]+)", question[m.end() :])
        if before and before[0].lower() not in BEFORE:
            return None
        if not m.group("poss") and after and after.group(1).lower() not in AFTER:
            return None
        if m.group("poss"):
            word = poss
        elif before and before[0].lower() in PREPOSITIONS:
            word = obj
        else:
            word = subj
        if m.start() == 0:
            word = word.capitalize()
        out = question[: m.start()] + word + question[m.end() :]
        if any(re.search(rf"\b{re.escape(n)}\b", out) for n in names):
            return None
        return " ".join(out.split())
    return None


def build_set(
    corpus: dict[str, Doc],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    n: int,
    seed: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(conversations, control turns) drawn from the dataset with ``seed``."""
    rng = random.Random(seed)
    by_article: dict[str, list[str]] = defaultdict(list)
    for qid in queries:
        doc_id = next(iter(qrels[qid]))
        by_article[corpus[doc_id].title].append(qid)
    convs: list[dict[str, Any]] = []
    for title, qids in sorted(by_article.items()):
        name = subject(title)
        if not proper(name) or name in COMMON:
            continue
        pronoun = pronoun_of(name)
        names = mentions(name, pronoun)
        made_here = 0
        naming = [
            q
            for q in qids
            if any(re.search(rf"\b{re.escape(x)}\b", queries[q], re.I) for x in names)
        ]
        rng.shuffle(naming)
        for qid in naming:
            made = follow_up(queries[qid], names, pronoun)
            if made is None or len(naming) < 2 or made_here >= PER_ARTICLE:
                continue
            made_here += 1
            first = rng.choice([q for q in naming if q != qid])
            convs.append(
                {
                    "article": title,
                    "pronoun": pronoun,
                    "first": queries[first],
                    "follow_up": made,
                    "original": queries[qid],
                    "relevant": qrels[qid],
                }
            )
    rng.shuffle(convs)
    convs = convs[:n]
    controls = []
    titles = sorted(by_article)
    for c in convs[: max(1, n // 4)]:
        other = rng.choice([t for t in titles if t != c["article"]])
        q = rng.choice(by_article[other])
        controls.append(
            {**c, "follow_up": queries[q], "original": queries[q], "relevant": qrels[q]}
        )
    return convs, controls


def ingest(db: Any, corpus: dict[str, Doc]) -> None:
    pgrag.ingest_documents(
        db,
        (from_text(doc.id, doc.text, title=doc.title) for doc in corpus.values()),
        collection=COLLECTION,
    )


def searched(db: Any, query: str) -> list[str]:
    return [r.source for r in pgrag.search(db, query, collection=COLLECTION, k=K)]


class Oracle:
    """The LLM stand-in: a local OpenAI-compatible server (tests/fakes.py) that answers a
    rewrite prompt with the reference question for its last question."""

    def __init__(self) -> None:
        from tests.fakes import LLMServer

        self.answers: dict[str, str] = {}
        self.server = LLMServer()
        self.server.answer = self.reply
        self.client = ChatClient(
            LLMConfig(base_url=self.server.url, model="stand-in", max_retries=0)
        )

    def reply(self, body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        last = prompt.rsplit("Last question:", 1)[1].split("\n\n", 1)[0].strip()
        return self.answers.get(last, last)


def evaluate(db: Any, cases: list[dict[str, Any]], oracle: Oracle) -> dict[str, Any]:
    runs: dict[str, list[tuple[list[str], dict[str, int]]]] = {m: [] for m in METHODS}
    changed: Counter[str] = Counter()
    examples = []
    rewritten: list[dict[str, str]] = []
    for i, c in enumerate(cases):
        first = pgrag.ask(
            db, c["first"], collection=COLLECTION, llm=None, log=False, min_confidence=None
        )
        history = [
            conversation.Turn("user", c["first"], standalone_query=c["first"]),
            conversation.Turn(
                "assistant", first.answer, sources=conversation.source_refs(first.sources)
            ),
        ]
        stored = [t.for_rewrite() for t in history]
        messages = [
            {"role": "user", "content": c["first"]},
            {"role": "assistant", "content": first.answer},
        ]
        bare = [t.for_rewrite() for t in conversation.history_from_messages(messages)]
        oracle.answers[c["follow_up"]] = c["original"]
        queries = {
            "as asked": c["follow_up"],
            "previous + follow-up": f"{c['first']} {c['follow_up']}",
            "heuristic, messages only": heuristic_rewrite(c["follow_up"], bare),
            "heuristic": heuristic_rewrite(c["follow_up"], stored),
            "LLM stand-in": standalone_query(c["follow_up"], stored, oracle.client).standalone,
            "original question": c["original"],
        }
        for method, query in queries.items():
            runs[method].append((searched(db, query), c["relevant"]))
            if " ".join(query.split()) != " ".join(c["follow_up"].split()):
                changed[method] += 1
                if method == "heuristic" and len(rewritten) < 10:
                    rewritten.append(
                        {"first": c["first"], "asked": c["follow_up"], "heuristic": query}
                    )
        if len(examples) < 12:
            examples.append({"first": c["first"], **{m: queries[m] for m in METHODS}})
        if (i + 1) % 50 == 0:
            log(f"  {i + 1} of {len(cases)}")
    # The follow-ups whose paragraph is not in the top 5 as asked: where the rewrite must help.
    failed = [i for i, (ranked, rel) in enumerate(runs["as asked"]) if not _hit(ranked, rel, 5)]
    out: dict[str, Any] = {}
    for method, pairs in runs.items():
        out[method] = {**_metrics(pairs), "changed": changed[method]}
    subset = {m: _metrics([pairs[i] for i in failed]) for m, pairs in runs.items()}
    return {
        "n": len(cases),
        "metrics": out,
        "failed_as_asked": {"n": len(failed), "metrics": subset},
        "examples": examples,
        "rewritten_by_heuristic": rewritten,
    }


def _hit(ranked: list[str], relevant: dict[str, int], k: int) -> bool:
    return any(d in relevant for d in ranked[:k])


def _metrics(pairs: list[tuple[list[str], dict[str, int]]]) -> dict[str, float]:
    n = len(pairs) or 1
    return {
        "hit@1": round(sum(_hit(ranked, rel, 1) for ranked, rel in pairs) / n, 3),
        "hit@5": round(sum(_hit(ranked, rel, 5) for ranked, rel in pairs) / n, 3),
        "hit@10": round(sum(_hit(ranked, rel, 10) for ranked, rel in pairs) / n, 3),
        "mrr@10": round(sum(mrr_at(ranked, rel, 10) for ranked, rel in pairs) / n, 3),
        "ndcg@10": round(sum(ndcg_at(ranked, rel, 10) for ranked, rel in pairs) / n, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_conversations")
    parser.add_argument("--reuse", action="store_true", help="keep the loaded database if there")
    parser.add_argument("--squad", help="squad-dev-v1.1.json (default: fetch-squad.sh's)")
    parser.add_argument("-n", type=int, default=300, help="conversations (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from _bench import database_exists, fresh_database
    from psycopg.conninfo import make_conninfo

    from pgrag.db.dsn import resolve_dsn

    dataset = load_squad(squad_path(args.squad))
    convs, controls = build_set(dataset.corpus, dataset.queries, dataset.qrels, args.n, args.seed)
    log(f"{len(convs)} conversations, {len(controls)} control turns")
    base = resolve_dsn(args.dsn)
    exists, comment = database_exists(make_conninfo(base, dbname="postgres"), args.database)
    t0 = time.perf_counter()
    if args.reuse and exists and comment == MARKER:
        dsn = make_conninfo(base, dbname=args.database)
        db = pgrag.connect(dsn)
    else:
        dsn = fresh_database(args.dsn, args.database, MARKER)
        db = pgrag.connect(dsn)
        ingest(db, dataset.corpus)
        log(f"ingested in {time.perf_counter() - t0:.0f} s")
    oracle = Oracle()
    try:
        followups = evaluate(db, convs, oracle)
        control = evaluate(db, controls, oracle)
    finally:
        oracle.server.close()
        db.close()
    report = {
        "dataset": "SQuAD v1.1 dev",
        "paragraphs": len(dataset.corpus),
        "search": f"pgrag.search hybrid, k={K}",
        "pronouns": dict(Counter(c["pronoun"] for c in convs)),
        "follow_ups": followups,
        "control_turns": control,
        "seed": args.seed,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for label, part in (("follow-ups", followups), ("control turns", control)):
        print(f"{label} (n={part['n']})")
        print(f"  {'method':<26} hit@1  hit@5  hit@10  MRR@10  nDCG@10  changed")
        for method, m in part["metrics"].items():
            print(
                f"  {method:<26} {m['hit@1']:.3f}  {m['hit@5']:.3f}  {m['hit@10']:.3f}"
                f"   {m['mrr@10']:.3f}   {m['ndcg@10']:.3f}  {m['changed']:>6}"
            )


if __name__ == "__main__":
    main()
