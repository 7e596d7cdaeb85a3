"""Ask: retrieve, assemble the prompt, generate, check the citations, log.

Without an LLM endpoint configured the offline extractive reader answers. With one
(``PGRAG_LLM_BASE_URL`` or ``OPENAI_BASE_URL``), any OpenAI-compatible chat server does; with
``PGRAG_LLM_GGUF``, a local GGUF model through llama-cpp-python (:mod:`pgrag.local_llm`). Either way
the answer comes back with its citations resolved to chunks and documents, or as an
abstention with a reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.answer.citations import Citation, check_citations, says_unknown
from pgrag.answer.prompt import (
    ABSTAIN_TEXT,
    BASE_STOP,
    Source,
    build_base_prompt,
    build_messages,
    fit_budget,
    number_sources,
    render,
)
from pgrag.errors import InputError
from pgrag.retrieval.search import search

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.llm.chat import LLMConfig
    from pgrag.llm.local import LocalLLMConfig
    from pgrag.retrieval.rerank import Reranker

_ENV = object()  # "read the LLM endpoint from the environment"


@dataclass
class Answer:
    question: str
    answer: str
    abstained: bool
    reason: str | None
    citations: list[Citation]
    sources: list[Source]
    generator: str
    timings: dict[str, float]
    prompt: str
    invalid_citations: list[int] = field(default_factory=list)
    raw_answer: str | None = None
    query_id: int | None = None
    # Sources whose text reads like an instruction to the model: [{n, chunk_id, phrases}].
    flagged: list[dict[str, Any]] = field(default_factory=list)
    # Per sentence: its citations, and how much of it its cited passage holds (pgrag.support);
    # the mean over sentences (an uncited one counting 0) estimates faithfulness.
    sentences: list[dict[str, Any]] = field(default_factory=list)
    faithfulness: float | None = None
    # The question's similarity to its nearest retrieved chunk (pgrag.confidence), and the
    # threshold below which the answer is an abstention (None: no threshold) with its origin.
    confidence: float | None = None
    confidence_detail: dict[str, float] | None = None  # its parts: similarity, coverage
    threshold: float | None = None
    threshold_from: str | None = None
    # What counted the passages' token budget: the embedding model's or the generator's
    # tokenizer (PGRAG_LLM_TOKENIZER).
    tokenizer: str = ""

    @property
    def uncited(self) -> list[str]:
        """Sentences of the answer that cite no source."""
        return [s["text"] for s in self.sentences if not s["citations"]]

    def check_support(self) -> None:
        from pgrag.answer.support import sentence_support

        if self.abstained:
            self.sentences, self.faithfulness = [], None
            return
        scored, self.faithfulness = sentence_support(self.answer, self.sources)
        self.sentences = [s.to_dict() for s in scored]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "abstained": self.abstained,
            "reason": self.reason,
            "citations": [c.to_dict() for c in self.citations],
            "invalid_citations": self.invalid_citations,
            "sources": [s.to_dict() for s in self.sources],
            "generator": self.generator,
            "timings": self.timings,
            "query_id": self.query_id,
            "flagged": self.flagged,
            "sentences": self.sentences,
            "uncited": self.uncited,
            "faithfulness": self.faithfulness,
            "confidence": self.confidence,
            "confidence_detail": self.confidence_detail,
            "threshold": self.threshold,
            "threshold_from": self.threshold_from,
            "tokenizer": self.tokenizer,
        }

    def checks(self) -> dict[str, Any]:
        """What checking the answer found, as recorded in ``pgrag.queries.checks``."""
        return {
            "confidence": self.confidence,
            "confidence_detail": self.confidence_detail,
            "threshold": self.threshold,
            "threshold_from": self.threshold_from,
            "invalid_citations": self.invalid_citations,
            "sentences": self.sentences,
            "faithfulness": self.faithfulness,
            "tokenizer": self.tokenizer,
        }


def ask(
    db: Database,
    question: str,
    *,
    collection: str = "default",
    k: int = 8,
    budget_tokens: int = 1500,
    llm: LLMConfig | LocalLLMConfig | None | object = _ENV,
    on_token: Callable[[str], None] | None = None,
    log: bool = True,
    reranker: Reranker | None = None,
    principals: Sequence[str] | None = None,
    context: str = "chunk",
    min_confidence: float | None | object = _ENV,
) -> Answer:
    """Answer ``question`` from ``collection`` with numbered citations, or abstain.

    ``principals`` overrides the connection's for this question (see :func:`pgrag.search`):
    the answer is built only from passages they (or public) may read. ``context="section"``
    is small-to-big retrieval: each retrieved chunk is handed to the prompt as its whole
    section (:mod:`pgrag.sections`), within the same token budget.

    When the retrieval confidence (:mod:`pgrag.confidence`) is below ``min_confidence`` the
    answer is an abstention and no generator is asked. By default the threshold is
    ``PGRAG_MIN_CONFIDENCE``, else the one ``pgrag eval answers --save`` calibrated for the
    collection's model, else the bundled model's default; None turns it off."""
    from pgrag.llm.chat import ChatClient, LLMConfig
    from pgrag.llm.local import LocalChatClient, LocalLLMConfig, config_from_env

    if not question or not question.strip():
        raise InputError(
            'the question is empty; ask something, e.g. pgrag ask "How do refunds work?"'
        )
    if budget_tokens < 1:
        raise InputError(f"budget_tokens must be at least 1, got {budget_tokens}")
    if context not in ("chunk", "section"):
        raise InputError(f"context must be 'chunk' or 'section', got {context!r}")
    config = config_from_env() if llm is _ENV else llm
    assert config is None or isinstance(config, LLMConfig | LocalLLMConfig)
    from pgrag.retrieval.confidence import (
        collection_model,
        describe,
        parse_threshold,
        retrieval_confidence,
        threshold_for,
    )

    model = collection_model(db, collection)
    threshold_from: str | None
    if min_confidence is _ENV:
        threshold, threshold_from = threshold_for(model)
    elif min_confidence is None:
        threshold, threshold_from = None, None
    else:
        assert isinstance(min_confidence, int | float)
        threshold = parse_threshold(min_confidence, "min_confidence")
        threshold_from = "min_confidence"
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    client: ChatClient | LocalChatClient | None = None
    generator = "extractive"
    if isinstance(config, LocalLLMConfig):  # loaded first: a missing extra fails fast
        t_load = time.perf_counter()
        client = LocalChatClient(config)  # the model is loaded once per process
        timings["load_model_ms"] = round((time.perf_counter() - t_load) * 1000, 2)
        generator = config.label
    elif config is not None:
        client, generator = ChatClient(config), _describe(config)
    if principals is None:
        principals = db.principals
    results = search(
        db,
        question,
        collection=collection,
        k=k,
        reranker=reranker,
        timings=timings,
        principals=principals,
    )
    passages = results
    if context == "section":
        from pgrag.retrieval.sections import widen

        passages = widen(db, results, principals=principals)
    measured = retrieval_confidence(question, results, model[1] if model else db.embedder.distance)
    confidence = measured.value if measured else None
    doubtful = threshold is not None and confidence is not None and confidence < threshold
    # The budget is counted in the generator's own tokens when known.
    count, tokenizer = _budget_counter(db, config, client)
    kept = fit_budget(passages, budget_tokens, count)
    sources = number_sources(kept)
    messages = build_messages(question, sources)
    prompt = render(messages)

    t_gen = time.perf_counter()
    raw: str | None = None
    reason: str | None
    invalid: list[int] = []
    citations: list[Citation] = []
    if not sources:
        text, abstained, reason = ABSTAIN_TEXT, True, "nothing was retrieved for this question"
    elif doubtful:
        text, abstained = ABSTAIN_TEXT, True
        reason = describe(confidence, threshold, threshold_from)
    elif client is None:
        from pgrag.answer.reader import extractive_answer

        reader = extractive_answer(question, sources, db.embedder)
        checked = check_citations(reader.text, sources)
        text, abstained, reason = checked.text, reader.abstained, reader.reason
        citations = checked.citations
    else:
        if isinstance(config, LLMConfig) and config.template == "base":
            from pgrag.llm.completions import CompletionClient

            prompt = build_base_prompt(question, sources)
            raw = CompletionClient(config).complete(prompt, stop=BASE_STOP, on_token=on_token)
        else:
            raw = client.complete(messages, on_token=on_token)
        text, abstained, reason, citations, invalid = judge(raw, sources)
    timings["generate_ms"] = round((time.perf_counter() - t_gen) * 1000, 2)
    timings["total_ms"] = round((time.perf_counter() - t_start) * 1000, 2)

    answer = Answer(
        question=question,
        answer=text,
        abstained=abstained,
        reason=reason,
        citations=citations,
        sources=sources,
        generator=generator,
        timings=timings,
        prompt=prompt,
        invalid_citations=invalid,
        raw_answer=raw,
        flagged=_flagged(sources),
        confidence=confidence,
        confidence_detail=measured.to_dict() if measured else None,
        threshold=threshold,
        threshold_from=threshold_from,
        tokenizer=tokenizer,
    )
    answer.check_support()
    if log:
        answer.query_id = _log(db, collection, answer, results, principals)
    return answer


def judge(
    raw: str, sources: Sequence[Source]
) -> tuple[str, bool, str | None, list[Citation], list[int]]:
    """A model's answer checked against the sources it was given: (text, abstained, reason,
    citations, invalid citation numbers). Invalid citations are removed; an answer that says
    it does not know, or keeps no valid citation, is an abstention with the reason. An answer
    that says the sources do not cover one point but cites them for another is kept: it is a
    partial answer, and its cited sentences are checked like any other."""
    from pgrag.answer.citations import cited_numbers, without_citations
    from pgrag.answer.support import split_sentences

    checked = check_citations(raw, sources)
    declined = without_citations(raw).strip().rstrip(".").lower()
    given = {s.n for s in sources}
    # Grounded: a sentence that does not decline cites a source that was in the prompt.
    grounded = any(
        n in given
        for sentence in split_sentences(raw)
        if not says_unknown(sentence)
        for n in cited_numbers(sentence)
    )
    if declined == ABSTAIN_TEXT.rstrip(".").lower() or (says_unknown(raw) and not grounded):
        return ABSTAIN_TEXT, True, "the model said it does not know", [], checked.invalid
    if not checked.citations:
        return (
            ABSTAIN_TEXT,
            True,
            "the model's answer cites no source that was in the prompt",
            [],
            checked.invalid,
        )
    return checked.text, False, None, checked.citations, checked.invalid


def _budget_counter(
    db: Database, config: LLMConfig | LocalLLMConfig | None, client: Any
) -> tuple[Callable[[str], int], str]:
    """What counts the prompt's token budget, and its name: a local GGUF model's own
    tokenizer; the generator's tokenizer.json when ``PGRAG_LLM_TOKENIZER`` names one; else the
    embedding model's tokenizer."""
    from pgrag.llm.local import LocalLLMConfig

    if isinstance(config, LocalLLMConfig):
        return client.count_tokens, f"{config.label} (its own tokenizer)"
    if config is not None and config.tokenizer:
        from pgrag.text.tokens import generator_counter

        return generator_counter(config.tokenizer).count, config.tokenizer
    return db.embedder.tokens.count, f"embedding model {db.embedder.name}"


def _describe(config: LLMConfig) -> str:
    """The generator as the answer and the query log name it."""
    out = f"openai-compatible:{config.model}"
    if config.template == "base":
        out += " (base template, /v1/completions)"
    return out


def _flagged(sources: Sequence[Source]) -> list[dict[str, Any]]:
    from pgrag.answer.injection import instruction_like

    out = []
    for s in sources:
        phrases = instruction_like(f"{s.result.section or ''}\n{s.result.text}")
        if phrases:
            out.append({"n": s.n, "chunk_id": s.result.chunk_id, "phrases": phrases})
    return out


def _no_nul(value: Any) -> Any:
    """``value`` with NUL characters replaced in every string (jsonb cannot hold \u0000)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k: _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value


def _log(
    db: Database,
    collection: str,
    answer: Answer,
    results: list[Any],
    principals: Sequence[str] | None,
) -> int:
    from psycopg.types.json import Jsonb

    from pgrag.db.connect import transaction

    flags = {f["chunk_id"]: f["phrases"] for f in answer.flagged}
    # What the generator said; a model may emit a NUL (a byte token), which text cannot hold.
    logged = answer.raw_answer if answer.raw_answer is not None else answer.answer
    retrieved = [
        {
            "chunk_id": r.chunk_id,
            "rank": r.rank,
            "score": r.score,
            "vector_rank": r.vector_rank,
            "keyword_rank": r.keyword_rank,
            **({"instruction_like": flags[r.chunk_id]} if r.chunk_id in flags else {}),
        }
        for r in results
    ]
    from pgrag.db import principals as access

    with transaction(db) as conn:
        # Under the same principals as the search, and recording the ones in effect (None for
        # an unrestricted session): the log holds retrieved text, and is shown only to
        # sessions that may read all of what an entry was asked with.
        access.apply(conn, principals)
        row = conn.execute(
            "INSERT INTO pgrag.queries (collection_id, model_id, question, principals,"
            " retrieved, prompt, generator, answer, citations, abstained, abstain_reason,"
            " timings, checks)"
            " SELECT c.id, c.model_id, %(q)s, pgrag.session_principals(), %(retrieved)s,"
            " %(prompt)s,"
            " %(generator)s, %(answer)s, %(citations)s, %(abstained)s, %(reason)s, %(timings)s,"
            " %(checks)s"
            " FROM pgrag.collections c WHERE c.name = %(collection)s RETURNING id",
            {
                "collection": collection,
                "q": _no_nul(answer.question),
                "retrieved": Jsonb(retrieved),
                "prompt": _no_nul(answer.prompt),  # an agentic prompt holds the model's turns
                "generator": answer.generator,
                "answer": logged.replace("\x00", "\ufffd"),
                "citations": Jsonb([c.to_dict() for c in answer.citations]),
                "abstained": answer.abstained,
                "reason": answer.reason,
                "timings": Jsonb(answer.timings),
                "checks": Jsonb(_no_nul(answer.checks())),
            },
        ).fetchone()
    return int(row[0]) if row else 0
