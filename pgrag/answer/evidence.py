"""Where a short answer stands in the sources: the sentence ``ask`` cites for it.

A small model names the answer far better than it cites it. Measured with the local 1.5B model
(docs/benchmarks.md): it often writes only a marker for the explanation (``Explanation: [2]``),
copies a source's header instead of a sentence, or cites the neighbouring source -- on a tuning
sample its first citation named the paragraph holding the answer for half of its answers, while
the sentence found here named it for four in five. The model's *citation* is a claim like any
other, and it can be checked: the short answer's words either stand in the cited passage or
they do not.

:func:`locate` finds the sentences of the sources that hold the short answer -- its content
words (stemmed; numbers and number words alike; negations count; a short answer made only of
stop words, such as "US" or "May", counts all its words), or the whole short answer as a
substring (for scripts written without spaces, and "8" in "8:00") -- and picks the one that
also shares most words with the question. :func:`pgrag.answer.verdict.ground` keeps the
model's own explanation when it is a sentence of the passage it cites and that passage holds
the short answer; otherwise the answer shows and cites the sentence found here. A passage that
reads like an instruction to the model (:mod:`pgrag.answer.injection`) is used only when no
other holds the short answer. When no source holds it, the answer is not grounded in the
sources, whatever it cites. A yes/no answer is not a span and is not grounded this way.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Sequence
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
# Negations change what a short answer says ("not within 14 days"): they must stand too.
_NEGATIONS = frozenset({"not", "no", "nor", "never", "none", "without", "neither"})
_SKIPPED = STOPWORDS - _NEGATIONS
_NEGATION_TOKENS = frozenset(stem(w) for w in _NEGATIONS)
# Stop words that never name anything on their own.
_EMPTY = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being"
    " do does did have has had i you he she it we they me him her us them my your his its our"
    " their this that these those what which who whom whose when where why how s t".split()
)
# Answers that are not spans of a passage.
YES_NO = frozenset({"yes", "no", "true", "false"})


@dataclass(frozen=True)
class Evidence:
    n: int  # the source's number in the prompt
    sentence: str
    coverage: float  # share of the short answer's words in the sentence
    overlap: float  # share of the question's words in the sentence


def plain(text: str) -> str:
    """``text`` compared as words are: Unicode compatibility forms folded (ligatures, full-width
    digits), accents dropped ("café" as "cafe"), case folded, whitespace collapsed."""
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    bare = "".join(c for c in folded if not unicodedata.combining(c))
    return " ".join(unicodedata.normalize("NFC", bare).split())


def _token(raw: str) -> str:
    word = re.sub(r"['’]s$", "", raw).replace(",", "")
    return _AS_DIGITS.get(word, stem(word))


def words(text: str, keep: Collection[str] = ()) -> list[str]:
    """Content words of ``text``, stemmed; number words as digits; possessives dropped; stop
    words left out, but for negations and those in ``keep``."""
    found = _WORD.findall(plain(text))
    return [_token(w) for w in found if w not in _SKIPPED or w in keep]


def answer_words(short: str) -> set[str]:
    """What must stand in a sentence for it to hold ``short``: its content words, or, when it
    has none, its stop words that can name something -- an acronym ("US", "WHO") or a word
    that is not only a function word ("May") -- so "the" or "It" is no answer."""
    content = set(words(short))
    if content:
        return content
    found = _WORD.findall(unicodedata.normalize("NFKC", short))  # (case kept: "US")
    named = [w for w in found if (len(w) > 1 and w.isupper()) or w.casefold() not in _EMPTY]
    return {_token(w.casefold()) for w in named}


def coverage(short: str, text: str) -> float:
    """The share of ``short``'s words (:func:`answer_words`) that stand in ``text``; 1.0 when
    ``short`` stands in it whole (as a substring, after :func:`plain`)."""
    return _coverage(answer_words(short), _whole(plain(short)), text)


def _coverage(wanted: set[str], whole: Callable[[str], bool], text: str) -> float:
    if not wanted:
        return 0.0
    if whole(plain(text)):
        return 1.0
    have = set(words(text, keep=STOPWORDS))
    if wanted & _NEGATION_TOKENS - have:
        return 0.0  # "not within 14 days" is not held by "within 14 days"
    return len(wanted & have) / len(wanted)


# Scripts written without spaces between words (Han, kana, Hangul, Thai, Lao, Myanmar, Khmer):
# there a short answer is found as a substring, since it has no word boundaries.
_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)


def _whole(whole: str) -> Callable[[str], bool]:
    """Whether ``whole`` stands in a text as a whole: between non-word characters ("8" in
    "at 8:00", not in "1987"), or anywhere for an unspaced script."""
    if not whole:
        return lambda text: False
    if _UNSPACED.search(whole):
        return lambda text: whole in text
    pattern = re.compile(r"(?<!\w)" + re.escape(whole) + r"(?!\w)")
    return lambda text: pattern.search(text) is not None


def is_yes_no(short: str) -> bool:
    return plain(short).strip(" .!") in YES_NO


def sentences_of(source: Source) -> list[str]:
    return [s.strip() for s in split_sentences(source.result.text) if s.strip()]


def locate(
    question: str, short: str, sources: Sequence[Source], avoid: Collection[int] = ()
) -> Evidence | None:
    """The sentence of ``sources`` that best holds ``short`` as the answer to ``question``
    (see the module), or None when no sentence holds enough of it. Sources numbered in
    ``avoid`` (instruction-like ones) are used only when no other holds it."""
    wanted, whole = answer_words(short), _whole(plain(short))
    if not wanted:
        return None
    asked = set(words(question))
    best: tuple[bool, float, float, int] | None = None
    found: Evidence | None = None
    for source in sources:
        trusted = source.n not in avoid
        for sentence in sentences_of(source):
            held = _coverage(wanted, whole, sentence)
            if held < MIN_COVERAGE:
                continue
            shared = len(asked & set(words(sentence))) / len(asked) if asked else 0.0
            key = (trusted, held, shared, -source.n)
            if best is None or key > best:
                best, found = key, Evidence(source.n, sentence, round(held, 4), round(shared, 4))
    return found
