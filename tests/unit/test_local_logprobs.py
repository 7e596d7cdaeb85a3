"""Continuation log-probabilities in-process (pgrag/llm/local_logprobs.py), against the
STAND-IN llama_cpp (tests.fakes.StandInLlama): the bookkeeping of the model's state -- one
evaluation of the prompt, the state cut back to it for each candidate, logits read after
each token. The stand-in's toy model gives logits that depend on the whole context, so a
candidate scored on top of another's leftover tokens would get other numbers. With the
real llama.cpp and a real (tiny) model: tests/integration/test_local_llm_real.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pgrag.errors import GenerationError, InputError
from pgrag.llm import local as local_llm
from pgrag.llm.local import LocalChatClient, LocalLLMConfig
from tests.fakes import StandInLlama, copying_logits

PROMPT = "Source: the kitchen stocks green tea.\nQuestion: What does it stock?\nAnswer:"


@pytest.fixture(autouse=True)
def _fresh_model_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_llm, "_loaded", {})


def by_hand(context: list[int], token: int) -> float:
    """The toy model's log p(token | context), from scratch (tests.fakes.copying_logits)."""
    logits = copying_logits(context)
    return logits[token] - math.log(sum(math.exp(v) for v in logits))


def test_each_candidate_is_scored_from_the_prompt_alone(
    gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    client = LocalChatClient(LocalLLMConfig(gguf_file))
    candidates = [" green tea", " green beans", " coffee"]
    rows = client.continuation_logprobs(PROMPT, candidates)
    head = [StandInLlama.BOS, *PROMPT.encode()]
    for candidate, row in zip(candidates, rows, strict=True):
        tokens = list(candidate.encode())
        expected = [by_hand(head + tokens[:i], t) for i, t in enumerate(tokens)]
        assert row == pytest.approx(expected, abs=1e-5)
        assert all(v <= 0 for v in row)
    # Candidates sharing a prefix share its log-probabilities, then part.
    tea, beans, _ = rows
    assert tea[:7] == pytest.approx(beans[:7]) and tea[7] != pytest.approx(beans[7])
    # The words of the source are likelier than others (the toy model copies).
    assert sum(tea) > sum(rows[2])


def test_the_prompt_is_evaluated_once_for_all_candidates(
    gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    client = LocalChatClient(LocalLLMConfig(gguf_file))
    client.continuation_logprobs(PROMPT, [" Yes", " No"])
    model = client.model
    prompt_tokens = len(PROMPT.encode()) + 1
    # The prompt once, then one token per step (" Yes": 4 tokens, 3 steps; its last token
    # is never fed); " No" re-reads only the prompt's last token (for its logits), then steps.
    assert [len(e) for e in model.evaluated] == [prompt_tokens, 1, 1, 1, 1, 1, 1]
    assert model.input_ids[: model.n_tokens] == [StandInLlama.BOS, *(PROMPT + " N").encode()]
    # The next prompt with the same head re-uses it: only what differs is evaluated.
    model.evaluated.clear()
    client.continuation_logprobs(PROMPT.replace("stock?", "sell?"), [" Yes"])
    assert sum(len(e) for e in model.evaluated) < prompt_tokens // 2


def test_bad_continuations_and_llama_failures_are_one_line(
    gguf_file: Path, stand_in: type[StandInLlama], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = LocalChatClient(LocalLLMConfig(gguf_file))
    with pytest.raises(InputError, match="adds no token"):
        client.continuation_logprobs(PROMPT, [""])

    def full(self: StandInLlama, tokens: list[int]) -> None:
        raise RuntimeError("llama_decode returned 1")

    monkeypatch.setattr(StandInLlama, "eval", full)
    with pytest.raises(GenerationError) as err:
        client.continuation_logprobs(PROMPT, [" Yes"])
    assert str(err.value) == (
        "llama.cpp failed to score on model.gguf (llama_decode returned 1); if the prompt is"
        " too long raise PGRAG_LLM_CTX or lower -k"
    )
