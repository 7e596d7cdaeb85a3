"""How well each cited sentence of an answer is supported by the passage it cites.

An answer is split into sentences. A sentence with citations gets a **support** score in
[0, 1]: the share of its content words (lower-cased, without stop words and citation marks,
numbers kept whole) that occur in the text of a passage it cites, the best of its citations.
A sentence copied from its source scores 1; one whose figures or names are not in the cited
passage scores lower, whatever the model claims. A sentence without a citation is reported
(``uncited``). The answer's **faithfulness** estimate is the mean support over its sentences,
an uncited one counting 0. Lexical, so it is cheap, needs no model, and explains itself: the
missing words are returned with each sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pgrag.answer.citations import cited_numbers, prose, without_citations
from pgrag.answer.prompt import ABSTAIN_TEXT, Source
from pgrag.text.stemming import stem

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\n+")
_TRAILING = re.compile(r"([.!?])[ \t]*((?:\[[\d,;\s]+\][ \t]*)+)")
_LIST_MARK = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t]+", re.MULTILINE)
_WORD = re.compile(r"\d+(?:[.,:]\d+)*|[^\W\d_]+(?:['’-][^\W\d_]+)*")
STOP = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her his"
    " how i if in into is it its may might must no not of on or our she should so such than that"
    " the their them then there these they this those to was we were what when where which who"
    " will with would you your also any all each per within after before up out about over only"
    " more most other some same".split()
)


@dataclass(frozen=True)
class SentenceSupport:
    text: str
    citations: list[int]
    support: float | None  # None: no citation
    missing: list[str]  # content words in no cited passage

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _words(text: str) -> list[str]:
    return [w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOP]


def split_sentences(answer: str) -> list[str]:
    """The answer's sentences: list items are sentences (their "1." or "-" dropped), code is
    left out (it is quoted, not claimed)."""
    # A fenced block ends a sentence; inline code is a word of it, left out of the scoring.
    text = "".join(
        p if is_prose else "\n" if p.startswith(("```", "~~~")) else " "
        for is_prose, p in prose(answer)
    )
    text = _LIST_MARK.sub("", text)
    # "… 14 days. [1] Annual …": the citation belongs to the sentence before it.
    moved = _TRAILING.sub(lambda m: " " + m.group(2).strip() + m.group(1) + " ", text)
    parts = [re.sub(r"[ \t]{2,}", " ", p).strip() for p in _SENTENCE.split(moved)]
    return [p for p in parts if p]


def sentence_support(
    answer: str, sources: Sequence[Source]
) -> tuple[list[SentenceSupport], float | None]:
    """Each sentence's support, and the answer's faithfulness (None for an abstention or an
    answer without content words)."""
    if not answer.strip() or answer.strip() == ABSTAIN_TEXT:
        return [], None
    passages = {s.n: {stem(w) for w in _words(f"{s.result.section or ''} {s.result.text}")}
                for s in sources}  # fmt: skip
    out: list[SentenceSupport] = []
    for sentence in split_sentences(answer):
        cited = [n for n in dict.fromkeys(cited_numbers(sentence)) if n in passages]
        words = list(dict.fromkeys(_words(without_citations(sentence))))
        if not words or (not cited and sentence.endswith(":")):
            continue  # nothing to support, or a lead-in ("Two rules apply:")
        if not cited:
            out.append(SentenceSupport(sentence, [], None, words))
            continue
        best, missing = -1.0, words
        for n in cited:
            absent = [w for w in words if stem(w) not in passages[n]]
            score = 1 - len(absent) / len(words)
            if score > best:
                best, missing = score, absent
        out.append(SentenceSupport(sentence, cited, round(best, 4), missing))
    if not out:
        return [], None
    faithfulness = sum(s.support or 0.0 for s in out) / len(out)
    return out, round(faithfulness, 4)
