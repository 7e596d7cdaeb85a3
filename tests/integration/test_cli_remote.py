"""``pgrag search`` / ``pgrag ask`` with ``PGRAG_URL``: the running service answers, the output
is the local command's (text and --json), and the CLI process never loads the embedding model
(a subprocess whose database setting points nowhere, timed by ``-X importtime``)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.config import Settings
from pgrag.service.client import ServiceClient
from pgrag.service.keys import create_key
from tests.fakes import LLMServer
from tests.serving import free_port, served

ROOT = Path(__file__).resolve().parents[2]
DOCS = {
    "refunds.md": "# Refunds\n\nMonthly plans can be refunded within 14 days of the charge.\n",
    "shipping.md": "# Shipping\n\nParcels to Norway take five working days by road.\n",
    "secret.md": "# Secret\n\nAlice's refund code for parcels is ZEBRA-14.\n",
}
HEAVY = ("sentence_transformers", "torch", "transformers", "fastapi", "psycopg")
# What differs between two runs of the same question: when, how long, which log entry.
VOLATILE = ("timings", "query_id")


@pytest.fixture
def corpus(db: Any, tmp_path: Path) -> Any:
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    pgrag.ingest(db, [tmp_path / "refunds.md", tmp_path / "shipping.md"], collection="handbook")
    pgrag.ingest(db, [tmp_path / "secret.md"], collection="handbook", allow=["alice"])
    return db


def _remote(url: str, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, as a terminal user runs it, with PGRAG_URL set and a
    database setting that points nowhere (a local search would fail on it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PGRAG_"))}
    env.update(
        PGRAG_URL=url,
        PGRAG_DSN="host=/nonexistent/pgrag dbname=nowhere connect_timeout=1",
        PYTHONPATH=str(ROOT),
    )
    if key:
        env["PGRAG_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pgrag.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def _imported(stderr: str) -> set[str]:
    """Top-level modules an ``-X importtime`` run imported."""
    out = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            out.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return out


def _stderr(stderr: str) -> str:
    """stderr without ``-X importtime``'s lines."""
    return "\n".join(ln for ln in stderr.splitlines() if not ln.startswith("import time:"))


def _local(dsn: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--dsn", dsn, *args], env={"PGRAG_URL": ""})
    return result


def _stable(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in VOLATILE}


def test_search_through_the_service_prints_what_the_local_search_prints(
    corpus: Any, dsn: str
) -> None:
    query = ["search", "refund within days", "-c", "handbook", "-k", "3"]
    with served(dsn, no_auth=True) as s:
        as_json = _remote(s.url, *query, "--json")
        as_text = _remote(s.url, *query)
        tuned = _remote(s.url, *query, "--mode", "keyword", "--rrf-k", "10", "--json")
    local_json, local_text = _local(dsn, *query, "--json"), _local(dsn, *query)
    local_tuned = _local(dsn, *query, "--mode", "keyword", "--rrf-k", "10", "--json")
    for remote, local in ((as_json, local_json), (as_text, local_text), (tuned, local_tuned)):
        assert remote.returncode == 0, _stderr(remote.stderr)
        assert local.exit_code == 0, local.output
        assert remote.stdout == local.stdout
    assert json.loads(as_json.stdout)[0]["source"].endswith("refunds.md")
    # The terminal's process loaded neither the model nor the database driver.
    for run in (as_json, as_text, tuned):
        assert not _imported(run.stderr) & set(HEAVY), _imported(run.stderr) & set(HEAVY)
        assert "pgrag" in _imported(run.stderr)  # (-X importtime did report imports)


def test_ask_through_the_service_answers_as_the_local_ask(corpus: Any, dsn: str) -> None:
    question = ["ask", "How long is the refund window for monthly plans?", "-c", "handbook"]
    with served(dsn, no_auth=True) as s:
        remote_json = _remote(s.url, *question, "--json")
        remote_text = _remote(s.url, *question)
    local_json = _local(dsn, *question, "--json")
    local_text = _local(dsn, *question)
    assert remote_json.returncode == 0, _stderr(remote_json.stderr)
    remote_answer, local_answer = json.loads(remote_json.stdout), json.loads(local_json.stdout)
    assert _stable(remote_answer) == _stable(local_answer)
    assert set(remote_answer) == set(local_answer)  # no key of the service's own
    assert remote_answer["abstained"] is False and "14 days" in remote_answer["answer"]
    assert remote_text.stdout == local_text.stdout and "Sources:" in remote_text.stdout
    assert not _imported(remote_json.stderr) & set(HEAVY)


def test_the_api_key_decides_what_the_terminal_sees(corpus: Any, dsn: str) -> None:
    key = create_key(corpus, principals=["alice"])[1]
    query = ["search", "refund code for parcels", "-c", "handbook", "--json"]
    with served(dsn) as s:
        as_alice = _remote(s.url, *query, key=key)
        anonymous = _remote(s.url, *query)
    local_alice = _local(dsn, *query, "--principal", "alice")
    local_public = _local(dsn, *query, "--principal", "nobody")
    assert as_alice.returncode == 0, _stderr(as_alice.stderr)
    assert as_alice.stdout == local_alice.stdout
    assert any(h["source"].endswith("secret.md") for h in json.loads(as_alice.stdout))
    assert not any(h["source"].endswith("secret.md") for h in json.loads(local_public.stdout))
    assert anonymous.returncode == 1
    assert "missing credentials" in anonymous.stderr and "PGRAG_API_KEY" in anonymous.stderr


def test_errors_are_the_local_commands_and_what_it_cannot_do_is_a_usage_error(
    corpus: Any, dsn: str
) -> None:
    runner = CliRunner()
    with served(dsn, no_auth=True) as s:
        env = {"PGRAG_URL": s.url}
        missing = runner.invoke(cli, ["search", "x", "-c", "nope"], env=env)
        unsupported = {
            option: runner.invoke(cli, command, env=env)
            for option, command in (
                ("--principal", ["search", "x", "-c", "handbook", "--principal", "bob"]),
                ("--reranker", ["search", "x", "-c", "handbook", "--reranker", "/models/ce"]),
                ("--agentic", ["ask", "x?", "-c", "handbook", "--agentic"]),
                ("--show-prompt", ["ask", "x?", "-c", "handbook", "--show-prompt"]),
            )
        }
        # An explicit --dsn runs locally, PGRAG_URL or not; --sql needs no service either.
        dead = {"PGRAG_URL": f"http://127.0.0.1:{free_port()}"}
        explicit = runner.invoke(
            cli, ["--dsn", dsn, "search", "refund", "-c", "handbook", "--json"], env=dead
        )
        printed = runner.invoke(cli, ["search", "refund", "--sql"], env=dead)
        unreachable = runner.invoke(cli, ["search", "refund", "-c", "handbook"], env=dead)
        not_a_url = runner.invoke(cli, ["search", "x"], env={"PGRAG_URL": "localhost:8000"})
    local_missing = runner.invoke(cli, ["--dsn", dsn, "search", "x", "-c", "nope"])
    assert missing.exit_code == local_missing.exit_code == 1
    assert missing.stderr == local_missing.stderr and "'nope'" in missing.stderr
    for option, result in unsupported.items():
        assert result.exit_code == 2, (option, result.output)
        assert f"{option} with PGRAG_URL" in result.stderr and "unset PGRAG_URL" in result.stderr
    assert explicit.exit_code == 0 and json.loads(explicit.stdout)
    assert printed.exit_code == 0 and "search_v5" in printed.stdout
    assert unreachable.exit_code == 1
    assert "cannot reach the pgrag service at http://127.0.0.1:" in unreachable.stderr
    assert "unset PGRAG_URL" in unreachable.stderr
    assert not_a_url.exit_code == 1 and "is not an http(s) URL" in not_a_url.stderr


def test_ask_streams_the_generators_tokens_to_a_terminal(corpus: Any, dsn: str) -> None:
    reply = "Monthly plans can be refunded within 14 days [1]."
    llm = LLMServer(reply)
    settings = Settings(llm_base_url=llm.url, llm_model="test", min_confidence="off")
    with served(dsn, settings, no_auth=True) as s:
        pieces: list[str] = []
        answer = ServiceClient(s.url).ask(
            {"question": "How long is the refund window?", "collection": "handbook"},
            pieces.append,
        )
        terminal = _on_a_terminal(s.url, "ask", "How long is the refund window?", "-c", "handbook")
    assert len(pieces) >= 5 and "".join(pieces) == answer["raw_answer"] == reply
    # At a terminal the draft streams in, then the sources, as the local ask prints them.
    lines = [ln.strip() for ln in terminal.replace("\r", "").splitlines() if ln.strip()]
    assert lines[0] == reply and lines[1] == "Sources:"
    assert lines[2].startswith("[1] Refunds") and lines[2].endswith("refunds.md")


def test_the_offline_readers_answer_at_a_terminal_is_printed_as_the_local_ask_prints_it(
    corpus: Any, dsn: str
) -> None:
    """The extractive reader does not stream locally (its answer is printed once, checked):
    through the service it reads the same at a terminal as in a pipe, as the local ask's."""
    question = ["ask", "How long is the refund window for monthly plans?", "-c", "handbook"]
    with served(dsn, no_auth=True) as s:
        terminal = _on_a_terminal(s.url, *question)
    local = _local(dsn, *question)
    assert local.exit_code == 0 and "Sources:" in local.stdout
    assert terminal.replace("\r\n", "\n") == local.stdout


def _on_a_terminal(url: str, *args: str) -> str:
    """What the CLI writes when its stdout is a terminal (a pseudo-terminal here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PGRAG_"))}
    env.update(PGRAG_URL=url, PYTHONPATH=str(ROOT), COLUMNS="200")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgrag.cli", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the other end closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(60) == 0
    return out.decode()
