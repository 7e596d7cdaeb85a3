"""Answer scoring with the RAG marginal: picking a candidate's tokens out of a completion's
log-probabilities. Scoring against the real database, model and a local /v1/completions
server: tests/integration/test_scoring.py.
"""

from __future__ import annotations

from pgrag.answer.scoring import span_logprobs


def test_span_logprobs_picks_the_candidates_tokens() -> None:
    # "Answer: Yes" read as "Answer", ":", " Yes" and a generated " ." at offset 11.
    tokens = [(0, None), (6, -0.5), (7, -0.25), (11, -1.0)]
    assert span_logprobs(tokens, 7, 11) == [-0.25]
    # Two tokens for the candidate, the generated one left out.
    assert span_logprobs([(0, None), (7, -0.5), (9, -0.75), (11, -3.0)], 7, 11) == [-0.5, -0.75]
    # A token that straddles the boundary (":Y" then "es") is the answer's first token.
    assert span_logprobs([(0, None), (6, -0.5), (8, -0.25), (11, -1.0)], 7, 11) == [-0.5, -0.25]
    # No echo: only the generated token, or a missing log-probability.
    assert span_logprobs([(11, -1.0)], 7, 11) is None
    assert span_logprobs([(0, None), (7, None), (11, -1.0)], 7, 11) is None
