"""What ``ask`` returns: the answer, its citations and sources, and what checking it found."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgrag.answer.citations import Citation
from pgrag.answer.prompt import Source
from pgrag.answer.support import sentence_support


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
    # Per sentence: its citations, and how much of it its cited passage holds
    # (pgrag.answer.support); the mean over sentences (an uncited one counting 0) estimates
    # faithfulness.
    sentences: list[dict[str, Any]] = field(default_factory=list)
    faithfulness: float | None = None
    # The question's similarity to its nearest retrieved chunk (pgrag.retrieval.confidence), and the
    # threshold below which the answer is an abstention (None: no threshold) with its origin.
    confidence: float | None = None
    confidence_detail: dict[str, float] | None = None  # its parts: similarity, coverage
    threshold: float | None = None
    threshold_from: str | None = None
    # What counted the passages' token budget: the embedding model's or the generator's
    # tokenizer (PGRAG_LLM_TOKENIZER).
    tokenizer: str = ""
    # What went wrong around the answer without changing it (e.g. it could not be logged).
    warnings: list[str] = field(default_factory=list)
    # The query rewrite ask(rewrite=...) searched with (pgrag.retrieval.expansion): its method,
    # what the model wrote (a passage, or paraphrases) and whether it fell back to the
    # question as asked. None without one. (Not ``rewrite``: that is a follow-up's, below.)
    expansion: dict[str, Any] | None = None
    # What was searched, put in the prompt and logged: the question, or the standalone query a
    # follow-up was rewritten into (pgrag.answer.rewrite); how ("heuristic", "llm",
    # "unchanged"; None: no earlier turns); and the stored conversation the answer is a turn of.
    standalone_query: str | None = None
    rewrite: str | None = None
    conversation_id: str | None = None
    # The short answer (a name, number, date or phrase) the answer text explains; None when
    # the generator gave none, or abstained. And the fault ("no_content", "uncited") that made
    # ask try the model a second time (pgrag.answer.verdict), None when one try sufficed.
    short_answer: str | None = None
    retried: str | None = None
    # The sentence of the sources that holds the short answer, which the answer shows and
    # cites (pgrag.answer.evidence), with the numbers the model itself cited; None without a
    # short answer (the extractive reader, a prose reply, an abstention).
    evidence: dict[str, Any] | None = None

    @property
    def uncited(self) -> list[str]:
        """Sentences of the answer that cite no source."""
        return [s["text"] for s in self.sentences if not s["citations"]]

    def check_support(self) -> None:
        if self.abstained:
            self.sentences, self.faithfulness = [], None
            return
        scored, self.faithfulness = sentence_support(self.answer, self.sources)
        self.sentences = [s.to_dict() for s in scored]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "short_answer": self.short_answer,
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
            "warnings": self.warnings,
            "expansion": self.expansion,
            "standalone_query": self.standalone_query,
            "rewrite": self.rewrite,
            "conversation_id": self.conversation_id,
            "retried": self.retried,
            "evidence": self.evidence,
        }

    def checks(self) -> dict[str, Any]:
        """What checking the answer found, as recorded in ``pgrag.queries.checks``."""
        return {
            "confidence": self.confidence,
            "confidence_detail": self.confidence_detail,
            "threshold": self.threshold,
            "threshold_from": self.threshold_from,
            "invalid_citations": self.invalid_citations,
            **({"expansion": self.expansion} if self.expansion is not None else {}),
            "sentences": self.sentences,
            "faithfulness": self.faithfulness,
            "tokenizer": self.tokenizer,
            **({"retried": self.retried} if self.retried is not None else {}),
            **({"evidence": self.evidence} if self.evidence is not None else {}),
            **(
                {"rewrite": {"question": self.question, "method": self.rewrite}}
                if self.rewrite is not None
                else {}
            ),
        }
