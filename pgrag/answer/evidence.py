"""Where a short answer stands in the sources: the sentence ``ask`` cites for it.

A small model names the answer far better than it cites it. Measured with the local 1.5B model
(docs/benchmarks.md): it often writes only a marker for the explanation (``Explanation: [2]``),
copies a source's header instead of a sentence, or cites the neighbouring source -- so its
first citation named the paragraph that holds the answer 43% of the time while its short answer
was right 86% of the time. The model's *citation* is a claim like any other, and it can be
checked: the short answer's words either stand in the cited passage or they do not.

:func:`locate` finds the sentences of the sources that hold the short answer (its content
words, stemmed, numbers and number words alike) and picks the one that also shares most
words with the question; ``ask`` then shows and cites that sentence when the model's own
explanation is not a sentence of the passage it cites, or its cited passage does not hold the
short answer (:func:`pgrag.answer.verdict.ground`). When no source holds the short answer, the
answer is not grounded in the sources, whatever it cites.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pgrag.answer.prompt import Source
from pgrag.text.chunking import split_sentences
from pgrag.text.stemming import STOPWORDS, stem

# A short answer is held by a sentence when at least this share of its words stand in it.
MIN_COVERAGE = 0.6
_WORD = re.compile(r"\d+(?:[.,:]\d+)*|[^\W\d_]+(?:['’][^\W\d_]+)*")
_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    " fifteen sixteen seventeen eighteen nineteen twenty"
).split()
_AS_DIGITS = {word: str(i) for i, word in enumerate(_NUMBERS)}


@dataclass(frozen=True)
class Evidence:
    n: int  # the source's number in the prompt
    sentence: str
    coverage: float  # share of the short answer's words in the sentence
    overlap: float  # share of the question's words in the sentence


def words(text: str) -> list[str]:
    """Content words of ``text``, stemmed; number words as digits; possessives dropped."""
    out = []
    for raw in _WORD.findall(text.lower()):
        word = re.sub(r"['’]s$", "", raw).replace(",", "")
        if word in STOPWORDS:
            continue
        out.append(_AS_DIGITS.get(word, stem(word)))
    return out


def coverage(short: str, text: str) -> float:
    """The share of ``short``'s content words that stand in ``text`` (0.0 for a short answer
    with no content words)."""
    wanted = set(words(short))
    if not wanted:
        return 0.0
    have = set(words(text))
    return len(wanted & have) / len(wanted)


def sentences_of(source: Source) -> list[str]:
    return [s.strip() for s in split_sentences(source.result.text) if s.strip()]


def locate(question: str, short: str, sources: Sequence[Source]) -> Evidence | None:
    """The sentence of ``sources`` that best holds ``short`` as the answer to ``question``
    (see the module), or None when no sentence holds enough of it."""
    asked = set(words(question))
    best: tuple[float, float, int] | None = None
    found: Evidence | None = None
    for source in sources:
        for sentence in sentences_of(source):
            held = coverage(short, sentence)
            if held < MIN_COVERAGE:
                continue
            shared = len(asked & set(words(sentence))) / len(asked) if asked else 0.0
            key = (held, shared, -source.n)
            if best is None or key > best:
                best, found = key, Evidence(source.n, sentence, round(held, 4), round(shared, 4))
    return found
