"""Scoring an answer with the RAG marginal (Lewis et al., 2020, "Retrieval-Augmented
Generation for Knowledge-Intensive NLP Tasks", section 2.1).

With retrieved passages z_1..z_k, the retriever's log-probabilities ``log_prior[i]`` =
log p(z_i | x), and the generator's per-token log-probabilities ``log_tok[i][t]`` =
log p(y_t | x, z_i, y_<t) of a candidate answer y (for example "Yes" or "No", scored per
passage with an endpoint that returns token log-probabilities):

- RAG-Sequence: one passage explains the whole answer,
  log p(y | x) = logsumexp_i (log_prior[i] + sum_t log_tok[i][t]);
- RAG-Token: each token may come from another passage,
  log p(y | x) = sum_t logsumexp_i (log_prior[i] + log_tok[i][t]).

Both are computed with log-sum-exp (the largest term factored out), so log-probabilities of
-1,000 or less neither underflow nor lose precision. The prior is used as given: pass
log-softmax scores (``pgrag.search``'s ``probability``, logged) for a distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pgrag.errors import InputError
from pgrag.llm.chat import logsumexp as logsumexp  # re-exported: pgrag.answer.scoring


def rag_marginals(
    log_prior: Sequence[float], log_tok: Sequence[Sequence[float]]
) -> tuple[float, float]:
    """(RAG-Sequence, RAG-Token) log-likelihoods of one answer (see the module)."""
    k = len(log_prior)
    if k == 0:
        raise InputError("rag_marginals needs at least one passage (log_prior is empty)")
    if len(log_tok) != k:
        raise InputError(
            f"log_tok has {len(log_tok)} rows but log_prior has {k}: one row of token"
            " log-probabilities per passage"
        )
    lengths = {len(row) for row in log_tok}
    if len(lengths) != 1 or 0 in lengths:
        raise InputError(
            "every row of log_tok must score the same answer tokens (rows of equal,"
            f" non-zero length); got lengths {sorted(lengths)}"
        )
    for value in [*log_prior, *(v for row in log_tok for v in row)]:
        if math.isnan(value) or value > 0:
            raise InputError(f"log-probabilities must be <= 0 and not NaN, got {value}")
    (length,) = lengths
    sequence = logsumexp([p + math.fsum(row) for p, row in zip(log_prior, log_tok, strict=True)])
    token = math.fsum(
        logsumexp([p + row[t] for p, row in zip(log_prior, log_tok, strict=True)])
        for t in range(length)
    )
    return sequence, token
