"""Answer metrics and the RAG report, against examples worked out by hand (no database)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest

import pgrag.evaluation
from pgrag.errors import InputError
from pgrag.evaluation import (
    RagRecord,
    RagReport,
    answer_metrics,
    exact_match,
    metrics,
    normalize,
    rag_report,
    token_f1,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


# --- normalize ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        # Articles go only as whole words: "theory", "another", "android" keep their letters.
        ("a theory of another android", "theory of another android"),
        ("An apple, THE pear and a plum", "apple pear and plum"),
        # Punctuation goes first, so "A-Team" becomes one word "ateam" and keeps its "a";
        # "theatre" is not "the" + "atre".
        ("Theatre, the A-Team!", "theatre ateam"),
        ("the-end", "theend"),
        # Every string.punctuation character is dropped, with no space put in its place.
        ("$1,000.00", "100000"),
        ("rock'n'roll (1950s)", "rocknroll 1950s"),
        # Whitespace of any kind collapses to single spaces, none at the ends.
        ("  Denver\t\n  Broncos  ", "denver broncos"),
        # Nothing left at all.
        ("The.", ""),
        ("  a  an  the ", ""),
        ("", ""),
        # Like the official script, only ASCII punctuation is removed.
        ("\u201cquoted\u201d", "\u201cquoted\u201d"),
    ],
)
def test_normalize_is_squad_v11(text: str, expected: str) -> None:
    assert normalize(text) == expected


# --- exact_match ---------------------------------------------------------------------------


def test_exact_match_after_normalization() -> None:
    assert exact_match("The Denver Broncos.", "denver broncos") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    # Word order matters for EM (it does not for F1, below).
    assert exact_match("Broncos Denver", "Denver Broncos") == 0.0


def test_exact_match_is_the_max_over_references() -> None:
    assert exact_match("Broncos", ["Denver Broncos", "the broncos!"]) == 1.0
    assert exact_match("Broncos", ["Denver Broncos", "Carolina Panthers"]) == 0.0
    assert exact_match("Broncos", ("Broncos",)) == 1.0  # any sequence, not only a list


def test_exact_match_empty_answers() -> None:
    assert exact_match("", "") == 1.0
    assert exact_match("The!", [""]) == 1.0  # both normalize to ""
    assert exact_match("", "Broncos") == 0.0
    assert exact_match("Broncos", "") == 0.0


# --- token_f1 ------------------------------------------------------------------------------


def test_token_f1_partial_overlap_by_hand() -> None:
    # prediction: denver broncos won            (3 tokens)
    # reference:  denver broncos super bowl     (4 tokens)
    # shared: denver, broncos = 2 -> precision 2/3, recall 2/4
    # F1 = 2 * (2/3) * (1/2) / (2/3 + 1/2) = (2/3) / (7/6) = 4/7
    assert token_f1("Denver Broncos won", "Denver Broncos Super Bowl") == pytest.approx(4 / 7)


def test_token_f1_counts_tokens_as_a_bag() -> None:
    # x x y  vs  x y y: shared x min(2, 1) = 1, y min(1, 2) = 1 -> 2 of 3 each way.
    # precision 2/3, recall 2/3 -> F1 2/3 (a set overlap would wrongly give 1.0).
    assert token_f1("x x y", "x y y") == pytest.approx(2 / 3)
    # paris paris paris vs paris: shared 1 -> precision 1/3, recall 1/1
    # F1 = 2 * (1/3) * 1 / (1/3 + 1) = (2/3) / (4/3) = 1/2
    assert token_f1("Paris Paris Paris", "Paris") == pytest.approx(1 / 2)


def test_token_f1_ignores_order_articles_and_punctuation() -> None:
    assert token_f1("Broncos, Denver", "the Denver Broncos") == 1.0
    assert token_f1("Carolina Panthers", "Denver Broncos") == 0.0


def test_token_f1_is_the_max_over_references() -> None:
    # denver broncos won against
    #   broncos                    -> shared 1, P 1/3, R 1/1 -> 2*(1/3)/(4/3) = 1/2
    #   denver broncos super bowl  -> 4/7 (above)
    #   denver broncos             -> shared 2, P 2/3, R 2/2 -> 2*(2/3)/(5/3) = 4/5
    references = ["Broncos", "Denver Broncos Super Bowl", "Denver Broncos"]
    assert token_f1("Denver Broncos won", references) == pytest.approx(4 / 5)
    assert token_f1("Denver Broncos won", references[:2]) == pytest.approx(4 / 7)


def test_token_f1_empty_answers() -> None:
    assert token_f1("", "") == 1.0  # empty vs empty (SQuAD v2.0 rule)
    assert token_f1("The!", ["  a "]) == 1.0  # both have no tokens after normalization
    assert token_f1("", "Broncos") == 0.0
    assert token_f1("Broncos", "the") == 0.0
    assert token_f1("", ["Broncos", ""]) == 1.0  # max over references


@pytest.mark.parametrize("score", [exact_match, token_f1])
def test_no_references_is_an_input_error(score: Callable[[str, list[str]], float]) -> None:
    with pytest.raises(InputError, match="at least one reference") as raised:
        score("Broncos", [])
    assert "\n" not in str(raised.value)


# --- RagRecord -----------------------------------------------------------------------------


def test_record_normalizes_its_sequences() -> None:
    record = RagRecord(
        "q", answerable=True, abstained=False, retrieved_ids=["a"], references="Broncos"
    )
    assert record.retrieved_ids == ("a",)
    assert record.gold_ids == ()
    assert record.references == ("Broncos",)  # one string is one reference


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"retrieved_ids": "c1"}, "retrieved_ids must be a list of ids"),
        ({"gold_ids": "c1"}, "gold_ids must be a list of ids"),
        ({"claims_supported": 1}, "both claims_supported and claims_total"),
        ({"claims_total": 1}, "both claims_supported and claims_total"),
        ({"claims_supported": 3, "claims_total": 2}, "got 3 of 2"),
        ({"claims_supported": -1, "claims_total": 2}, "got -1 of 2"),
    ],
)
def test_record_rejects_bad_fields(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        RagRecord("q", answerable=True, abstained=False, **fields)  # type: ignore[arg-type]


# --- rag_report ----------------------------------------------------------------------------


def hand_built_records() -> list[RagRecord]:
    return [
        # A: answerable, answered. Gold c1, c4; c1 retrieved -> recall 1/2. Claims 3/4.
        #    "Denver Broncos" matches a reference -> EM 1, F1 1.
        RagRecord(
            "A",
            answerable=True,
            abstained=False,
            retrieved_ids=["c1", "c2", "c3"],
            gold_ids=["c1", "c4"],
            claims_supported=3,
            claims_total=4,
            prediction="Denver Broncos",
            references=["Denver Broncos", "Broncos"],
        ),
        # B: answerable, answered. Gold c5 retrieved (twice) -> recall 1. Claims 0/2.
        #    EM 0, F1 4/7 (the partial-overlap example).
        RagRecord(
            "B",
            answerable=True,
            abstained=False,
            retrieved_ids=["c5", "c5"],
            gold_ids=["c5"],
            claims_supported=0,
            claims_total=2,
            prediction="denver broncos won",
            references=["denver broncos super bowl"],
        ),
        # C: answerable, refused (a false refusal). Gold c7, c8, c9; c7 retrieved -> recall
        #    1/3. No claims. Its prediction is not scored: it abstained.
        RagRecord(
            "C",
            answerable=True,
            abstained=True,
            retrieved_ids=["c7"],
            gold_ids=["c7", "c8", "c9"],
            prediction="I don't know.",
            references=["x"],
        ),
        # D: answerable, answered, but no gold ids (not in context recall), no references
        #    (not scored), and claims_total 0 (not in faithfulness).
        RagRecord(
            "D",
            answerable=True,
            abstained=False,
            retrieved_ids=["c1"],
            claims_supported=0,
            claims_total=0,
            prediction="Broncos",
        ),
        # E: unanswerable, abstained (correctly).
        RagRecord("E", answerable=False, abstained=True, retrieved_ids=["c1"]),
        # F: unanswerable, answered anyway. Claims 1/1. Its gold ids and references are
        #    ignored: context recall and EM/F1 are over answerable records only.
        RagRecord(
            "F",
            answerable=False,
            abstained=False,
            retrieved_ids=["c3"],
            gold_ids=["c2"],
            claims_supported=1,
            claims_total=1,
            prediction="Carolina",
            references=["Carolina"],
        ),
        # G: unanswerable, abstained (correctly).
        RagRecord("G", answerable=False, abstained=True),
    ]


def test_rag_report_by_hand() -> None:
    report = rag_report(hand_built_records())
    expected: dict[str, int | Fraction] = {
        "records": 7,
        "answerable": 4,  # A B C D
        "unanswerable": 3,  # E F G
        # over A B C: (1/2 + 1 + 1/3) / 3 = (11/6) / 3 = 11/18
        "context_recall": Fraction(11, 18),
        "with_gold": 3,
        # over A B F: (3/4 + 0/2 + 1/1) / 3 = (7/4) / 3 = 7/12
        "faithfulness": Fraction(7, 12),
        "with_claims": 3,
        # E and G abstained, F did not: 2/3
        "abstention_when_unanswerable": Fraction(2, 3),
        # C abstained, A B D did not: 1/4
        "false_refusal_rate": Fraction(1, 4),
        # over A B: (1 + 0) / 2
        "exact_match": Fraction(1, 2),
        # over A B: (1 + 4/7) / 2 = (11/7) / 2 = 11/14
        "f1": Fraction(11, 14),
        "scored_answers": 2,
    }
    got = report.to_dict()
    assert list(got) == list(expected)  # every field, in order
    for name, value in expected.items():
        assert got[name] == pytest.approx(float(value)), name
        assert getattr(report, name) == got[name]
    assert isinstance(got["records"], int)


def test_rag_report_takes_any_iterable() -> None:
    records = hand_built_records()
    assert rag_report(iter(records)) == rag_report(records)


def test_rag_report_of_nothing_is_none_not_zero() -> None:
    report = rag_report([])
    assert report == RagReport(
        records=0,
        answerable=0,
        unanswerable=0,
        context_recall=None,
        with_gold=0,
        faithfulness=None,
        with_claims=0,
        abstention_when_unanswerable=None,
        false_refusal_rate=None,
        exact_match=None,
        f1=None,
        scored_answers=0,
    )


def test_rag_report_empty_groups_are_none() -> None:
    # Only answerable records, all refused, without gold ids or claims.
    refused = [RagRecord(q, answerable=True, abstained=True) for q in ("q1", "q2")]
    report = rag_report(refused)
    assert report.false_refusal_rate == 1.0  # 2 of 2
    assert report.abstention_when_unanswerable is None  # no unanswerable record
    assert report.context_recall is None and report.with_gold == 0
    assert report.faithfulness is None and report.with_claims == 0
    assert report.exact_match is None and report.f1 is None and report.scored_answers == 0

    # Only unanswerable records: nothing can be a false refusal or be scored.
    report = rag_report([RagRecord("q", answerable=False, abstained=False, prediction="x")])
    assert report.abstention_when_unanswerable == 0.0  # 0 of 1: a real zero, not None
    assert report.false_refusal_rate is None
    assert report.exact_match is None and report.f1 is None


# --- pgrag.evaluation and the docs ----------------------------------------------------------------


def test_pgrag_eval_exposes_the_metrics_api() -> None:
    expected = {
        "ndcg_at": metrics.ndcg_at,
        "recall_at": metrics.recall_at,
        "mrr_at": metrics.mrr_at,
        "dcg": metrics.dcg,
        "percentile": metrics.percentile,
        "summarize": metrics.summarize,
        "Summary": metrics.Summary,
        "normalize": answer_metrics.normalize,
        "exact_match": answer_metrics.exact_match,
        "token_f1": answer_metrics.token_f1,
        "RagRecord": answer_metrics.RagRecord,
        "RagReport": answer_metrics.RagReport,
        "rag_report": answer_metrics.rag_report,
        "auroc": answer_metrics.auroc,
    }
    assert set(pgrag.evaluation.__all__) == set(expected)
    for name, obj in expected.items():
        assert getattr(pgrag.evaluation, name) is obj, name


def test_importing_pgrag_eval_stays_light() -> None:
    # A fresh interpreter: this test process may already hold numpy from other tests.
    code = (
        "import sys, pgrag.evaluation; "
        "print(sorted(m for m in ('numpy', 'torch', 'sentence_transformers') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_docs_example_prints_what_the_docs_say(capsys: pytest.CaptureFixture[str]) -> None:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```\s*prints\s*```text\n(.*?)```", text, flags=re.DOTALL)
    assert match, "docs/metrics.md should have a python block followed by its printed output"
    example, printed = match.groups()
    exec(compile(example, str(DOCS), "exec"), {})  # noqa: S102 - our own documentation
    assert capsys.readouterr().out == printed
