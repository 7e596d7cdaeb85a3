"""`pgrag eval retrieval`: measure retrieval on a dataset, beside the peers a user would pick.

The dataset's documents are ingested into a collection of their own (unchanged documents are
skipped on a re-run), every query goes through the keyword arm, the vector arm and the hybrid
of ``pgrag.search_v5``, and the same queries go through two peers in the same process:
bm25s (k1=1.5, b=0.75, English stop words, Snowball stemmer) over the same documents, and an
exact brute-force cosine search (numpy) over the same stored embeddings. Latency is per query,
one at a time; query embeddings are computed once, up front, and timed separately, because the
vector arm and the exact peer share them.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.db import queries
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError, InputError
from pgrag.evaluation.datasets import RetrievalDataset
from pgrag.evaluation.metrics import Summary, percentile, summarize
from pgrag.ingest.loaders import from_text
from pgrag.ingest.pipeline import ingest_documents
from pgrag.retrieval.rerank import rerank
from pgrag.retrieval.search import SearchSettings, call_sql

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from pgrag.db.connect import Database
    from pgrag.ingest.report import IngestReport
    from pgrag.retrieval.rerank import Reranker

Q = queries.load(__name__)

ARMS = ("keyword", "vector", "hybrid")
RUN_DEPTH = 100  # results kept per query (Recall@100)
SPEED_K = 10  # results per query in the throughput pass: what a RAG prompt takes


@dataclass
class ArmResult:
    name: str
    summary: Summary
    p50_ms: float
    p95_ms: float
    queries_per_s: float
    # A second pass asking for SPEED_K results, as an application building a prompt would.
    p50_ms_at_10: float = math.nan
    queries_per_s_at_10: float = math.nan
    ndcg10_at_10: float = math.nan  # nDCG@10 of that pass: what asking for only 10 gives

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **asdict(self.summary),
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "queries_per_s": self.queries_per_s,
            "p50_ms_at_10": self.p50_ms_at_10,
            "queries_per_s_at_10": self.queries_per_s_at_10,
            "ndcg10_at_10": self.ndcg10_at_10,
        }


@dataclass
class EvalReport:
    dataset: str
    collection: str
    documents: int
    queries: int
    chunks_embedded: int
    query_embedding_s: float
    results: dict[str, ArmResult] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "collection": self.collection,
            "documents": self.documents,
            "queries": self.queries,
            "chunks_embedded": self.chunks_embedded,
            "query_embedding_s": self.query_embedding_s,
            "results": {name: r.to_dict() for name, r in self.results.items()},
            "ratios": self.ratios,
        }

    def table(self) -> str:
        head = (
            f"{'run':<16}{'nDCG@10':>9}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'R@20':>7}{'R@100':>7}"
            f"{'MRR@10':>8}{'empty':>7}{'p50 ms':>9}{'p95 ms':>9}{'q/s':>8}{'q/s@10':>8}"
            f"{'nDCG@10 k=10':>14}"
        )
        lines = [
            f"{self.dataset}: {self.documents} documents, {self.queries} queries"
            f" (collection {self.collection!r})",
            head,
            "-" * len(head),
        ]
        for name, r in self.results.items():
            s = r.summary
            lines.append(
                f"{name:<16}{s.ndcg10:>9.4f}{s.recall[1]:>7.3f}{s.recall[5]:>7.3f}"
                f"{s.recall[10]:>7.3f}{s.recall[20]:>7.3f}{s.recall[100]:>7.3f}{s.mrr10:>8.4f}"
                f"{s.zero_results:>7}{r.p50_ms:>9.2f}{r.p95_ms:>9.2f}{r.queries_per_s:>8.0f}"
                f"{r.queries_per_s_at_10:>8.0f}{r.ndcg10_at_10:>14.4f}"
            )
        if self.ratios:
            lines.append("")
            lines.extend(f"{k}: {v:.3f}" for k, v in self.ratios.items())
        return "\n".join(lines)


def collection_name(dataset: RetrievalDataset) -> str:
    return "eval-" + (re.sub(r"[^A-Za-z0-9_.:-]+", "-", dataset.name).strip("-") or "dataset")


def evaluate_retrieval(
    db: Database,
    dataset: RetrievalDataset,
    *,
    collection: str | None = None,
    arms: Sequence[str] = ARMS,
    peers: bool = True,
    settings: SearchSettings | None = None,
    reranker: Reranker | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> EvalReport:
    """Ingest ``dataset`` (skipping what is already there) and measure every arm and peer.
    With a ``reranker``, a "hybrid+rerank" run reorders the hybrid's top 100 with it.
    ``progress(stage, done, total)`` is called as work proceeds."""
    if not dataset.queries:
        raise InputError(f"dataset {dataset.name!r} has no queries with relevance judgements")
    collection = collection or collection_name(dataset)
    doc_ids = list(dataset.corpus)
    report_ingest = ingest_dataset(db, dataset, collection, progress)
    query_ids = list(dataset.queries)
    texts = [dataset.queries[q] for q in query_ids]

    t0 = time.perf_counter()
    embed = "vector" in arms or "hybrid" in arms or peers
    vectors = configured_embedder(db).embed(texts) if embed else None
    embed_s = time.perf_counter() - t0

    report = EvalReport(
        dataset=dataset.name,
        collection=collection,
        documents=len(doc_ids),
        queries=len(query_ids),
        chunks_embedded=report_ingest.chunks_embedded,
        query_embedding_s=round(embed_s, 3),
    )
    settings = settings or SearchSettings()
    searchers: dict[str, Searcher] = {
        arm: _arm_searcher(db, collection, arm, texts, vectors, settings) for arm in arms
    }
    if reranker is not None:
        searchers["hybrid+rerank"] = _reranked_searcher(
            db, collection, texts, vectors, settings, reranker
        )
    if peers:
        assert vectors is not None
        searchers["bm25s"] = _bm25s_searcher(dataset, texts)
        searchers["exact-cosine"] = _exact_searcher(db, collection, vectors)
    all_runs: dict[str, dict[str, list[str]]] = {}
    for name, searcher in searchers.items():
        runs, times = _quality_pass(name, searcher, query_ids, progress)
        report.results[name] = _result(name, runs, times, dataset)
        all_runs[name] = runs
    fast = {name: s for name, s in searchers.items() if name != "hybrid+rerank"}
    for name, (times, ranked) in _speed_pass(fast, len(query_ids), progress).items():
        result = report.results[name]
        result.p50_ms_at_10 = round(percentile(times, 50) * 1000, 3)
        result.queries_per_s_at_10 = round(len(times) / sum(times), 1)
        runs_at_10 = {qid: _dedupe(r) for qid, r in zip(query_ids, ranked, strict=True)}
        result.ndcg10_at_10 = summarize(runs_at_10, dataset.qrels).ndcg10
    db.conn.commit()
    if peers:
        report.ratios = _ratios(report, all_runs)
    return report


def ingest_dataset(
    db: Database,
    dataset: RetrievalDataset,
    collection: str,
    progress: Callable[[str, int, int], None] | None = None,
) -> IngestReport:
    """Ingest ``dataset``'s documents into ``collection`` (each with its id in metadata
    ``doc_id``; unchanged documents skipped), and settle the tables after a load."""

    def on_plan(total: int) -> None:
        if progress:
            progress("ingest", 0, total)

    done = 0

    def on_progress(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress("ingest", done, -1)

    report = ingest_documents(
        db,
        (
            from_text(
                f"{dataset.name}:{doc.id}", doc.text, title=doc.title, metadata={"doc_id": doc.id}
            )
            for doc in dataset.corpus.values()
        ),
        collection=collection,
        on_plan=on_plan,
        progress=on_progress,
    )
    if report.chunks_written:
        _settle(db)
    return report


# A searcher answers query number i with up to k ranked document ids.
Searcher = Callable[[int, int], list[str]]


def _quality_pass(
    name: str,
    searcher: Searcher,
    query_ids: list[str],
    progress: Callable[[str, int, int], None] | None,
) -> tuple[dict[str, list[str]], list[float]]:
    """Every query at RUN_DEPTH, one at a time; the latency of each."""
    runs: dict[str, list[str]] = {}
    times: list[float] = []
    for i, qid in enumerate(query_ids):
        t = time.perf_counter()
        ranked = searcher(i, RUN_DEPTH)
        times.append(time.perf_counter() - t)
        runs[qid] = _dedupe(ranked)
        if progress and i % 50 == 0:
            progress(name, i, len(query_ids))
    return runs, times


def _speed_pass(
    searchers: dict[str, Searcher],
    n: int,
    progress: Callable[[str, int, int], None] | None,
    block: int = 100,
) -> dict[str, tuple[list[float], list[list[str]]]]:
    """Every query again at SPEED_K, the runs taking turns a block of queries at a time, so
    that a shared machine's background load falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in searchers}
    ranked: dict[str, list[list[str]]] = {name: [] for name in searchers}
    for start in range(0, n, block):
        for name, searcher in searchers.items():
            for i in range(start, min(start + block, n)):
                t = time.perf_counter()
                ranked[name].append(searcher(i, SPEED_K))
                times[name].append(time.perf_counter() - t)
        if progress:
            progress(f"speed@{SPEED_K}", min(start + block, n), n)
    return {name: (times[name], ranked[name]) for name in searchers}


def _settle(db: Database) -> None:
    """After a load, what autovacuum would do a little later: set the visibility map (so the
    keyword arm's index-only scans stay index-only) and refresh planner statistics, so the
    timings measure pgrag as it runs, not a table that is seconds old. Skipped when the role may
    not vacuum pgrag's tables."""
    import psycopg

    autocommit = db.conn.autocommit
    db.conn.commit()
    db.conn.autocommit = True
    try:
        db.conn.execute(Q.settle)
    except psycopg.errors.InsufficientPrivilege:
        pass
    finally:
        db.conn.autocommit = autocommit


def _result(
    name: str, runs: dict[str, list[str]], times: list[float], dataset: RetrievalDataset
) -> ArmResult:
    total = sum(times)
    return ArmResult(
        name=name,
        summary=summarize(runs, dataset.qrels),
        p50_ms=round(percentile(times, 50) * 1000, 3),
        p95_ms=round(percentile(times, 95) * 1000, 3),
        queries_per_s=round(len(times) / total, 1) if total else 0.0,
    )


def _arm_searcher(
    db: Database,
    collection: str,
    arm: str,
    texts: list[str],
    vectors: npt.NDArray[np.float32] | None,
    settings: SearchSettings,
) -> Searcher:
    """One arm of ``pgrag.search_v5``, as an application calls it (one statement per query)."""
    from psycopg.types.json import Jsonb

    sql = call_sql(settings, columns="metadata ->> 'doc_id'")
    cur = db.conn.cursor()
    empty = Jsonb({})
    options = settings.arguments()

    def search(i: int, k: int) -> list[str]:
        params = {
            "collection": collection,
            "query": None if arm == "vector" else texts[i],
            "embedding": None if arm == "keyword" or vectors is None else vectors[i],
            "k": k,
            "filter": empty,
            **options,
        }
        return [r[0] for r in cur.execute(sql, params).fetchall()]

    return search


def _reranked_searcher(
    db: Database,
    collection: str,
    texts: list[str],
    vectors: npt.NDArray[np.float32] | None,
    settings: SearchSettings,
    reranker: Reranker,
) -> Searcher:
    """The hybrid's top RUN_DEPTH chunks reordered by the reranker (its time included)."""
    from psycopg.types.json import Jsonb

    sql = call_sql(settings, columns="metadata ->> 'doc_id', text")
    cur = db.conn.cursor()
    options = settings.arguments()

    def search(i: int, k: int) -> list[str]:
        params = {
            "collection": collection,
            "query": texts[i],
            "embedding": None if vectors is None else vectors[i],
            "k": RUN_DEPTH,
            "filter": Jsonb({}),
            **options,
        }
        rows = cur.execute(sql, params).fetchall()
        ranked = rerank(texts[i], rows, reranker, text=lambda row: str(row[1]))
        return [row[0] for row, _ in ranked][:k]

    return search


def _dedupe(ids: Any) -> list[str]:
    seen: dict[str, None] = {}
    for i in ids:
        if i is not None and i not in seen:
            seen[i] = None
    return list(seen)


def _bm25s_searcher(dataset: RetrievalDataset, texts: list[str]) -> Searcher:
    """bm25s over the same documents (title and text); tokenisation timed with the query."""
    try:
        import bm25s
        import Stemmer
    except ImportError as err:
        raise ConfigError(
            "the bm25s peer needs bm25s and PyStemmer: pip install 'pgrag[eval]',"
            " or run without peers (--no-peers)"
        ) from err
    stemmer = Stemmer.Stemmer("english")
    doc_ids = list(dataset.corpus)
    corpus = [f"{d.title} {d.text}" for d in dataset.corpus.values()]
    tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(k1=1.5, b=0.75)
    retriever.index(tokens, show_progress=False)

    def search(i: int, k: int) -> list[str]:
        q = bm25s.tokenize([texts[i]], stopwords="en", stemmer=stemmer, show_progress=False)
        if not (q.vocab and len(q.ids[0])):
            return []
        docs, scores = retriever.retrieve(
            q, k=min(k, len(doc_ids)), show_progress=False, n_threads=1
        )
        return [doc_ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]

    return search


def _stored_vectors(db: Database, collection: str) -> tuple[list[str], npt.NDArray[np.float32]]:
    import numpy as np

    rows = db.conn.execute(Q.stored_vectors, {"collection": collection}).fetchall()
    db.conn.commit()
    ids = [r[0] for r in rows]
    matrix = np.asarray([r[1].to_numpy() for r in rows], dtype=np.float32)
    return ids, matrix


def _exact_searcher(db: Database, collection: str, vectors: npt.NDArray[np.float32]) -> Searcher:
    """Brute-force cosine over the stored embeddings (numpy), chunks folded into documents."""
    import numpy as np

    ids, matrix = _stored_vectors(db, collection)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    matrix = matrix / norms[:, None]

    def search(i: int, k: int) -> list[str]:
        depth = min(k * 4, len(ids))  # several chunks may share a document
        q = vectors[i] / (np.linalg.norm(vectors[i]) or 1.0)
        scores = matrix @ q
        top = (
            np.argpartition(-scores, depth - 1)[:depth] if depth < len(ids) else np.arange(len(ids))
        )
        order = top[np.argsort(-scores[top], kind="stable")]
        return _dedupe(ids[j] for j in order)[:k]

    return search


def _ratios(report: EvalReport, runs: dict[str, dict[str, list[str]]]) -> dict[str, float]:
    r = report.results
    out: dict[str, float] = {}
    if "keyword" in r and r["bm25s"].summary.ndcg10:
        out["keyword nDCG@10 / bm25s"] = r["keyword"].summary.ndcg10 / r["bm25s"].summary.ndcg10
        if r["bm25s"].queries_per_s:
            out["keyword q/s / bm25s q/s"] = r["keyword"].queries_per_s / r["bm25s"].queries_per_s
        if r["bm25s"].queries_per_s_at_10:
            out["keyword q/s / bm25s q/s (k=10)"] = (
                r["keyword"].queries_per_s_at_10 / r["bm25s"].queries_per_s_at_10
            )
    if "vector" in r:
        out["vector nDCG@10 - exact"] = (
            r["vector"].summary.ndcg10 - r["exact-cosine"].summary.ndcg10
        )
        # HNSW against exact search: the share of exact top-10 documents the index also found.
        overlaps = []
        for qid, exact in runs["exact-cosine"].items():
            top = exact[:10]
            if top:
                overlaps.append(len(set(top) & set(runs["vector"].get(qid, [])[:10])) / len(top))
        if overlaps:
            out["vector recall@10 vs exact"] = sum(overlaps) / len(overlaps)
    return out
