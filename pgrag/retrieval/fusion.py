"""Fusion functions: how the keyword arm's and the vector arm's ranked lists become one.

``pgrag.search_v5`` fuses in SQL (sql/functions/search.sql); these are the same functions in
Python, over the arms' lists as search_v5 returns them (chunk id with BM25 score; chunk id with
distance), for what must try many settings without searching again: ``pgrag tune`` and
``benchmarks/fusion_eval.py``. ``tests/integration/test_fusion.py`` checks that the two agree.

- ``rrf``: Reciprocal Rank Fusion, sum over arms of weight / (rrf_k + rank).
- ``convex-mm``: alpha x vector + (1 - alpha) x keyword, each arm's scores min-max normalised
  over its list (a chunk absent from a list scores 0 there). Statistics (min, max, mean,
  standard deviation) come from the first STATS_DEPTH of each list.
- ``convex-tm``: theoretical-min normalisation (Bruch et al., 2023): BM25 divided by the list's
  top score; cosine similarity (1 - distance) as (s + 1) / (top + 1).
- ``convex-z``: z-scores over each list (absent: the list's floor); search_v5's default.
  The keyword arm's statistics count a list shorter than STATS_DEPTH as completed with BM25
  0, what every chunk without a query word scores.
- ``convex-mm-adaptive``: convex-mm with alpha moved per query by ``adapt`` x (the vector
  list's normalised gap between its first and second result - the keyword list's).
- ``keyword`` / ``vector``: one arm alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Ranked = Sequence[tuple[int, float]]  # (chunk id, score or distance), best first

# Each arm's normalisation takes its statistics from its first 40 candidates, the depth search_v5
# fuses at k <= 10, and floors a later candidate's score at the 40th's (which a chunk missing
# from the list scores too), so that asking for more results does not move the first ones.
STATS_DEPTH = 40

METHODS = ("rrf", "convex-mm", "convex-tm", "convex-z", "convex-mm-adaptive", "keyword", "vector")


def fuse(
    keyword: Ranked,
    vector: Ranked,
    method: str,
    *,
    rrf_k: float = 5,
    vector_weight: float = 0.5,
    keyword_weight: float = 1.0,
    alpha: float = 0.5,
    adapt: float = 0.0,
) -> list[tuple[int, float]]:
    """(chunk id, fused score), best first. ``keyword`` carries BM25 scores (higher is
    better), ``vector`` cosine distances (lower is better); each is in its arm's order. Ties
    are broken as the SQL does: by the better of the chunk's ranks in the two lists, then by
    chunk id."""
    if method == "keyword":
        return [(c, s) for c, s in keyword]
    if method == "vector":
        return [(c, 1.0 - d) for c, d in vector]
    kr = {c: i for i, (c, _) in enumerate(keyword, 1)}
    vr = {c: i for i, (c, _) in enumerate(vector, 1)}
    ids = list(dict.fromkeys([c for c, _ in keyword] + [c for c, _ in vector]))
    if method == "rrf":
        fused = {
            c: (vector_weight / (rrf_k + vr[c]) if c in vr else 0.0)
            + (keyword_weight / (rrf_k + kr[c]) if c in kr else 0.0)
            for c in ids
        }
    elif method.startswith("convex"):
        ks = {c: s for c, s in keyword}
        vs = {c: 1.0 - d for c, d in vector}  # similarity
        if method in ("convex-mm", "convex-mm-adaptive"):
            kn, vn = _minmax(ks, pad=True), _minmax(vs)
            absent_k = absent_v = 0.0
        elif method == "convex-tm":
            top_k = max(ks.values(), default=0.0)
            top_v = max(vs.values(), default=0.0)
            kn = {c: s / top_k if top_k > 0 else 0.0 for c, s in ks.items()}
            vn = {c: (s + 1) / (top_v + 1) if top_v > -1 else 0.0 for c, s in vs.items()}
            absent_k = absent_v = 0.0
        elif method == "convex-z":
            (kn, absent_k), (vn, absent_v) = _z(ks, pad=True), _z(vs)
        else:
            raise ValueError(f"unknown fusion method {method!r}; one of {', '.join(METHODS)}")
        a = alpha
        if method == "convex-mm-adaptive" and adapt:
            a = min(1.0, max(0.0, alpha + adapt * (_gap(vector, vn) - _gap(keyword, kn))))
        if not vs:
            a = 0.0
        if not ks:
            a = 1.0
        fused = {c: a * vn.get(c, absent_v) + (1 - a) * kn.get(c, absent_k) for c in ids}
    else:
        raise ValueError(f"unknown fusion method {method!r}; one of {', '.join(METHODS)}")
    best = {c: min(kr.get(c, math.inf), vr.get(c, math.inf)) for c in ids}
    return [(c, fused[c]) for c in sorted(ids, key=lambda c: (-fused[c], best[c], c))]


def _minmax(scores: dict[int, float], pad: bool = False) -> dict[int, float]:
    """Min-max with the list's first STATS_DEPTH scores (the list is best first): the best
    scores 1, the STATS_DEPTH-th 0, and a later one 0 too (its floor). ``pad``: a list shorter
    than STATS_DEPTH is completed with scores of 0 (the keyword arm: BM25 0 is what every chunk
    without a query word scores), so its floor is 0."""
    if not scores:
        return {}
    head = list(scores.values())[:STATS_DEPTH]
    lo = 0.0 if pad and len(head) < STATS_DEPTH else min(head)
    hi = max(scores.values())
    if hi - lo <= 0:
        return {c: 1.0 for c in scores}
    return {c: max(s - lo, 0.0) / (hi - lo) for c, s in scores.items()}


def _z(scores: dict[int, float], pad: bool = False) -> tuple[dict[int, float], float]:
    """z-scores with the mean and standard deviation of the list's first STATS_DEPTH scores,
    floored at the STATS_DEPTH-th's; and the floor's z-score (what a missing chunk scores).
    ``pad`` as for :func:`_minmax`: a single keyword match then stands far out."""
    if not scores:
        return {}, 0.0
    head = list(scores.values())[:STATS_DEPTH]
    if pad and len(head) < STATS_DEPTH:
        floor = 0.0
        head = head + [0.0] * (STATS_DEPTH - len(head))
    else:
        floor = min(head)
    n = len(head)
    mean = sum(head) / n
    sd = math.sqrt(max(sum(s * s for s in head) / n - mean * mean, 0.0))
    if sd <= 0:
        return {c: 0.0 for c in scores}, 0.0
    return {c: (max(s, floor) - mean) / sd for c, s in scores.items()}, (floor - mean) / sd


def _gap(ranked: Ranked, norm: dict[int, float]) -> float:
    """How far the first result stands above the second, on the list's normalised scale."""
    if len(ranked) < 2:
        return 0.0
    return norm[ranked[0][0]] - norm[ranked[1][0]]
