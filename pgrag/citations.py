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

from .prompt import Source

_CITE = re.compile(r"\[(\s*\d+(?:\s*[,;]\s*\d+)*\s*)\]")
_UNKNOWN = re.compile(
    r"\b(i\s+(?:do\s+not|don'?t|cannot|can'?t)\s+(?:know|find|answer|tell)"
    r"|(?:the\s+)?sources?\s+(?:do(?:es)?\s+not|don'?t)\s+(?:contain|mention|say|provide|include)"
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


def check_citations(answer: str, sources: Sequence[Source]) -> CheckedAnswer:
    by_n = {s.n: s for s in sources}
    cited: list[int] = []
    invalid: list[int] = []

    def keep_valid(match: re.Match[str]) -> str:
        numbers = [int(x) for x in re.split(r"[,;]", match.group(1))]
        good = [n for n in numbers if n in by_n]
        for n in numbers:
            bucket = cited if n in by_n else invalid
            if n not in bucket:
                bucket.append(n)
        return "[" + ", ".join(str(n) for n in good) + "]" if good else ""

    text = _CITE.sub(keep_valid, answer)
    text = re.sub(r"[ \t]+([.,;:!?])", r"\1", text)
    text = re.sub(r"[ \t]{2,}", " ", text).strip()
    citations = []
    for n in cited:
        r = by_n[n].result
        citations.append(Citation(n, r.chunk_id, r.document_id, r.source, r.title, r.section))
    return CheckedAnswer(text=text, citations=citations, invalid=invalid)


def says_unknown(answer: str) -> bool:
    """Whether the answer declines to answer ("I don't know …")."""
    return bool(_UNKNOWN.search(answer))
