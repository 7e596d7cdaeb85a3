"""Answer scoring with the RAG marginal: real database and model, a real local /v1/completions
server whose toy model likes the words of the passage in its prompt (tests/fakes.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.marginals import rag_marginals
from pgrag.answer.scoring import passage_prompt, score_answers
from pgrag.cli import cli
from pgrag.config import from_env
from pgrag.db.connect import Database
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError, GenerationError, InputError
from pgrag.llm.chat import LLMConfig
from tests.fakes import LLMServer

ESPRESSO, TEA = "espresso beans", "green tea"


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


def config(server: LLMServer) -> LLMConfig:
    return LLMConfig(base_url=server.url, model="toy", max_retries=1)


@pytest.mark.parametrize(
    ("question", "top_source", "expected"),
    [
        ("What does the office cafe serve?", "cafe.md", ESPRESSO),
        ("What does the team kitchen stock?", "kitchen.md", TEA),
    ],
)
def test_scoring_follows_the_passage_the_retriever_ranks_higher(
    drinks: Database,
    completions_llm: LLMServer,
    question: str,
    top_source: str,
    expected: str,
) -> None:
    scores = score_answers(
        drinks, question, [ESPRESSO, TEA], collection="drinks", k=3, llm=config(completions_llm)
    )
    assert scores.passages[0].source.endswith(top_source)
    assert scores.passages[0].prior > scores.passages[1].prior
    assert scores.best == expected
    by_text = {c.text: c for c in scores.candidates}
    assert (
        by_text[expected].probability
        > 0.5
        > by_text[ESPRESSO if expected == TEA else TEA].probability
    )
    assert math.isclose(sum(c.probability for c in scores.candidates), 1.0)
    # Every passage was scored for every candidate on /v1/completions, with echo.
    assert len(completions_llm.requests) == 3 * 2
    assert set(completions_llm.paths) == {"/v1/completions"}
    assert all(r.body["echo"] is True and r.body["logprobs"] == 1 for r in completions_llm.requests)


def test_scores_equal_the_rag_marginals_of_the_servers_logprobs(
    drinks: Database, completions_llm: LLMServer
) -> None:
    question = "What does the office cafe serve?"
    scores = score_answers(
        drinks, question, [ESPRESSO, TEA], collection="drinks", k=3, llm=config(completions_llm)
    )
    hits = pgrag.search(drinks, question, collection="drinks", k=3)
    total = sum(h.probability or 0.0 for h in hits)
    log_prior = [math.log((h.probability or 0.0) / total) for h in hits]
    assert [p.chunk_id for p in scores.passages] == [h.chunk_id for h in hits]
    for candidate in scores.candidates:
        n = len(candidate.text.split())
        rows = []
        for hit in hits:
            # The server's answer for this passage and candidate: its last n prompt tokens
            # (before the one it generated) are the candidate's words.
            (echo,) = [
                e
                for e in completions_llm.echoed
                if e[0] == passage_prompt(question, hit) + " " + candidate.text
            ]
            prompt, tokens, offsets, values = echo
            assert "".join(tokens[-1 - n : -1]) == " " + candidate.text
            rows.append([float(v) for v in values[-1 - n : -1] if v is not None])
        sequence, token = rag_marginals(log_prior, rows)
        assert math.isclose(candidate.rag_sequence, sequence, rel_tol=1e-12)
        assert candidate.rag_token is not None
        assert math.isclose(candidate.rag_token, token, rel_tol=1e-12)
        # And by hand, without rag_marginals: sum_i p_i * prod_t p_it.
        by_hand = math.log(
            sum(math.exp(lp + sum(row)) for lp, row in zip(log_prior, rows, strict=True))
        )
        assert math.isclose(candidate.rag_sequence, by_hand, rel_tol=1e-9)
    # Two-token answers whose tokens lean on different passages: the two marginals differ.
    assert all(c.rag_token != c.rag_sequence for c in scores.candidates)


@pytest.mark.parametrize("mode", ["none", "generated"])
def test_an_endpoint_without_prompt_logprobs_is_one_line_error(
    drinks: Database, completions_llm: LLMServer, mode: str
) -> None:
    completions_llm.logprobs_mode = mode
    with pytest.raises(GenerationError) as exc:
        score_answers(
            drinks, "cafe", ["Yes", "No"], collection="drinks", llm=config(completions_llm)
        )
    message = str(exc.value)
    assert "\n" not in message
    assert "does not return token log-probabilities for /v1/completions with echo" in message
    assert completions_llm.url in message


@pytest.mark.parametrize(
    ("candidates", "needle"),
    [(["Yes"], "at least two"), (["Yes", "  "], "is empty"), (["Yes", "Yes "], "repeat")],
)
def test_candidates_must_be_two_or_more_distinct_non_empty(
    drinks: Database, completions_llm: LLMServer, candidates: list[str], needle: str
) -> None:
    with pytest.raises(InputError, match=needle):
        score_answers(drinks, "cafe", candidates, collection="drinks", llm=config(completions_llm))
    assert completions_llm.requests == []


def test_scoring_without_an_endpoint_says_what_to_set(drinks: Database) -> None:
    with pytest.raises(ConfigError, match="PGRAG_LLM_BASE_URL"):
        score_answers(drinks, "cafe", ["Yes", "No"], collection="drinks")


def test_scoring_uses_the_endpoint_the_connection_was_opened_with(
    drinks: Database, completions_llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = from_env({"PGRAG_LLM_BASE_URL": completions_llm.url, "PGRAG_LLM_MODEL": "toy"})
    db = pgrag.connect(drinks.dsn, embedder=configured_embedder(drinks), settings=settings)
    try:
        # The environment is not read at call time: only the connection's settings count.
        monkeypatch.setenv("PGRAG_LLM_BASE_URL", "http://127.0.0.1:9/v1")
        scores = score_answers(
            db, "What does the office cafe serve?", [ESPRESSO, TEA], k=1, collection="drinks"
        )
        assert scores.generator == "openai-compatible:toy" and scores.best == ESPRESSO
        assert completions_llm.paths and set(completions_llm.paths) == {"/v1/completions"}
        with pytest.raises(ConfigError, match="PGRAG_LLM_BASE_URL"):
            score_answers(db, "cafe", ["Yes", "No"], collection="drinks", llm=None)
    finally:
        db.close()


def test_retried_after_a_server_error(drinks: Database, completions_llm: LLMServer) -> None:
    completions_llm.fail_next = 1
    llm = LLMConfig(base_url=completions_llm.url, model="toy", max_retries=2)
    from pgrag import http as http_post

    old, http_post.BACKOFF_FIRST = http_post.BACKOFF_FIRST, 0.0
    try:
        scores = score_answers(
            drinks,
            "What does the office cafe serve?",
            [ESPRESSO, TEA],
            collection="drinks",
            k=1,
            llm=llm,
        )
    finally:
        http_post.BACKOFF_FIRST = old
    assert scores.best == ESPRESSO
    assert len(completions_llm.requests) == 3  # one 503, then both candidates


def test_pgrag_score_command(drinks: Database, dsn: str, completions_llm: LLMServer) -> None:
    env = {"PGRAG_LLM_BASE_URL": completions_llm.url, "PGRAG_LLM_MODEL": "toy"}
    args = ["--dsn", dsn, "score", "What does the team kitchen stock?", "-c", "drinks"]
    args += ["--candidate", ESPRESSO, "--candidate", TEA, "--k", "2"]
    result = CliRunner().invoke(cli, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["best"] == TEA
    assert {c["text"] for c in out["candidates"]} == {ESPRESSO, TEA}
    assert len(out["passages"]) == 2
    assert out["passages"][0]["source"].endswith("kitchen.md")
    assert set(out["passages"][0]["loglik"]) == {ESPRESSO, TEA}

    plain = CliRunner().invoke(cli, args, env=env)
    assert plain.exit_code == 0, plain.output
    assert plain.stdout.splitlines()[-1] == f"best: {TEA}"
    assert "RAG-Sequence" in plain.stdout and "kitchen" in plain.stderr.lower()

    one = CliRunner().invoke(cli, ["--dsn", dsn, "score", "tea?", "--candidate", "Yes"], env=env)
    assert one.exit_code == 1
    assert one.stderr.startswith("error: scoring needs at least two candidate answers")
    assert len(one.stderr.strip().splitlines()) == 1
