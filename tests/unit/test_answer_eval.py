"""The pure parts of `pgrag eval answers` and of abstention on retrieval confidence: AUROC,
calibration, the seeded split, the retrieval confidence of given hits, reading SQuAD answers.
The evaluation itself, on the real model and database: tests/integration/test_answer_eval.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pgrag.errors import InputError
from pgrag.evaluation.answer_metrics import auroc
from pgrag.evaluation.answers import calibrate, split_paragraphs
from pgrag.evaluation.datasets import load_squad_answers
from pgrag.retrieval.confidence import retrieval_confidence
from pgrag.retrieval.search import SearchResult
from tests.samples import squad_file


@pytest.fixture
def squad(tmp_path: Path) -> Path:
    return squad_file(tmp_path / "tiny-squad.json")


# -- pure parts ------------------------------------------------------------------------------


def test_auroc_matches_pairwise_counting() -> None:
    assert auroc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]) == 0.0
    # ties count one half: pairs (0.5 vs 0.5) = 0.5, (0.5 vs 0.1) = 1, (0.7 vs both) = 2
    assert auroc([0.7, 0.5, 0.5, 0.1], [True, True, False, False]) == pytest.approx(3.5 / 4)
    assert auroc([0.3, 0.4], [True, True]) is None
    with pytest.raises(InputError, match="2 scores but 1 labels"):
        auroc([0.1, 0.2], [True])


def test_calibrate_refuses_at_most_the_allowed_share() -> None:
    confidences = [0.1 * i for i in range(1, 11)]  # 0.1 .. 1.0
    t = calibrate(confidences, 0.2)
    assert t is not None
    assert sum(c < t for c in confidences) <= 2
    assert sum(c < calibrate(confidences, 0.0) for c in confidences) == 0  # type: ignore[operator]
    assert calibrate([], 0.1) is None
    hundred = [i / 100 for i in range(100)]
    assert calibrate(hundred, 0.29) == 0.29  # exactly 29 of 100 below it, not 28


def test_calibrate_counts_what_the_generator_refused_itself() -> None:
    hundred = [i / 100 for i in range(100)]
    # 100 answered + 10 the generator refused: 11 of 110 may be refused, 1 is left.
    assert calibrate(hundred, 0.1, refused=10) == 0.01
    # The generator alone refused more than the share: the threshold refuses nothing more.
    assert calibrate(hundred, 0.1, refused=30) == 0.0
    assert sum(c < calibrate(hundred, 0.1, refused=30) for c in hundred) == 0  # type: ignore[operator]


def _hit(rank: int, text: str, distance: float | None) -> SearchResult:
    return SearchResult(
        rank, 0.1, rank, rank, f"s{rank}", "Volcanoes", None, text, rank, None, distance, None, {}
    )


def test_retrieval_confidence_is_the_mean_of_similarity_and_coverage() -> None:
    question = "When did Mount Tambora erupt?"  # content words: mount, tambora, erupt
    top = _hit(1, "Mount Tambora erupted in 1815.", 0.30)
    other = _hit(2, "Bees dance.", 0.20)  # nearer, but not the top-ranked passage
    got = retrieval_confidence(question, [other, top], "cosine")
    assert got is not None
    assert got.similarity == pytest.approx(0.80)  # the nearest chunk, whatever its rank
    assert got.coverage == pytest.approx(1.0)  # all three words (stemmed) are in the top one
    assert got.value == pytest.approx(0.90)
    partial = retrieval_confidence(question, [_hit(1, "Mount Fuji.", 0.5)], "cosine")
    assert partial is not None and partial.coverage == pytest.approx(1 / 3, abs=1e-4)
    # Inner product (pgvector's <#> is its negative) and L2 over unit vectors.
    ip = retrieval_confidence(question, [_hit(1, "x", -0.6)], "inner_product")
    assert ip is not None and ip.similarity == pytest.approx(0.6)
    l2 = retrieval_confidence(question, [_hit(1, "x", 1.0)], "l2")
    assert l2 is not None and l2.similarity == pytest.approx(0.5)
    assert retrieval_confidence(question, [_hit(1, "Mount Tambora", None)], "cosine") is None
    # A question of stop words names nothing: coverage 0. Words in any script count.
    stop_words = retrieval_confidence("Who is he?", [top], "cosine")
    assert stop_words is not None and stop_words.coverage == 0.0
    russian = retrieval_confidence(
        "Какая столица Перу?", [_hit(1, "Столица Перу Лима.", 0.9)], "cosine"
    )
    assert russian is not None and russian.coverage == pytest.approx(2 / 3, abs=1e-4)


def test_split_is_seeded_and_ignores_order() -> None:
    ids = [f"p{i}" for i in range(10)]
    withheld = split_paragraphs(ids, 0.5, seed=3)
    assert len(withheld) == 5
    assert split_paragraphs(list(reversed(ids)), 0.5, seed=3) == withheld
    assert split_paragraphs(ids, 0.5, seed=4) != withheld


def test_load_squad_answers_keeps_answers(squad: Path) -> None:
    data = load_squad_answers(squad)
    assert data.answers["Volcanoes-0"] == ["1815"]
    assert data.retrieval.qrels["Volcanoes-0"] == {"0-0": 1}
