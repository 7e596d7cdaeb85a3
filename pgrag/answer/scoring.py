"""Scoring candidate answers ("Yes" / "No", "30 days" / "14 days") with the RAG marginal.

For a question x: search; for each retrieved passage z_i ask the generator, in a one-passage
plain-text prompt that ends in ``Answer:``, for the log-probabilities of each candidate's
tokens as the continuation (``/v1/completions`` with ``echo``, or in-process from a local GGUF
model, :mod:`pgrag.llm.local_logprobs`); weigh the passages by the
retriever's p(z_i | x) (``SearchResult.probability``, renormalised over the passages used) and
combine with :func:`pgrag.answer.marginals.rag_marginals`:

- RAG-Sequence: one passage explains the whole answer, p(y|x) = sum_i p(z_i|x) p(y|x, z_i);
- RAG-Token: each token of the answer may lean on another passage.

Both are log-likelihoods; ``probability`` normalises RAG-Sequence over the candidates (the
model's preference among them, not a calibrated truth value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pgrag.answer.marginals import logsumexp, rag_marginals
from pgrag.answer.prompt import Source, fenced
from pgrag.errors import ConfigError, GenerationError, InputError, PgragError
from pgrag.llm.chat import LLMConfig
from pgrag.llm.completions import NO_LOGPROBS, CompletionClient
from pgrag.llm.local import LocalChatClient, LocalLLMConfig, config_from_settings
from pgrag.retrieval.search import SearchResult, search

if TYPE_CHECKING:
    from pgrag.db.connect import Database


@dataclass
class CandidateScore:
    text: str
    rag_sequence: float  # log p(y | x)
    rag_token: float | None  # None when passages tokenised the answer differently
    probability: float  # RAG-Sequence, normalised over the candidates
    token_probability: float | None  # RAG-Token, normalised over the candidates

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PassageScore:
    rank: int
    chunk_id: int
    source: str
    title: str | None
    section: str | None
    prior: float  # p(z | x), renormalised over the passages scored
    # Per candidate: the log-probabilities of its tokens given this passage.
    token_logprobs: dict[str, list[float]] = field(default_factory=dict)

    def loglik(self, candidate: str) -> float:
        return math.fsum(self.token_logprobs[candidate])

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["loglik"] = {c: self.loglik(c) for c in self.token_logprobs}
        return out


@dataclass
class Scores:
    question: str
    candidates: list[CandidateScore]
    passages: list[PassageScore]
    generator: str

    @property
    def best(self) -> str:
        return max(self.candidates, key=lambda c: c.rag_sequence).text

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "best": self.best,
            "candidates": [c.to_dict() for c in self.candidates],
            "passages": [p.to_dict() for p in self.passages],
            "generator": self.generator,
        }


def passage_prompt(question: str, result: SearchResult) -> str:
    """The one-passage plain-text prompt a candidate answer continues (after a space)."""
    return (
        "Answer the question using only the source.\n\n"
        f"Source:\n\n{fenced([Source(n=1, result=result)])}\n\n"
        f"Question: {question.strip()}\nAnswer:"
    )


def continuation_logprobs(client: CompletionClient, prefix: str, continuation: str) -> list[float]:
    """Log-probabilities of the tokens of ``continuation`` after ``prefix``, from the server."""
    tokens = client.prompt_logprobs(prefix + continuation)
    picked = span_logprobs(tokens, len(prefix), len(prefix) + len(continuation))
    if picked is None:
        raise GenerationError(f"the LLM endpoint {client.url} {NO_LOGPROBS}")
    return picked


def span_logprobs(
    tokens: Sequence[tuple[int, float | None]], start: int, end: int
) -> list[float] | None:
    """The log-probabilities of the echoed tokens (``(text_offset, logprob)``) that start in
    ``[start, end)``, plus the token before them when it straddles ``start`` (the tokenizer
    merged the prompt's last characters with the answer's first). None when no token starts
    in the span or one of them has no log-probability: the server did not echo the prompt."""
    first = next((i for i, (offset, _) in enumerate(tokens) if offset >= start), None)
    if first is None or tokens[first][0] >= end:
        return None
    if tokens[first][0] > start and first > 0:
        first -= 1
    picked = [value for offset, value in tokens[first:] if offset < end]
    if any(value is None for value in picked):
        return None
    return [float(v) for v in picked if v is not None]


def _check_candidates(candidates: Sequence[str]) -> list[str]:
    texts = [c.strip() for c in candidates]
    if len(texts) < 2:
        raise InputError(
            "scoring needs at least two candidate answers to compare, e.g."
            " --candidate Yes --candidate No"
        )
    if any(not t for t in texts):
        raise InputError("a candidate answer is empty; give each --candidate some text")
    if len(set(texts)) != len(texts):
        raise InputError(f"the candidate answers repeat one another: {texts}; give distinct ones")
    return texts


def score_answers(
    db: Database,
    question: str,
    candidates: Sequence[str],
    *,
    collection: str = "default",
    k: int = 5,
    principals: Sequence[str] | None = None,
    llm: LLMConfig | LocalLLMConfig | Literal["configured"] | None = "configured",
) -> Scores:
    """Score ``candidates`` as answers to ``question`` with the RAG marginal over the top
    ``k`` passages (see the module). Needs token log-probabilities: a local GGUF model
    computes them in-process; an endpoint must return them for ``/v1/completions`` with
    ``echo`` (vLLM does). ``llm`` is by default the model the connection's settings name
    (``db.settings``: ``PGRAG_LLM_GGUF`` or ``PGRAG_LLM_BASE_URL``...)."""
    if not question or not question.strip():
        raise InputError('the question is empty; e.g. pgrag score "Is the refund window 30 days?"')
    texts = _check_candidates(candidates)
    config = config_from_settings(db.settings) if llm == "configured" else llm
    if config is None:
        raise ConfigError(
            "scoring answers needs a model that returns token log-probabilities: set"
            " PGRAG_LLM_GGUF to a local GGUF model, or PGRAG_LLM_BASE_URL to an"
            " OpenAI-compatible server with /v1/completions and echo (vLLM)"
        )
    if not isinstance(config, LLMConfig | LocalLLMConfig):
        raise InputError(
            f"llm must be an LLMConfig, a LocalLLMConfig, None or 'configured', got {config!r}"
        )
    score = _scorer(config)  # a local model is loaded before the search
    results = search(
        db,
        question,
        collection=collection,
        k=k,
        principals=db.principals if principals is None else principals,
    )
    if not results:
        raise InputError(
            f"nothing in collection {collection!r} was retrieved for this question, so there"
            " is nothing to score the answers against"
        )
    probabilities = [r.probability for r in results]
    total = math.fsum(p for p in probabilities if p is not None)
    if any(p is None or p <= 0 for p in probabilities) or total <= 0:
        raise PgragError("the search returned passages without probabilities; cannot weigh them")
    passages = []
    for r in results:
        prefix = passage_prompt(question, r)
        rows = score(prefix, [" " + t for t in texts])
        passages.append(
            PassageScore(
                rank=r.rank,
                chunk_id=r.chunk_id,
                source=r.source,
                title=r.title,
                section=r.section,
                prior=(r.probability or 0.0) / total,
                token_logprobs=dict(zip(texts, rows, strict=True)),
            )
        )
    log_prior = [math.log(p.prior) for p in passages]
    scored = []
    for t in texts:
        rows = [p.token_logprobs[t] for p in passages]
        if len({len(row) for row in rows}) == 1:
            sequence, token = rag_marginals(log_prior, rows)
        else:  # RAG-Token needs the same tokens under every passage
            pairs = zip(log_prior, rows, strict=True)
            sequence = logsumexp([lp + math.fsum(row) for lp, row in pairs])
            token = None
        scored.append((t, sequence, token))
    seq_norm = logsumexp([s for _, s, _ in scored])
    tokens_known = all(tok is not None for _, _, tok in scored)
    tok_norm = logsumexp([tok for _, _, tok in scored if tok is not None])
    return Scores(
        question=question,
        candidates=[
            CandidateScore(
                text=t,
                rag_sequence=s,
                rag_token=tok,
                probability=math.exp(s - seq_norm),
                token_probability=(
                    math.exp(tok - tok_norm) if tokens_known and tok is not None else None
                ),
            )
            for t, s, tok in scored
        ],
        passages=passages,
        generator=(
            config.label
            if isinstance(config, LocalLLMConfig)
            else f"openai-compatible:{config.model}"
        ),
    )


def _scorer(config: LLMConfig | LocalLLMConfig) -> Callable[[str, list[str]], list[list[float]]]:
    """What gives the log-probabilities of each continuation's tokens after a prompt."""
    if isinstance(config, LocalLLMConfig):
        return LocalChatClient(config).continuation_logprobs
    client = CompletionClient(config)
    return lambda prefix, continuations: [
        continuation_logprobs(client, prefix, c) for c in continuations
    ]
