"""The short answer inside a sentence: what the extractive reader gives as ``short_answer``.

The reader answers with whole sentences; a person (and exact match) wants the phrase that
answers. Without a reading model, the phrase is found the classic way: the words of the
sentence that the question does not already say, in runs between the words it does, scored
by the kind of answer the question asks for (a year or date for *when*, a number for *how
many/much/long*, a name for *who* and *where*) and by closeness to the words the question
shares with the sentence. Measured in docs/benchmarks.md (exact match and F1 on SQuAD dev);
a heuristic, so it is a help for reading, and the cited sentence stays the answer.
"""

from __future__ import annotations

import re

from pgrag.text.stemming import STOPWORDS, stem

MAX_WORDS = 6
_TOKEN = re.compile(r"\d[\d,.:]*\d%?|\d%?|[^\W\d_]+(?:['’.-][^\W\d_]+)*\.?|[^\w\s]")
_MONTHS = "january february march april may june july august september october november december"
_MONTH = set(_MONTHS.split())
_CONNECTORS = {"of", "the", "de", "and", "&", "von", "van", "du", "la"}
_NUMBER_WORDS = set(
    "one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty"
    " hundred thousand million billion trillion half dozen".split()
)
_KINDS = [
    (
        "date",
        re.compile(
            r"^\s*(when|(in|by|since|until)\s+what\s+(year|decade|century|month)|"
            r"what\s+(year|decade|century|date|month|day))\b",
            re.I,
        ),
    ),
    (
        "number",
        re.compile(
            r"^\s*(how\s+(many|much|long|old|far|big|large|tall|high|often)|"
            r"what\s+(percentage|percent|number|amount|fraction))\b",
            re.I,
        ),
    ),
    (
        "name",
        re.compile(
            r"^\s*(who|whom|whose|where|(what|which)\s+(\w+\s+){0,2}?(city|country|"
            r"team|person|company|state|university|name|group|band|king|river|"
            r"language|party|organization|school|player|author|church))\b",
            re.I,
        ),
    ),
]


def _kind(question: str) -> str | None:
    for kind, pattern in _KINDS:
        if pattern.search(question):
            return kind
    return None


def _is_number(word: str) -> bool:
    return word[0].isdigit() or word.lower() in _NUMBER_WORDS


def _fits(kind: str | None, words: list[str]) -> float:
    if kind == "date":
        dated = any(
            re.fullmatch(r"1\d{3}|20\d{2}|\d{1,4}s", w) or w.lower() in _MONTH for w in words
        )
        return 1.0 if dated else 0.0
    if kind == "number":
        return 1.0 if any(_is_number(w) for w in words) else 0.0
    if kind == "name":
        return 1.0 if all(w[0].isupper() or w.lower() in _CONNECTORS for w in words) else 0.0
    return 0.0


def _runs(tokens: list[str], asked: set[str]) -> list[list[int]]:
    """Maximal runs of token positions the question does not hold, split at punctuation and
    stop words (a connector between two capitalised words is kept: "University of Chicago")."""
    runs: list[list[int]] = []
    run: list[int] = []
    for i, t in enumerate(tokens):
        low = t.lower()
        connector = (
            low in _CONNECTORS and run and tokens[run[-1]][0].isupper()
            and i + 1 < len(tokens) and tokens[i + 1][0].isupper()
        )  # fmt: skip
        if t[0].isalnum() and stem(low) not in asked and (low not in STOPWORDS or connector):
            run.append(i)
        elif run:
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def _candidates(tokens: list[str], run: list[int]) -> list[list[int]]:
    """A run, and within it its capitalised stretches and each number with the word after it."""
    out = [run[:MAX_WORDS]]
    caps: list[int] = []
    for j in [*run, -1]:
        if j >= 0 and (tokens[j][0].isupper() or (caps and tokens[j].lower() in _CONNECTORS)):
            caps.append(j)
            continue
        while caps and tokens[caps[-1]].lower() in _CONNECTORS:
            caps.pop()
        if caps and caps != run:
            out.append(caps[:MAX_WORDS])
        caps = []
    for at, j in enumerate(run):
        if _is_number(tokens[j]):
            out.append(run[at : at + 2])
    return out


def short_span(question: str, sentence: str) -> str | None:
    """The phrase of ``sentence`` that answers ``question`` (see the module); None when the
    sentence has no words the question does not already hold."""
    asked = {stem(w.lower()) for w in _TOKEN.findall(question) if w[0].isalnum()}
    tokens = _TOKEN.findall(sentence)
    shared = [i for i, t in enumerate(tokens) if t[0].isalnum() and stem(t.lower()) in asked
              and t.lower() not in STOPWORDS]  # fmt: skip
    kind = _kind(question)
    best: tuple[float, str] | None = None
    for run in _runs(tokens, asked):
        for span in _candidates(tokens, run):
            words = [tokens[j] for j in span]
            distance = min((min(abs(j - s) for j in span) for s in shared), default=len(tokens))
            score = 2.0 * _fits(kind, words) - 0.1 * distance - 0.05 * abs(len(words) - 2)
            if best is None or score > best[0]:
                best = (score, " ".join(words).rstrip("."))
    return best[1] if best else None
