"""pgrag score with a local GGUF model (PGRAG_LLM_GGUF): the candidates' token
log-probabilities computed in-process, no endpoint. Real database and embedding model; the
STAND-IN llama_cpp (tests.fakes.StandInLlama), whose toy model copies what it has read, so the
passage a candidate's words come from makes it likelier. The endpoint path:
test_scoring.py; the real llama.cpp with a tiny random model: test_local_llm_real.py."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.marginals import rag_marginals
from pgrag.answer.scoring import passage_prompt, score_answers
from pgrag.cli import cli
from pgrag.config import from_env
from pgrag.db.connect import Database
from pgrag.llm import local as local_llm
from pgrag.llm.local import LocalChatClient, LocalLLMConfig
from tests.fakes import StandInLlama

ESPRESSO, TEA = "espresso beans", "green tea"


@pytest.fixture(autouse=True)
def _fresh_model_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_llm, "_loaded", {})


@pytest.fixture
def drinks(db: Database, tmp_path: Path) -> Database:
    root = tmp_path / "drinks"
    root.mkdir()
    (root / "cafe.md").write_text(
        "# Office cafe\n\nThe office cafe serves espresso brewed from fresh beans every morning.\n"
    )
    (root / "kitchen.md").write_text(
        "# Team kitchen\n\nThe team kitchen stocks green tea and biscuits for everyone.\n"
    )
    (root / "parking.md").write_text(
        "# Parking\n\nVisitors park their cars in the east lot next to the loading dock.\n"
    )
    pgrag.ingest(db, [root], collection="drinks")
    return db


@pytest.mark.parametrize(
    ("question", "top_source"),
    [
        ("What does the office cafe serve?", "cafe.md"),
        ("What does the team kitchen stock?", "kitchen.md"),
    ],
)
def test_local_scoring_reads_each_passage(
    drinks: Database,
    gguf_file: Path,
    stand_in: type[StandInLlama],
    question: str,
    top_source: str,
) -> None:
    config = LocalLLMConfig(gguf_file)
    scores = score_answers(drinks, question, [ESPRESSO, TEA], collection="drinks", k=3, llm=config)
    assert scores.generator == "llama-cpp:model.gguf"
    assert scores.passages[0].source.endswith(top_source)
    # Under each drink's passage, the drink it names is the likelier answer.
    for p in scores.passages:
        if p.source.endswith(("cafe.md", "kitchen.md")):
            named = ESPRESSO if p.source.endswith("cafe.md") else TEA
            other = TEA if named == ESPRESSO else ESPRESSO
            assert p.loglik(named) > p.loglik(other)
    assert scores.best == max(scores.candidates, key=lambda c: c.rag_sequence).text
    assert math.isclose(sum(c.probability for c in scores.candidates), 1.0)
    # Each passage's prompt was evaluated once, whatever the number of candidates: the
    # evaluations longer than one token are the three prompts (or what differs of them).
    model = LocalChatClient(config).model
    assert len([e for e in model.evaluated if len(e) > 1]) == 3
    assert len(stand_in.loads) == 1


def test_local_scores_are_the_rag_marginals_of_the_models_logprobs(
    drinks: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    question = "What does the office cafe serve?"
    config = LocalLLMConfig(gguf_file)
    scores = score_answers(drinks, question, [ESPRESSO, TEA], collection="drinks", k=3, llm=config)
    hits = pgrag.search(drinks, question, collection="drinks", k=3)
    total = sum(h.probability or 0.0 for h in hits)
    log_prior = [math.log((h.probability or 0.0) / total) for h in hits]
    client = LocalChatClient(config)
    for candidate in scores.candidates:
        # One token per byte: the candidate's tokens are " " and its letters.
        rows = [
            client.continuation_logprobs(passage_prompt(question, h), [" " + candidate.text])[0]
            for h in hits
        ]
        assert all(len(row) == len(candidate.text) + 1 for row in rows)
        assert all(v <= 0 for row in rows for v in row)
        sequence, token = rag_marginals(log_prior, rows)
        assert math.isclose(candidate.rag_sequence, sequence, rel_tol=1e-12)
        assert candidate.rag_token is not None
        assert math.isclose(candidate.rag_token, token, rel_tol=1e-12)
        by_passage = {p.chunk_id: p.token_logprobs[candidate.text] for p in scores.passages}
        assert [by_passage[h.chunk_id] for h in hits] == rows


def test_pgrag_score_takes_the_configured_local_model(
    drinks: Database, gguf_file: Path, stand_in: type[StandInLlama]
) -> None:
    env = {"PGRAG_LLM_GGUF": str(gguf_file), "PGRAG_LLM_CTX": "2048"}
    result = CliRunner().invoke(
        cli,
        ["--dsn", drinks.dsn, "score", "What does the team kitchen stock?", "-c", "drinks"]
        + ["--candidate", ESPRESSO, "--candidate", TEA, "--k", "2", "--json"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["generator"] == "llama-cpp:model.gguf" and out["best"] == TEA
    assert len(out["passages"]) == 2
    assert stand_in.loads[0]["n_ctx"] == 2048
    # From Python, the connection's settings name it too.
    db = pgrag.connect(drinks.dsn, settings=from_env(env))
    try:
        again = score_answers(
            db, "What does the team kitchen stock?", [ESPRESSO, TEA], collection="drinks", k=2
        )
    finally:
        db.close()
    assert again.generator == "llama-cpp:model.gguf"


def test_a_local_model_without_the_extra_is_one_line(
    drinks: Database, gguf_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    result = CliRunner().invoke(
        cli,
        ["--dsn", drinks.dsn, "score", "cafe?", "-c", "drinks", "--candidate", "a"]
        + ["--candidate", "b"],
        env={"PGRAG_LLM_GGUF": str(gguf_file)},
    )
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: PGRAG_LLM_GGUF is set but llama-cpp-python is not installed"
    )
