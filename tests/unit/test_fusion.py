"""pgrag.retrieval.fusion: the fusion functions search_v5 runs in SQL, in Python (no database:
tests/integration/test_fusion.py checks that the two agree)."""

from __future__ import annotations

import math

import pytest

from pgrag.retrieval import fusion
from pgrag.retrieval.tuning import bootstrap_low, choose, written_question

KEYWORD = [(1, 9.0), (2, 6.0), (3, 3.0)]  # BM25, best first
VECTOR = [(2, 0.2), (4, 0.4), (1, 0.6)]  # cosine distance, best first


def ids(ranked: list[tuple[int, float]]) -> list[int]:
    return [c for c, _ in ranked]


def test_rrf_sums_weight_over_rrf_k_plus_rank() -> None:
    got = dict(fusion.fuse(KEYWORD, VECTOR, "rrf", rrf_k=5, vector_weight=0.5, keyword_weight=1))
    assert got[1] == pytest.approx(1 / 6 + 0.5 / 8)
    assert got[2] == pytest.approx(1 / 7 + 0.5 / 6)
    assert got[3] == pytest.approx(1 / 8)
    assert got[4] == pytest.approx(0.5 / 7)


def test_convex_min_max_is_the_weighted_mean_of_scores_from_0_to_1() -> None:
    got = dict(fusion.fuse(KEYWORD, VECTOR, "convex-mm", alpha=0.4))
    # keyword (9, 6, 3), a list shorter than 40 whose floor is BM25 0: (1, 2/3, 1/3);
    # vector similarity (0.8, 0.6, 0.4), floored at its last: (1, 0.5, 0)
    assert got[1] == pytest.approx(0.4 * 0.0 + 0.6 * 1.0)
    assert got[2] == pytest.approx(0.4 * 1.0 + 0.6 * 2 / 3)
    assert got[3] == pytest.approx(0.6 / 3)  # absent from the vector list: 0 there
    assert got[4] == pytest.approx(0.4 * 0.5)
    assert ids(fusion.fuse(KEYWORD, VECTOR, "convex-mm", alpha=0.4)) == [2, 1, 3, 4]


def test_convex_z_scores_with_the_keyword_list_padded_with_zeros() -> None:
    got = dict(fusion.fuse(KEYWORD, VECTOR, "convex-z", alpha=0.5))
    # keyword: (9, 6, 3) and 37 zeros; vector: its own three similarities
    head = [9.0, 6.0, 3.0] + [0.0] * 37
    mean = sum(head) / 40
    sd = math.sqrt(sum(x * x for x in head) / 40 - mean**2)
    kz = {1: (9 - mean) / sd, 2: (6 - mean) / sd, 3: (3 - mean) / sd, None: (0 - mean) / sd}
    z = math.sqrt(1.5)  # (x - mean) / sd for three evenly spaced values: -1.22, 0, 1.22
    assert got[1] == pytest.approx(0.5 * -z + 0.5 * kz[1])
    assert got[2] == pytest.approx(0.5 * z + 0.5 * kz[2])
    assert got[3] == pytest.approx(0.5 * -z + 0.5 * kz[3])  # absent from the vector list
    assert got[4] == pytest.approx(0.5 * 0 + 0.5 * kz[None])  # no query word: BM25 0
    # a single keyword match stands far out (sqrt(39) standard deviations), not at 0
    alone = dict(fusion.fuse([(7, 2.0)], [], "convex-z"))
    assert alone[7] == pytest.approx(math.sqrt(39))


def test_statistics_and_floor_come_from_the_first_40() -> None:
    long = [(i, 100.0 - i) for i in range(1, 101)]  # 100 keyword candidates
    z, floor = fusion._z(dict(long))
    head = [100.0 - i for i in range(1, 41)]
    mean = sum(head) / 40
    sd = math.sqrt(sum((s - mean) ** 2 for s in head) / 40)
    assert z[1] == pytest.approx((99 - mean) / sd)
    assert z[40] == pytest.approx((60 - mean) / sd)
    assert z[41] == z[100] == z[40] == floor  # floored at the 40th
    mm = fusion._minmax(dict(long))
    assert mm[1] == 1.0 and mm[40] == 0.0 and mm[100] == 0.0
    # so a deeper list does not move what a list of 40 ranked
    short_kw, short_vec = long[:40], [(i, i / 100) for i in range(1, 41)]
    long_vec = [(i, i / 100) for i in range(1, 101)]
    for method in ("convex-z", "convex-mm"):
        a = fusion.fuse(short_kw, short_vec, method, alpha=0.4)
        b = fusion.fuse(long, long_vec, method, alpha=0.4)
        assert ids(b[:40]) == ids(a[:40])
        assert [x for _, x in b[:40]] == pytest.approx([x for _, x in a[:40]])


def test_one_arm_alone_and_constant_lists() -> None:
    assert ids(fusion.fuse(KEYWORD, [], "convex-z", alpha=0.4)) == [1, 2, 3]
    assert ids(fusion.fuse([], VECTOR, "convex-mm", alpha=0.4)) == [2, 4, 1]
    flat = [(1, 2.0), (2, 2.0)]
    assert dict(fusion.fuse(flat, [], "convex-mm")) == {1: 1.0, 2: 1.0}
    same = [(1, 0.3), (2, 0.3)]  # a vector list of equal distances: no spread, no say
    assert dict(fusion.fuse([], same, "convex-z")) == {1: 0.0, 2: 0.0}
    # ties are broken by the better rank in either list, then by chunk id
    assert ids(fusion.fuse(flat, [], "convex-mm")) == [1, 2]
    with pytest.raises(ValueError, match="unknown fusion method"):
        fusion.fuse(KEYWORD, VECTOR, "borda")


def test_choose_moves_halfway_from_the_current_weight_toward_the_best() -> None:
    scores = {w / 20: 0.5 for w in range(21)} | {0.8: 0.9}
    assert choose(scores, 0.4) == (0.6, 0.8)
    # among tied bests, the one nearest the current weight
    flat = {w / 20: 0.5 for w in range(21)}
    assert choose(flat, 0.4) == (0.4, 0.4)


def test_bootstrap_low_is_below_the_mean_and_above_0_only_for_a_steady_gain() -> None:
    steady = [0.02] * 50 + [0.01] * 50
    assert 0 < bootstrap_low(steady) <= 0.015
    noisy = [1.0, -1.0] * 50
    assert bootstrap_low(noisy) < 0


@pytest.mark.parametrize(
    ("reply", "question"),
    [
        ("What does the FORMAT option default to?", "What does the FORMAT option default to?"),
        ('"Which note carries the mark?"\nIt asks about the note.', "Which note carries the mark?"),
        ("Glaciers carve valleys.", None),  # no question mark
        ("Why?", None),  # fewer than 3 words
        ("", None),
        (" ".join(["word"] * 45) + "?", None),  # more than 40 words
    ],
)
def test_written_question_keeps_one_usable_question(reply: str, question: str | None) -> None:
    assert written_question(reply) == question
