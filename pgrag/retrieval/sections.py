"""Small-to-big retrieval: the index holds small chunks, the prompt gets their section.

A retrieved chunk is widened to the chunks around it in the same section (same document,
section path and page; ``pgrag.section_chunks_v1``, which shows a session only what it may
read), joined in document order with the overlap between neighbours removed. A passage whose
section a better-ranked passage already holds is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pgrag.db import principals as access
from pgrag.db import queries
from pgrag.db.replica import read

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.retrieval.search import SearchResult

Q = queries.load(__name__)
MAX_SECTION_CHUNKS = 20


def widen(
    db: Database,
    results: Sequence[SearchResult],
    *,
    principals: Sequence[str] | None = None,
    max_chunks: int = MAX_SECTION_CHUNKS,
) -> list[SearchResult]:
    """The results in rank order, each one's text widened to its section."""
    if not results:
        return []
    arguments = {"ids": [r.chunk_id for r in results], "n": max_chunks}

    def run(conn: Any) -> Any:
        access.apply(conn, principals)
        return conn.execute(Q.section_chunks, arguments).fetchall()

    rows = read(db, run)  # (the read replica's, when there is one)
    sections: dict[int, list[tuple[int, int, str]]] = {}
    for seed, sibling, ordinal, content in rows:
        sections.setdefault(seed, []).append((sibling, ordinal, content))
    out: list[SearchResult] = []
    covered: set[int] = set()
    for result in sorted(results, key=lambda r: r.rank):
        siblings = sections.get(result.chunk_id)
        if not siblings:
            out.append(result)
            continue
        if result.chunk_id in covered:
            continue  # a better-ranked passage holds this section already
        covered.update(s[0] for s in siblings)
        out.append(replace(result, text=join_chunks([(o, c) for _, o, c in siblings])))
    return out


def join_chunks(chunks: Sequence[tuple[int, str]]) -> str:
    """Chunks' texts in ordinal order, each without the start it repeats from the one before
    (chunking's overlap); a gap in the ordinals is marked with an ellipsis."""
    ordered = sorted(chunks)
    text = ordered[0][1]
    for (prev, _), (ordinal, content) in zip(ordered, ordered[1:], strict=False):
        if ordinal != prev + 1:
            text = f"{text} … {content}"
            continue
        k = _overlap(text, content)
        rest = content[k:].strip()
        if rest:
            text = f"{text} {rest}"
    return text


def _overlap(before: str, after: str) -> int:
    """The length of the longest start of ``after`` that ``before`` ends with, in whole words
    (the overlap chunking makes is whole sentences; a chance match of a few letters is not)."""
    for k in range(min(len(before), len(after)), 0, -1):
        whole = (k == len(after) or after[k].isspace()) and (
            k == len(before) or before[-k - 1].isspace()
        )
        if whole and before.endswith(after[:k]):
            return k
    return 0
