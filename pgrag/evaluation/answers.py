"""`pgrag eval answers`: how good and how honest the answers are, on SQuAD-style data.

Half of the paragraphs (chosen with a seeded shuffle) are indexed and the other half withheld,
so every question is either *answerable* (its paragraph is in the collection) or
*unanswerable* (it is not; a neighbouring paragraph of the same article may still be, which
makes these hard cases). A sample of each goes through ``ask`` with the threshold off, and:

- exact match and token F1 (SQuAD normalisation) over the answered answerable questions, and
  "answer in text": the share whose answer contains an accepted answer (an extractive reader
  answers with whole sentences, so its exact match is near zero by design);
- citation accuracy: of the answered answerable questions, the share whose first citation is
  the gold paragraph (and whose citations include it at all);
- abstention: the share of unanswerable questions abstained on, and the false-refusal rate
  (answerable ones abstained on), as the generator decides alone;
- the AUROC of the retrieval confidence (:mod:`pgrag.retrieval.confidence`) for telling
  answerable from unanswerable questions;
- a threshold, calibrated on one half of the questions as the confidence below which at most
  ``max_false_refusal`` of the answerable ones are refused -- counting those the generator
  refused itself, so a generator that refuses more gets a lower threshold -- and both rates
  with it on the *other* half.

``save=True`` records the threshold on the collection's active model, where ``ask`` reads it.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.answer.ask import ask
from pgrag.answer.citations import without_citations
from pgrag.answer.verdict import AGAIN
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import InputError, PgragError
from pgrag.evaluation.answer_metrics import auroc, exact_match, normalize, token_f1
from pgrag.evaluation.datasets import AnswerDataset
from pgrag.evaluation.metrics import percentile
from pgrag.ingest.loaders import from_text
from pgrag.ingest.pipeline import ingest_documents
from pgrag.llm.chat import LLMConfig
from pgrag.llm.configured import label as generator_label

if TYPE_CHECKING:
    from pgrag.answer.result import Answer
    from pgrag.db.connect import Database
    from pgrag.evaluation.judge import Judge
    from pgrag.llm.local import LocalLLMConfig

Q = queries.load(__name__)


@dataclass
class Case:
    """One question as asked and answered."""

    qid: str
    question: str
    answerable: bool
    gold: str  # the paragraph (document id) that holds the answer
    references: list[str]
    answer: str
    abstained: bool
    reason: str | None
    cited: list[str]  # paragraphs cited, in order of first use
    given: list[str]  # paragraphs in the prompt, by source number
    confidence: float | None
    ms: float
    calibration: bool  # in the half the threshold is calibrated on
    short_answer: str | None = None
    invalid: list[int] = field(default_factory=list)  # numbers cited that were not given
    sentences: int = 0  # sentences of the answer (0 when abstained)
    uncited: int = 0  # of them, those that cite no source
    retried: str | None = None  # the fault that made ask try the model again
    raw: str | None = None  # the generator's reply as it came (None: the extractive reader)
    support: float | None = None  # the lexical faithfulness estimate (pgrag.answer.support)
    judgement: dict[str, Any] | None = None  # the judge's metrics (pgrag.evaluation.judge)
    ranked: list[str] = field(default_factory=list)  # paragraphs in the prompt, by rank
    # The paragraphs the model itself cited, where ask cites the sentence that holds the short
    # answer instead (answer.evidence); None when the answer's citations are the model's.
    model_cited: list[str] | None = None


@dataclass
class GeneratorResult:
    generator: str
    answered: int  # answerable questions answered
    exact_match: float | None  # of the short answer (the answer text where none was given)
    f1: float | None
    answer_in_text: float | None
    short_answer_rate: float | None  # answered answerable questions with a short answer
    citation_accuracy: float | None  # first citation is the gold paragraph
    citation_includes_gold: float | None
    gold_in_prompt: float | None  # over all answerable questions
    abstain_when_unanswerable: float | None
    false_refusal_rate: float | None
    confidence_auroc: float | None
    threshold: float | None
    # On the held-out half: the generator alone, then with the threshold as well.
    heldout_abstain_when_unanswerable: float | None
    heldout_false_refusal_rate: float | None
    threshold_abstain_when_unanswerable: float | None
    threshold_false_refusal_rate: float | None
    p50_ms: float
    # What the checks found in the replies, over every question asked: replies citing a number
    # that was not in the prompt, sentences of answers citing nothing, replies asked for again
    # (only markers, or no valid citation), and those still refused after the second try.
    invalid_citation_rate: float | None = None
    uncited_sentence_rate: float | None = None
    retry_rate: float | None = None
    refused_after_retry: int = 0
    # Judge-based (pgrag.evaluation.judge), over the judged questions: faithfulness and answer
    # relevance of the answers given, context precision and recall of the answerable ones.
    judged: int = 0
    judge_errors: int = 0  # judged questions the judge failed on (its error is in the case)
    judge_faithfulness: float | None = None
    judge_answer_relevance: float | None = None
    judge_context_precision: float | None = None
    judge_context_recall: float | None = None
    lexical_support: float | None = None  # the lexical estimate over the same answers
    # Citation accuracy had the answers cited what the model wrote (answer.evidence's
    # model_cited where ask grounded the short answer): the grounding's effect.
    model_citation_accuracy: float | None = None
    cases: list[Case] = field(default_factory=list)

    def to_dict(self, with_cases: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not with_cases:
            out.pop("cases")
        return out


@dataclass
class AnswerReport:
    dataset: str
    collection: str
    indexed: int
    withheld: int
    answerable: int
    unanswerable: int
    k: int
    max_false_refusal: float
    results: list[GeneratorResult]
    saved_threshold: float | None = None
    errors: dict[str, str] = field(default_factory=dict)  # generators that could not finish

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["results"] = [r.to_dict() for r in self.results]
        return out

    def table(self) -> str:
        lines = [
            f"pgrag eval answers: {self.dataset} in collection {self.collection}"
            f" ({self.indexed} paragraphs indexed, {self.withheld} withheld)",
            f"{self.answerable} answerable + {self.unanswerable} unanswerable questions,"
            f" k={self.k}",
            "",
        ]
        rows: list[tuple[str, str]] = [
            ("short answer exact match", "exact_match"),
            ("short answer token F1", "f1"),
            ("answer in text (answered)", "answer_in_text"),
            ("short answer given (answered)", "short_answer_rate"),
            ("citation accuracy (first = gold)", "citation_accuracy"),
            ("citations include gold", "citation_includes_gold"),
            ("  the model's own citation first", "model_citation_accuracy"),
            ("gold paragraph in prompt", "gold_in_prompt"),
            ("abstain | unanswerable", "abstain_when_unanswerable"),
            ("false refusal | answerable", "false_refusal_rate"),
            ("confidence AUROC", "confidence_auroc"),
            (f"threshold (<= {self.max_false_refusal:.0%} refused)", "threshold"),
            ("held-out abstain | unanswerable", "heldout_abstain_when_unanswerable"),
            ("  with threshold", "threshold_abstain_when_unanswerable"),
            ("held-out false refusal", "heldout_false_refusal_rate"),
            ("  with threshold", "threshold_false_refusal_rate"),
            ("invalid citation | replies", "invalid_citation_rate"),
            ("uncited sentences | sentences", "uncited_sentence_rate"),
            ("asked again | questions", "retry_rate"),
            ("refused after asking again", "refused_after_retry"),
            ("judged questions", "judged"),
            ("judge: faithfulness", "judge_faithfulness"),
            ("  lexical support, same answers", "lexical_support"),
            ("judge: answer relevance", "judge_answer_relevance"),
            ("judge: context precision", "judge_context_precision"),
            ("judge: context recall", "judge_context_recall"),
            ("p50 ms per question", "p50_ms"),
        ]
        width = max([10, *(len(r.generator) for r in self.results)])
        head = f"{'':34}" + "".join(f"{r.generator:>{width + 2}}" for r in self.results)
        lines.append(head)
        for label, key in rows:
            cells = []
            for r in self.results:
                value = getattr(r, key)
                cells.append(f"{'-' if value is None else f'{value:.4g}':>{width + 2}}")
            lines.append(f"{label:34}" + "".join(cells))
        if self.saved_threshold is not None:
            lines.append(f"\nsaved threshold {self.saved_threshold:.4g} on the collection's model")
        for label, error in self.errors.items():
            lines.append(f"\n{label}: {error}")
        return "\n".join(lines)


def collection_name(dataset: AnswerDataset, seed: int, withhold: float) -> str:
    name = re.sub(r"[^A-Za-z0-9_.:-]+", "-", dataset.retrieval.name).strip("-") or "dataset"
    return f"eval-answers-{name}-s{seed}-w{round(withhold * 100)}"


def split_paragraphs(doc_ids: Sequence[str], withhold: float, seed: int) -> set[str]:
    """The withheld paragraphs: a seeded ``withhold`` share of ``doc_ids``, whatever their order."""
    ordered = sorted(doc_ids)
    random.Random(seed).shuffle(ordered)
    return set(ordered[: round(len(ordered) * withhold)])


def evaluate_answers(
    db: Database,
    dataset: AnswerDataset,
    *,
    questions: int = 200,
    withhold: float = 0.5,
    seed: int = 0,
    k: int = 8,
    budget_tokens: int = 1500,
    llms: Sequence[LLMConfig | LocalLLMConfig | None] = (None,),
    collection: str | None = None,
    max_false_refusal: float = 0.1,
    save: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    style: str = "short",
    judge: Judge | None = None,
    judge_sample: int | None = None,
) -> AnswerReport:
    """Index part of ``dataset``, ask ``questions`` answerable and as many unanswerable
    questions with each generator (None: the extractive reader), and measure the answers.

    With ``judge``, the first ``judge_sample`` questions of each kind (all when None) are
    also judged (:mod:`pgrag.evaluation.judge`) for every generator."""
    data = dataset.retrieval
    if not 0 < withhold < 1:
        raise InputError(f"--withhold must be between 0 and 1 (a share), got {withhold}")
    if not 0 <= max_false_refusal < 1:
        raise InputError(f"--max-false-refusal must be in [0, 1), got {max_false_refusal}")
    if questions < 2:
        raise InputError(f"--questions must be at least 2 (per group), got {questions}")
    withheld = split_paragraphs(list(data.corpus), withhold, seed)
    indexed = [d for d in data.corpus.values() if d.id not in withheld]
    if not indexed or not withheld:
        raise InputError(
            f"dataset {data.name!r} has {len(data.corpus)} paragraph(s): too few to withhold a"
            " share and index the rest"
        )
    collection = collection or collection_name(dataset, seed, withhold)
    sources = [f"{data.name}:{d.id}" for d in indexed]
    _check_collection(db, collection, sources)  # before writing anything into it

    def on_plan(total: int) -> None:
        if progress:
            progress("ingest", 0, total)

    ingest_documents(
        db,
        (
            from_text(f"{data.name}:{d.id}", d.text, title=d.title, metadata={"doc_id": d.id})
            for d in indexed
        ),
        collection=collection,
        on_plan=on_plan,
    )
    _check_collection(db, collection, sources)

    cases = _sample(dataset, withheld, questions, seed)
    answerable = sum(1 for c in cases if c[2])
    report = AnswerReport(
        dataset=data.name,
        collection=collection,
        indexed=len(indexed),
        withheld=len(withheld),
        answerable=answerable,
        unanswerable=len(cases) - answerable,
        k=k,
        max_false_refusal=max_false_refusal,
        results=[],
    )
    prefix = f"{data.name}:"
    if judge_sample is not None and judge_sample < 1:
        raise InputError(f"--judge-sample must be at least 1, got {judge_sample}")
    for llm in llms:
        label = _label(llm)
        done: list[Case] = []
        for i, (qid, gold, is_answerable, calibration) in enumerate(cases):
            try:
                case = _ask_one(
                    db,
                    dataset,
                    qid,
                    gold,
                    is_answerable,
                    calibration,
                    collection=collection,
                    k=k,
                    budget_tokens=budget_tokens,
                    llm=llm,
                    prefix=prefix,
                    style=style,
                    judge=judge if _judged(i, answerable, judge_sample) else None,
                )
            except PgragError as err:
                if llm is None:
                    raise
                # An endpoint that fails (unreachable, out of credit) must not cost the
                # results already measured: report them, and this generator's error.
                report.errors[label] = (
                    f"stopped after {i} of {len(cases)} questions (its column is over those): {err}"
                )
                break
            done.append(case)
            if progress and (i % 20 == 0 or i == len(cases) - 1):
                progress(label, i + 1, len(cases))
        if done:
            report.results.append(_measure(label, done, max_false_refusal))
    if save:
        threshold = report.results[0].threshold if report.results else None
        if threshold is None:
            raise InputError(
                "no threshold could be calibrated: no answerable question got a confidence"
            )
        save_threshold(db, collection, threshold)
        report.saved_threshold = threshold
    return report


def _judged(i: int, answerable: int, sample: int | None) -> bool:
    """Whether the ``i``-th case (answerable ones first) is among the judged sample."""
    return sample is None or (i if i < answerable else i - answerable) < sample


def _label(llm: LLMConfig | LocalLLMConfig | None) -> str:
    return "extractive" if llm is None else generator_label(llm)


def _check_collection(db: Database, collection: str, sources: list[str]) -> None:
    """The collection must hold nothing but the indexed paragraphs (``sources``), or an
    unanswerable question might be answerable after all."""
    with transaction(db) as conn:
        row = conn.execute(
            Q.foreign_documents, {"collection": collection, "sources": sources}
        ).fetchone()
    other = int(row[0]) if row else 0
    if other:
        raise InputError(
            f"collection {collection!r} holds {other} documents that are not this split's"
            " paragraphs (another file, seed or --withhold); pass another --collection, or"
            f" delete that collection first (`pgrag collections delete {collection} --yes`)"
        )


def _sample(
    dataset: AnswerDataset, withheld: set[str], n: int, seed: int
) -> list[tuple[str, str, bool, bool]]:
    """(question id, gold paragraph, answerable, in the calibration half), ``n`` of each kind
    (fewer if the dataset has fewer), each kind split evenly between the two halves."""
    data = dataset.retrieval
    groups: dict[bool, list[tuple[str, str]]] = {True: [], False: []}
    for qid in sorted(data.queries):
        gold = next(iter(data.qrels[qid]))
        if gold in withheld:
            groups[False].append((qid, gold))
        elif dataset.answers.get(qid):
            groups[True].append((qid, gold))
    out = []
    rng = random.Random(seed)
    for is_answerable in (True, False):
        chosen = rng.sample(groups[is_answerable], min(n, len(groups[is_answerable])))
        for i, (qid, gold) in enumerate(chosen):
            out.append((qid, gold, is_answerable, i % 2 == 0))
    if not groups[True] or not groups[False]:
        raise InputError(
            f"dataset {data.name!r} gives no {'answerable' if not groups[True] else 'unanswerable'}"
            " questions for this split; use a larger dataset"
        )
    return out


def _ask_one(
    db: Database,
    dataset: AnswerDataset,
    qid: str,
    gold: str,
    is_answerable: bool,
    calibration: bool,
    *,
    collection: str,
    k: int,
    budget_tokens: int,
    llm: LLMConfig | LocalLLMConfig | None,
    prefix: str,
    style: str = "short",
    judge: Judge | None = None,
) -> Case:
    question = dataset.retrieval.queries[qid]
    t = time.perf_counter()
    answer: Answer = ask(
        db,
        question,
        collection=collection,
        k=k,
        budget_tokens=budget_tokens,
        llm=llm,
        log=False,
        min_confidence=None,
        style=style,
    )
    ms = (time.perf_counter() - t) * 1000

    def paragraph(source: str) -> str:
        return source.removeprefix(prefix)

    by_n = {s.n: s for s in answer.sources}
    cited = []
    for c in answer.citations:
        if paragraph(c.source) not in cited:
            cited.append(paragraph(c.source))
    return Case(
        qid=qid,
        question=question,
        answerable=is_answerable,
        gold=gold,
        references=dataset.answers.get(qid, []),
        answer=answer.answer,
        abstained=answer.abstained,
        reason=answer.reason,
        cited=cited,
        given=[paragraph(s.result.source) for s in answer.sources],
        ranked=[
            paragraph(s.result.source) for s in sorted(answer.sources, key=lambda s: s.result.rank)
        ],
        confidence=answer.confidence,
        ms=round(ms, 2),
        calibration=calibration,
        short_answer=answer.short_answer,
        invalid=list(answer.invalid_citations),
        sentences=len(answer.sentences),
        uncited=len(answer.uncited),
        retried=answer.retried,
        raw=answer.raw_answer,
        support=answer.faithfulness,
        model_cited=None
        if answer.evidence is None
        else list(
            dict.fromkeys(
                paragraph(by_n[n].result.source)
                for n in answer.evidence["model_cited"]
                if n in by_n
            )
        ),
        judgement=None
        if judge is None
        else judge.judge(answer, dataset.answers.get(qid, []) if is_answerable else []).to_dict(),
    )


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def calibrate(
    confidences: Sequence[float], max_false_refusal: float, refused: int = 0
) -> float | None:
    """The highest threshold below which at most ``max_false_refusal`` of the answerable
    questions are refused: ``confidences`` are those the generator answered, ``refused`` how
    many more it refused itself (they count against the share, so the threshold refuses
    only what is left of it: nothing when the generator alone refused more). None without
    any confidence."""
    if refused < 0:
        raise InputError(f"refused must be a count of questions, got {refused}")
    ordered = sorted(c for c in confidences if math.isfinite(c))
    if not ordered:
        return None
    # (+1e-9: 0.29 * 100 is 28.999… in floating point, and 29 of 100 may be refused)
    allowed = math.floor(max_false_refusal * (len(ordered) + refused) + 1e-9) - refused
    return ordered[min(max(allowed, 0), len(ordered) - 1)]


def _measure(label: str, cases: list[Case], max_false_refusal: float) -> GeneratorResult:
    answerable = [c for c in cases if c.answerable]
    unanswerable = [c for c in cases if not c.answerable]
    answered = [c for c in answerable if not c.abstained]
    scored = [c for c in answered if c.references]
    plain = {c.qid: without_citations(c.answer).strip() for c in answered}
    # Exact match and F1 score the short answer; where none was given, the answer text.
    short = {c.qid: c.short_answer or plain[c.qid] for c in answered}
    in_text = {c.qid: normalize(f"{c.short_answer or ''} {plain[c.qid]}") for c in answered}
    sentences = sum(c.sentences for c in cases)
    with_conf = [c for c in cases if c.confidence is not None]
    calibrating = [c for c in answerable if c.calibration and c.confidence is not None]
    threshold = calibrate(
        [c.confidence for c in calibrating if not c.abstained and c.confidence is not None],
        max_false_refusal,
        refused=sum(c.abstained for c in calibrating),
    )
    held = [c for c in cases if not c.calibration]

    def refused(c: Case, t: float | None) -> bool:
        low = t is not None and c.confidence is not None and c.confidence < t
        return c.abstained or low

    def rate(group: list[Case], t: float | None) -> float | None:
        return _mean([float(refused(c, t)) for c in group])

    held_answerable = [c for c in held if c.answerable]
    held_unanswerable = [c for c in held if not c.answerable]
    return GeneratorResult(
        generator=label,
        answered=len(answered),
        exact_match=_mean([exact_match(short[c.qid], c.references) for c in scored]),
        f1=_mean([token_f1(short[c.qid], c.references) for c in scored]),
        answer_in_text=_mean(
            [
                float(any(normalize(r) and normalize(r) in in_text[c.qid] for r in c.references))
                for c in scored
            ]
        ),
        short_answer_rate=_mean([float(c.short_answer is not None) for c in answered]),
        citation_accuracy=_mean([float(bool(c.cited) and c.cited[0] == c.gold) for c in answered]),
        citation_includes_gold=_mean([float(c.gold in c.cited) for c in answered]),
        gold_in_prompt=_mean([float(c.gold in c.given) for c in answerable]),
        abstain_when_unanswerable=_mean([float(c.abstained) for c in unanswerable]),
        false_refusal_rate=_mean([float(c.abstained) for c in answerable]),
        confidence_auroc=_round(
            auroc(
                [c.confidence for c in with_conf if c.confidence is not None],
                [c.answerable for c in with_conf],
            )
        ),
        threshold=threshold,
        heldout_abstain_when_unanswerable=rate(held_unanswerable, None),
        heldout_false_refusal_rate=rate(held_answerable, None),
        threshold_abstain_when_unanswerable=rate(held_unanswerable, threshold),
        threshold_false_refusal_rate=rate(held_answerable, threshold),
        p50_ms=round(percentile([c.ms for c in cases], 50), 1),
        invalid_citation_rate=_mean([float(bool(c.invalid)) for c in cases]),
        uncited_sentence_rate=round(sum(c.uncited for c in cases) / sentences, 4)
        if sentences
        else None,
        retry_rate=_mean([float(c.retried is not None) for c in cases]),
        refused_after_retry=sum(1 for c in cases if (c.reason or "").endswith(AGAIN)),
        model_citation_accuracy=_mean(
            [float(bool(own) and own[0] == c.gold) for c in answered for own in [_own(c)]]
        ),
        **_judge_means(cases),
        cases=cases,
    )


def _own(case: Case) -> list[str]:
    """The paragraphs the model itself cited, first cited first."""
    return case.cited if case.model_cited is None else case.model_cited


def _judge_means(cases: list[Case]) -> dict[str, Any]:
    """The judge's metrics averaged over the judged cases they apply to (see GeneratorResult)."""
    judged = [c for c in cases if c.judgement is not None]

    def mean(key: str, group: list[Case]) -> float | None:
        return _mean(
            [c.judgement[key] for c in group if c.judgement and c.judgement[key] is not None]
        )

    answered = [c for c in judged if not c.abstained]
    faithful = [c for c in answered if c.judgement and c.judgement["faithfulness"] is not None]
    return {
        "judged": len(judged),
        "judge_errors": sum(1 for c in judged if c.judgement and c.judgement.get("error")),
        "judge_faithfulness": mean("faithfulness", answered),
        "judge_answer_relevance": mean("answer_relevance", answered),
        "judge_context_precision": mean("context_precision", [c for c in judged if c.answerable]),
        "judge_context_recall": mean("context_recall", [c for c in judged if c.answerable]),
        "lexical_support": _mean([c.support for c in faithful if c.support is not None]),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def save_threshold(db: Database, collection: str, threshold: float) -> str:
    """Record ``threshold`` on ``collection``'s active model; returns the model's name."""
    with transaction(db) as conn:
        row = conn.execute(
            Q.save_threshold, {"threshold": threshold, "collection": collection}
        ).fetchone()
    if row is None:
        raise InputError(f"collection {collection!r} has no active model to record a threshold on")
    return str(row[0])
