"""Contextual retrieval on SQuAD v1.1 dev: Recall@10 and nDCG@10 with and without context lines.

Issue 18 item 5. ``--articles N`` articles of SQuAD v1.1 dev (the first N in the file; 10 by
default) are each ingested as ONE Markdown document whose paragraphs are sections under the
article's title (``# Title`` before each paragraph), so every chunk's section is the title, as
in pgrag's per-paragraph SQuAD evaluation, and the chunker never packs two paragraphs into one
chunk. Each chunk is mapped back to the paragraph whose text contains it (whitespace
normalised); a question's one relevant document is its paragraph, and a ranking of chunks
becomes a ranking of paragraphs (first occurrence).

The same documents go into two fresh collections of one database: ``squad-plain`` (a plain
ingest) and ``squad-contextual`` (``contextual=True``: the configured model writes each
chunk's context line). Both are chunked alike: the plain one is given the contextual chunk
size (the collection's chunk size less the room kept for the line), and the script checks
that the chunk texts are the same, so the difference measured is the context lines alone.

Reported, JSON (``--json``) and a table: Recall@10 and nDCG@10 of the keyword, vector and
hybrid arms of ``pgrag.search_v5`` for both collections, and the share of retrieval failures
(1 - Recall@10) the lines remove, as Anthropic reports it; the model's seconds per chunk (the
first chunk of each document, which evaluates the document's window, and the later ones,
which reuse it as a prompt prefix); and the prefix effect measured directly on
``--prefix-chunks`` chunks of the first article, asked document-first (the order ingest uses)
and chunk-first (no shared prefix), one after the other.

    # the data, once (prints its path)
    ../shared/data/fetch-squad.sh
    # smoke scale: a few minutes with the local 1.5B model
    PGRAG_LLM_GGUF=/work/cache/model/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        .venv/bin/python benchmarks/contextual_eval.py --articles 1 --questions 10
    # the measurement: about an hour on 2 cores (see docs/ingest.md#contextual-retrieval)
    PGRAG_LLM_GGUF=/work/cache/model/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        .venv/bin/python benchmarks/contextual_eval.py --articles 10 --json > contextual.json

Any configured model works (``PGRAG_LLM_BASE_URL`` for a server). The database
(``--database``, default pgrag_bench_contextual) is made afresh on the server of ``--dsn``
(default: PGRAG_DSN, PG*, the embedded server).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _bench import fresh_database, log

import pgrag
from pgrag.collections import ensure_collection
from pgrag.embeddings.local import configured_embedder
from pgrag.evaluation.datasets import RetrievalDataset, load_squad, sample_queries
from pgrag.evaluation.metrics import summarize
from pgrag.ingest.contextual import Contextualizer, context_line
from pgrag.ingest.loaders import from_text
from pgrag.ingest.plan import chunk_limits, prepare_chunks
from pgrag.retrieval.search import SearchSettings, call_sql

MARKER = "pgrag benchmark: contextual_eval"
ARMS = ("keyword", "vector", "hybrid")
COLLECTIONS = ("squad-plain", "squad-contextual")
DEPTH = 40  # chunks asked per question: enough for 10 distinct paragraphs


def default_squad() -> Path:
    base = os.environ.get("PGRAG_BENCH_DATA") or str(Path.home() / ".cache" / "pgrag-bench")
    return Path(base) / "squad-dev-v1.1.json"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def articles(data: RetrievalDataset, n: int) -> dict[int, list[str]]:
    """The first ``n`` articles: article index -> its paragraph ids, in order."""
    out: dict[int, list[str]] = {}
    for doc_id in data.corpus:
        a = int(doc_id.split("-")[0])
        if a not in out and len(out) == n:
            break
        out.setdefault(a, []).append(doc_id)
    return out


def article_document(data: RetrievalDataset, paragraphs: list[str], index: int) -> Any:
    title = data.corpus[paragraphs[0]].title
    text = "\n\n".join(f"# {title}\n\n{data.corpus[p].text.strip()}" for p in paragraphs)
    return from_text(f"squad-article-{index}", text, title=title, format="markdown")


def chunk_paragraphs(
    db: pgrag.Database, collection: str, data: RetrievalDataset, chosen: dict[int, list[str]]
) -> dict[int, str]:
    """chunk id -> the paragraph (id) whose text contains the chunk's, for every chunk."""
    rows = db.conn.execute(
        "SELECT c.id, d.source, c.content FROM pgrag.chunks c"
        " JOIN pgrag.documents d ON d.id = c.document_id"
        " JOIN pgrag.collections k ON k.id = c.collection_id"
        " WHERE k.name = %s ORDER BY d.source, c.ordinal",
        (collection,),
    ).fetchall()
    db.conn.commit()
    texts = {p: _norm(data.corpus[p].text) for ps in chosen.values() for p in ps}
    out: dict[int, str] = {}
    for chunk_id, source, content in rows:
        paragraphs = chosen[int(source.rsplit("-", 1)[1])]
        text = _norm(content)
        found = [p for p in paragraphs if text in texts[p]]
        if not found:
            sys.exit(f"chunk {chunk_id} of {source} is in no paragraph: {text[:80]!r}")
        out[chunk_id] = found[0]
    return out


def evaluate(
    db: pgrag.Database,
    collection: str,
    data: RetrievalDataset,
    vectors: Any,
    paragraph_of: dict[int, str],
) -> dict[str, dict[str, float]]:
    """Recall@10 and nDCG@10 of each arm, over paragraphs."""
    from psycopg.types.json import Jsonb

    settings = SearchSettings()
    statement = call_sql(settings, columns="chunk_id")
    options = settings.arguments()
    qids = list(data.queries)
    results: dict[str, dict[str, float]] = {}
    cur = db.conn.cursor()
    for arm in ARMS:
        runs: dict[str, list[str]] = {}
        t0 = time.perf_counter()
        for i, qid in enumerate(qids):
            params = {
                "collection": collection,
                "query": None if arm == "vector" else data.queries[qid],
                "embedding": None if arm == "keyword" else vectors[i],
                "k": DEPTH,
                "filter": Jsonb({}),
                **options,
            }
            ranked = [paragraph_of[r[0]] for r in cur.execute(statement, params).fetchall()]
            runs[qid] = list(dict.fromkeys(ranked))
        summary = summarize(runs, data.qrels)
        results[arm] = {
            "recall@10": round(summary.recall[10], 4),
            "ndcg@10": round(summary.ndcg10, 4),
            "recall@1": round(summary.recall[1], 4),
            "empty": summary.zero_results,
            "ms_per_query": round((time.perf_counter() - t0) * 1000 / max(1, len(qids)), 2),
        }
    db.conn.commit()
    return results


def prefix_effect(db: pgrag.Database, doc: Any, chunks: int, window: int | None) -> dict[str, Any]:
    """Seconds per chunk asked document-first (after one call that puts the document's window
    in the engine's cache) and chunk-first, on the same chunks of ``doc``."""
    embedder = configured_embedder(db)
    limit, overlap = chunk_limits(None, embedder, contextual=True)
    prepared = prepare_chunks(doc, embedder, limit, overlap)[: chunks + 1]
    out: dict[str, Any] = {"chunks": len(prepared) - 1}
    for order in ("document-first", "chunk-first"):
        asker = Contextualizer(db, embedder, window=window, order=order)
        text = asker.window(doc)
        t0 = time.perf_counter()
        asker.ask(text, prepared[0].text)  # (document-first: the prefix is evaluated here)
        first = time.perf_counter() - t0
        times, lines = [], 0
        for chunk in prepared[1:]:
            t0 = time.perf_counter()
            reply = asker.ask(text, chunk.text)
            times.append(time.perf_counter() - t0)
            lines += context_line(reply) is not None
        out[order] = {
            "first_s": round(first, 2),
            "s_per_chunk": round(statistics.mean(times), 2) if times else None,
            "usable_lines": lines,
        }
        out["window_tokens"] = asker.count(text)
    a, b = out["document-first"]["s_per_chunk"], out["chunk-first"]["s_per_chunk"]
    out["chunk_first_over_document_first"] = round(b / a, 2) if a and b else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--squad", type=Path, default=default_squad(), help="SQuAD v1.1 dev JSON")
    parser.add_argument("--articles", type=int, default=10)
    parser.add_argument("--questions", type=int, default=None, help="sample (default: all)")
    parser.add_argument("--context-window", type=int, default=None, help="tokens (2000)")
    parser.add_argument("--prefix-chunks", type=int, default=4)
    parser.add_argument("--dsn", help="server to use (default: PGRAG_DSN, PG*, embedded server)")
    parser.add_argument("--database", default="pgrag_bench_contextual")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if not args.squad.is_file():
        sys.exit(f"{args.squad}: missing; fetch it with ../shared/data/fetch-squad.sh (or --squad)")

    full = load_squad(args.squad)
    chosen = articles(full, args.articles)
    keep = {p for ps in chosen.values() for p in ps}
    qrels = {q: r for q, r in full.qrels.items() if set(r) <= keep}
    data = RetrievalDataset(
        name=full.name,
        corpus={p: full.corpus[p] for p in keep},
        queries={q: full.queries[q] for q in qrels},
        qrels=qrels,
    )
    data = sample_queries(data, args.questions)
    documents = [article_document(data, ps, a) for a, ps in chosen.items()]
    log(
        f"{len(documents)} articles, {len(keep)} paragraphs, {len(data.queries)} questions;"
        f" database {args.database}"
    )

    dsn = fresh_database(args.dsn, args.database, MARKER)
    db = pgrag.connect(dsn)
    embedder = configured_embedder(db)
    # Chunked alike: a contextual ingest keeps room for the line beside each chunk (the
    # default chunk size less CONTEXT_LINE_TOKENS); the plain collection is given that size.
    limit, overlap = chunk_limits(None, embedder, contextual=True)
    for name in COLLECTIONS:
        ensure_collection(db, name, embedder)
    db.conn.execute(
        "UPDATE pgrag.collections SET chunk_tokens = %s, chunk_overlap = %s WHERE name = %s",
        (limit, overlap, COLLECTIONS[0]),
    )
    db.conn.commit()

    out: dict[str, Any] = {
        "dataset": f"SQuAD v1.1 dev, first {len(documents)} articles",
        "articles": len(documents),
        "paragraphs": len(keep),
        "questions": len(data.queries),
        "chunk_tokens": limit,
        "embedding_model": embedder.name,
    }
    embedder.embed(["warm up"])  # (the model's load is not the plain ingest's time)
    t0 = time.perf_counter()
    plain = pgrag.ingest_documents(db, documents, collection=COLLECTIONS[0])
    out["plain_ingest_s"] = round(time.perf_counter() - t0, 1)
    log(f"plain: {plain.summary()} ({out['plain_ingest_s']} s)")

    last = [0.0]

    def on_context(done: int, total: int) -> None:
        if done == total or time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            log(f"  context lines: {done}/{total}")

    t0 = time.perf_counter()
    ctx = pgrag.ingest_documents(
        db,
        documents,
        collection=COLLECTIONS[1],
        contextual=True,
        context_window=args.context_window,
        on_context=on_context,
        on_warning=lambda path, why: log(f"  warning: {path}: {why}"),
    )
    out["contextual_ingest_s"] = round(time.perf_counter() - t0, 1)
    log(f"contextual: {ctx.summary()} ({out['contextual_ingest_s']} s)")
    asker = Contextualizer(db, embedder, window=args.context_window)
    out["llm"] = asker.label
    out["context_window_tokens"] = asker.window_tokens
    out["contexts"] = {
        "written": ctx.contexts_written,
        "empty": ctx.contexts_empty,
        "missing": ctx.contexts_missing,
        "llm_seconds": ctx.context_seconds,
        "llm_s_per_chunk": round(
            ctx.context_seconds / max(1, ctx.contexts_written + ctx.contexts_empty), 2
        ),
    }

    chunk_texts = {}
    for name in COLLECTIONS:
        chunk_texts[name] = [
            r[0]
            for r in db.conn.execute(
                "SELECT c.content FROM pgrag.chunks c JOIN pgrag.documents d"
                " ON d.id = c.document_id JOIN pgrag.collections k ON k.id = c.collection_id"
                " WHERE k.name = %s ORDER BY d.source, c.ordinal",
                (name,),
            )
        ]
    db.conn.commit()
    if chunk_texts[COLLECTIONS[0]] != chunk_texts[COLLECTIONS[1]]:
        sys.exit("the two collections were chunked differently; the comparison would not hold")
    out["chunks"] = len(chunk_texts[COLLECTIONS[0]])
    samples = db.conn.execute(
        "SELECT c.context, left(c.content, 160) FROM pgrag.chunks c"
        " JOIN pgrag.collections k ON k.id = c.collection_id"
        " WHERE k.name = %s AND c.context IS NOT NULL ORDER BY c.id LIMIT 3",
        (COLLECTIONS[1],),
    ).fetchall()
    db.conn.commit()
    out["sample_contexts"] = [{"context": c, "chunk": t} for c, t in samples]

    log("searching")
    vectors = embedder.embed(list(data.queries.values()))
    out["results"] = {}
    for name in COLLECTIONS:
        paragraph_of = chunk_paragraphs(db, name, data, chosen)
        out["results"][name] = evaluate(db, name, data, vectors, paragraph_of)
    # (None where the plain collection has no failure left to remove.)
    out["failures_removed"] = {}
    for arm in ARMS:
        before = 1 - out["results"][COLLECTIONS[0]][arm]["recall@10"]
        after = 1 - out["results"][COLLECTIONS[1]][arm]["recall@10"]
        out["failures_removed"][arm] = round(1 - after / before, 4) if before > 0 else None

    if args.prefix_chunks > 0:
        log(f"prefix effect on {args.prefix_chunks} chunks of the first article")
        out["prefix_effect"] = prefix_effect(
            db, documents[0], args.prefix_chunks, args.context_window
        )
    db.close()

    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['dataset']}: {out['paragraphs']} paragraphs, {out['chunks']} chunks,"
        f" {out['questions']} questions; LLM {out['llm']}, window {out['context_window_tokens']}"
    )
    print(f"{'arm':<10}{'collection':<20}{'Recall@10':>11}{'nDCG@10':>10}{'R@1':>8}")
    for arm in ARMS:
        for name in COLLECTIONS:
            r = out["results"][name][arm]
            print(
                f"{arm:<10}{name:<20}{r['recall@10']:>11.4f}{r['ndcg@10']:>10.4f}{r['recall@1']:>8.4f}"
            )
        removed = out["failures_removed"][arm]
        shown = "-" if removed is None else f"{removed:.1%}"
        print(f"{'':<10}{'failures removed':<20}{shown:>11}")
    c = out["contexts"]
    print(
        f"context lines: {c['written']} written, {c['empty']} of no use, {c['missing']} missing;"
        f" {c['llm_s_per_chunk']} s of LLM per chunk; ingest {out['plain_ingest_s']} s plain,"
        f" {out['contextual_ingest_s']} s contextual"
    )
    if "prefix_effect" in out:
        p = out["prefix_effect"]
        print(
            f"prefix: document-first {p['document-first']['s_per_chunk']} s/chunk (first"
            f" {p['document-first']['first_s']} s), chunk-first"
            f" {p['chunk-first']['s_per_chunk']} s/chunk; ratio"
            f" {p['chunk_first_over_document_first']} over {p['chunks']} chunks"
        )
    for s in out["sample_contexts"]:
        print(f"  [{s['context']}] {s['chunk']}")


if __name__ == "__main__":
    main()
