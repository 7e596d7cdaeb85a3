"""Ranking metrics over ranked lists of document ids, matching BEIR's numbers.

nDCG uses linear gain (``rel / log2(rank + 1)``), as pytrec_eval's ``ndcg_cut`` does, with the
ideal ranking built from all judged-relevant documents. A document id that appears more than
once in a ranking counts only at its first position. Queries with no relevant documents score 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pgrag.errors import InputError

RECALL_KS = (1, 5, 10, 20, 100)


def dcg(gains: Sequence[float]) -> float:
    """Discounted cumulative gain with linear gain: sum of ``gain / log2(i + 2)``."""
    return sum(gain / math.log2(i + 2) for i, gain in enumerate(gains))


def ndcg_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k: DCG of the top k (distinct) ids over DCG of the ideal top k."""
    return _ndcg(_top(ranked, _check_k(k)), qrels, k)


def recall_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Fraction of the relevant documents found in the top k (distinct) ids."""
    return _recall(_top(ranked, _check_k(k)), qrels, k)


def mrr_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant id within the top k, or 0 if there is none."""
    return _mrr(_top(ranked, _check_k(k)), qrels, k)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation, as ``numpy.percentile`` does by
    default; NaN for no values."""
    if not 0 <= p <= 100:
        raise InputError(f"percentile must be between 0 and 100, got {p}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * p / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


@dataclass(frozen=True)
class Summary:
    ndcg10: float
    recall: dict[int, float]  # k -> mean recall@k, for k in RECALL_KS
    mrr10: float
    zero_results: int  # queries whose ranking was empty (or missing from the runs)
    queries: int


def summarize(runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> Summary:
    """Mean metrics over every query in ``qrels``; a query missing from ``runs`` counts as an
    empty ranking. With no queries the means are NaN."""
    deepest = max(RECALL_KS)
    ndcg_total = mrr_total = 0.0
    recall_totals = dict.fromkeys(RECALL_KS, 0.0)
    zero_results = 0
    for qid, judged in qrels.items():
        top = _top(runs.get(qid, ()), max(deepest, 10))
        if not top:
            zero_results += 1
        ndcg_total += _ndcg(top, judged, 10)
        mrr_total += _mrr(top, judged, 10)
        for k in RECALL_KS:
            recall_totals[k] += _recall(top, judged, k)
    n = len(qrels)

    def mean(total: float) -> float:
        return total / n if n else math.nan

    return Summary(
        ndcg10=mean(ndcg_total),
        recall={k: mean(total) for k, total in recall_totals.items()},
        mrr10=mean(mrr_total),
        zero_results=zero_results,
        queries=n,
    )


def _check_k(k: int) -> int:
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    return k


def _top(ranked: Sequence[str], k: int) -> list[str]:
    """The first k distinct ids, each at its first position."""
    seen: set[str] = set()
    top: list[str] = []
    for doc_id in ranked:
        if doc_id not in seen:
            seen.add(doc_id)
            top.append(doc_id)
            if len(top) == k:
                break
    return top


def _ndcg(top: list[str], qrels: Mapping[str, int], k: int) -> float:
    ideal = dcg(sorted((rel for rel in qrels.values() if rel > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(qrels.get(doc_id, 0), 0) for doc_id in top[:k]]) / ideal


def _recall(top: list[str], qrels: Mapping[str, int], k: int) -> float:
    relevant = sum(1 for rel in qrels.values() if rel > 0)
    if not relevant:
        return 0.0
    found = sum(1 for doc_id in top[:k] if qrels.get(doc_id, 0) > 0)
    return found / relevant


def _mrr(top: list[str], qrels: Mapping[str, int], k: int) -> float:
    for rank, doc_id in enumerate(top[:k], start=1):
        if qrels.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0
