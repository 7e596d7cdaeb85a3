from __future__ import annotations

import math
import random

import numpy
import pytest

from pgrag.errors import InputError
from pgrag.evaluation.metrics import (
    Summary,
    dcg,
    mrr_at,
    ndcg_at,
    percentile,
    recall_at,
    summarize,
)


def test_dcg_linear_gain() -> None:
    assert dcg([]) == 0.0
    assert dcg([3.0]) == pytest.approx(3.0)
    assert dcg([0.0, 2.0, 1.0]) == pytest.approx(2 / math.log2(3) + 1 / math.log2(4))


def test_ndcg_by_hand() -> None:
    # Ranking [a, b, c] with b relevant 1 and c relevant 2.
    actual = 0 / math.log2(2) + 1 / math.log2(3) + 2 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)  # [c, b]
    assert ndcg_at(["a", "b", "c"], {"b": 1, "c": 2}, 3) == pytest.approx(actual / ideal)
    # @2 only b is within the cut; the ideal is still [c, b].
    assert ndcg_at(["a", "b", "c"], {"b": 1, "c": 2}, 2) == pytest.approx(
        (1 / math.log2(3)) / ideal
    )
    # @1 the ideal is [c] alone.
    assert ndcg_at(["c", "a"], {"b": 1, "c": 2}, 1) == pytest.approx(1.0)


def test_ndcg_perfect_and_none() -> None:
    qrels = {"x": 3, "y": 2, "z": 1}
    assert ndcg_at(["x", "y", "z", "w"], qrels, 10) == pytest.approx(1.0)
    assert ndcg_at(["u", "v", "w"], qrels, 10) == 0.0
    assert ndcg_at([], qrels, 10) == 0.0
    assert ndcg_at(["x"], {}, 10) == 0.0  # nothing relevant: 0, not a division by zero


def test_ndcg_ideal_counts_relevant_docs_not_retrieved() -> None:
    # Only one of two equally relevant documents retrieved, at rank 1.
    expected = 1.0 / (1.0 + 1 / math.log2(3))
    assert ndcg_at(["a"], {"a": 1, "b": 1}, 10) == pytest.approx(expected)


def test_ndcg_ignores_non_positive_judgements() -> None:
    assert ndcg_at(["a", "b"], {"a": 0, "b": 1}, 10) == pytest.approx(1 / math.log2(3))
    assert ndcg_at(["a", "b"], {"a": -1, "b": 1}, 10) == pytest.approx(1 / math.log2(3))


def test_recall() -> None:
    qrels = {"a": 1, "b": 1, "c": 2, "d": 1}
    ranked = ["a", "x", "c", "y", "b"]
    assert recall_at(ranked, qrels, 1) == pytest.approx(0.25)
    assert recall_at(ranked, qrels, 3) == pytest.approx(0.5)
    assert recall_at(ranked, qrels, 5) == pytest.approx(0.75)
    assert recall_at(ranked, qrels, 100) == pytest.approx(0.75)
    assert recall_at([], qrels, 10) == 0.0
    assert recall_at(["a"], {}, 10) == 0.0
    assert recall_at(["a"], {"a": 0}, 10) == 0.0


def test_mrr() -> None:
    qrels = {"c": 1, "e": 1}
    assert mrr_at(["a", "b", "c", "e"], qrels, 10) == pytest.approx(1 / 3)
    assert mrr_at(["c"], qrels, 10) == 1.0
    assert mrr_at(["a", "b", "c"], qrels, 2) == 0.0  # first relevant beyond the cut
    assert mrr_at(["a", "b", "c"], qrels, 3) == pytest.approx(1 / 3)
    assert mrr_at([], qrels, 10) == 0.0
    assert mrr_at(["a", "b"], {"a": 0, "b": 1}, 10) == pytest.approx(0.5)


def test_duplicates_count_once() -> None:
    qrels = {"b": 1, "c": 1}
    ranked = ["a", "a", "b", "b", "c"]  # distinct order: a, b, c
    assert mrr_at(ranked, qrels, 10) == pytest.approx(1 / 2)
    assert recall_at(ranked, qrels, 2) == pytest.approx(0.5)  # top 2 distinct = a, b
    assert recall_at(["b", "b", "b"], qrels, 10) == pytest.approx(0.5)
    assert ndcg_at(ranked, qrels, 3) == pytest.approx(ndcg_at(["a", "b", "c"], qrels, 3))
    # A repeated relevant id cannot earn gain twice: nDCG never exceeds 1.
    assert ndcg_at(["b", "b", "b"], {"b": 2}, 3) == pytest.approx(1.0)


def test_k_must_be_positive() -> None:
    for metric in (ndcg_at, recall_at, mrr_at):
        with pytest.raises(InputError, match="k must be at least 1"):
            metric(["a"], {"a": 1}, 0)


def test_percentile_matches_numpy() -> None:
    rng = random.Random(0)
    for size in (1, 2, 3, 10, 101):
        values = [rng.uniform(-100, 100) for _ in range(size)]
        for p in (0, 1, 5, 25, 50, 62.5, 90, 95, 99, 100):
            assert percentile(values, p) == pytest.approx(float(numpy.percentile(values, p)))


def test_percentile_edges() -> None:
    assert math.isnan(percentile([], 50))
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 50) == pytest.approx(1.5)
    with pytest.raises(InputError):
        percentile([1.0], 101)
    with pytest.raises(InputError):
        percentile([1.0], -1)


def test_summarize() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"z": 1}}
    runs = {
        "q1": ["a", "x"],  # perfect
        "q2": ["x", "b"],  # half recall, rr 1/2
        # q3 missing: an empty ranking
        "q9": ["a"],  # not in qrels: ignored
    }
    s = summarize(runs, qrels)
    assert isinstance(s, Summary)
    assert s.queries == 3
    assert s.zero_results == 1
    q2_ndcg = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert s.ndcg10 == pytest.approx((1.0 + q2_ndcg + 0.0) / 3)
    assert s.mrr10 == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert sorted(s.recall) == [1, 5, 10, 20, 100]
    assert s.recall[1] == pytest.approx((1.0 + 0.0 + 0.0) / 3)
    assert s.recall[5] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert s.recall[100] == pytest.approx((1.0 + 0.5 + 0.0) / 3)


def test_summarize_empty_ranking_and_deep_recall() -> None:
    ranked = [f"n{i}" for i in range(50)] + ["hit"]  # relevant at rank 51
    s = summarize({"q1": ranked, "q2": []}, {"q1": {"hit": 1}, "q2": {"a": 1}})
    assert s.zero_results == 1
    assert s.recall[20] == 0.0
    assert s.recall[100] == pytest.approx(0.5)
    assert s.ndcg10 == 0.0 and s.mrr10 == 0.0


def test_summarize_agrees_with_per_query_metrics() -> None:
    rng = random.Random(1)
    docs = [f"d{i}" for i in range(200)]
    qrels = {f"q{i}": {d: rng.randint(1, 3) for d in rng.sample(docs, 4)} for i in range(20)}
    runs = {q: rng.sample(docs, 120) for q in qrels}
    s = summarize(runs, qrels)
    n = len(qrels)
    assert s.ndcg10 == pytest.approx(sum(ndcg_at(runs[q], qrels[q], 10) for q in qrels) / n)
    assert s.mrr10 == pytest.approx(sum(mrr_at(runs[q], qrels[q], 10) for q in qrels) / n)
    for k in (1, 5, 10, 20, 100):
        expected = sum(recall_at(runs[q], qrels[q], k) for q in qrels) / n
        assert s.recall[k] == pytest.approx(expected)


def test_summarize_no_queries() -> None:
    s = summarize({}, {})
    assert s.queries == 0 and s.zero_results == 0
    assert math.isnan(s.ndcg10) and math.isnan(s.mrr10) and math.isnan(s.recall[10])
