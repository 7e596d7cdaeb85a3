"""The ``pgrag`` command end to end: real database, real model, a real local LLM server.

Every command runs through click's CliRunner with ``--dsn`` pointing at a fresh migrated
database; stdout and stderr are checked separately (results on stdout, everything else on
stderr). ``--help`` is checked in a subprocess so that nothing the tests imported hides a heavy
import.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from pgrag import http as http_post
from pgrag.cli import cli
from tests.fakes import LLMServer
from tests.tables import read_table

SEARCH_KEYS = {
    "rank",
    "score",
    "chunk_id",
    "document_id",
    "source",
    "title",
    "section",
    "text",
    "vector_rank",
    "keyword_rank",
}
MONTHLY = "How many days do monthly subscriptions have for a refund?"
ABSTAIN_TEXT = "I don't know based on the sources."


def run(dsn: str, *args: str, env: dict[str, str | None] | None = None) -> Result:
    """``pgrag --dsn DSN ARGS``; exceptions other than SystemExit fail the test."""
    result = CliRunner().invoke(cli, ["--dsn", dsn, *args], env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ok(dsn: str, *args: str, env: dict[str, str | None] | None = None) -> Result:
    result = run(dsn, *args, env=env)
    assert result.exit_code == 0, f"exit {result.exit_code}\nstderr: {result.stderr}"
    return result


def assert_one_error_line(result: Result, starts_with: str) -> str:
    assert result.exit_code == 1, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(starts_with), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def loaded(dsn: str, corpus: Path) -> str:
    """``dsn`` after ``pgrag ingest <corpus> --collection docs``."""
    result = ok(dsn, "ingest", str(corpus), "--collection", "docs")
    assert "3 added" in result.stderr
    return dsn


def chunk_text(dsn: str, chunk_id: int) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT content FROM pgrag.chunks WHERE id = %s", (chunk_id,)).fetchone()
    assert row is not None, f"chunk {chunk_id} does not exist"
    return str(row[0])


# --- search ----------------------------------------------------------------------------------


def test_search_json(loaded: str) -> None:
    result = ok(loaded, "search", "refund", "--collection", "docs", "--json")
    rows = json.loads(result.stdout)  # nothing but JSON on stdout
    assert isinstance(rows, list) and rows
    for row in rows:
        assert SEARCH_KEYS <= row.keys(), row.keys()
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[0]["source"].endswith("refunds.md")

    two = json.loads(ok(loaded, "search", "refund", "-c", "docs", "--json", "--k", "2").stdout)
    assert len(two) == 2

    keyword = json.loads(
        ok(loaded, "search", "refund", "-c", "docs", "--json", "--mode", "keyword").stdout
    )
    assert keyword and all(r["vector_rank"] is None for r in keyword)
    assert all(r["keyword_rank"] is not None for r in keyword)


def test_search_filter(loaded: str) -> None:
    result = ok(
        loaded, "search", "office hours", "-c", "docs", "--json", "--filter", '{"format": "text"}'
    )
    rows = json.loads(result.stdout)
    assert rows and {Path(r["source"]).name for r in rows} == {"office.txt"}

    bad = run(loaded, "search", "refund", "-c", "docs", "--filter", "not json")
    assert_one_error_line(bad, "error: --filter ")

    not_object = run(loaded, "search", "refund", "-c", "docs", "--filter", "[1]")
    assert_one_error_line(not_object, "error: --filter must be a JSON object")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"tag": "\\u0000"}', "NUL character"),
        ('{"tag": "\\ud800"}', "not valid Unicode"),
        ('{"n": NaN}', "NaN, which is not JSON"),
        ('{"n": {"$gt": Infinity}}', "Infinity, which is not JSON"),
        ('{"n": 1e99999}', "beyond double precision"),
        ('{"n": -1e-99999}', "beyond double precision"),  # would silently be 0
        ("{" + '"$not": {' * 2000 + '"n": 1' + "}" * 2001, "more than 32 levels deep"),
        ("{" + '"$not": {' * 40 + '"n": 1' + "}" * 41, "more than 32 levels deep"),
    ],
    ids=["nul", "surrogate", "nan", "infinity", "overflow", "underflow", "deep", "deeper-than-32"],
)
def test_search_filter_json_postgres_cannot_take(loaded: str, raw: str, message: str) -> None:
    result = run(loaded, "search", "refund", "-c", "docs", "--filter", raw)
    assert message in assert_one_error_line(result, "error: --filter ")


@pytest.mark.parametrize("command", ["search", "ask"])
def test_a_query_that_is_not_utf8_is_one_line(loaded: str, command: str) -> None:
    """What a shell passes for $'\\xff refund' reaches Python as a surrogate escape."""
    result = run(loaded, command, "\udcff refund", "-c", "docs")
    what = "the search query" if command == "search" else "the question"
    assert "is not valid UTF-8" in assert_one_error_line(result, f"error: {what} ")


def test_search_plain_output(loaded: str) -> None:
    result = ok(loaded, "search", "refund", "-c", "docs", "--k", "2")
    assert result.stdout.startswith("1. ")
    assert "refunds.md" in result.stdout and "\n2. " in result.stdout


def test_search_unknown_collection(dsn: str) -> None:
    result = run(dsn, "search", "refund", "--collection", "nope")
    assert_one_error_line(result, "error: collection 'nope' does not exist")


def test_database_errors_become_one_line(loaded: str) -> None:
    with psycopg.connect(loaded) as conn:
        conn.execute("ALTER FUNCTION pgrag.search_v5 RENAME TO search_v5_gone")
    result = run(loaded, "search", "refund", "-c", "docs")
    assert_one_error_line(result, "error: function pgrag.search_v5(")


# --- configuration: read once, at the root, from pgrag.config ------------------------------


def test_collection_defaults_to_pgrag_collection(loaded: str) -> None:
    # No -c: PGRAG_COLLECTION names it; -c wins over the variable; neither: "default".
    rows = json.loads(
        ok(loaded, "search", "refund", "--json", env={"PGRAG_COLLECTION": "docs"}).stdout
    )
    assert rows and rows[0]["source"].endswith("refunds.md")
    result = run(loaded, "search", "refund", "-c", "nope", env={"PGRAG_COLLECTION": "docs"})
    assert_one_error_line(result, "error: collection 'nope' does not exist")
    assert_one_error_line(run(loaded, "search", "refund"), "error: collection 'default' does")
    # The help shows the built-in default, as before, whatever the environment says.
    help_text = CliRunner().invoke(cli, ["search", "--help"], env={"PGRAG_COLLECTION": "docs"})
    assert "[default: default]" in help_text.stdout


def test_dsn_defaults_to_pgrag_dsn(loaded: str) -> None:
    result = CliRunner().invoke(cli, ["collections", "--json"], env={"PGRAG_DSN": loaded})
    assert result.exit_code == 0, result.stderr
    assert [r["name"] for r in json.loads(result.stdout)] == ["docs"]
    # --dsn wins over PGRAG_DSN.
    unreachable = "postgresql://nobody@127.0.0.1:1/nowhere"
    table = read_table(ok(loaded, "collections", env={"PGRAG_DSN": unreachable}).stdout)
    assert [r["COLLECTION"] for r in table] == ["docs"]


def test_the_environment_is_read_once_per_command(
    loaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag import config

    calls = []
    real = config.from_env

    def counting(environ: Any = None) -> config.Settings:
        calls.append(environ)
        return real(environ)

    monkeypatch.setattr(config, "from_env", counting)
    ok(loaded, "search", "refund", "-c", "docs", "--json")
    ok(loaded, "db", "check")
    assert len(calls) == 2, calls


# --- ask, offline reader ------------------------------------------------------------------


def test_ask_json_offline(loaded: str) -> None:
    result = ok(loaded, "ask", MONTHLY, "--collection", "docs", "--json")
    answer = json.loads(result.stdout)
    assert answer["abstained"] is False, answer
    assert answer["generator"] == "extractive"
    assert "14 days" in answer["answer"]
    assert answer["citations"], answer
    for c in answer["citations"]:
        assert {"n", "chunk_id", "document_id", "source", "title"} <= c.keys()
        assert f"[{c['n']}]" in answer["answer"]
    assert any("14 days" in chunk_text(loaded, c["chunk_id"]) for c in answer["citations"])
    assert answer["sources"]
    for s in answer["sources"]:
        assert {"n", "chunk_id", "text"} <= s.keys()
    cited = {c["n"] for c in answer["citations"]}
    assert cited <= {s["n"] for s in answer["sources"]}
    assert {"embed_ms", "retrieve_ms", "generate_ms", "total_ms"} <= answer["timings"].keys()

    with psycopg.connect(loaded) as conn:
        row = conn.execute(
            "SELECT question, abstained FROM pgrag.queries WHERE id = %s", (answer["query_id"],)
        ).fetchone()
    assert row == (MONTHLY, False)

    # An OpenAI key without a base URL does not send the documents anywhere.
    keyed = ok(loaded, "ask", MONTHLY, "-c", "docs", "--json", env={"OPENAI_API_KEY": "sk-x"})
    assert json.loads(keyed.stdout)["generator"] == "extractive"


def test_ask_plain_and_show_prompt(loaded: str) -> None:
    result = ok(loaded, "ask", MONTHLY, "-c", "docs", "--show-prompt")
    out = result.stdout
    assert "14 days" in out
    assert "[1]" in out or "[2]" in out
    assert "\nSources:\n" in out
    answer_part, sources_part = out.split("Sources:", 1)
    assert "refunds.md" in sources_part
    # The prompt went to stderr, not stdout, and ends with the question.
    assert "### system" in result.stderr and "### system" not in out
    prompt_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert prompt_lines[-1] == f"Question: {MONTHLY}"


def test_ask_unanswerable_abstains(loaded: str) -> None:
    result = ok(loaded, "ask", "What is the capital of Mongolia?", "-c", "docs", "--json")
    answer = json.loads(result.stdout)
    assert answer["abstained"] is True
    assert answer["answer"] == ABSTAIN_TEXT
    assert answer["reason"]
    assert answer["citations"] == []


# --- ask, through a real OpenAI-compatible server ------------------------------------------


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    for name in (
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    fake = LLMServer(reply="Hello [1].")  # JSON, or server-sent events when asked to stream
    yield fake
    fake.close()


def test_ask_llm_keeps_valid_citations_and_drops_invalid(loaded: str, llm: LLMServer) -> None:
    llm.reply = "Monthly refunds are allowed within 14 days [1]. Annual plans get 30 days [9]."
    result = ok(loaded, "ask", MONTHLY, "-c", "docs", "--json", env=llm.env)
    answer = json.loads(result.stdout)
    assert answer["abstained"] is False
    assert [c["n"] for c in answer["citations"]] == [1]
    assert answer["invalid_citations"] == [9]
    assert "[9]" not in answer["answer"] and "[1]" in answer["answer"]
    assert "openai-compatible" in answer["generator"]

    (request,) = llm.requests
    assert request.body["model"] == "test"
    assert request.body["stream"] is False
    messages = request.body["messages"]
    assert messages[-1]["content"].endswith(MONTHLY)
    assert any("[1] " in m["content"] for m in messages)
    assert "14 days" in messages[-1]["content"]


def test_ask_llm_answer_with_a_nul_is_logged(loaded: str, llm: LLMServer) -> None:
    # Models emit NUL (e.g. a <0x00> byte token; a random-weight GGUF model did), and
    # PostgreSQL text cannot hold it: the log keeps a replacement character instead.
    llm.reply = "Monthly refunds are allowed within 14 days [1].\x00"
    answer = json.loads(ok(loaded, "ask", MONTHLY, "-c", "docs", "--json", env=llm.env).stdout)
    assert answer["abstained"] is False
    with psycopg.connect(loaded) as conn:
        row = conn.execute(
            "SELECT answer, checks FROM pgrag.queries WHERE id = %s", (answer["query_id"],)
        ).fetchone()
    assert row is not None
    assert row[0] == "Monthly refunds are allowed within 14 days [1].\ufffd"
    # The answer's checks (jsonb, which cannot hold \u0000 either) are recorded too.
    assert "\ufffd" in json.dumps(row[1]["sentences"], ensure_ascii=False)


def test_ask_llm_says_it_does_not_know(loaded: str, llm: LLMServer) -> None:
    llm.reply = ABSTAIN_TEXT
    answer = json.loads(ok(loaded, "ask", MONTHLY, "-c", "docs", "--json", env=llm.env).stdout)
    assert answer["abstained"] is True
    assert answer["answer"] == ABSTAIN_TEXT
    assert "does not know" in answer["reason"]
    assert answer["citations"] == []


def test_ask_llm_without_citations_abstains(loaded: str, llm: LLMServer) -> None:
    llm.reply = "Monthly subscriptions can be refunded within 14 days."
    answer = json.loads(ok(loaded, "ask", MONTHLY, "-c", "docs", "--json", env=llm.env).stdout)
    assert answer["abstained"] is True
    assert answer["answer"] == ABSTAIN_TEXT
    assert "cites no source" in answer["reason"]
    assert answer["citations"] == []


INVALID = "Monthly refunds are allowed within 14 days [1]. Annual plans get 30 days [9]."


def test_ask_llm_into_a_pipe_prints_only_the_checked_answer(loaded: str, llm: LLMServer) -> None:
    # CliRunner's stdout is a pipe, not a terminal: `pgrag ask ... > out.txt` gets no draft.
    llm.reply = INVALID
    result = ok(loaded, "ask", MONTHLY, "-c", "docs", env=llm.env)
    assert llm.requests[0].body["stream"] is False
    assert "[9]" not in result.stdout, result.stdout
    assert "checked answer" not in result.stdout
    first = result.stdout.splitlines()[0]
    assert "14 days [1]" in first and "Annual plans get 30 days" in first
    assert "\nSources:\n" in result.stdout and "  [1] " in result.stdout
    assert "removed citations of sources not in the prompt: [9]" in result.stderr


def test_ask_llm_at_a_terminal_streams_the_draft(
    loaded: str, llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pgrag.cli.ask.stdout_is_terminal", lambda: True)
    llm.reply = "Monthly subscriptions can be refunded within 14 days [1]."
    result = ok(loaded, "ask", MONTHLY, "-c", "docs", env=llm.env)
    assert llm.requests[0].body["stream"] is True
    assert result.stdout.count(llm.reply) == 1, result.stdout
    assert "\nSources:\n" in result.stdout and "  [1] " in result.stdout
    # A draft the checks changed is followed by what they made of it.
    llm.reply = INVALID
    result = ok(loaded, "ask", MONTHLY, "-c", "docs", env=llm.env)
    draft, checked = result.stdout.split("checked answer: ")
    assert "[9]" in draft and "[9]" not in checked and "14 days [1]" in checked


def test_ask_llm_unreachable(loaded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_post, "BACKOFF_FIRST", 0.0)  # retries, without the waiting
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PGRAG_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1", "PGRAG_LLM_MODEL": "test"}
    for extra in ((), ("--json",)):
        result = run(loaded, "ask", MONTHLY, "-c", "docs", *extra, env=env)
        line = assert_one_error_line(result, "error: cannot reach the LLM endpoint ")
        assert f"127.0.0.1:{port}" in line


# --- collections, db, ingest ---------------------------------------------------------------


def test_collections_json(loaded: str) -> None:
    rows = json.loads(ok(loaded, "collections", "--json").stdout)
    (docs,) = [r for r in rows if r["name"] == "docs"]
    assert docs["documents"] == 3 and docs["chunks"] > 0
    assert docs["model"] and docs["dimension"] == 384


def test_collections_status_and_models_print_tables_for_people(loaded: str) -> None:
    # An aligned table under a header line, with the same numbers --json gives.
    (docs,) = json.loads(ok(loaded, "collections", "--json").stdout)
    text = ok(loaded, "collections").stdout
    assert "\t" not in text
    assert text.splitlines()[0].split()[:4] == ["COLLECTION", "DOCUMENTS", "CHUNKS", "MODEL"]
    [row] = read_table(text)
    assert row["COLLECTION"] == "docs" and row["DOCUMENTS"] == "3"
    assert row["CHUNKS"] == f"{docs['chunks']:,}" and row["MODEL"] == docs["model"]
    assert row["DIMENSION"] == "384"

    text = ok(loaded, "status").stdout
    assert "\t" not in text
    [row] = read_table(text)
    assert (row["COLLECTION"], row["DOCUMENTS"], row["PENDING"], row["FAILED"]) == (
        "docs",
        "3",
        "0",
        "0",
    )
    assert row["MODEL"] == docs["model"] and row["OTHER MODELS"] == "-"

    text = ok(loaded, "models", "list").stdout
    assert "\t" not in text
    [row] = read_table(text)
    assert row["NAME"] == docs["model"] and row["DIMENSION"] == "384"
    assert row["DISTANCE"] == "cosine" and row["COLLECTIONS"] == "docs (active)"


def test_db_check(dsn: str, empty_dsn: str) -> None:
    ok(dsn, "db", "check")
    assert run(empty_dsn, "db", "check").exit_code == 1


def test_ingest_twice_writes_nothing_the_second_time(loaded: str, corpus: Path) -> None:
    result = ok(loaded, "ingest", str(corpus), "--collection", "docs")
    assert "3 unchanged" in result.stderr
    assert "0 chunks written" in result.stderr
    assert result.stdout == ""


def test_trace_shows_what_ask_recorded(loaded: str) -> None:
    answer = json.loads(ok(loaded, "ask", MONTHLY, "--collection", "docs", "--json").stdout)
    trace = json.loads(ok(loaded, "trace", str(answer["query_id"]), "--json").stdout)
    assert trace["question"] == MONTHLY and trace["collection"] == "docs"
    assert trace["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert trace["answer"] == answer["answer"] and trace["abstained"] is False
    assert [c["chunk_id"] for c in trace["citations"]] == [
        c["chunk_id"] for c in answer["citations"]
    ]
    # (The prompt puts the strongest passages at both ends; the trace keeps retrieval order.)
    assert {r["chunk_id"] for r in trace["retrieved"]} == {s["chunk_id"] for s in answer["sources"]}
    assert [r["rank"] for r in trace["retrieved"]] == list(range(1, len(trace["retrieved"]) + 1))
    assert all(r["source"] for r in trace["retrieved"])
    assert "retrieve_ms" in trace["timings"] and trace["prompt"]
    plain = ok(loaded, "trace", str(answer["query_id"]), "--show-prompt").stdout
    assert f"Q: {MONTHLY}" in plain and "retrieved:" in plain and "prompt:" in plain
    missing = run(loaded, "trace", "999999")
    assert_one_error_line(missing, "error: no recorded question has id 999999")


def test_ask_scores_each_cited_sentence(loaded: str, llm: LLMServer) -> None:
    llm.reply = (
        "Monthly subscriptions can be refunded within 14 days [1]. Refunds also cover"
        " shipping costs worldwide."
    )
    result = ok(loaded, "ask", MONTHLY, "-c", "docs", "--json", env=llm.env)
    answer = json.loads(result.stdout)
    first, second = answer["sentences"]
    assert first["citations"] == [1] and first["support"] is not None
    assert second["citations"] == [] and second["support"] is None
    assert answer["uncited"] == ["Refunds also cover shipping costs worldwide."]
    assert 0 < answer["faithfulness"] <= 0.5
    plain = ok(loaded, "ask", MONTHLY, "-c", "docs", env=llm.env)
    assert "warning: 1 sentence(s) cite no source" in plain.stderr


# --- what reaches a terminal -------------------------------------------------------------------

OSC_CLIPBOARD = "\x1b]52;c;cHduZWQ=\x07"  # writes the clipboard in many terminals
OSC_TITLE = "\x1b]0;pwned\x07"  # sets the window title
RAW = ("\x1b", "\x07", "\r", "\u202e", "\x9b")  # none of them may reach a person's terminal


def assert_nothing_raw(*texts: str) -> None:
    for text in texts:
        found = [ascii(ch) for ch in RAW if ch in text]
        assert not found, f"raw {found} in {text!r}"


@pytest.fixture
def hostile(dsn: str, tmp_path: Path) -> str:
    """``dsn`` with a collection ``hostile``: escape sequences in a file's text and name."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    text = (
        f"# Refunds {OSC_TITLE}\n\nMonthly refunds are possible {OSC_CLIPBOARD} within 14 days."
        " Annual plans \u202eget 30 days\u202c, says the \x9bpolicy\r.\n"
    )
    (folder / f"policy{OSC_TITLE}.md").write_text(text, encoding="utf-8")
    (folder / f"broken{OSC_TITLE}.md").write_bytes(b"\xff\xfe not UTF-8")
    result = run(dsn, "ingest", str(folder), "--collection", "hostile")
    assert result.exit_code == 1  # the broken file
    assert "1 added" in result.stderr
    # The file names in the messages (the error line of the broken file) are escaped, on one line.
    assert_nothing_raw(result.stdout, result.stderr)
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert "broken\\x1b]0;pwned\\x07.md" in error
    return dsn


def test_search_escapes_what_documents_hold(hostile: str) -> None:
    result = ok(hostile, "search", "monthly refunds", "-c", "hostile")
    assert_nothing_raw(result.stdout, result.stderr)
    assert "\\x1b]52;c;cHduZWQ=\\x07" in result.stdout  # visible, not acted on
    assert "policy\\x1b]0;pwned\\x07.md" in result.stdout
    assert "\\u202eget 30 days" in result.stdout and "\\x9bpolicy ." in result.stdout  # (\r: space)
    # --json stays exact: the same text comes back, and still nothing raw on the terminal.
    as_json = ok(hostile, "search", "monthly refunds", "-c", "hostile", "--json").stdout
    assert_nothing_raw(as_json)
    (top, *_) = json.loads(as_json)
    assert OSC_CLIPBOARD in top["text"] and "\u202e" in top["text"] and "\x9b" in top["text"]
    assert top["source"].endswith(f"policy{OSC_TITLE}.md")


def test_ask_escapes_the_answer_and_its_sources(hostile: str, llm: LLMServer) -> None:
    llm.reply = f"Answer {OSC_TITLE} here [1].\nSecond line \u202ereversed\u202c [1]."
    result = ok(hostile, "ask", "How long do monthly refunds take?", "-c", "hostile", env=llm.env)
    assert_nothing_raw(result.stdout, result.stderr)
    assert "Answer \\x1b]0;pwned\\x07 here [1]." in result.stdout
    assert "\nSecond line \\u202ereversed\\u202c [1]." in result.stdout  # newlines stay layout
    assert "policy\\x1b]0;pwned\\x07.md" in result.stdout.split("Sources:")[1]
    # --json: exact, and parses back to what the model said.
    as_json = ok(hostile, "ask", "monthly refunds?", "-c", "hostile", "--json", env=llm.env)
    assert_nothing_raw(as_json.stdout)
    assert OSC_TITLE in json.loads(as_json.stdout)["answer"]


def test_ask_escapes_the_draft_streamed_to_a_terminal(
    hostile: str, llm: LLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pgrag.cli.ask.stdout_is_terminal", lambda: True)
    llm.reply = f"Answer {OSC_TITLE} here [1]. Annual [9]."
    result = ok(hostile, "ask", "How long do monthly refunds take?", "-c", "hostile", env=llm.env)
    assert llm.requests[0].body["stream"] is True
    assert_nothing_raw(result.stdout, result.stderr)
    draft, checked = result.stdout.split("checked answer: ")
    assert "\\x1b]0;pwned\\x07" in draft and "\\x1b]0;pwned\\x07" in checked


def test_errors_quoting_user_input_are_escaped(loaded: str) -> None:
    # A name no collection can have is a usage error naming -c, escaped as it was typed.
    result = run(loaded, "search", "x", "-c", f"no{OSC_TITLE}\nsuch")
    assert result.exit_code == 2
    assert_nothing_raw(result.stderr)
    assert "'--collection' / '-c': invalid collection name" in result.stderr
    assert "\\x1b]0;pwned\\x07" in result.stderr
    # A path that does not exist, a filter operator that does not: the message names them.
    for args in (
        ("ingest", f"/nonexistent/no{OSC_TITLE}.md", "-c", "x"),
        ("search", "x", "-c", "docs", "--filter", json.dumps({"a": {f"$no{OSC_TITLE}": 1}})),
    ):
        result = run(loaded, *args)
        assert result.exit_code == 1
        assert_nothing_raw(result.stderr)
        assert "\\x1b]0;pwned\\x07" in result.stderr, result.stderr
    # click's own usage errors quote what was typed, too.
    result = run(loaded, "search", "x", "--mode", f"bad{OSC_TITLE}")
    assert result.exit_code == 2
    assert_nothing_raw(result.stderr)
    assert "bad\\x1b]0;pwned\\x07" in result.stderr


def test_progress_in_a_log_is_plain_numbered_lines(dsn: str, corpus: Path) -> None:
    # CliRunner's stderr is not a terminal: no bar redrawn with \r, no label without numbers.
    result = ok(dsn, "ingest", str(corpus), "--collection", "logged")
    assert "\r" not in result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("embedding")]
    assert lines, result.stderr
    for line in lines:
        assert re.fullmatch(r"embedding: (\d+/\d+ files, )?[\d,]+/[\d,]+ chunks", line), line
    assert lines[-1].startswith("embedding: 3/3 files, ")
    done, total = lines[-1].rsplit(" ", 2)[1].split("/")
    assert done == total
