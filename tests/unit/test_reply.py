"""Replies read as a short answer and its cited explanation, and what the checks make of them:
a reply that is only citation markers is never a cited answer."""

from __future__ import annotations

import pytest

from pgrag.answer.prompt import ABSTAIN_TEXT, number_sources
from pgrag.answer.reply import has_content, parse_reply
from pgrag.answer.span import short_span
from pgrag.answer.verdict import NO_CONTENT, UNCITED, after_retry, check_reply, correction
from tests.unit.test_prompt import _result


@pytest.mark.parametrize(
    ("raw", "short", "text"),
    [
        (
            "Answer: Denver Broncos\nExplanation: The Broncos won Super Bowl 50 [2].",
            "Denver Broncos",
            "The Broncos won Super Bowl 50 [2].",
        ),
        ("**Answer:** 1879 [3]", "1879", "1879 [3]."),
        ("answer: Paris", "Paris", "Paris."),
        # The short answer's citation backs an explanation that has none of its own.
        ("Answer: Denver [2]\nExplanation: They won the game.", "Denver", "They won the game [2]."),
        # An explanation that is only a marker: the short answer is shown with it.
        ("Answer: Denver Broncos\nExplanation: [2]", "Denver Broncos", "Denver Broncos [2]."),
        ("Answer: X [1] Explanation: it says so [1].", "X", "it says so [1]."),
        # An abbreviation keeps its stop; a sentence's stop is dropped.
        ("Answer: 5 p.m.", "5 p.m.", "5 p.m."),
        # The evidence first, then the answer (the form that has a model find the sentence).
        ("Evidence: It opened in 1990 [1].\nAnswer: 1990", "1990", "It opened in 1990 [1]."),
        # "answer:" inside a sentence is not a field.
        ("Explanation: The correct answer: Paris [1].", None, "The correct answer: Paris [1]."),
        # Prose (no fields) is read as the explanation, with no short answer.
        ("The library opens at 9:00 [1].", None, "The library opens at 9:00 [1]."),
    ],
)
def test_replies_are_read_leniently(raw: str, short: str | None, text: str) -> None:
    reply = parse_reply(raw)
    assert (reply.short, reply.text) == (short, text)


@pytest.mark.parametrize("raw", ["[1]", " [2] ", "Answer: [2]", "Answer: [1]\nExplanation: [1]."])
def test_markers_alone_are_no_content(raw: str) -> None:
    reply = parse_reply(raw)
    assert reply.short is None and not has_content(reply.text)


def test_a_bare_citation_is_a_fault_to_retry_not_an_answer() -> None:
    sources = number_sources([_result(1), _result(2)])
    for raw in ("[2]", "Answer: [1]", "[1][2]."):
        verdict = check_reply(raw, sources)
        assert verdict.abstained and verdict.fault == NO_CONTENT and verdict.citations == []
        assert verdict.text == ABSTAIN_TEXT
        final = after_retry(verdict)
        assert final.abstained and final.reason is not None
        assert final.reason.endswith("(also when asked again)") and "only citation" in final.reason
    assert "only source numbers" in correction(NO_CONTENT) and ABSTAIN_TEXT in correction(UNCITED)


def test_an_uncited_or_wrongly_cited_answer_is_a_fault() -> None:
    sources = number_sources([_result(1), _result(2)])
    for raw in ("Answer: 1879\nExplanation: It was founded then.", "Answer: 1879 [7]"):
        verdict = check_reply(raw, sources)
        assert verdict.abstained and verdict.fault == UNCITED
    assert check_reply("Answer: 1879 [7]", sources).invalid == [7]


def test_a_structured_answer_keeps_its_short_answer_and_citations() -> None:
    sources = number_sources([_result(1), _result(2)])
    verdict = check_reply("Answer: 1879 [2, 9]\nExplanation: Founded in 1879 [2].", sources)
    assert not verdict.abstained and verdict.fault is None
    assert verdict.short == "1879" and [c.n for c in verdict.citations] == [2]
    assert verdict.invalid == [9]  # the short answer's invalid citation is reported too
    abstain = check_reply(f"Answer: {ABSTAIN_TEXT}", sources)
    assert abstain.abstained and abstain.fault is None


@pytest.mark.parametrize(
    ("question", "sentence", "span"),
    [
        (
            "When was the University of Chicago founded?",
            "The University of Chicago was founded in 1890 by the American Baptist Society.",
            "1890",
        ),
        ("How many students attend?", "About 15,000 students attend the university.", "15,000"),
        (
            "Who wrote the report?",
            "The report was written by Ada Lovelace in the autumn.",
            "Ada Lovelace",
        ),
    ],
)
def test_the_reader_finds_the_phrase_that_answers(question: str, sentence: str, span: str) -> None:
    assert short_span(question, sentence) == span


def test_a_sentence_that_only_repeats_the_question_has_no_span() -> None:
    assert short_span("Who founded the company?", "Who founded the company?") is None
