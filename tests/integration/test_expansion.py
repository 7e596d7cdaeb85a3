"""Query rewriting (HyDE, multi-query) on the real database and embedding model, against a
real local OpenAI-compatible server (tests/fakes.py's LLMServer) whose replies are computed
from the prompt it gets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.answer.traces import get_trace
from pgrag.cli import cli
from pgrag.config import from_env
from pgrag.db.connect import Database
from pgrag.embeddings.embedder import Embedder
from pgrag.errors import ConfigError, InputError
from pgrag.ingest.document import from_text
from pgrag.llm.chat import LLMConfig
from pgrag.retrieval.expansion import (
    HYDE_SYSTEM,
    QueryRewrite,
    RewriteWarning,
    expanded_search,
    fuse,
)
from pgrag.retrieval.search import candidates
from tests.fakes import LLMServer

QUESTION = "Who runs the northern office?"
# The question shares words with the two "northern office" notes, not with the paragraph
# that answers it: the hypothetical passage (which knows Porto is the northern office) does.
DOCS = {
    "porto.txt": "Marta Silva leads the Porto branch, where twelve engineers build the billing"
    " service and answer to her directly.",
    "headcount.txt": "Every quarter the northern office and the southern office report their"
    " headcount to the finance team.",
    "move.txt": "The northern office moved to a new building last spring; its kitchen is"
    " twice as large.",
    "lisbon.txt": "The Lisbon office opens at 8:00 and closes at 18:00 on weekdays.",
    "bikes.txt": "Bicycles are parked in the inner courtyard of the Lisbon office.",
}
# Words no keyword of the collection matches: the vector arm alone ranks (porto.txt third).
NORTH = "Who heads the north?"
PASSAGE = "Marta Silva leads the Porto branch, the company's northern office, and its engineers."
SECRET = (
    "secret/merger.txt",
    "The merger with Globex closes in March; the board approved a price of 40 million.",
)


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = LLMServer(reply="I don't know.")
    yield server
    server.close()


@pytest.fixture
def offices(db: Database) -> Database:
    pgrag.ingest_documents(
        db,
        [from_text(s, text, metadata={"doc": s.split(".")[0]}) for s, text in DOCS.items()],
        collection="offices",
    )
    pgrag.ingest_documents(db, [from_text(*SECRET)], collection="offices", allow=["board"])
    return db


def config(server: LLMServer) -> LLMConfig:
    return LLMConfig(base_url=server.url, model="test", max_retries=0)


def sources(results: list[Any]) -> list[str]:
    return [r.source for r in results]


def paraphrases(*lines: str) -> Any:
    """A reply function: the paraphrases for the multi-query prompt, ``answer`` otherwise."""

    def reply(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        if system.startswith("Write ") and "different ways" in system:
            return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))
        return "I don't know."

    return reply


def cosine_distance(a: Any, b: Any) -> float:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def stored_vector(db: Database, source: str) -> Any:
    row = db.conn.execute(
        "SELECT e.embedding FROM pgrag.chunk_embeddings e JOIN pgrag.chunks c ON c.id ="
        " e.chunk_id JOIN pgrag.documents d ON d.id = c.document_id WHERE d.source = %s",
        (source,),
    ).fetchone()
    db.conn.commit()
    assert row is not None
    return row[0].to_numpy()


# --- HyDE --------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_question", [False, True])
def test_hyde_searches_the_vector_arm_with_the_hypothetical_passage(
    offices: Database, llm: LLMServer, embedder: Embedder, with_question: bool
) -> None:
    plain = pgrag.search(offices, QUESTION, collection="offices", mode="vector", k=5)
    assert sources(plain).index("porto.txt") >= 2  # the question alone ranks it third
    llm.reply = PASSAGE
    rewrite = QueryRewrite("hyde", with_question=with_question, llm=config(llm))
    got = pgrag.search(offices, QUESTION, collection="offices", mode="vector", k=5, rewrite=rewrite)
    assert sources(got)[0] == "porto.txt"
    # The model was asked once, briefly, for a passage answering the question.
    (request,) = llm.requests
    assert request.body["messages"] == [
        {"role": "system", "content": HYDE_SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    assert request.body["max_tokens"] == 80 and request.body["stream"] is False
    # The vector arm's distances are to the passage's embedding (or to its mean with the
    # question's), not to the question's.
    passage, question = embedder.embed([PASSAGE, QUESTION])
    target = (passage + question) / 2 if with_question else passage
    for r in got:
        expected = cosine_distance(target, stored_vector(offices, r.source))
        assert r.vector_distance == pytest.approx(expected, abs=1e-4), r.source


def test_hyde_leaves_the_keyword_arm_on_the_question(offices: Database, llm: LLMServer) -> None:
    plain = pgrag.search(offices, QUESTION, collection="offices", k=5)
    llm.reply = PASSAGE  # "Marta", "Silva", "Porto" are in no keyword the question has
    got = pgrag.search(
        offices, QUESTION, collection="offices", k=5, rewrite=QueryRewrite("hyde", llm=config(llm))
    )
    keyword = {r.chunk_id: r.keyword_rank for r in plain}
    assert {r.chunk_id: r.keyword_rank for r in got} == keyword
    assert next(r for r in got if r.source == "porto.txt").keyword_rank is None
    # ... while the vector arm ranks the answer first now.
    vector = {r.source: r.vector_rank for r in got}
    assert vector["porto.txt"] == 1 and {r.source: r.vector_rank for r in plain}["porto.txt"] == 3


def test_a_question_searched_after_hyde_is_searched_as_before(
    offices: Database, llm: LLMServer
) -> None:
    def seen() -> list[tuple[str, float | None]]:
        found = pgrag.search(offices, QUESTION, collection="offices", mode="vector", k=5)
        return [(r.source, r.vector_distance) for r in found]

    before = seen()
    llm.reply = PASSAGE
    rewrite = QueryRewrite("hyde", with_question=False, llm=config(llm))
    pgrag.search(offices, QUESTION, collection="offices", mode="vector", k=5, rewrite=rewrite)
    # The passage's vector is cached under the passage, never under the question.
    assert seen() == before


# --- multi-query -------------------------------------------------------------------------------


def test_multi_query_fuses_the_searches_of_the_question_and_its_paraphrases(
    offices: Database, llm: LLMServer
) -> None:
    asked = ["Who leads the Porto branch?", "Who do the Porto engineers answer to?"]
    llm.answer = paraphrases(*asked)
    timings: dict[str, float] = {}
    got = pgrag.search(
        offices,
        QUESTION,
        collection="offices",
        k=3,
        timings=timings,
        rewrite=QueryRewrite("multi", paraphrases=2, llm=config(llm)),
    )
    (request,) = llm.requests
    assert request.body["messages"][1]["content"] == QUESTION
    assert "Write 2 different ways" in request.body["messages"][0]["content"]
    assert request.body["max_tokens"] == 80
    # What came back is the RRF fusion of the three searches, each as deep as a reranker's.
    each = [
        pgrag.search(offices, q, collection="offices", k=candidates(3)) for q in [QUESTION, *asked]
    ]
    want = fuse(each, 3)
    assert [(r.chunk_id, r.rank) for r in got] == [(r.chunk_id, r.rank) for r in want]
    assert [r.score for r in got] == pytest.approx([r.score for r in want])
    assert sum(r.probability or 0 for r in got) == pytest.approx(1.0)
    # The paraphrase that names Porto lifts its paragraph above where the question alone
    # ranks it.
    plain = sources(pgrag.search(offices, QUESTION, collection="offices", k=5))
    assert "porto.txt" in sources(got)
    assert sources(got).index("porto.txt") < plain.index("porto.txt")
    assert timings["searches"] == 3 and timings["expand_ms"] > 0


def test_multi_query_passes_the_filter_to_every_search(offices: Database, llm: LLMServer) -> None:
    llm.answer = paraphrases("Who leads the Porto branch?", "When does the Lisbon office open?")
    got = pgrag.search(
        offices,
        QUESTION,
        collection="offices",
        k=10,
        filter={"doc": "porto"},
        rewrite=QueryRewrite("multi", paraphrases=2, llm=config(llm)),
    )
    assert sources(got) == ["porto.txt"]


# --- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["hyde", "multi"])
@pytest.mark.parametrize(
    ("failure", "says"),
    [
        ("status 500", "HTTP 500"),
        ("empty", "it was empty"),
        ("garbage", "held no"),
    ],
)
def test_a_failing_model_falls_back_to_the_question_as_asked(
    offices: Database, llm: LLMServer, method: str, failure: str, says: str
) -> None:
    plain = pgrag.search(offices, QUESTION, collection="offices", k=4)
    if failure == "status 500":
        llm.fail_next, llm.fail_status = 1, 500
    else:
        llm.reply = "" if failure == "empty" else "1.\n2.\n**"
    with pytest.warns(RewriteWarning) as caught:
        got = pgrag.search(
            offices,
            QUESTION,
            collection="offices",
            k=4,
            rewrite=QueryRewrite(method, llm=config(llm)),
        )
    assert [(r.chunk_id, r.rank, r.score) for r in got] == [
        (r.chunk_id, r.rank, r.score) for r in plain
    ]
    (warning,) = caught
    message = str(warning.message)
    assert message.startswith(f"query rewriting ({method}) failed, so the question was searched")
    assert says in message and "\n" not in message


def test_the_library_call_says_what_fell_back(offices: Database, llm: LLMServer) -> None:
    llm.fail_next, llm.fail_status = 1, 500
    expanded = expanded_search(
        offices, QUESTION, QueryRewrite("multi", llm=config(llm)), collection="offices", k=3
    )
    assert expanded.fell_back and expanded.generated == [] and len(expanded.results) == 3
    assert expanded.to_dict() == {
        "method": "multi", "generated": [], "fallback": True, "skipped": False
    }  # fmt: skip
    assert expanded.warnings and "HTTP 500" in expanded.warnings[0]


# --- principals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["hyde", "multi"])
def test_a_rewrite_never_shows_a_reader_a_chunk_it_may_not_read(
    offices: Database, llm: LLMServer, method: str
) -> None:
    # The model writes the private paragraph's very words; it finds it only for the board.
    llm.reply = SECRET[1]
    llm.answer = (
        None
        if method == "hyde"
        else paraphrases(
            "When does the merger with Globex close?", "What price did the board approve?"
        )
    )
    rewrite = QueryRewrite(method, paraphrases=2, llm=config(llm))
    question = "What is the status of the merger?"
    for who, sees in ((["alice"], False), (["board"], True)):
        got = pgrag.search(
            offices, question, collection="offices", k=10, principals=who, rewrite=rewrite
        )
        assert ("secret/merger.txt" in sources(got)) is sees, who
        assert len(got) == len(DOCS) + sees  # every chunk the reader may read, and no other
    answer = pgrag.ask(
        offices, question, collection="offices", llm=config(llm), principals=["alice"],
        rewrite=rewrite, min_confidence=None,
    )  # fmt: skip
    assert all(s.result.source != "secret/merger.txt" for s in answer.sources)
    assert all(SECRET[1] not in r.body["messages"][-1]["content"] for r in llm.requests[-1:])


# --- refused -------------------------------------------------------------------------------------


def test_rewriting_needs_a_language_model(offices: Database) -> None:
    with pytest.raises(ConfigError) as caught:
        pgrag.search(offices, QUESTION, collection="offices", rewrite="hyde")
    message = str(caught.value)
    assert message.startswith("query rewriting (hyde) needs a language model: set")
    assert "PGRAG_LLM_BASE_URL" in message and "PGRAG_LLM_GGUF" in message
    base = LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", template="base")
    with pytest.raises(ConfigError, match="needs a chat model"):
        pgrag.search(
            offices, QUESTION, collection="offices", rewrite=QueryRewrite("multi", llm=base)
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rewrite": "hyde", "mode": "keyword"}, "hyde changes only what the vector arm"),
        ({"rewrite": "multi", "mmr": 0.5}, "mmr does not apply to a multi-query rewrite"),
        ({"rewrite": "hyde", "embed_text": "x"}, "pass embed_text or rewrite, not both"),
        ({"rewrite": "rm3"}, "unknown query rewrite 'rm3'"),
        ({"rewrite": "multi", "k": 0}, "k must be between 1 and 1000"),
    ],
)
def test_what_a_rewrite_cannot_do_is_refused_before_the_model_is_asked(
    offices: Database, llm: LLMServer, options: dict[str, Any], message: str
) -> None:
    rewrite = options.pop("rewrite")
    spec = rewrite if rewrite == "rm3" else QueryRewrite(rewrite, llm=config(llm))
    with pytest.raises(InputError, match=message):
        pgrag.search(offices, QUESTION, collection="offices", rewrite=spec, **options)
    assert llm.requests == []


# --- ask -----------------------------------------------------------------------------------------


def answering(body: dict[str, Any]) -> str:
    """HyDE's passage for its prompt; for the answer prompt, Marta Silva when a source that
    names her was retrieved, else "I don't know"."""
    import re

    if body["messages"][0]["content"] == HYDE_SYSTEM:
        return PASSAGE
    prompt = body["messages"][-1]["content"]
    found = re.search(r"^\[(\d+)\][^\n]*\n<<<\n[^>]*Marta Silva", prompt, re.M)
    return f"Marta Silva runs it [{found.group(1)}]." if found else "I don't know."


@pytest.fixture
def configured(
    offices: Database, dsn: str, embedder: Embedder, llm: LLMServer
) -> Iterator[Database]:
    """A connection whose settings name the LLM server (PGRAG_LLM_BASE_URL)."""
    db = pgrag.connect(dsn, embedder=embedder, settings=from_env(dict(llm.env)))
    yield db
    db.close()


def test_ask_answers_from_what_the_rewrite_found(configured: Database, llm: LLMServer) -> None:
    llm.answer = answering
    options: dict[str, Any] = {"collection": "offices", "k": 2, "min_confidence": None}
    plain = pgrag.ask(configured, NORTH, **options)
    assert plain.abstained and plain.expansion is None
    asked = len(llm.requests)
    answer = pgrag.ask(configured, NORTH, rewrite="hyde", **options)
    assert not answer.abstained, answer.reason
    assert "Marta Silva" in answer.answer and answer.citations[0].source == "porto.txt"
    assert answer.expansion == {
        "method": "hyde", "generated": [PASSAGE], "fallback": False, "skipped": False
    }  # fmt: skip
    assert answer.warnings == [] and answer.timings["expand_ms"] > 0
    # Two calls: the passage (capped, the configured model), then the answer.
    hyde, final = [r.body for r in llm.requests[asked:]]
    assert hyde["messages"][0]["content"] == HYDE_SYSTEM and hyde["max_tokens"] == 80
    assert final["max_tokens"] == 512
    trace = get_trace(configured, answer.query_id or 0)
    assert trace["checks"]["expansion"]["generated"] == [PASSAGE]
    assert "porto.txt" in [r["source"] for r in trace["retrieved"]]


def test_ask_does_not_rewrite_a_question_it_abstains_on(
    configured: Database, llm: LLMServer
) -> None:
    llm.answer = answering
    answer = pgrag.ask(
        configured, QUESTION, collection="offices", rewrite="multi", min_confidence=0.99
    )
    assert answer.abstained and "below the threshold" in (answer.reason or "")
    assert llm.requests == []  # neither a rewrite nor an answer
    assert answer.expansion == {
        "method": "multi", "generated": [], "fallback": False, "skipped": True
    }  # fmt: skip


def test_ask_keeps_its_abstention_decision_under_a_rewrite(
    configured: Database, llm: LLMServer
) -> None:
    # The confidence is the question's own search's, what the threshold was calibrated on.
    llm.answer = answering
    plain = pgrag.ask(configured, QUESTION, collection="offices", k=2, min_confidence=None)
    hyde = pgrag.ask(
        configured, QUESTION, collection="offices", k=2, min_confidence=None, rewrite="hyde"
    )
    assert hyde.confidence == plain.confidence and hyde.confidence_detail == plain.confidence_detail


def test_ask_answers_when_the_rewrite_fails(configured: Database, llm: LLMServer) -> None:
    llm.answer = answering
    llm.fail_next, llm.fail_status = 1, 400  # the rewrite's request; the answer's succeeds
    answer = pgrag.ask(configured, QUESTION, collection="offices", k=5, rewrite="hyde",
                       min_confidence=None)  # fmt: skip
    assert not answer.abstained and answer.citations[0].source == "porto.txt"
    assert answer.expansion is not None and answer.expansion["fallback"] is True
    (warning,) = answer.warnings
    assert warning.startswith("query rewriting (hyde) failed") and "400" in warning


def test_the_offline_reader_can_read_what_a_rewrite_found(
    configured: Database, llm: LLMServer
) -> None:
    llm.answer = answering
    answer = pgrag.ask(
        configured, NORTH, collection="offices", k=2, llm=None, rewrite="hyde",
        min_confidence=None,
    )  # fmt: skip
    assert answer.generator == "extractive"
    assert "porto.txt" in [s.result.source for s in answer.sources]
    assert [r.body["messages"][0]["content"] for r in llm.requests] == [HYDE_SYSTEM]


# --- the command line ---------------------------------------------------------------------------


def cli_run(dsn: str, env: dict[str, str | None], *args: str) -> Any:
    return CliRunner().invoke(cli, ["--dsn", dsn, *args], env=env, catch_exceptions=True)


def test_pgrag_search_rewrite(offices: Database, dsn: str, llm: LLMServer) -> None:
    import json

    llm.answer = paraphrases("Who leads the Porto branch?", "Who do the Porto engineers answer to?")
    env = dict(llm.env)
    result = cli_run(
        dsn, env, "search", QUESTION, "-c", "offices", "-k", "3", "--rewrite", "multi",
        "--paraphrases", "2", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 3 and "porto.txt" in [r["source"] for r in rows]
    assert result.stderr == ""
    # For a person: what the model wrote goes to stderr, beside the results.
    text = cli_run(dsn, env, "search", QUESTION, "-c", "offices", "--rewrite", "multi")
    assert text.exit_code == 0 and "multi: Who leads the Porto branch?" in text.stderr
    # A model that fails: the plain results, and a warning.
    llm.fail_next, llm.fail_status = 1, 400
    failed = cli_run(dsn, env, "search", QUESTION, "-c", "offices", "--rewrite", "hyde", "--json")
    assert failed.exit_code == 0 and len(json.loads(failed.stdout)) == len(DOCS) + 1
    assert failed.stderr.startswith("warning: query rewriting (hyde) failed")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["search", QUESTION, "--paraphrases", "2"], "--paraphrases is for --rewrite multi"),
        (["search", QUESTION, "--rewrite", "hyde", "--paraphrases", "2"], "--paraphrases is for"),
        (["search", QUESTION, "--rewrite", "hyde", "--sql"], "--sql prints one statement"),
        (["search", QUESTION, "--rewrite", "bm25"], "Invalid value for '--rewrite'"),
        (["ask", QUESTION, "--rewrite", "multi", "--paraphrases", "11"], "--paraphrases"),
        (["ask", QUESTION, "--rewrite", "hyde", "--agentic"], "--agentic does not take --rewrite"),
    ],
)
def test_pgrag_rewrite_usage_errors(dsn: str, args: list[str], says: str) -> None:
    env = {"PGRAG_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    result = cli_run(dsn, env, *args)
    assert result.exit_code == 2 and says in result.stderr, result.stderr


def test_pgrag_search_rewrite_without_a_model_is_one_line(offices: Database, dsn: str) -> None:
    result = cli_run(dsn, {}, "search", QUESTION, "-c", "offices", "--rewrite", "hyde")
    assert result.exit_code == 1 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: query rewriting (hyde) needs a language model")


def test_pgrag_ask_rewrite(configured: Database, dsn: str, llm: LLMServer) -> None:
    import json

    llm.answer = answering
    result = cli_run(
        dsn, dict(llm.env), "ask", NORTH, "-c", "offices", "-k", "2", "--rewrite", "hyde",
        "--min-confidence", "off", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["expansion"]["generated"] == [PASSAGE]
    assert answer["citations"][0]["source"] == "porto.txt"
