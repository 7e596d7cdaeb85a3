"""rag_marginals: RAG-Sequence and RAG-Token log-likelihoods, against brute force."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pgrag.answer.marginals import logsumexp, rag_marginals
from pgrag.errors import InputError


def brute(log_prior: list[float], log_tok: list[list[float]]) -> tuple[float, float]:
    """In plain probabilities: sequence = sum_z p(z) prod_t p(y_t|z), and
    token = prod_t sum_z p(z) p(y_t|z)."""
    prior = [math.exp(p) for p in log_prior]
    tok = [[math.exp(v) for v in row] for row in log_tok]
    seq = sum(p * math.prod(row) for p, row in zip(prior, tok, strict=True))
    per_token = math.prod(
        sum(p * row[t] for p, row in zip(prior, tok, strict=True)) for t in range(len(tok[0]))
    )
    return math.log(seq), math.log(per_token)


def test_matches_brute_force_on_random_cases() -> None:
    rng = random.Random(7)
    for k, length in itertools.product((1, 2, 5), (1, 3)):
        for _ in range(20):
            weights = [rng.random() + 0.01 for _ in range(k)]
            log_prior = [math.log(w / sum(weights)) for w in weights]
            log_tok = [[math.log(rng.uniform(0.01, 1.0)) for _ in range(length)] for _ in range(k)]
            got = rag_marginals(log_prior, log_tok)
            want = brute(log_prior, log_tok)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_worked_example() -> None:
    # Two passages, prior 0.75 / 0.25; the answer has two tokens.
    # Passage 1 gives them 0.9 and 0.8, passage 2 gives 0.1 and 0.5.
    log_prior = [math.log(0.75), math.log(0.25)]
    log_tok = [[math.log(0.9), math.log(0.8)], [math.log(0.1), math.log(0.5)]]
    sequence, token = rag_marginals(log_prior, log_tok)
    assert sequence == pytest.approx(math.log(0.75 * 0.72 + 0.25 * 0.05))  # 0.5525
    assert token == pytest.approx(math.log((0.75 * 0.9 + 0.25 * 0.1) * (0.75 * 0.8 + 0.25 * 0.5)))


def test_one_token_or_one_passage_makes_both_equal() -> None:
    one_token = rag_marginals([math.log(0.5), math.log(0.5)], [[-1.0], [-3.0]])
    assert one_token[0] == pytest.approx(one_token[1])
    one_passage = rag_marginals([0.0], [[-1.0, -2.0, -0.5]])
    assert one_passage == pytest.approx((-3.5, -3.5))


def test_stable_far_below_the_floating_point_range() -> None:
    # exp(-2000) is 0.0 in floating point: a naive sum would give log(0) = -inf.
    sequence, token = rag_marginals([math.log(0.5), math.log(0.5)], [[-1000.0, -1000.0]] * 2)
    assert sequence == pytest.approx(-2000.0)
    assert token == pytest.approx(-2000.0)
    # Lowering the first token's log-probability by c under every passage lowers both by c.
    base = rag_marginals([-0.1, -2.4], [[-0.3, -1.2], [-2.0, -0.7]])
    shifted = rag_marginals([-0.1, -2.4], [[-700.3, -1.2], [-702.0, -0.7]])
    assert shifted[0] == pytest.approx(base[0] - 700.0)
    assert shifted[1] == pytest.approx(base[1] - 700.0)
    assert logsumexp([]) == -math.inf and logsumexp([-math.inf, -math.inf]) == -math.inf


@pytest.mark.parametrize(
    ("log_prior", "log_tok", "message"),
    [
        ([], [], "at least one passage"),
        ([-0.1], [[-1.0], [-2.0]], "2 rows but log_prior has 1"),
        ([-0.1, -2.0], [[-1.0], [-2.0, -1.0]], "equal"),
        ([-0.1], [[]], "non-zero length"),
        ([0.5], [[-1.0]], "<= 0"),
        ([-0.1], [[float("nan")]], "NaN"),
    ],
)
def test_bad_input_is_a_one_line_error(
    log_prior: list[float], log_tok: list[list[float]], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        rag_marginals(log_prior, log_tok)
