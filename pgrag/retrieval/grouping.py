"""Document-level results: one entry per document, with its best chunks.

``pgrag.search(..., group="document")`` asks ``pgrag.search_v5`` for more chunks than ``k``
(a deeper ``k``) and folds them into documents here, in Python: a document ranks where its best
chunk ranked, and lists its best chunks (at most ``chunks_per_document``) in rank order. When
the chunks hold fewer than ``k`` distinct documents and the search may have more, it searches
again, deeper, up to search_v5's bound of 1,000 chunks.

Everything comes from what search_v5 returned for the caller (its access lists and filter):
nothing here reads a table, so a document the caller may not read can never be listed, and a
document's chunks are only the ones the search returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pgrag.errors import InputError
from pgrag.retrieval.search import SearchResult

GROUPS = ("chunk", "document")
# search_v5's bound on k (sql/functions/search.sql): the deepest a grouped search goes.
MAX_DEPTH = 1000
MAX_CHUNKS_PER_DOCUMENT = 100
DEFAULT_CHUNKS_PER_DOCUMENT = 3


@dataclass(frozen=True)
class DocumentHit:
    """One document of a grouped search (``pgrag.search(..., group="document")``).

    ``rank`` is the document's place (1, 2, ...), by its best chunk's rank in the chunk search;
    ``score`` is that chunk's score. ``chunks`` are its best chunks (at most
    ``chunks_per_document``), best first, each a :class:`SearchResult` with its rank, score and
    probability in the deeper chunk search the documents were folded from. ``matched`` counts
    every chunk of the document that search returned (listed or not); ``probability`` is the
    sum of their probabilities (None when the search gave none)."""

    rank: int
    score: float
    document_id: int
    source: str
    title: str | None
    metadata: dict[str, Any]
    probability: float | None
    matched: int
    chunks: list[SearchResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_group(group: str, chunks_per_document: int) -> None:
    """A one-line :class:`InputError` for an unknown ``group`` or a bad
    ``chunks_per_document``."""
    if group not in GROUPS:
        raise InputError(f"unknown group {group!r}; use one of {', '.join(GROUPS)}")
    if (
        isinstance(chunks_per_document, bool)
        or not isinstance(chunks_per_document, int)
        or not 1 <= chunks_per_document <= MAX_CHUNKS_PER_DOCUMENT
    ):
        raise InputError(
            f"chunks_per_document must be between 1 and {MAX_CHUNKS_PER_DOCUMENT},"
            f" got {chunks_per_document!r}"
        )


def group_by_document(
    results: Sequence[SearchResult], k: int, chunks_per_document: int
) -> list[DocumentHit]:
    """``results`` (ranked chunks) folded into their first ``k`` distinct documents, in the
    order of each document's best chunk; each with its first ``chunks_per_document`` chunks."""
    ordered = sorted(results, key=lambda r: r.rank)
    documents: dict[int, list[SearchResult]] = {}
    for r in ordered:
        documents.setdefault(r.document_id, []).append(r)
    hits = []
    for rank, chunks in enumerate(list(documents.values())[:k], start=1):
        best = chunks[0]
        probabilities = [c.probability for c in chunks if c.probability is not None]
        hits.append(
            DocumentHit(
                rank=rank,
                score=best.score,
                document_id=best.document_id,
                source=best.source,
                title=best.title,
                metadata=best.metadata,
                probability=math.fsum(probabilities) if probabilities else None,
                matched=len(chunks),
                chunks=chunks[:chunks_per_document],
            )
        )
    return hits


def first_depth(k: int, chunks_per_document: int = DEFAULT_CHUNKS_PER_DOCUMENT) -> int:
    """How many chunks a grouped search asks for first: k and a fifth (at least k + 2), or
    room for k documents the first of which has ``chunks_per_document`` chunks if that is
    more; at most 1,000. Only a little deeper than k: a deeper first search costs every query,
    a second one only the few whose chunks crowd into fewer documents (docs/benchmarks.md,
    "Document-level results": on SQuAD dev, 12 chunks hold 10 paragraphs for 95% of the
    questions)."""
    return min(MAX_DEPTH, max(k + max(2, math.ceil(k / 5)), k + chunks_per_document - 1))


def next_depth(k: int, depth: int, found: int) -> int:
    """The next, deeper search when ``depth`` chunks held only ``found`` (< k) documents:
    enough chunks for k documents at the chunks per document seen so far, and half as many
    again (at least twice as deep), at most 1,000."""
    per_document = depth / max(found, 1)
    return min(MAX_DEPTH, max(2 * depth, math.ceil(1.5 * k * per_document)))


def grouped(
    fetch: Callable[[int], list[SearchResult]],
    k: int,
    chunks_per_document: int,
    timings: dict[str, float] | None = None,
) -> list[DocumentHit]:
    """Up to ``k`` documents from ``fetch(depth)`` (the best ``depth`` chunks), searching
    deeper until ``k`` distinct documents came back, the search ran out of chunks (fewer than
    ``depth``), or it went 1,000 deep. ``timings`` gets ``group_depth`` (the last depth) and
    ``group_searches`` (how many searches it took)."""
    depth = first_depth(k, chunks_per_document)
    searches = 0
    while True:
        results = fetch(depth)
        searches += 1
        found = len({r.document_id for r in results})
        if found >= k or len(results) < depth or depth >= MAX_DEPTH:
            break
        depth = next_depth(k, depth, found)
    if timings is not None:
        timings["group_depth"] = depth
        timings["group_searches"] = searches
    return group_by_document(results, k, chunks_per_document)
