"""Support scores of cited sentences, uncited sentences, and the faithfulness estimate."""

from __future__ import annotations

from pgrag.answer.prompt import ABSTAIN_TEXT, Source
from pgrag.answer.support import sentence_support, split_sentences
from pgrag.retrieval.search import SearchResult


def source(n: int, text: str, section: str | None = None) -> Source:
    result = SearchResult(
        rank=n, score=1.0, chunk_id=100 + n, document_id=n, source=f"doc{n}.md", title=None,
        section=section, text=text, vector_rank=None, keyword_rank=None, vector_distance=None,
        keyword_score=None, metadata={},
    )  # fmt: skip
    return Source(n, result)


SOURCES = [
    source(1, "Monthly subscriptions can be refunded within 14 days of the charge."),
    source(2, "The Lisbon office opens at 8:00 and closes at 18:00 on weekdays.", "Office"),
]


def test_splitting_keeps_citations_with_their_sentence() -> None:
    assert split_sentences("It opens at 8:00. [2] Guests sign in.\nBikes go inside [1, 3].") == [
        "It opens at 8:00 [2].",
        "Guests sign in.",
        "Bikes go inside [1, 3].",
    ]
    assert split_sentences("Version 1.2 is out. See the notes [1].") == [
        "Version 1.2 is out.",
        "See the notes [1].",
    ]


def test_a_sentence_from_its_source_is_fully_supported() -> None:
    scored, faithfulness = sentence_support(
        "Monthly subscriptions are refunded within 14 days [1]. The office opens at 8:00 [2].",
        SOURCES,
    )
    assert [s.support for s in scored] == [1.0, 1.0]
    assert [s.citations for s in scored] == [[1], [2]]
    assert faithfulness == 1.0


def test_wrong_figures_and_wrong_sources_lower_the_support() -> None:
    scored, faithfulness = sentence_support(
        "Monthly subscriptions are refunded within 30 days [1]. The office opens at 8:00 [1].",
        SOURCES,
    )
    first, second = scored
    assert first.missing == ["30"] and 0.5 < (first.support or 0) < 1
    # Cited the refund passage for the office hours: most of it is not there.
    assert (second.support or 0) < 0.5 and "8:00" in second.missing
    assert faithfulness is not None and faithfulness < 0.8


def test_uncited_sentences_are_reported_and_count_zero() -> None:
    scored, faithfulness = sentence_support(
        "The office opens at 8:00 [2]. Parking is free for everyone.", SOURCES
    )
    assert scored[1].citations == [] and scored[1].support is None
    assert "parking" in scored[1].missing
    assert faithfulness == 0.5
    # The best of several citations counts; a citation to a source not given is ignored.
    scored, _ = sentence_support("The office opens at 8:00 [1, 2, 7].", SOURCES)
    assert scored[0].citations == [1, 2] and scored[0].support == 1.0


def test_abstentions_and_empty_answers_have_no_estimate() -> None:
    assert sentence_support(ABSTAIN_TEXT, SOURCES) == ([], None)
    assert sentence_support("  ", SOURCES) == ([], None)
    assert sentence_support("[1].", SOURCES) == ([], None)


def test_list_items_are_sentences_and_lead_ins_and_code_are_not() -> None:
    answer = (
        "Two rules apply:\n1. Monthly subscriptions are refunded within 14 days [1].\n"
        "2. The office opens at 8:00 [2].\n- It closes at 18:00 [2].\n"
        "```\nrefund(days=14)  # [1]\n```"
    )
    assert split_sentences(answer) == [
        "Two rules apply:",
        "Monthly subscriptions are refunded within 14 days [1].",
        "The office opens at 8:00 [2].",
        "It closes at 18:00 [2].",
    ]
    scored, faithfulness = sentence_support(answer, SOURCES)
    assert [s.citations for s in scored] == [[1], [2], [2]]  # no "1." / "2." / lead-in
    assert faithfulness == 1.0


def test_the_light_stemmer_matches_inflections() -> None:
    from pgrag.text.stemming import stem

    pairs = [("bicycles", "bicycle"), ("parked", "parking"), ("policies", "policy"),
             ("charges", "charged"), ("boxes", "box"), ("classes", "class")]  # fmt: skip
    assert all(stem(a) == stem(b) for a, b in pairs)
    assert stem("refund") != stem("fund") and stem("us") == "us"


def test_inline_code_stays_inside_its_sentence() -> None:
    assert split_sentences("Run `pgrag ask` to ask about refunds [1].") == [
        "Run to ask about refunds [1]."
    ]
    scored, faithfulness = sentence_support("Monthly `plans` refunded within 14 days [1].", SOURCES)
    assert len(scored) == 1 and faithfulness == 1.0
