"""What a generator's reply is worth: the checks ``ask`` (and ``ask --agentic``) apply to it.

A reply is read as a short answer and its cited explanation (:mod:`pgrag.answer.reply`).
Citations to sources that were not in the prompt are removed and reported. The reply is then
one of:

- an abstention the model chose ("I don't know based on the sources", or a reply that only
  declines and cites nothing);
- an answer: it has content of its own and cites at least one source that was in the prompt;
- a *fault* a second try could fix -- ``no_content`` (nothing but citation markers: ``[1]``,
  ``Answer: [2]``), ``uncited`` (content, but no valid citation, and no short answer that
  :func:`ground` finds in a source -- one it finds is cited where it stands) or ``ungrounded``
  (a short answer that stands in none of the sources, :func:`ground`). ``ask`` asks once more with
  :func:`correction`; a fault that remains is an abstention with its reason. Never is a bare
  ``[2]`` accepted as a cited answer.

A short answer is then *grounded* (:func:`ground`): unless the model's own explanation is a
sentence of the passage it cites and that passage holds the short answer, the sentence of the
sources that holds it (:mod:`pgrag.answer.evidence`) is what the answer shows and cites,
whatever source number the model wrote -- small models name the answer far better than they
cite it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pgrag.answer.citations import (
    Citation,
    check_citations,
    cited_numbers,
    says_unknown,
    without_citations,
)
from pgrag.answer.evidence import (
    MIN_COVERAGE,
    Evidence,
    answer_words,
    coverage,
    is_yes_no,
    locate,
    words,
)
from pgrag.answer.injection import flagged_sources
from pgrag.answer.prompt import ABSTAIN_TEXT, Source
from pgrag.answer.reply import has_content, parse_reply
from pgrag.answer.support import split_sentences

AGAIN = " (also when asked again)"  # ends the reason of a fault that a second try kept
NO_CONTENT = "no_content"
UNCITED = "uncited"
UNGROUNDED = "ungrounded"
# The model's explanation is taken as a sentence of the passage it cites when at least this
# share of its words stand there.
QUOTED = 0.8

_REASONS = {
    NO_CONTENT: "the model's answer has no content of its own, only citation markers",
    UNCITED: "the model's answer cites no source that was in the prompt",
    UNGROUNDED: "the model's short answer is not in any of the sources",
}
_FORM = (
    "Reply again in this form:\nAnswer: <the answer itself>\nExplanation: <a sentence from the"
    " sources, ending with the number of its source, like [1]>\nor reply exactly: " + ABSTAIN_TEXT
)
_CORRECTIONS = {
    NO_CONTENT: "Your reply gave only source numbers, not the answer. " + _FORM,
    UNCITED: "Your reply did not cite any of the numbered sources. " + _FORM,
    UNGROUNDED: "Your answer is not in the sources. Answer with words copied from the sources. "
    + _FORM,
}


@dataclass(frozen=True)
class Verdict:
    text: str  # the answer as shown and checked (the explanation), or the abstention
    short: str | None  # the short answer (None: none given, or an abstention)
    abstained: bool
    reason: str | None
    citations: list[Citation]
    invalid: list[int]  # numbers cited that were not in the prompt
    fault: str | None = None  # NO_CONTENT, UNCITED or UNGROUNDED: what a second try could fix
    # What grounds the short answer (ground): {"by": "model" (its own quotation) or "located"
    # (the sentence pgrag found), "n", "sentence", "coverage", "model_cited"}.
    evidence: dict[str, Any] | None = None


def check_reply(raw: str, sources: Sequence[Source]) -> Verdict:
    """``raw`` checked against the ``sources`` it was given (see the module). An answer that
    says the sources do not cover one point but cites them for another is kept: it is a
    partial answer, and its cited sentences are checked like any other."""
    reply = parse_reply(raw)
    checked = check_citations(reply.text, sources)
    invalid = checked.invalid + [
        n for n in check_citations(raw, sources).invalid if n not in checked.invalid
    ]
    declined = without_citations(raw).strip().rstrip(".").lower()
    given = {s.n for s in sources}
    # Grounded: a sentence that does not decline cites a source that was in the prompt.
    grounded = any(
        n in given
        for sentence in split_sentences(reply.text)
        if not says_unknown(sentence)
        for n in cited_numbers(sentence)
    )
    if declined == ABSTAIN_TEXT.rstrip(".").lower() or (says_unknown(raw) and not grounded):
        return Verdict(ABSTAIN_TEXT, None, True, "the model said it does not know", [], invalid)
    if not has_content(reply.text) and reply.short is None:
        return _fault(NO_CONTENT, invalid)
    if not checked.citations:
        fault = _fault(UNCITED, invalid)
        # The short answer rides along for ground() to cite where it stands -- only when the
        # reply stands behind it: its explanation states it ("Answer: 14 days / Explanation: it
        # cannot be determined" is a doubt to ask about again, not an answer).
        said = without_citations(reply.text)
        if reply.short is not None and coverage(reply.short, said) >= MIN_COVERAGE:
            fault = replace(fault, short=reply.short)
        return fault
    return Verdict(checked.text, reply.short, False, None, checked.citations, invalid)


def ground(verdict: Verdict, question: str, sources: Sequence[Source]) -> Verdict:
    """An answer's short answer grounded in ``sources`` (:mod:`pgrag.answer.evidence`): the
    model's own explanation and citation are kept when the explanation is a sentence of the
    passage it cites (at least :data:`QUOTED` of its words stand there) and that passage holds
    the short answer; otherwise the answer shows and cites the sentence of the sources that
    holds it (:func:`pgrag.answer.evidence.locate`), and with none, it is an ``ungrounded``
    fault. An ``uncited`` fault may become an answer the same way (:func:`_uncited`). Any
    other fault, an abstention, an answer without a short answer and a yes/no answer are
    returned as they are."""
    if verdict.fault == UNCITED:
        return _uncited(verdict, question, sources)
    if verdict.abstained or verdict.short is None or is_yes_no(verdict.short):
        return verdict
    short = verdict.short
    own = [c.n for c in verdict.citations]
    texts = {s.n: s.result.text for s in sources}
    said = without_citations(verdict.text)
    first = own[0] if own else None
    held = coverage(short, texts[first]) if first in texts else 0.0
    if (
        first in texts
        and held >= MIN_COVERAGE
        and len(words(said)) > len(answer_words(short))
        and coverage(said, texts[first]) >= QUOTED
    ):
        evidence = {
            "by": "model",
            "n": first,
            "sentence": said.strip(),
            "coverage": round(held, 4),
            "model_cited": own,
        }
        return replace(verdict, evidence=evidence)
    avoid = {f["n"] for f in flagged_sources(sources)}
    found = locate(question, short, sources, avoid=avoid)
    if found is None:
        return _fault(UNGROUNDED, verdict.invalid)
    return _located(verdict, found, sources, own)


def _uncited(verdict: Verdict, question: str, sources: Sequence[Source]) -> Verdict:
    """An ``uncited`` fault whose short answer stands in a source is that source's sentence,
    cited -- what :func:`ground` shows for any answer whose own citation does not hold -- rather
    than a second try, which for a 1.5B model on SQuAD dev ended in a refusal every time
    (docs/benchmarks.md). Without a short answer, with a yes/no one, one its own explanation
    does not state (:func:`check_reply`), or one that only a passage reading like an
    instruction holds, it stays the fault."""
    short = verdict.short
    if short is None or is_yes_no(short):
        return replace(verdict, short=None)
    avoid = {f["n"] for f in flagged_sources(sources)}
    found = locate(question, short, sources, avoid=avoid)
    if found is None or found.n in avoid:  # pgrag does not pick an instruction-like passage
        return replace(verdict, short=None)
    return _located(verdict, found, sources, [])


def _located(
    verdict: Verdict, found: Evidence, sources: Sequence[Source], own: list[int]
) -> Verdict:
    """``verdict``'s short answer as the answer that shows and cites ``found``, the sentence
    that holds it; ``own``: the numbers the model cited itself."""
    checked = check_citations(_cited(found.sentence, found.n), sources)
    evidence = {
        "by": "located",
        "n": found.n,
        "sentence": found.sentence,
        "coverage": found.coverage,
        "model_cited": own,
    }
    return Verdict(
        checked.text,
        verdict.short,
        False,
        None,
        checked.citations,
        verdict.invalid,
        evidence=evidence,
    )


def _cited(sentence: str, n: int) -> str:
    """``sentence`` citing source ``n`` before its closing stop: "… in 1990 [1]."; markers
    the passage itself holds ("1990.[12]") are not citations of the prompt's sources."""
    body = " ".join(without_citations(sentence).split())
    end = body[-1] if body and body[-1] in ".!?" else "."
    return f"{body.rstrip('.!?')} [{n}]{end}"


def _fault(fault: str, invalid: list[int]) -> Verdict:
    return Verdict(ABSTAIN_TEXT, None, True, _REASONS[fault], [], invalid, fault)


def correction(fault: str) -> str:
    """What the model is told when its reply had ``fault``, before it is asked again."""
    return _CORRECTIONS[fault]


def after_retry(verdict: Verdict) -> Verdict:
    """A fault that remained after the second try: its reason says so."""
    if verdict.fault is None:
        return verdict
    return Verdict(
        verdict.text,
        None,
        True,
        _REASONS[verdict.fault] + AGAIN,
        [],
        verdict.invalid,
        verdict.fault,
    )


def judge(
    raw: str, sources: Sequence[Source]
) -> tuple[str, bool, str | None, list[Citation], list[int]]:
    """:func:`check_reply` as (text, abstained, reason, citations, invalid), for callers that
    do not retry."""
    v = check_reply(raw, sources)
    return v.text, v.abstained, v.reason, v.citations, v.invalid
