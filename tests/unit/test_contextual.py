"""The pieces of contextual ingest that need no model or database: the prompt, the reply's
line, the document window and the text a chunk's vector is made from."""

from __future__ import annotations

import os

import pytest

from pgrag.ingest.contextual import (
    INSTRUCTION,
    MAX_CHARS,
    context_line,
    document_window,
    messages,
)
from pgrag.text.vector_text import vector_text


class WordCounter:
    """One token per whitespace-separated word; cut in words."""

    def count(self, text: str) -> int:
        return len(text.split())

    def cut(self, text: str, max_tokens: int) -> list[str]:
        words = text.split()
        return [" ".join(words[i : i + max_tokens]) for i in range(0, len(words), max_tokens)]


def test_the_document_comes_first_and_the_chunk_last() -> None:
    a = messages("The whole document.", "chunk one")[0]["content"]
    b = messages("The whole document.", "chunk two")[0]["content"]
    assert a.startswith("<document>\nThe whole document.\n</document>\n")
    assert a.endswith(f"<chunk>\nchunk one\n</chunk>\n{INSTRUCTION}")
    assert os.path.commonprefix([a, b]).endswith("<chunk>\nchunk ")
    c = messages("The whole document.", "chunk one", order="chunk-first")[0]["content"]
    assert c.index("<chunk>") < c.index("<document>") and c.endswith(INSTRUCTION)
    with pytest.raises(ValueError, match="order"):
        messages("d", "c", order="sideways")


@pytest.mark.parametrize(
    ("reply", "line"),
    [
        ("This chunk describes the refund window.", "This chunk describes the refund window."),
        (
            "  Context: The section on parking rules. \n\nMore text.",
            "The section on parking rules.",
        ),
        (
            'Succinct context:\n"From the handbook\'s billing chapter."',
            "From the handbook's billing chapter.",
        ),
        (
            "**The ovens section of the bakery handbook**",
            "The ovens section of the bakery handbook",
        ),
        ("a\tline   with\nbreaks", None),  # its first line has two words of 2+ letters
        ("", None),
        ("   \n  ", None),
        ("[1]", None),
        ("Context:", None),
        ("The <chunk> is about parking rules here.", None),
        ("Yes.", None),
        ("42 17 99", None),
    ],
)
def test_the_reply_gives_one_line_or_none(reply: str, line: str | None) -> None:
    assert context_line(reply) == line


def test_a_long_line_is_cut_at_a_word() -> None:
    line = context_line("word " * 300)
    assert line is not None and len(line) <= MAX_CHARS + 1 and line.endswith("word…")


def test_the_window_is_the_longest_beginning_within_the_tokens() -> None:
    counter = WordCounter()
    text = " ".join(f"w{i}" for i in range(1000))
    assert document_window("short text here", counter.count, 10) == "short text here"
    window = document_window(text, counter.count, 37)
    assert window == " ".join(f"w{i}" for i in range(37))
    assert document_window("oneverylongword and more", lambda t: len(t), 3) == "oneverylongword"
    calls = []
    document_window(text, lambda t: calls.append(t) or counter.count(t), 500)
    assert len(calls) < 20  # bisection, not a count per word


def test_the_vector_text_keeps_the_chunk_whole_and_cuts_the_line() -> None:
    counter = WordCounter()
    assert vector_text("Head", "the text", None, counter, 100) == "Head\nthe text"
    assert vector_text("", "the text", "", counter, 100) == "the text"
    full = vector_text("Head", "a b c", "one two three", counter, 100)
    assert full == "Head\none two three\na b c"
    # 10 tokens of input: 2 special, 1 heading, 3 text: 4 left for the line.
    cut = vector_text("Head", "a b c", "one two three four five six", counter, 10)
    assert cut == "Head\none two three four\na b c"
    assert vector_text("Head", "a b c d e f g", "one two", counter, 10) == "Head\na b c d e f g"
