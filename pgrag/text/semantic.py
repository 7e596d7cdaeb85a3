"""Semantic chunking: chunks that end where the text changes subject.

The fixed chunker (:mod:`pgrag.text.chunking`) packs whole sentences greedily up to the token
limit, wherever that falls. This one embeds every sentence (with the collection's own model,
in batches) and cuts where adjacent sentences stop resembling each other, as Kamradt's and
LangChain's ``SemanticChunker`` do:

1. The units are the fixed chunker's: sentences, and in Markdown each list item, table row and
   fenced code block; a heading still starts a new chunk (sections are chunked apart).
2. At each boundary between two units, the *distance* is 1 - the cosine similarity of the
   mean vector of the :data:`WINDOW` units before it and that of the :data:`WINDOW` units after
   it (within the section).
3. A boundary is a break when its distance is above the :data:`PERCENTILE`-th percentile of the
   document's own distances, over the boundaries that may be breaks (:func:`candidates`): not
   between two table rows (a table is not cut for its meaning), and at least
   :data:`MIN_FRACTION` of the limit from either end of its section. A section that has no
   such boundary and fits the limit is one piece, and its sentences are not embedded.
4. A piece still over the token limit is cut again at its most distant boundary (one outside
   a table and leaving both sides at least :data:`MIN_FRACTION` of the limit, if there is one,
   else one outside a table; among equal distances the one nearest its middle), until every
   piece fits; a piece under that minimum is merged into the neighbour it resembles more,
   when the two fit together.
5. Each piece is packed by the fixed chunker's rules, which guarantee the limit on the final
   text (a unit longer than the limit is cut at token boundaries). Consecutive chunks overlap
   only where a piece had to be packed into several chunks; across a break there is no overlap.

The result depends only on the text and the model's vectors: distances are rounded (to 1e-6)
before they are compared, so the same document with the same model gives the same chunks
(ties go to the boundary nearest the middle, then to the earliest).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from pgrag.text.chunking import (
    _TABLE_ROW,
    Chunk,
    Section,
    _check_budget,
    _markdown_units,
    _pack,
    markdown_sections,
    split_sentences,
    stream_sections,
    table_headers,
)
from pgrag.text.tokens import TokenCounter

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "MIN_FRACTION",
    "PERCENTILE",
    "STRATEGIES",
    "WINDOW",
    "boundary_distances",
    "candidates",
    "segment",
    "semantic_chunk_lines",
    "semantic_chunk_text",
]

STRATEGIES = ("fixed", "semantic")  # a collection's chunking (collections.settings ->> 'chunking')
PERCENTILE = 95.0  # a boundary more distant than this share of the document's own is a break
# Units on each side of a boundary whose mean vectors are compared. 2 separated known topic
# boundaries from the rest better than 1 or 3 (ROC AUC of the distance: 0.86 against 0.82 and
# 0.80 between consecutive CMake manual pages, 0.66 against 0.56 and 0.67 between the
# handbook's sections).
WINDOW = 2
MIN_FRACTION = 0.25  # a piece under this share of the limit is merged into a neighbour
_DIGITS = 6  # distances are rounded to this many decimals (determinism across batch shapes)

Embed = Callable[[list[str]], "npt.NDArray[np.float32]"]


def boundary_distances(vectors: npt.NDArray[np.floating], window: int = WINDOW) -> list[float]:
    """For ``n`` unit vectors, the ``n - 1`` distances between the mean of the ``window``
    vectors before each boundary and the mean of the ``window`` after it (1 - cosine)."""
    import numpy as np

    v = np.asarray(vectors, dtype=np.float64)
    n = len(v)
    if n < 2:
        return []
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms > 0, norms, 1.0)
    sums = np.vstack([np.zeros((1, v.shape[1])), np.cumsum(v, axis=0)])
    out: list[float] = []
    for b in range(1, n):
        left = sums[b] - sums[max(0, b - window)]
        right = sums[min(n, b + window)] - sums[b]
        denom = float(np.linalg.norm(left) * np.linalg.norm(right))
        cos = float(left @ right) / denom if denom > 0 else 0.0
        out.append(round(1.0 - cos, _DIGITS))
    return out


def segment(
    counts: Sequence[int],
    distances: Sequence[float],
    threshold: float,
    *,
    limit: int,
    min_tokens: int,
    joined: Sequence[bool] | None = None,
) -> list[tuple[int, int]]:
    """Where to cut ``len(counts)`` units (with these token counts) into pieces: ``(start,
    end)`` index ranges covering them in order. ``distances[b - 1]`` is boundary ``b``'s
    (between units ``b - 1`` and ``b``); it is a break when above ``threshold`` and one of
    the :func:`candidates` (not ``joined[b - 1]``, and at least ``min_tokens`` from either
    end). Pieces over ``limit`` (by the sum of their counts) are cut at their most distant
    boundary, any of them; pieces under ``min_tokens`` are merged into the more similar
    neighbour when both fit."""
    n = len(counts)
    if n == 0:
        return []
    if len(distances) != n - 1:
        raise ValueError(f"{n} units need {n - 1} distances, got {len(distances)}")
    prefix = [0]
    for c in counts:
        prefix.append(prefix[-1] + c)

    def size(a: int, b: int) -> int:
        return prefix[b] - prefix[a]

    eligible = candidates(counts, min_tokens, joined)
    cuts = {b for b in range(1, n) if eligible[b - 1] and distances[b - 1] > threshold}
    for i, c in enumerate(counts):  # a unit over the limit is a piece of its own (cut later)
        if c > limit:
            cuts.update(b for b in (i, i + 1) if 0 < b < n)
    bounds = [0, *sorted(cuts), n]
    pieces: list[tuple[int, int]] = []
    todo = [(bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1)][::-1]
    while todo:  # (a stack, in document order)
        a, b = todo.pop()
        if b - a < 2 or size(a, b) <= limit:
            pieces.append((a, b))
            continue
        inner = list(range(a + 1, b))
        balanced = [c for c in inner if size(a, c) >= min_tokens and size(c, b) >= min_tokens]
        free = [c for c in inner if not (joined is not None and joined[c - 1])]
        # Where to cut, in this order: a boundary outside a table that leaves both sides at
        # least min_tokens, any outside a table, any leaving min_tokens, any. Among those, the
        # most distant; among equals, the one that halves the piece best.
        wide = set(balanced)
        pool = next(p for p in ([c for c in free if c in wide], free, balanced, inner) if p)
        at = max(pool, key=lambda c: (distances[c - 1], -abs(size(a, c) - size(c, b)), -c))
        todo.extend([(at, b), (a, at)])

    # Merge pieces under the minimum, the smallest (then the earliest) first, into the
    # neighbour across the less distant boundary, while the two fit the limit. (A piece that
    # fits with neither never will: its neighbours only grow.)
    starts = [a for a, _ in pieces]
    ends = [b for _, b in pieces]
    alive = [True] * len(pieces)
    before = list(range(-1, len(pieces) - 1))
    after = [*range(1, len(pieces)), -1]
    heap = [(size(a, b), a, k) for k, (a, b) in enumerate(pieces) if size(a, b) < min_tokens]
    heapq.heapify(heap)
    while heap:
        tokens, a, k = heapq.heappop(heap)
        if not alive[k] or starts[k] != a or size(starts[k], ends[k]) != tokens:
            continue  # (stale: merged since)
        b = ends[k]
        options = []
        if before[k] >= 0 and size(starts[before[k]], b) <= limit:
            options.append((distances[a - 1], 0, before[k]))
        if after[k] >= 0 and size(a, ends[after[k]]) <= limit:
            options.append((distances[b - 1], 1, after[k]))
        if not options:
            continue
        _, _, other = min(options)
        lo, hi = (other, k) if other == before[k] else (k, other)
        ends[lo] = ends[hi]
        alive[hi] = False
        after[lo] = after[hi]
        if after[hi] >= 0:
            before[after[hi]] = lo
        merged = size(starts[lo], ends[lo])
        if merged < min_tokens:
            heapq.heappush(heap, (merged, starts[lo], lo))
    pieces = [(starts[k], ends[k]) for k in range(len(pieces)) if alive[k]]
    return pieces


def candidates(
    counts: Sequence[int], min_tokens: int, joined: Sequence[bool] | None = None
) -> list[bool]:
    """Which of the ``len(counts) - 1`` boundaries may be a break for their distance alone:
    not between two units ``joined`` (table rows), and leaving at least ``min_tokens`` before
    and after it. (A break nearer an end would leave a piece that is merged back; the mean
    vector on that side is also of fewer units, so its distance says less.)"""
    total = sum(counts)
    out: list[bool] = []
    before = 0
    for b in range(1, len(counts)):
        before += counts[b - 1]
        keep = joined is not None and joined[b - 1]
        out.append(not keep and before >= min_tokens and total - before >= min_tokens)
    return out


def _units(section: Section, markdown: bool) -> list[str]:
    units = _markdown_units(section.text) if markdown else split_sentences(section.text)
    return [u.strip() for u in units if u.strip()]


def _threshold(distances: Iterable[float], percentile: float) -> float:
    import numpy as np

    values = list(distances)
    if not values:
        return float("inf")
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), percentile)), _DIGITS)


def _chunks(
    sections: list[tuple[Section, list[str]]],
    counter: TokenCounter,
    embed: Embed,
    *,
    limit: int,
    overlap: int,
) -> Iterator[Chunk]:
    """The chunks of these sections (with their units), the threshold taken over all of them."""
    min_tokens = max(1, int(limit * MIN_FRACTION))
    plans = []  # per section: its units' counts, which boundaries are joined and candidates
    for _, units in sections:
        counts = [counter.count(u) for u in units]
        rows = [bool(_TABLE_ROW.match(u)) for u in units]
        joined = [rows[b - 1] and rows[b] for b in range(1, len(units))]
        plans.append((counts, joined, candidates(counts, min_tokens, joined)))
    # Only a section with a candidate boundary, or over the limit, needs its units' vectors;
    # every distinct text is embedded once, in one call.
    needed = [
        len(units) > 1 and (any(eligible) or sum(counts) > limit)
        for (_, units), (counts, _, eligible) in zip(sections, plans, strict=True)
    ]
    texts = list(
        dict.fromkeys(
            u for (_, units), need in zip(sections, needed, strict=True) if need for u in units
        )
    )
    vectors = embed(texts) if texts else None
    row = {t: i for i, t in enumerate(texts)}
    distances = [
        boundary_distances(vectors[[row[u] for u in units]]) if need and vectors is not None else []
        for (_, units), need in zip(sections, needed, strict=True)
    ]
    threshold = _threshold(
        (
            d
            for found, (_, _, eligible) in zip(distances, plans, strict=True)
            for d, e in zip(found, eligible, strict=False)
            if e
        ),
        PERCENTILE,
    )
    for (section, units), (counts, joined, _), found in zip(
        sections, plans, distances, strict=True
    ):
        if not units:
            continue
        if not found:
            pieces = [(0, len(units))]
        else:
            pieces = segment(
                counts, found, threshold, limit=limit, min_tokens=min_tokens, joined=joined
            )
        heads = table_headers(units)  # (a piece that starts inside a table repeats its header)
        for a, b in pieces:
            for text, count in _pack(units[a:b], counter, limit, overlap, heads[a:b]):
                yield Chunk(text=text, section=section.path, token_count=count)


def semantic_chunk_text(
    text: str,
    counter: TokenCounter,
    embed: Embed,
    *,
    limit: int,
    overlap: int,
    markdown: bool,
    check: Callable[[], None] | None = None,
) -> list[Chunk]:
    """:func:`~pgrag.text.chunking.chunk_text`, cut where the subject changes (the module
    docstring). ``embed`` turns a list of texts into one row of floats each (the collection's
    model, ``embedder.embed``); it is called once per document. ``check`` is called between
    sections while they are split into units (not while they are embedded)."""
    _check_budget(limit, overlap)
    found = markdown_sections(text) if markdown else [Section((), text)]
    sections: list[tuple[Section, list[str]]] = []
    for section in found:
        if check is not None:
            check()
        sections.append((section, _units(section, markdown)))
    return list(_chunks(sections, counter, embed, limit=limit, overlap=overlap))


def semantic_chunk_lines(
    lines: Iterable[str],
    counter: TokenCounter,
    embed: Embed,
    *,
    limit: int,
    overlap: int,
    markdown: bool,
) -> Iterator[Chunk]:
    """:func:`semantic_chunk_text` over lines read one at a time (a file too large to hold
    whole): section by section, each with the threshold of its own distances."""
    _check_budget(limit, overlap)
    for section in stream_sections(lines, markdown=markdown):
        yield from _chunks(
            [(section, _units(section, markdown))], counter, embed, limit=limit, overlap=overlap
        )
