"""Checking an answer against the sources it was given.

Every ``[n]`` must name a source that was in the prompt. Citations to sources that were not
there are removed from the answer and reported; the valid ones are resolved to chunks and
documents so a reader can check each claim.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pgrag.answer.prompt import Source

# The spaces before a marker go with it ("14 days [9]." loses " [9]"). A match starts only
# where a run of spaces starts, and takes the run whole: a reply with long runs of spaces is
# read in linear time, not quadratic.
_CITE = re.compile(r"(?<![ \t])([ \t]*+)\[(\s*\d+(?:\s*[,;]\s*\d+)*\s*)\]")
# Code is quoted, not cited: `x[1]` and fenced blocks are left exactly as written. A fence
# must close, and an inline span must not open right after a letter ("customer`s" is a typo
# for an apostrophe), so a stray backtick cannot hide the citations that follow it.
_CODE = re.compile(r"```.*?```|~~~.*?~~~|(?<![^\W_])`[^`\n]+`", re.DOTALL)
_UNKNOWN = re.compile(
    r"\b(i\s+(?:do\s+not|don['’]?t|cannot|can['’]?t)\s+(?:know|find|answer|tell)"
    r"|(?:the\s+)?sources?\s+(?:do(?:es)?\s+not|don['’]?t)\s+(?:contain|mention|say|provide|include)"
    r"|not\s+(?:mentioned|covered|stated)\s+in\s+the\s+sources?)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Citation:
    n: int
    chunk_id: int
    document_id: int
    source: str
    title: str | None
    section: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CheckedAnswer:
    text: str  # the answer with invalid citations removed
    citations: list[Citation]  # valid ones, in order of first use
    invalid: list[int]  # numbers cited that were not in the prompt


def prose(answer: str) -> list[tuple[bool, str]]:
    """``answer`` as consecutive (is_prose, text) pieces; code spans and fenced blocks are not
    prose. Joining the texts gives ``answer`` back."""
    pieces: list[tuple[bool, str]] = []
    at = 0
    for m in _CODE.finditer(answer):
        if m.start() > at:
            pieces.append((True, answer[at : m.start()]))
        pieces.append((False, m.group(0)))
        at = m.end()
    if at < len(answer):
        pieces.append((True, answer[at:]))
    return pieces


def cited_numbers(text: str) -> list[int]:
    """The source numbers cited in ``text``'s prose, in order, repeats included."""
    return [
        int(x)
        for is_prose, piece in prose(text)
        if is_prose
        for m in _CITE.finditer(piece)
        for x in re.split(r"[,;]", m.group(2))
    ]


def without_citations(text: str) -> str:
    """``text`` with the citation marks of its prose removed."""
    return "".join(_CITE.sub("", p) if is_prose else p for is_prose, p in prose(text))


def check_citations(answer: str, sources: Sequence[Source]) -> CheckedAnswer:
    by_n = {s.n: s for s in sources}
    cited: list[int] = []
    invalid: list[int] = []

    def keep_valid(match: re.Match[str]) -> str:
        numbers = [int(x) for x in re.split(r"[,;]", match.group(2))]
        good = [n for n in numbers if n in by_n]
        for n in numbers:
            bucket = cited if n in by_n else invalid
            if n not in bucket:
                bucket.append(n)
        if not good:  # removed, with the space before it: "14 days [9]." -> "14 days."
            return ""
        return match.group(1) + "[" + ", ".join(str(n) for n in good) + "]"

    text = "".join(_CITE.sub(keep_valid, p) if is_prose else p for is_prose, p in prose(answer))
    text = text.strip()
    citations = []
    for n in cited:
        r = by_n[n].result
        citations.append(Citation(n, r.chunk_id, r.document_id, r.source, r.title, r.section))
    return CheckedAnswer(text=text, citations=citations, invalid=invalid)


def says_unknown(answer: str) -> bool:
    """Whether the answer declines to answer ("I don't know …")."""
    return bool(_UNKNOWN.search(answer))
