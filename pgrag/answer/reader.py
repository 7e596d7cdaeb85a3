"""The offline generator: an extractive reader that needs no model server.

It answers with the sentences of the retrieved passages that best answer the question, each
cited with its source number. A sentence's score is its cosine similarity to the question
under the embedding model, plus a small bonus for sharing the question's content words. It
abstains when the retrieved passages do not mention most of the question's content words, or
when no sentence is similar enough to the question. The thresholds are heuristics checked on
the example handbook; `pgrag eval answers` (planned) is where they get calibrated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pgrag.answer.prompt import ABSTAIN_TEXT, Source
from pgrag.answer.span import short_span
from pgrag.embeddings.embedder import Embedder
from pgrag.text.chunking import split_sentences
from pgrag.text.stemming import STOPWORDS, stem

MIN_SIMILARITY = 0.40  # below this, no sentence is taken to answer the question
MIN_COVERAGE = 0.5  # share of the question's content words the sources must mention
KEYWORD_WEIGHT = 0.15
MARGIN = 0.05  # a second sentence is added only when it scores this close to the best
MAX_SENTENCES = 2
QUANTITY_BONUS = 0.1
_QUANTITY_QUESTION = re.compile(
    r"\s*(how\s+(long|many|much|often|soon|far|old|big|large)|when|what\s+time)\b", re.IGNORECASE
)
_NUMBER = re.compile(r"\d")

_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")
_STOPWORDS = STOPWORDS


@dataclass(frozen=True)
class ReaderAnswer:
    text: str
    abstained: bool
    reason: str | None
    best_similarity: float
    short: str | None = None  # the phrase of the best sentence that answers (pgrag.answer.span)


def content_words(text: str) -> set[str]:
    """The stems of ``text``'s words, stop words left out."""
    return set(_stems(text))


def _stems(text: str) -> dict[str, str]:
    """Content words of ``text`` by stem, each with the word as written (for messages)."""
    words = (re.sub(r"['’]s$", "", w) for w in _WORD.findall(text.lower()))
    return {stem(w): w for w in words if w not in _STOPWORDS}


_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_MARKUP = re.compile(r"\*\*|__|`|^\s*(?:[-*+]|\d{1,3}[.)])\s+")


def _clean(sentence: str) -> str:
    return _MARKUP.sub("", sentence).strip()


def _usable(sentence: str) -> bool:
    if sentence.rstrip().endswith(("?", ":")):  # FAQ questions and lead-ins to a list
        return False
    if set(sentence.strip()) <= set("|-: "):  # a table's separator row
        return False
    return len(_WORD.findall(sentence.lower())) >= 3


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _render_tables(text: str) -> str:
    """Markdown table rows become sentences that carry their column names
    ("Plan: Team; Severity 1: 4 hours; ..."), so a row can answer a question on its own.
    The header and separator rows are dropped; a table cut by chunking (no header in this
    passage) keeps its cells without names."""
    out: list[str] = []
    header: list[str] | None = None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not _TABLE_ROW.match(line):
            header = None
            out.append(line)
            continue
        cells = _cells(line)
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the separator row
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if (
            header is None
            and _TABLE_ROW.match(nxt)
            and all(set(c) <= set("-: ") for c in _cells(nxt))
        ):
            header = cells  # a header row, followed by its separator
            continue
        if header and len(header) == len(cells):
            row = "; ".join(f"{h}: {c}" for h, c in zip(header, cells, strict=True) if c)
        else:
            row = "; ".join(c for c in cells if c)
        out.append(f"\n{row}.\n")
    return "\n".join(out)


def extractive_answer(question: str, sources: Sequence[Source], embedder: Embedder) -> ReaderAnswer:
    candidates: list[tuple[int, str]] = []  # (source number, sentence)
    mentioned: set[str] = set()
    for source in sources:
        r = source.result
        # The title and heading path are part of what a passage says.
        mentioned |= content_words(f"{r.title or ''} {r.section or ''} {r.text}")
        for sentence in split_sentences(_render_tables(source.result.text)):
            if _usable(sentence):
                candidates.append((source.n, _clean(sentence)))
    source_text = " ".join(
        f"{s.result.title or ''} {s.result.section or ''} {s.result.text}".lower() for s in sources
    )
    if not candidates:
        return ReaderAnswer(ABSTAIN_TEXT, True, "nothing was retrieved for this question", 0.0)
    asked = _stems(question)
    q_words = set(asked)
    # A word also counts when it is part of a longer one ("roll back" / "rollback").
    missing = sorted(w for w in q_words - mentioned if len(w) < 4 or w not in source_text)
    if q_words and len(missing) / len(q_words) > 1 - MIN_COVERAGE:
        return ReaderAnswer(
            ABSTAIN_TEXT,
            True,
            f"the retrieved sources do not mention {', '.join(asked[w] for w in missing)}",
            0.0,
        )

    vectors = embedder.embed([question] + [s for _, s in candidates])
    similarity = vectors[1:] @ vectors[0]
    wants_quantity = bool(_QUANTITY_QUESTION.match(question))
    scored = []
    for (n, sentence), sim in zip(candidates, similarity, strict=True):
        overlap = len(q_words & content_words(sentence)) / len(q_words) if q_words else 0.0
        score = float(sim) + KEYWORD_WEIGHT * overlap
        if wants_quantity and _NUMBER.search(sentence):
            score += QUANTITY_BONUS  # "how long/many/much/often", "when": the answer has a number
        scored.append((score, float(sim), n, sentence))
    scored.sort(key=lambda t: t[0], reverse=True)
    best_sim = max(t[1] for t in scored)
    if best_sim < MIN_SIMILARITY:
        return ReaderAnswer(
            ABSTAIN_TEXT,
            True,
            f"no retrieved sentence is close enough to the question"
            f" (best similarity {best_sim:.2f} < {MIN_SIMILARITY})",
            best_sim,
        )
    top_score = scored[0][0]
    chosen = [t for t in scored if t[1] >= MIN_SIMILARITY and t[0] >= top_score - MARGIN]
    parts = []
    seen: set[str] = set()
    for _, _, n, sentence in chosen[:MAX_SENTENCES]:
        if sentence not in seen:
            seen.add(sentence)
            body = sentence.rstrip()
            end = body[-1] if body[-1] in ".!" else "."
            parts.append(f"{body.rstrip('.!')} [{n}]{end}")
    return ReaderAnswer(" ".join(parts), False, None, best_sim, short_span(question, chosen[0][3]))
