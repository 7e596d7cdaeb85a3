"""Answer metrics: SQuAD exact match and token F1, and a RAG report over evaluated records.

``normalize`` is the official SQuAD v1.1 evaluation script's ``normalize_answer``: lowercase,
drop every ``string.punctuation`` character, drop the articles *a*, *an*, *the* as whole words,
collapse whitespace. ``exact_match`` and ``token_f1`` score a prediction against each reference
and keep the best, as that script does. One deliberate difference, taken from the SQuAD v2.0
script: when the prediction or the reference normalizes to no tokens at all, F1 is 1.0 if both
are empty and 0.0 otherwise (v1.1 would give 0.0 for empty against empty).

``rag_report`` averages over groups of records (answerable ones, unanswerable ones, ones with
claims...). A mean over an empty group is ``None``, never 0 or NaN: "nothing to measure" must
not read as a score. Each mean comes with the number of records it is over.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pgrag.errors import InputError

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize(text: str) -> str:
    """SQuAD v1.1 answer normalization: ``"The  Eiffel-Tower!"`` becomes ``"eiffeltower"``."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, references: str | Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized reference, else 0.0."""
    wanted = normalize(prediction)
    return max(float(wanted == normalize(ref)) for ref in _references(references, "exact_match"))


def token_f1(prediction: str, references: str | Sequence[str]) -> float:
    """The best SQuAD token F1 of ``prediction`` against any reference.

    Tokens are the whitespace-separated words of the normalized text; overlap counts each token
    as often as it occurs in both (a bag, not a set).
    """
    predicted = normalize(prediction).split()
    return max(
        _f1(predicted, normalize(ref).split()) for ref in _references(references, "token_f1")
    )


def _f1(predicted: list[str], reference: list[str]) -> float:
    if not predicted or not reference:
        return float(predicted == reference)
    same = sum((Counter(predicted) & Counter(reference)).values())
    if same == 0:
        return 0.0
    precision = same / len(predicted)
    recall = same / len(reference)
    return 2 * precision * recall / (precision + recall)


def _references(references: str | Sequence[str], caller: str) -> tuple[str, ...]:
    refs = (references,) if isinstance(references, str) else tuple(references)
    if not refs:
        raise InputError(f"{caller} needs at least one reference answer, got an empty list")
    return refs


@dataclass(frozen=True)
class RagRecord:
    """One evaluated question: what was retrieved, what was answered, and what was expected.

    ``answerable``: the collection holds an answer; an unanswerable question should be
    abstained on. ``abstained``: the system said it does not know (``Answer.abstained``).
    ``retrieved_ids`` / ``gold_ids``: ids of the contexts handed to the generator and of the
    contexts that hold the answer; order and duplicates do not matter.
    ``claims_supported`` / ``claims_total``: of the claims in the answer, how many the retrieved
    contexts support (judged by a person or a model); give both or neither. Counts rather than a
    ratio, so "no claims" (``claims_total=0``) stays distinct from "no claim supported".
    ``prediction`` / ``references``: the answer text and the accepted answers, for exact match
    and F1; a single string counts as one reference.
    """

    question: str
    answerable: bool
    abstained: bool
    retrieved_ids: Sequence[str] = ()
    gold_ids: Sequence[str] = ()
    claims_supported: int | None = None
    claims_total: int | None = None
    prediction: str | None = None
    references: Sequence[str] = ()

    def __post_init__(self) -> None:
        for name in ("retrieved_ids", "gold_ids"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise InputError(f"{name} must be a list of ids, not the string {value!r}")
            object.__setattr__(self, name, tuple(value))
        refs = self.references
        object.__setattr__(self, "references", (refs,) if isinstance(refs, str) else tuple(refs))
        supported, total = self.claims_supported, self.claims_total
        if (supported is None) != (total is None):
            raise InputError(
                "give both claims_supported and claims_total or neither"
                f" (question {self.question!r})"
            )
        if supported is not None and total is not None and not 0 <= supported <= total:
            raise InputError(
                f"claims_supported must be between 0 and claims_total, got {supported} of {total}"
                f" (question {self.question!r})"
            )


@dataclass(frozen=True)
class RagReport:
    """Means over groups of records; each is ``None`` when its group is empty.

    ``context_recall``: over answerable records that name gold ids (``with_gold``), the fraction
    of a record's gold ids found among its retrieved ids.
    ``faithfulness``: over records with at least one claim (``with_claims``), supported / total
    claims per record, averaged per record (not pooled).
    ``abstention_when_unanswerable``: the fraction of unanswerable records that abstained.
    ``false_refusal_rate``: the fraction of answerable records that abstained.
    ``exact_match`` / ``f1``: over answerable records that did not abstain and have a prediction
    and at least one reference (``scored_answers``). Refusals are left out here because
    ``false_refusal_rate`` already counts them; these two measure the answers that were given.
    """

    records: int
    answerable: int
    unanswerable: int
    context_recall: float | None
    with_gold: int
    faithfulness: float | None
    with_claims: int
    abstention_when_unanswerable: float | None
    false_refusal_rate: float | None
    exact_match: float | None
    f1: float | None
    scored_answers: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rag_report(records: Iterable[RagRecord]) -> RagReport:
    """Context recall, faithfulness, abstention, false refusals, EM and F1 over ``records``."""
    records = list(records)
    answerable = [r for r in records if r.answerable]
    unanswerable = [r for r in records if not r.answerable]
    with_gold = [r for r in answerable if r.gold_ids]
    faithful = [f for r in records if (f := _faithfulness(r)) is not None]
    scored = [
        (r.prediction, r.references)
        for r in answerable
        if not r.abstained and r.prediction is not None and r.references
    ]
    return RagReport(
        records=len(records),
        answerable=len(answerable),
        unanswerable=len(unanswerable),
        context_recall=_mean([_context_recall(r) for r in with_gold]),
        with_gold=len(with_gold),
        faithfulness=_mean(faithful),
        with_claims=len(faithful),
        abstention_when_unanswerable=_mean([float(r.abstained) for r in unanswerable]),
        false_refusal_rate=_mean([float(r.abstained) for r in answerable]),
        exact_match=_mean([exact_match(pred, refs) for pred, refs in scored]),
        f1=_mean([token_f1(pred, refs) for pred, refs in scored]),
        scored_answers=len(scored),
    )


def _context_recall(record: RagRecord) -> float:
    gold = set(record.gold_ids)
    return len(gold & set(record.retrieved_ids)) / len(gold)


def _faithfulness(record: RagRecord) -> float | None:
    if record.claims_supported is None or not record.claims_total:
        return None  # no judged claims: nothing to be faithful about
    return record.claims_supported / record.claims_total


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def auroc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """The area under the ROC curve of ``scores`` for telling positives from negatives: the
    chance that a random positive scores above a random negative, ties counting one half
    (Mann-Whitney U). ``None`` when either class is empty."""
    if len(scores) != len(positive):
        raise InputError(f"auroc: {len(scores)} scores but {len(positive)} labels")
    ranked = sorted(zip(scores, positive, strict=True), key=lambda t: t[0])
    n_pos = sum(1 for p in positive if p)
    n_neg = len(positive) - n_pos
    if not n_pos or not n_neg:
        return None
    # Mid-ranks over runs of tied scores, then the rank sum of the positives.
    rank_sum, i = 0.0, 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid = (i + 1 + j) / 2  # ranks i+1 .. j
        rank_sum += mid * sum(1 for t in ranked[i:j] if t[1])
        i = j
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
