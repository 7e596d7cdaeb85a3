"""Splitting documents into chunks that fit the embedding model's input limit.

Text is split into sentences (rule-based, no dependencies), sentences longer than the limit
are cut at token boundaries, and whole sentences are packed greedily into chunks. Consecutive
chunks share a tail of sentences that fits the overlap budget. Every chunk's token count, as
measured by the :class:`~pgrag.tokens.TokenCounter` on the chunk's final text, is at most the
limit, because the embedding model silently truncates anything longer.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from pgrag.text.tokens import TokenCounter, count_all

__all__ = [
    "CONTEXT_TOKENS",
    "Chunk",
    "Section",
    "chunk_lines",
    "chunk_text",
    "markdown_headings",
    "markdown_sections",
    "pack_sentences",
    "split_sentences",
]

# At most this much of a chunk's heading context (its section path, or the document's title)
# is embedded in front of its text, so that the context never crowds the text out of the
# model's input.
CONTEXT_TOKENS = 32


@dataclass(frozen=True)
class Section:
    """A run of Markdown text under one heading path (``()`` before any heading)."""

    path: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Chunk:
    """One piece of text to embed, with the heading path it came from."""

    text: str
    section: tuple[str, ...]
    token_count: int  # counter.count(text), without special tokens


# --- sentences ------------------------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    """
    e.g. i.e. mr. mrs. ms. dr. prof. etc. vs. u.s. no. nos. fig. figs. st. inc. ltd. co. corp.
    jr. sr. cf. al. approx. dept. est. vol. vols. pp. ch. sec. eq. mt. ft. gen. gov. rev.
    jan. feb. mar. apr. jun. jul. aug. sep. sept. oct. nov. dec.
    """.split()
)
_BLANK_LINE = re.compile(r"\n[ \t\f\v]*(?:\n[ \t\f\v]*)+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+\S")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
# A Markdown table's delimiter row, under its header row: | --- | :-: | ---: |
_TABLE_DELIMITER = re.compile(r"^\s*\|(?:\s*:?-+:?\s*\|)+\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_BOUNDARY = re.compile(r"""([.!?]+)(["'\u201d\u2019\u00bb)\]}]*) (?=(\S))""")
_OPENERS = "\"'\u201c\u2018\u00ab([{*_`"
_INITIAL = re.compile(r"[A-Z]\.")
_DOTTED = re.compile(r"(?:[A-Za-z]\.){2,}")
_WHITESPACE = re.compile(r"\s+")


def _is_abbreviation(word: str) -> bool:
    word = word.lstrip(_OPENERS)
    return (
        word.lower() in _ABBREVIATIONS
        or _INITIAL.fullmatch(word) is not None
        or _DOTTED.fullmatch(word) is not None
    )


def _split_segment(segment: str) -> list[str]:
    """Sentences of one paragraph, list item or table row (whitespace already collapsed)."""
    sentences: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(segment):
        nxt = m.group(3)
        if not (nxt.isupper() or nxt.isdigit() or nxt in _OPENERS):
            continue
        if m.group(1) == "." and not m.group(2):
            word = segment[start : m.end(1)].rsplit(" ", 1)[-1]
            if _is_abbreviation(word):
                continue
        sentences.append(segment[start : m.end(2)].strip())
        start = m.end()
    sentences.append(segment[start:].strip())
    return [s for s in sentences if s]


def split_sentences(text: str) -> list[str]:
    """Split plain text (or Markdown prose) into sentences.

    Blank lines end a sentence; other newlines are whitespace, except that each Markdown list
    item and table row starts a new sentence. Whitespace runs collapse to one space.
    """
    sentences: list[str] = []
    for paragraph in _BLANK_LINE.split(text.replace("\r\n", "\n").replace("\r", "\n")):
        segments: list[list[str]] = []
        in_row = False  # the current segment is a table row: the next line starts a new one
        for line in paragraph.split("\n"):
            if _TABLE_ROW.match(line):
                segments.append([line])
                in_row = True
            elif _LIST_ITEM.match(line) or in_row or not segments:
                segments.append([line])
                in_row = False
            else:
                segments[-1].append(line)  # continuation, including lazy list continuation
        for seg in segments:
            joined = _WHITESPACE.sub(" ", " ".join(seg)).strip()
            # A table row is one unit whatever its cells say: a chunk never ends inside one.
            sentences.extend([joined] if _TABLE_ROW.match(joined) else _split_segment(joined))
    return sentences


# --- markdown -------------------------------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a code block opened with ``fence`` (same char, at least as long)."""
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return indent <= 3 and stripped.startswith(fence) and set(stripped) == {fence[0]}


def markdown_sections(text: str) -> list[Section]:
    """Split a Markdown document by ATX headings into sections carrying their heading path.

    A leading YAML front matter block is dropped, headings inside fenced code blocks are
    ignored, and sections without body text are dropped. (:func:`stream_sections` over the
    text's lines, never splitting a section: a streamed file is chunked the same way.)
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return list(stream_sections(lines, markdown=True, max_chars=sys.maxsize))


def markdown_headings(text: str) -> list[str]:
    """The texts of a Markdown document's ATX headings outside code blocks, in order: what a
    document made only of headings is indexed by (its sections have no body text)."""
    found: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is not None:
            if _closes(line, fence):
                fence = None
        elif (m := _FENCE.match(line)) is not None:
            fence = m.group(1)
        elif (h := _HEADING.match(line)) is not None:
            title = _CLOSING_HASHES.sub("", h.group(2) or "").strip()
            if title:
                found.append(title)
    return found


def _markdown_units(text: str) -> list[str]:
    """Sentences of a Markdown section, with each fenced code block kept whole as one unit."""
    units: list[str] = []
    prose: list[str] = []
    block: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is not None:
            block.append(line)
            if _closes(line, fence):
                units.append("\n".join(block).strip())
                block, fence = [], None
        elif (m := _FENCE.match(line)) is not None:
            units.extend(split_sentences("\n".join(prose)))
            prose = []
            fence, block = m.group(1), [line.rstrip()]
        else:
            prose.append("" if _THEMATIC_BREAK.match(line) else line)
    if fence is not None:  # unclosed fence runs to the end of the section
        units.append("\n".join(block).strip())
    units.extend(split_sentences("\n".join(prose)))
    return [u for u in units if u]


# --- packing --------------------------------------------------------------------------------


def _is_block(unit: str) -> bool:
    return bool(_LIST_ITEM.match(unit) or _TABLE_ROW.match(unit) or _FENCE.match(unit))


def table_headers(units: Sequence[str]) -> list[str | None]:
    """For each unit, the header of the Markdown table it is a body row of (its header row and
    delimiter row, joined by a newline), else None: what a chunk that starts inside the table
    repeats first, so that every chunk of a long table says what its columns are. (Units
    carry no blank lines: rows of pipes right after a table, with only a blank line between,
    count as more of its rows.)"""
    out: list[str | None] = [None] * len(units)
    header: str | None = None
    k = 0
    while k < len(units):
        unit = units[k]
        if (
            _TABLE_ROW.match(unit)
            and k + 1 < len(units)
            and _TABLE_DELIMITER.match(units[k + 1])
            and not _TABLE_DELIMITER.match(unit)
        ):
            header = f"{unit.strip()}\n{units[k + 1].strip()}"
            k += 2
            continue
        if header is not None and _TABLE_ROW.match(unit):
            out[k] = header
        else:
            header = None
        k += 1
    return out


def _fit(text: str, counter: TokenCounter, limit: int) -> list[str]:
    """Cut ``text`` into pieces that each count at most ``limit`` tokens on their own."""
    if counter.count(text) <= limit:
        return [text]
    pieces: list[str] = []
    for piece in counter.cut(text, limit):
        # A piece cut inside a word can re-tokenise into more tokens than it had in context;
        # fall back to the longest prefixes that fit (at least one character each).
        while piece and counter.count(piece) > limit:
            lo, hi = 1, len(piece) - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if counter.count(piece[:mid]) <= limit:
                    lo = mid
                else:
                    hi = mid - 1
            head, piece = piece[:lo].strip(), piece[lo:].strip()
            if head:
                pieces.append(head)
        if piece:
            pieces.append(piece)
    return pieces


def _check_budget(limit: int, overlap: int) -> None:
    if limit < 1:
        raise ValueError(f"chunk limit must be at least 1 token, got {limit}")
    if not 0 <= overlap < limit:
        raise ValueError(
            f"chunk overlap must be at least 0 and below the limit ({limit}), got {overlap}"
        )


def pack_sentences(
    sentences: list[str], counter: TokenCounter, limit: int, overlap: int
) -> list[str]:
    """Pack sentences greedily into chunks of at most ``limit`` tokens.

    Sentences longer than the limit are first cut into pieces. Each chunk takes as many whole
    units as fit; the next chunk starts at the earliest unit such that the units carried over
    fit in ``overlap`` tokens and the next chunk still reaches a unit not yet chunked.
    """
    return [text for text, _ in _pack(sentences, counter, limit, overlap)]


def _pack(
    sentences: list[str],
    counter: TokenCounter,
    limit: int,
    overlap: int,
    headers: Sequence[str | None] | None = None,
    check: Callable[[], None] | None = None,
) -> list[tuple[str, int]]:
    """:func:`pack_sentences`, each chunk with its token count. (Each text is counted once:
    a sentence, and a join of units, whose count is kept for the chunk -- tokenising is most
    of what chunking costs.) A chunk that starts at a body row of a Markdown table begins
    with the table's header (:func:`table_headers`; ``headers``, one per sentence, when the
    caller packs a slice of a longer list), counted within the limit; a header too long to
    go with its row is left out."""
    _check_budget(limit, overlap)
    texts: list[str] = []
    blocks: list[bool] = []
    counts: list[int] = []
    heads: list[str | None] = []
    kept = [
        (s.strip(), h) for s, h in zip(sentences, headers or [None] * len(sentences), strict=True)
    ]
    kept = [(s, h) for s, h in kept if s]
    units = [s for s, _ in kept]
    found = table_headers(units) if headers is None else [h for _, h in kept]
    for sentence, count, head in zip(units, count_all(counter, units, check), found, strict=True):
        pieces = [sentence] if count <= limit else _fit(sentence, counter, limit)
        texts.extend(pieces)
        blocks.extend([_is_block(sentence)] * len(pieces))
        counts.extend([count] if count <= limit else [counter.count(t) for t in pieces])
        heads.extend([head] * len(pieces))
    n = len(texts)
    known: dict[tuple[int, int], int] = {}
    head_counts = {h: counter.count(h) for h in set(heads) if h is not None}
    fits: dict[int, bool] = {}

    def prefixed(a: int) -> bool:
        """Whether a chunk starting at unit ``a`` begins with its table's header."""
        head = heads[a]
        if head is None:
            return False
        if a not in fits:
            fits[a] = counter.count(f"{head}\n{texts[a]}") <= limit
        return fits[a]

    def join(a: int, b: int) -> str:
        out = texts[a]
        for k in range(a + 1, b):
            out += ("\n" if blocks[k - 1] or blocks[k] else " ") + texts[k]
        return f"{heads[a]}\n{out}" if prefixed(a) else out

    def tokens(a: int, b: int) -> int:
        if a >= b:
            return 0
        if b == a + 1 and not prefixed(a):
            return counts[a]
        if (a, b) not in known:
            known[(a, b)] = counter.count(join(a, b))
        return known[(a, b)]

    chunks: list[tuple[str, int]] = []
    i = 0
    while i < n:
        if check is not None and len(chunks) % 256 == 255:
            check()  # (a section of many units: a table of a million rows is one section)
        # Estimate the end from per-unit counts, then correct it on the joined text.
        head = heads[i]
        j, total = i + 1, counts[i] + (head_counts[head] if head and prefixed(i) else 0)
        while j < n and total + counts[j] <= limit:
            total += counts[j]
            j += 1
        while j > i + 1 and tokens(i, j) > limit:
            j -= 1
        while j < n and tokens(i, j + 1) <= limit:
            j += 1
        chunks.append((join(i, j), tokens(i, j)))
        if j >= n:
            break
        s = j  # s == j: no overlap; walk back while the carried tail fits the overlap budget
        while s - 1 > i and tokens(s - 1, j) <= overlap and tokens(s - 1, j + 1) <= limit:
            s -= 1
        i = s
        known = {k: v for k, v in known.items() if k[0] >= i}  # (only later starts are asked)
    return chunks


def chunk_text(
    text: str,
    counter: TokenCounter,
    *,
    limit: int,
    overlap: int,
    markdown: bool,
    check: Callable[[], None] | None = None,
) -> list[Chunk]:
    """Chunk a document; with ``markdown`` chunks follow (and never span) heading sections.
    ``check`` is called between sections (it may raise to stop a file that takes too long)."""
    _check_budget(limit, overlap)
    sections = markdown_sections(text) if markdown else [Section((), text)]
    chunks: list[Chunk] = []
    for section in sections:
        if check is not None:
            check()
        path = section.path
        units = _markdown_units(section.text) if markdown else split_sentences(section.text)
        for piece, count in _pack(units, counter, limit, overlap, check=check):
            chunks.append(Chunk(text=piece, section=path, token_count=count))
    return chunks


# --- streaming ------------------------------------------------------------------------------

STREAM_SECTION_CHARS = 1 << 20  # a section longer than this is chunked in parts, at blank lines


def stream_sections(
    lines: Iterable[str], *, markdown: bool, max_chars: int | None = None
) -> Iterator[Section]:
    """:func:`markdown_sections` (or, without ``markdown``, the whole text as one section) over
    lines read one at a time. A section is yielded when it ends; one longer than
    ``max_chars`` is yielded in parts that end at a blank line outside code blocks, so memory
    stays bounded whatever the file's size. Up to that size the sections are the same."""
    max_chars = STREAM_SECTION_CHARS if max_chars is None else max_chars
    stack: list[tuple[int, str]] = []
    body: list[str] = []
    size = 0
    fence: str | None = None
    # A leading YAML front matter block is dropped once it closes; held until then (a block
    # that never closes within 1,000 lines is text after all, as in markdown_sections).
    front: list[str] | None = None
    first = True

    def flush() -> Iterator[Section]:
        nonlocal size
        joined = "\n".join(body)
        if joined.strip():
            yield Section(tuple(title for _, title in stack), joined.strip("\n"))
        body.clear()
        size = 0

    def take(line: str) -> Iterator[Section]:
        nonlocal fence, size
        if markdown and fence is not None:
            if _closes(line, fence):
                fence = None
        elif markdown and (m := _FENCE.match(line)) is not None:
            fence = m.group(1)
        elif markdown and (h := _HEADING.match(line)) is not None:
            yield from flush()
            level = len(h.group(1))
            title = _CLOSING_HASHES.sub("", h.group(2) or "").strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            return
        elif size > max_chars and not line.strip():
            yield from flush()
            return
        body.append(line)
        size += len(line) + 1

    for raw in lines:
        line = raw.rstrip("\n").rstrip("\r")
        if first:
            first = False
            line = line.lstrip("\ufeff")
            if markdown and line.rstrip() == "---":
                front = [line]
                continue
        if front is not None:
            front.append(line)
            if line.rstrip() in ("---", "..."):
                front = None
            elif len(front) > 1000:
                held, front = front, None
                for kept in held:
                    yield from take(kept)
            continue
        yield from take(line)
    for kept in front or []:
        yield from take(kept)
    yield from flush()


def chunk_lines(
    lines: Iterable[str], counter: TokenCounter, *, limit: int, overlap: int, markdown: bool
) -> Iterator[Chunk]:
    """:func:`chunk_text` over lines read one at a time (a file too large to hold whole)."""
    _check_budget(limit, overlap)
    for section in stream_sections(lines, markdown=markdown):
        units = _markdown_units(section.text) if markdown else split_sentences(section.text)
        for piece, count in _pack(units, counter, limit, overlap):
            yield Chunk(text=piece, section=section.path, token_count=count)
