"""The judge's arithmetic and how a one-token reply's log-probabilities are read
(pgrag.evaluation.judge, pgrag.llm.chat.first_token_choices)."""

from __future__ import annotations

import json
import math

import pytest

from pgrag.answer.result import Answer
from pgrag.evaluation.judge import Judge, average_precision, claim_of, claims_of
from pgrag.llm.chat import ChatClient, LLMConfig, first_token_choices, normalized
from tests.fakes import LLMServer
from tests.unit.test_support import source


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


def _answer(short: str, text: str) -> Answer:
    from pgrag.answer.citations import check_citations

    sources = [source(1, "The Hubble Space Telescope was launched in 1990 aboard Discovery.")]
    checked = check_citations(text, sources)
    return Answer(
        question="When was Hubble launched?", answer=checked.text, abstained=False, reason=None,
        citations=checked.citations, sources=sources, generator="test", timings={}, prompt="",
        short_answer=short,
    )  # fmt: skip


def test_a_judge_without_a_preference_gives_no_verdict_never_a_yes() -> None:
    """A reply that is neither Yes nor No, and no log-probabilities: the judge has no verdict,
    so the metrics it would have made are None, not 1.0."""
    with LLMServer(reply="Perhaps.") as server:
        server.logprobs_mode = "none"
        judge = Judge(ChatClient(LLMConfig(base_url=server.url, model="m", max_retries=0)))
        out = judge.judge(_answer("1990", "It was launched in 1990 [1]."), ["1990"])
    assert [c["p_yes"] for c in out.claims] == [None, None]
    assert out.faithfulness is None and out.context_recall is None
    assert out.useful == [None] and out.context_precision is None
    assert out.error is None and out.calls == 4


def test_a_failing_judge_leaves_its_metrics_unset_and_says_why() -> None:
    with LLMServer() as server:
        server.fail_next = 10
        judge = Judge(ChatClient(LLMConfig(base_url=server.url, model="m", max_retries=0)))
        out = judge.judge(_answer("1990", "It was launched in 1990 [1]."), ["1990"])
    assert out.faithfulness is None and out.context_recall is None
    assert out.error is not None and "HTTP 503" in out.error


def test_a_quoted_sentence_is_not_judged_as_the_models_claim() -> None:
    with LLMServer(reply="Yes") as server:
        judge = Judge(ChatClient(LLMConfig(base_url=server.url, model="m", max_retries=0)))
        answer = _answer("1990", "The Hubble Space Telescope was launched in 1990 [1].")
        answer.evidence = {"by": "located", "n": 1, "sentence": "…", "model_cited": []}
        out = judge.judge(answer, relevance=False)
    assert [c["claim"] for c in out.claims] == [claim_of("When was Hubble launched?", "1990")]
    assert out.faithfulness == 1.0
