"""Query rewriting's own logic, without a database: reading what a model wrote (a hypothetical
passage, paraphrases one per line), fusing rankings, the options, and the model's part against
a real local HTTP server (tests/fakes.py's LLMServer)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pgrag.errors import InputError
from pgrag.llm.chat import ChatClient, LLMConfig
from pgrag.retrieval.expansion import (
    HYDE_SYSTEM,
    HYDE_TOKENS,
    MAX_PASSAGE_CHARS,
    PARAPHRASE_TOKENS,
    QueryRewrite,
    as_rewrite,
    clean_passage,
    fuse,
    generate,
    multi_messages,
    parse_paraphrases,
    rewrite_client,
)
from pgrag.retrieval.search import SearchResult, embedded_texts, mean_vector
from tests.fakes import LLMServer, StandInLlama

QUESTION = "When was the University of Chicago founded?"


def row(chunk_id: int, rank: int, probability: float | None = 0.1, **extra: object) -> SearchResult:
    fields: dict[str, object] = {
        "rank": rank,
        "score": 1.0 / (60 + rank),
        "chunk_id": chunk_id,
        "document_id": chunk_id,
        "source": f"doc-{chunk_id}",
        "title": None,
        "section": None,
        "text": f"text {chunk_id}",
        "vector_rank": rank,
        "keyword_rank": None,
        "vector_distance": 0.1 * rank,
        "keyword_score": None,
        "metadata": {},
        "probability": probability,
    }
    fields.update(extra)
    return SearchResult(**fields)  # type: ignore[arg-type]


def ranking(*chunk_ids: int, probability: float | None = 0.1) -> list[SearchResult]:
    return [row(c, i + 1, probability) for i, c in enumerate(chunk_ids)]


# --- paraphrases --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        # plain lines
        "In what year was UChicago established?\nWho founded the University of Chicago, and when?\n"
        "What is the founding date of the University of Chicago?",
        # numbered, with a preamble and blank lines
        "Here are three ways to ask it:\n\n1. In what year was UChicago established?\n"
        "2) Who founded the University of Chicago, and when?\n"
        "3: What is the founding date of the University of Chicago?\n",
        # bullets, labels, emphasis and quotes
        '- "In what year was UChicago established?"\n'
        "* **Paraphrase 2:** Who founded the University of Chicago, and when?\n"
        "\u2022 Question 3: What is the founding date of the University of Chicago?",
        # all on one line
        "In what year was UChicago established? Who founded the University of Chicago, and"
        " when? What is the founding date of the University of Chicago?",
    ],
)
def test_paraphrases_are_read_whatever_the_layout(reply: str) -> None:
    assert parse_paraphrases(reply, QUESTION, 3) == [
        "In what year was UChicago established?",
        "Who founded the University of Chicago, and when?",
        "What is the founding date of the University of Chicago?",
    ]


def test_paraphrases_leave_out_the_question_repeats_and_scraps() -> None:
    reply = (
        "Sure! Here are some paraphrases.\n"
        "when was the university of chicago founded\n"  # the question again
        "1. In what year was UChicago established?\n"
        "2. In what year was UChicago established?\n"  # a repeat
        "3. Founded?\n"  # one word
        "4. " + "very " * 80 + "long?\n"  # not a question anyone asks
        "5. Which year saw the University of Chicago's founding?\n"
    )
    assert parse_paraphrases(reply, QUESTION, 5) == [
        "In what year was UChicago established?",
        "Which year saw the University of Chicago's founding?",
    ]


def test_paraphrases_stop_at_n() -> None:
    reply = "\n".join(f"Question number {i} about Chicago?" for i in range(1, 8))
    assert len(parse_paraphrases(reply, QUESTION, 3)) == 3


@pytest.mark.parametrize("reply", ["", "   \n\n", "1.\n2.\n3.", "Here are three questions:"])
def test_nothing_usable_is_no_paraphrase(reply: str) -> None:
    assert parse_paraphrases(reply, QUESTION, 3) == []


def test_what_no_search_can_take_is_removed() -> None:
    # A NUL and an unpaired surrogate (JSON can carry one) would make the search refuse.
    [text] = parse_paraphrases("Who built the \x00 bridge in \ud800 Lisbon?", QUESTION, 3)
    assert "\x00" not in text and "\ud800" not in text
    text.encode("utf-8")  # valid now


# --- the hypothetical passage ------------------------------------------------------------------


def test_a_passage_loses_its_label_quotes_and_line_breaks() -> None:
    reply = 'Passage: "The University of Chicago was founded in 1890\nby John D. Rockefeller."'
    assert clean_passage(reply) == (
        "The University of Chicago was founded in 1890 by John D. Rockefeller."
    )


@pytest.mark.parametrize(
    "reply",
    ["", "  ", "1890.", "I'm sorry, I cannot help with that.", "As an AI, I have no facts here."],
)
def test_an_empty_or_refusing_reply_is_no_passage(reply: str) -> None:
    assert clean_passage(reply) is None


def test_a_passage_is_capped() -> None:
    passage = clean_passage("word " * 2000)
    assert passage is not None and len(passage) == MAX_PASSAGE_CHARS


# --- fusion ------------------------------------------------------------------------------------


def test_fusion_ranks_by_reciprocal_rank_summed_over_the_rankings() -> None:
    fused = fuse([ranking(1, 2, 3), ranking(3, 4), ranking(3, 2)], k=10)
    assert [r.chunk_id for r in fused] == [3, 2, 1, 4]
    assert [r.rank for r in fused] == [1, 2, 3, 4]
    by_id = {r.chunk_id: r for r in fused}
    assert math.isclose(by_id[3].score, 1 / 63 + 1 / 61 + 1 / 61)
    assert math.isclose(by_id[2].score, 1 / 62 + 1 / 62)
    assert math.isclose(by_id[1].score, 1 / 61)


def test_fusion_keeps_k_and_renormalises_the_probability() -> None:
    lists = [ranking(1, 2, 3, probability=0.5), ranking(3, 4, probability=0.25)]
    fused = fuse(lists, k=2)
    assert [r.chunk_id for r in fused] == [3, 1]
    # mean probabilities: chunk 3 (0.5 + 0.25) / 2, chunk 1 0.5 / 2; renormalised over the two
    assert math.isclose(fused[0].probability or 0, 0.375 / 0.625)
    assert math.isclose(fused[1].probability or 0, 0.25 / 0.625)
    assert math.isclose(sum(r.probability or 0 for r in fused), 1.0)


def test_fusion_takes_a_chunks_fields_from_the_ranking_that_placed_it_best() -> None:
    first = [row(1, 1), row(2, 2, vector_distance=0.9, keyword_rank=7)]
    second = [row(2, 1, vector_distance=0.2, keyword_rank=1)]
    by_id = {r.chunk_id: r for r in fuse([first, second], k=5)}
    assert by_id[2].vector_distance == 0.2 and by_id[2].keyword_rank == 1


def test_fusion_breaks_ties_towards_the_earlier_ranking() -> None:
    # Chunks 1 and 2 are both first once: the question's ranking (first) wins.
    assert [r.chunk_id for r in fuse([ranking(1), ranking(2)], k=2)] == [1, 2]


def test_fusion_of_rankings_without_probabilities() -> None:
    fused = fuse([ranking(1, 2, probability=None)], k=2)
    assert [r.probability for r in fused] == [None, None]
    assert fuse([], k=3) == [] and fuse([[], []], k=3) == []


# --- options -----------------------------------------------------------------------------------


def test_a_rewrite_is_named_or_built() -> None:
    assert as_rewrite(None) is None
    assert as_rewrite(" HyDE ") == QueryRewrite("hyde")
    spec = QueryRewrite("multi", paraphrases=5)
    assert as_rewrite(spec) is spec
    assert (
        spec.max_tokens == 5 * PARAPHRASE_TOKENS and QueryRewrite("hyde").max_tokens == HYDE_TOKENS
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: as_rewrite("rm3"), "unknown query rewrite 'rm3'; use one of hyde, multi"),
        (lambda: QueryRewrite("multi", paraphrases=0), "paraphrases must be between 1 and 10"),
        (lambda: QueryRewrite("multi", paraphrases=11), "paraphrases must be between 1 and 10"),
        (lambda: as_rewrite(3), "rewrite must be 'hyde', 'multi', a QueryRewrite or None"),
    ],
)
def test_a_bad_rewrite_is_one_line(make: object, message: str) -> None:
    with pytest.raises(InputError) as caught:
        make()  # type: ignore[operator]
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_paraphrase_prompt_names_how_many() -> None:
    system, user = multi_messages(QUESTION, 4)
    assert "Write 4 different ways" in system["content"] and "4 questions" in system["content"]
    assert user == {"role": "user", "content": QUESTION}


# --- the vector arm's input ---------------------------------------------------------------------


def test_texts_to_embed_default_to_the_query() -> None:
    assert embedded_texts("q", None) == ["q"]
    assert embedded_texts("q", "passage") == ["passage"]
    assert embedded_texts("q", ["passage", "q"]) == ["passage", "q"]


@pytest.mark.parametrize("bad", [[], [""], ["  "], ["ok", "\x00"], ["x" * 20001]])
def test_bad_texts_to_embed_are_refused(bad: list[str]) -> None:
    with pytest.raises(InputError):
        embedded_texts("q", bad)


def test_the_mean_of_unit_vectors_is_a_unit_vector_between_them() -> None:
    a, b = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    mean = mean_vector([a, b], "m")
    assert np.allclose(mean, [2**-0.5, 2**-0.5, 0.0], atol=1e-6)
    # Vectors of another scale keep it (an inner-product or L2 model's own scale).
    assert math.isclose(float(np.linalg.norm(mean_vector([3 * a, 3 * b], "m"))), 3.0, rel_tol=1e-6)


def test_opposite_vectors_have_no_mean_to_search_with() -> None:
    with pytest.raises(InputError, match="zero, non-finite or unusable vector"):
        mean_vector([np.array([1.0, 0.0]), np.array([-1.0, 0.0])], "m")


# --- the model's part, over HTTP ---------------------------------------------------------------


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = LLMServer()
    yield server
    server.close()


def client(server: LLMServer) -> ChatClient:
    return ChatClient(LLMConfig(base_url=server.url, model="test", max_retries=0))


def test_hyde_asks_for_a_passage_once_not_streamed(llm: LLMServer) -> None:
    llm.reply = "The University of Chicago was founded in 1890 by John D. Rockefeller."
    assert generate(client(llm), QueryRewrite("hyde"), QUESTION) == ([llm.reply], None)
    (request,) = llm.requests
    assert request.body["stream"] is False
    assert request.body["messages"] == [
        {"role": "system", "content": HYDE_SYSTEM},
        {"role": "user", "content": QUESTION},
    ]


def test_multi_asks_for_n_paraphrases_in_one_call(llm: LLMServer) -> None:
    llm.reply = "1. In what year was UChicago established?\n2. When did UChicago open?"
    generated, problem = generate(client(llm), QueryRewrite("multi", paraphrases=2), QUESTION)
    assert generated == ["In what year was UChicago established?", "When did UChicago open?"]
    assert problem is None and len(llm.requests) == 1


def test_a_failing_model_gives_a_reason_not_an_exception(llm: LLMServer) -> None:
    llm.fail_next, llm.fail_status = 1, 500
    generated, problem = generate(client(llm), QueryRewrite("hyde"), QUESTION)
    assert generated == [] and problem is not None and "500" in problem


@pytest.mark.parametrize(
    ("method", "reply", "says"),
    [
        ("hyde", "", "the model's reply held no passage (it was empty)"),
        ("multi", "Here are three questions:", "the model's reply held no paraphrase"),
    ],
)
def test_a_reply_with_nothing_usable_gives_a_reason(
    llm: LLMServer, method: str, reply: str, says: str
) -> None:
    llm.reply = reply
    generated, problem = generate(client(llm), QueryRewrite(method), QUESTION)
    assert generated == [] and problem is not None and problem.startswith(says)


# --- the command line, before any database ----------------------------------------------------


@pytest.mark.parametrize("command", ["search", "ask"])
def test_a_remote_service_does_not_rewrite(command: str) -> None:
    from click.testing import CliRunner

    from pgrag.cli import cli

    env = {"PGRAG_URL": "http://127.0.0.1:9", "PGRAG_DSN": None}
    result = CliRunner().invoke(cli, [command, QUESTION, "--rewrite", "hyde"], env=env)
    assert result.exit_code == 2, result.output
    assert "--rewrite with PGRAG_URL: the service does not rewrite queries" in result.stderr


def test_a_local_model_rewrites_with_its_tokens_capped(
    gguf_file: Path, stand_in: type[StandInLlama], monkeypatch: pytest.MonkeyPatch
) -> None:
    # PGRAG_LLM_GGUF, as the benchmark runs it: the model is loaded once, and each rewrite's
    # call is capped (80 tokens for a passage, 40 per paraphrase) whatever ask's cap is.
    from pgrag.llm.local import LocalChatClient, LocalLLMConfig

    config = LocalLLMConfig(model_path=gguf_file)

    # (No connection: it is read only when neither the rewrite nor ask names a model.)
    hyde = rewrite_client(None, QueryRewrite("hyde"), config)  # type: ignore[arg-type]
    multi = rewrite_client(None, QueryRewrite("multi"), config)  # type: ignore[arg-type]
    assert isinstance(hyde, LocalChatClient) and isinstance(multi, LocalChatClient)
    assert len(stand_in.loads) == 1
    # The stand-in is a class: its reply is set for this test only.
    monkeypatch.setattr(stand_in, "reply", "The University of Chicago was founded in 1890.")
    assert generate(hyde, QueryRewrite("hyde"), QUESTION) == ([stand_in.reply], None)
    generate(multi, QueryRewrite("multi"), QUESTION)
    calls = hyde.model.calls
    assert [c["max_tokens"] for c in calls] == [HYDE_TOKENS, 3 * PARAPHRASE_TOKENS]
    assert all(c["stream"] is False for c in calls)
