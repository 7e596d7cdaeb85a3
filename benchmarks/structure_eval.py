"""Chunking choices on a structured corpus: structure-aware vs plain chunking, and small-to-big.

Issue 5 asks for the effect of structure-aware chunking (split at headings, the section path
embedded and keyword-indexed with each chunk) and of small-to-big retrieval, measured on a
structured corpus. The corpus is examples/handbook (8 documents, 6 in Markdown with 2-3
levels of headings, ~4,200 words). The questions are the 34 below, written by hand, each with
a short answer string that occurs once in the handbook.

- **structured:** `pgrag.ingest` of the files, as shipped.
- **plain:** the same texts ingested as plain text (`from_text(format="text")`): the
  headings stay in the text, but chunks are packed across sections and carry only the
  document's title as context.

Retrieval is judged by the answer: a result is relevant when its text contains the answer
string. That holds the same for both chunkings. For each collection and arm: the share of
questions whose answer is in the top 1 and top 5, and MRR@10. For small-to-big: the share of
questions whose answer reaches the prompt of `pgrag.ask` (k=4, budget 1,000 tokens) with
`context="chunk"` and with `context="section"`, on the structured collection.

With ``--semantic`` (issue 19), a third collection, **semantic**, holds the files ingested as
shipped but with ``chunking="semantic"`` (pgrag.text.semantic): measured beside the other two
in the same run, with the seconds each structure-aware ingest took.

    .venv/bin/python benchmarks/structure_eval.py
    .venv/bin/python benchmarks/structure_eval.py --semantic
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from _bench import fresh_database, log

import pgrag
from pgrag.embeddings.local import configured_embedder
from pgrag.ingest.loaders import from_text

MARKER = "pgrag benchmark: structure_eval"
HANDBOOK = Path(__file__).resolve().parent.parent / "examples" / "handbook"

QUESTIONS = [
    (
        "How long do I have to request a refund on an annual plan?",
        "within **30 days** of the purchase",
    ),
    (
        "Can I get a refund for a connector pack I already activated?",
        "non-refundable once they have been activated",
    ),
    ("Can a refund be sent to a different bank account?", "original payment method"),
    ("What happens to my workspace if every payment retry fails?", "read-only mode"),
    (
        "Which email address do refund requests go to?",
        "Send an email to **billing@northwind.example**",
    ),
    (
        "When does a monthly plan renew if that day does not exist in the month?",
        "last day of that month",
    ),
    ("Which port does the VPN need?", "51820"),
    ("How long are VPN profiles valid?", "180 days"),
    ("How many characters must a password have?", "16 characters"),
    ("Are SMS codes accepted as a second factor?", "SMS codes are not accepted"),
    ("Within how many hours must a security incident be reported?", "within 24 hours"),
    ("After how long does a company laptop lock its screen?", "five minutes"),
    ("How many paid vacation days do full-time employees get?", "25 days of paid vacation"),
    ("How many unused vacation days can I carry over?", "up to 5 unused vacation days"),
    ("By when must carried-over vacation days be taken?", "31 March"),
    (
        "From which day of illness do I need a doctor's certificate?",
        "fourth consecutive calendar day",
    ),
    ("How many paid days can I take to care for a sick child?", "eight paid days"),
    ("How far in advance should I request vacation?", "two weeks before"),
    ("What may a hotel cost per night in London?", "€200 per night"),
    ("What is the mileage allowance for my own car?", "€0.30 per kilometre"),
    ("What is the per diem for a full day abroad?", "€64 per full travel day"),
    ("How much is the per diem reduced when breakfast is included?", "by 20%"),
    ("How soon must I submit an expense claim?", "of the expense date"),
    ("Who approves an expense claim above 2,500 euros?", "Finance Director"),
    ("When may I fly business class?", "longer than nine hours"),
    (
        "How long is customer data kept after a subscription is cancelled?",
        "90 days after the subscription is cancelled",
    ),
    ("How long are backups kept?", "kept for 35 days"),
    ("How long are invoices kept?", "ten years"),
    ("How quickly is a GDPR export request answered?", "of receiving the request"),
    ("How long does the export download link stay valid?", "72 hours"),
    ("What is the Severity 2 response time on the Team plan?", "8 hours"),
    ("What are the support team's hours?", "07:00–19:00"),
    ("How do I escalate a support ticket?", 'the word "escalate"'),
    ("Which plans can use the in-app chat?", "(Team and Enterprise)"),
]


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _first_hit(texts: list[str], answer: str) -> int | None:
    target = _norm(answer)
    return next((i for i, t in enumerate(texts, 1) if target in _norm(t)), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_structure")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--semantic",
        action="store_true",
        help="also ingest the files with chunking='semantic' (collection 'semantic')",
    )
    args = parser.parse_args()
    corpus = "\n".join(p.read_text() for p in sorted(HANDBOOK.iterdir()))
    for _, answer in QUESTIONS:
        if corpus.count(answer) != 1:
            sys.exit(f"answer {answer!r} occurs {corpus.count(answer)} times in the handbook")

    dsn = fresh_database(args.dsn, args.database, MARKER)
    db = pgrag.connect(dsn)
    log("ingesting the handbook twice: structured, and as plain text")
    seconds = {}
    configured_embedder(db).embed(["warm up"])  # (the model's load is in neither ingest's time)
    t0 = time.perf_counter()
    pgrag.ingest(db, [HANDBOOK], collection="structured")
    seconds["structured"] = round(time.perf_counter() - t0, 2)
    plain = [
        from_text(f"plain/{p.name}", p.read_text(), title=p.stem.replace("-", " ").title())
        for p in sorted(HANDBOOK.iterdir())
    ]
    pgrag.ingest_documents(db, plain, collection="plain")
    collections = ["structured", "plain"]
    if args.semantic:
        log("and structured, chunked semantically")
        t0 = time.perf_counter()
        pgrag.ingest(db, [HANDBOOK], collection="semantic", chunking="semantic")
        seconds["semantic"] = round(time.perf_counter() - t0, 2)
        collections.append("semantic")

    results: dict[str, Any] = {}
    for collection in collections:
        for mode in ("keyword", "vector", "hybrid"):
            ranks = []
            for question, answer in QUESTIONS:
                hits = pgrag.search(db, question, collection=collection, k=10, mode=mode)
                ranks.append(_first_hit([h.text for h in hits], answer))
            n = len(QUESTIONS)
            results[f"{collection} {mode}"] = {
                "top1": round(sum(r == 1 for r in ranks) / n, 3),
                "top5": round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
                "mrr10": round(sum(1 / r for r in ranks if r) / n, 3),
            }
    for context in ("chunk", "section"):
        found = 0
        for question, answer in QUESTIONS:
            reply = pgrag.ask(
                db, question, collection="structured", k=4, budget_tokens=1000, llm=None,
                log=False, context=context,
            )  # fmt: skip
            found += _norm(answer) in _norm(reply.prompt)
        results[f"answer in prompt, context={context}"] = round(found / len(QUESTIONS), 3)
    chunks = {
        name: db.conn.execute(
            "SELECT count(*) FROM pgrag.chunks c JOIN pgrag.collections k"
            " ON k.id = c.collection_id WHERE k.name = %s",
            (name,),
        ).fetchone()[0]
        for name in collections
    }
    db.close()
    results["chunks"] = chunks
    if args.semantic:
        results["ingest seconds"] = seconds
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{len(QUESTIONS)} questions; chunks: {chunks}")
    for name, value in results.items():
        print(f"{name:40} {value}")


if __name__ == "__main__":
    main()
