"""The judge's arithmetic and how a one-token reply's log-probabilities are read
(pgrag.evaluation.judge, pgrag.llm.chat.first_token_choices)."""

from __future__ import annotations

import json
import math

import pytest

from pgrag.evaluation.judge import average_precision, claim_of, claims_of
from pgrag.llm.chat import first_token_choices, normalized


def _reply(top: list[tuple[str, float]] | None, text: str = "Yes") -> bytes:
    choice: dict[str, object] = {"message": {"role": "assistant", "content": text}}
    if top is not None:
        listed = [{"token": t, "logprob": lp} for t, lp in top]
        choice["logprobs"] = {"content": [{"token": text, "top_logprobs": listed}]}
    return json.dumps({"choices": [choice]}).encode()


def test_average_precision_is_ragas_context_precision() -> None:
    # Useful at ranks 1 and 3: (1/1 + 2/3) / 2.
    assert average_precision([True, False, True, False]) == pytest.approx(0.8333, abs=1e-4)
    assert average_precision([False, False, True]) == pytest.approx(1 / 3, abs=1e-4)
    assert average_precision([True, True]) == 1.0
    assert average_precision([False, False]) == 0.0
    assert average_precision([]) == 0.0


def test_claims_are_the_short_answer_and_the_sentences() -> None:
    claims = claims_of(
        "When was it launched?",
        "1990",
        "It was launched in 1990 aboard Discovery [1]. Its mirror is 2.4 metres across [2].",
    )
    assert claims == [
        claim_of("When was it launched?", "1990"),
        "It was launched in 1990 aboard Discovery.",
        "Its mirror is 2.4 metres across.",
    ]
    # The short answer repeated as the explanation is one claim, not two; markers are none.
    assert claims_of("When?", "1990", "1990 [1].") == [claim_of("When?", "1990")]
    assert claims_of("When?", None, "[1]") == []


def test_first_token_choices_sums_the_listed_tokens_an_option_begins_with() -> None:
    raw = _reply([("Yes", -0.2), (" yes", -2.5), ("No", -3.0), ("Maybe", -4.0)])
    yes, no, unlisted = first_token_choices(raw, ["Yes", "No", "Perhaps"], "Yes")
    assert yes == pytest.approx(math.log(math.exp(-0.2) + math.exp(-2.5)))
    assert no == pytest.approx(-3.0)
    assert unlisted == -4.0  # at most the least listed one
    p_yes, p_no, _ = normalized([yes, no, unlisted])
    assert p_yes > 0.9 > p_no
    # A longer option is matched by the first token it begins with.
    abstain, answer = first_token_choices(
        _reply([("Answer", -0.1), ("I", -2.0)]), ["I don't know.", "Answer:"], "Answer"
    )
    assert (abstain, answer) == (pytest.approx(-2.0), pytest.approx(-0.1))


def test_first_token_choices_without_logprobs_decides_by_the_reply() -> None:
    assert first_token_choices(_reply(None, "No"), ["Yes", "No"], "No") == [-math.inf, 0.0]
    assert normalized([-math.inf, 0.0]) == [0.0, 1.0]
    assert normalized([-math.inf, -math.inf]) == [0.5, 0.5]
    # Log-probabilities above zero are not probabilities: ignored, the reply decides.
    assert first_token_choices(_reply([("Yes", 3.0)], "Yes"), ["Yes", "No"], "Yes") == [
        0.0,
        -math.inf,
    ]
