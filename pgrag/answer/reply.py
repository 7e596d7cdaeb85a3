"""A generator's reply read as a short answer and its cited explanation.

The prompt (:data:`pgrag.answer.prompt.SYSTEM`) asks for::

    Answer: <the answer itself: a name, number, date or short phrase>
    Explanation: <a sentence from the sources that supports it, ending with its number [2]>

or exactly ``I don't know based on the sources.``. Small models keep to that form better than
to free prose, and it gives a field that exact match and F1 can score. :func:`parse_reply`
is lenient about what they actually write -- ``**Answer:**``, lower case, the two fields on one
line, an explanation with no label, no fields at all (a prose reply is read as the
explanation) -- and never invents content: a reply that is only citation markers
(``[1]``, ``Answer: [2]``) has no content of its own (:func:`has_content`), which
:func:`pgrag.answer.ask.ask` does not accept as an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pgrag.answer.citations import cited_numbers, without_citations

# A label starts where a run of markup or space starts (the lookbehind), and its runs are
# possessive: a reply with long runs of spaces is read in linear time, not cubic.
_LABEL = (
    r"(?<![ \t>*_#\s-])[ \t>*_#-]*+(?:\*\*|__)?+\s*+{name}\s*+(?:\*\*|__)?+\s*+[:：]"
    r"\s*+(?:\*\*|__)?+"
)
_ANSWER = re.compile(_LABEL.format(name="(?:short\\s+)?answer"), re.IGNORECASE)
# The answer field of the evidence-first form starts a line ("… the answer: Paris is …" in
# a sentence is not one).
_ANSWER_LINE = re.compile(
    r"(?m)^" + _LABEL.format(name="(?:short\\s+)?answer").removeprefix(r"(?<![ \t>*_#\s-])"),
    re.IGNORECASE,
)
_EXPLANATION = re.compile(
    _LABEL.format(name="(?:explanation|evidence|because|reason|support)"), re.IGNORECASE
)
_WORD = re.compile(r"[^\W_]", re.UNICODE)
_EDGE = " \t\n\"'`*_.,;:!?-–—"
_ABBREVIATION = re.compile(r"(?<![^\W\d_])[^\W\d_]\.[^\W\d_]$")


@dataclass(frozen=True)
class Reply:
    """What a reply says: ``short`` (the "Answer:" field without citation marks; None when the
    reply has no such field, or it holds nothing but marks) and ``text``, the part shown and
    checked as the answer (the explanation, or the whole reply in prose)."""

    short: str | None
    text: str
    structured: bool  # the reply used the Answer:/Explanation: form


def has_content(text: str) -> bool:
    """Whether ``text`` says anything besides citation marks, labels and punctuation."""
    bare = without_citations(text)
    bare = _ANSWER.sub(" ", _EXPLANATION.sub(" ", bare))
    return bool(_WORD.search(bare))


def parse_reply(raw: str) -> Reply:
    """The short answer and the explanation in ``raw`` (see the module)."""
    text = raw.strip()
    e = _EXPLANATION.match(text)
    last = None if e is None else _ANSWER_LINE.search(text, e.end())
    if e is not None and last is not None:
        # Evidence first ("Evidence: <sentence> [2]\nAnswer: <phrase>"), the form that has a
        # small model find the sentence before it names the answer.
        explanation, short_part = text[e.end() : last.start()].strip(), text[last.end() :]
        short_part = short_part.strip().partition("\n")[0]
        return _structured(short_part, explanation)
    m = _ANSWER.search(text)
    if m is None or text[: m.start()].strip():
        # No "Answer:" field first: a prose reply (an explanation-only label is dropped).
        e = _EXPLANATION.match(text)
        return Reply(None, text[e.end() :].strip() if e else text, False)
    rest = text[m.end() :]
    e = _EXPLANATION.search(rest)
    if e is not None:
        short_part, explanation = rest[: e.start()], rest[e.end() :].strip()
    else:
        # "Answer: Denver Broncos [2]" or "Answer: X\nThe sources say ... [1]."
        first, _, after = rest.strip().partition("\n")
        short_part, explanation = first, after.strip()
    return _structured(short_part, explanation, rest)


def _structured(short_part: str, explanation: str, rest: str | None = None) -> Reply:
    """The reply of the two fields' texts (``rest``: both, as written, for a reply that is
    nothing but marks)."""
    written = rest if rest is not None else f"{short_part}\n{explanation}"
    short = _clean_short(short_part)
    cites = cited_numbers(short_part)
    if explanation and cites and not cited_numbers(explanation):
        # "Answer: X [2]\nExplanation: ...": the short answer's citation backs the explanation.
        body = explanation.rstrip()
        end = body[-1] if body[-1] in ".!?" else "."
        marks = ", ".join(str(n) for n in dict.fromkeys(cites))
        explanation = f"{body.rstrip('.!?')} [{marks}]{end}"
    if not has_content(explanation):
        # The short answer is the whole answer ("Answer: 1879 [3]", or an explanation that
        # is only "[3]"): it is shown with every citation either field gave.
        both = list(dict.fromkeys(cited_numbers(short_part) + cited_numbers(explanation)))
        body = without_citations(short_part).strip().rstrip(".!?")
        explanation = f"{body} [{', '.join(map(str, both))}]." if both else _sentence(body)
        if not body:
            # nothing but marks: left for has_content to refuse
            explanation = written.strip()
    return Reply(short, explanation, True)


def _clean_short(part: str) -> str | None:
    bare = without_citations(part).strip()
    short = bare.strip(_EDGE).strip()
    if bare.rstrip("*_ ").endswith(".") and _ABBREVIATION.search(short):
        short += "."  # "5 p.m.", "U.S.": the stop is the abbreviation's
    short = re.sub(r"\s+", " ", short)
    return short if _WORD.search(short) else None


def _sentence(text: str) -> str:
    return text.rstrip() + "." if text.strip() else ""
