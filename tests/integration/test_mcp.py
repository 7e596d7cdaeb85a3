"""pgrag's MCP server driven by the official ``mcp`` client SDK: over streamable HTTP at
``/mcp`` of a real ``pgrag serve``, and over stdio from a spawned ``pgrag mcp``. The tools are
listed with their schemas, called, refuse bad arguments with one-line tool errors, and read as
the caller's principals, so two callers see only their own documents."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import psycopg
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

import pgrag
from pgrag.config import Settings
from pgrag.service.keys import create_key, revoke_key
from tests.fakes import LLMServer
from tests.integration.test_service_access import app_dsn  # noqa: F401 - fixture
from tests.serving import served

ROOT = Path(__file__).resolve().parents[2]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}
TOOLS = {"search", "ask", "fetch_document", "list_collections"}
# One document long enough for several (overlapping) chunks, to read back whole.
SENTENCES = [
    f"Step {i} of the warehouse audit checks shelf {i * 7} for the {w} crates."
    for i, w in enumerate(
        "red blue green amber violet silver golden copper ivory coral teal olive maroon navy"
        " plum sand rust jade pearl ochre cobalt crimson indigo lilac".split(),
        start=1,
    )
]
PUBLIC = {
    "refunds.md": "# Refunds\n\nMonthly plans can be refunded within 14 days of the charge.\n",
    "audit.md": "# Warehouse audit\n\n" + " ".join(SENTENCES) + "\n",
}
PRIVATE = {
    "alice": ("salary.md", "# Salary review\n\nThe salary review budget code is ZEBRA-7.\n"),
    "bob": ("bonus.md", "# Bonus plan\n\nThe bonus plan budget code is ZEBRA-9.\n"),
}


@pytest.fixture
def corpus(db: Any, tmp_path: Path) -> Any:
    public = tmp_path / "public"
    public.mkdir()
    for name, text in PUBLIC.items():
        (public / name).write_text(text)
    pgrag.ingest(db, [public], collection="handbook")
    for who, (name, text) in PRIVATE.items():
        folder = tmp_path / who
        folder.mkdir()
        (folder / name).write_text(text)
        pgrag.ingest(db, [folder], collection="handbook", allow=[who])
    return db


def _run(main: Callable[[], Awaitable[None]]) -> None:
    anyio.run(main)


def _structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


def _text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _http(url: str, key: str | None = None) -> Client:
    client = httpx.AsyncClient(headers=_bearer(key) if key else {}, timeout=httpx.Timeout(120.0))
    return Client(streamable_http_client(f"{url}/mcp", http_client=client))


def _sources(found: dict[str, Any]) -> set[str]:
    return {Path(r["source"]).name for r in found["results"]}


# -- streamable HTTP -------------------------------------------------------------------------


def test_tools_are_listed_with_their_schemas(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:

        async def main() -> None:
            async with _http(s.url) as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert set(listed) == TOOLS
                search = listed["search"]
                assert search.input_schema["required"] == ["query"]
                properties = search.input_schema["properties"]
                assert set(properties) == {"query", "collection", "k", "mode", "filter"}
                assert properties["mode"]["enum"] == ["hybrid", "keyword", "vector"]
                assert properties["k"]["maximum"] == 50
                assert search.output_schema is not None
                assert "results" in search.output_schema["properties"]
                assert listed["ask"].input_schema["required"] == ["question"]
                fetch = listed["fetch_document"].input_schema["properties"]
                assert {"chunk_id", "source", "collection"} <= set(fetch)
                for tool in listed.values():
                    assert tool.description, tool.name
                assert listed["search"].annotations is not None
                assert listed["search"].annotations.read_only_hint is True

        _run(main)


def test_search_ask_and_fetch_document_over_http(corpus: Any, dsn: str) -> None:
    llm = LLMServer("Monthly plans can be refunded within 14 days [1].")
    settings = Settings(llm_base_url=llm.url, llm_model="test", min_confidence="off")
    local = pgrag.search(corpus, "refund window", collection="handbook", k=3)
    with served(dsn, settings, no_auth=True) as s:

        async def main() -> None:
            async with _http(s.url) as client:
                found = _structured(
                    await client.call_tool(
                        "search", {"query": "refund window", "collection": "handbook", "k": 3}
                    )
                )
                assert [r["chunk_id"] for r in found["results"]] == [h.chunk_id for h in local]
                top = found["results"][0]
                assert Path(top["source"]).name == "refunds.md" and top["title"] == "Refunds"
                assert "14 days" in top["text"]

                answer = _structured(
                    await client.call_tool(
                        "ask",
                        {"question": "How long is the refund window?", "collection": "handbook"},
                    )
                )
                assert answer["abstained"] is False
                assert answer["answer"] == "Monthly plans can be refunded within 14 days [1]."
                assert Path(answer["citations"][0]["source"]).name == "refunds.md"
                assert isinstance(answer["query_id"], int)

                cited = answer["citations"][0]["chunk_id"]
                doc = _structured(await client.call_tool("fetch_document", {"chunk_id": cited}))
                assert Path(doc["source"]).name == "refunds.md"
                assert doc["collection"] == "handbook" and doc["truncated"] is False
                assert "refunded within 14 days" in doc["text"]

                listing = _structured(await client.call_tool("list_collections", {}))
                assert [c["name"] for c in listing["collections"]] == ["handbook"]

        _run(main)
        metrics = httpx.get(f"{s.url}/metrics").text
    assert 'pgrag_http_requests_total{method="POST",route="/mcp",status="200"}' in metrics
    assert 'pgrag_stage_duration_seconds_count{route="mcp:search",stage="embed"} 1.0' in metrics
    assert 'pgrag_stage_duration_seconds_count{route="mcp:ask",stage="generate"} 1.0' in metrics


def test_fetch_document_reads_a_whole_document_once_in_order(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:

        async def main() -> None:
            async with _http(s.url) as client:
                by_source = _structured(
                    await client.call_tool(
                        "fetch_document",
                        {"source": _stored_source(corpus, "audit.md"), "collection": "handbook"},
                    )
                )
                assert by_source["chunks"] >= 2 and len(by_source["parts"]) == by_source["chunks"]
                ordinals = [p["ordinal"] for p in by_source["parts"]]
                assert ordinals == sorted(ordinals)
                text = by_source["text"]
                # Every sentence once, in order: the chunks' overlap is not repeated.
                positions = [text.find(sentence) for sentence in SENTENCES]
                assert -1 not in positions and positions == sorted(positions)
                assert all(text.count(sentence) == 1 for sentence in SENTENCES)
                # Any of its chunks names the same document.
                last = by_source["parts"][-1]["chunk_id"]
                by_chunk = _structured(await client.call_tool("fetch_document", {"chunk_id": last}))
                assert by_chunk["text"] == text
                first = _structured(
                    await client.call_tool("fetch_document", {"chunk_id": last, "max_chunks": 1})
                )
                assert first["truncated"] is True and len(first["parts"]) == 1
                assert first["chunks"] == by_source["chunks"]

        _run(main)


def _stored_source(db: Any, name: str) -> str:
    hits = pgrag.search(db, name.split(".")[0], collection="handbook", k=20, mode="keyword")
    sources = {h.source for h in hits if Path(h.source).name == name}
    assert len(sources) == 1, sources
    return sources.pop()


def test_bad_arguments_are_one_line_tool_errors(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:

        async def main() -> None:
            async with _http(s.url) as client:

                async def error(name: str, arguments: dict[str, Any]) -> str:
                    result = await client.call_tool(name, arguments)
                    assert result.is_error, (name, arguments)
                    message = _text(result)
                    assert "\n" not in message
                    return message

                assert "k: Input should be less than or equal to 50" in await error(
                    "search", {"query": "refund", "k": 500}
                )
                assert "mode:" in await error("search", {"query": "refund", "mode": "fuzzy"})
                assert "query: Field required" in await error("search", {"k": 3})
                assert "the search query is empty" in await error(
                    "search", {"query": "  ", "collection": "handbook"}
                )
                typo = await error("search", {"query": "refund", "colection": "handbook"})
                assert "no argument 'colection'" in typo and "collection" in typo
                assert "collection 'nope' does not exist" in await error(
                    "search", {"query": "refund", "collection": "nope"}
                )
                assert "name the document" in await error(
                    "fetch_document", {"collection": "handbook"}
                )
                assert "no document 'missing.md'" in await error(
                    "fetch_document", {"source": "missing.md", "collection": "handbook"}
                )
                assert "the question is empty" in await error(
                    "ask", {"question": "", "collection": "handbook"}
                )

        _run(main)


@pytest.fixture
def keys(corpus: Any) -> dict[str, str]:
    return {who: create_key(corpus, principals=[who], name=f"{who}-mcp")[1] for who in PRIVATE}


def test_two_keys_see_only_their_own_documents_over_http(
    corpus: Any,
    keys: dict[str, str],
    app_dsn: str,  # noqa: F811 - the service connects as a pgrag_app member, as it should
) -> None:
    seen: dict[str, dict[str, Any]] = {}
    with served(app_dsn, Settings(min_confidence="off"), warm_model=False) as s:

        async def main() -> None:
            for who, key in keys.items():
                async with _http(s.url, key) as client:
                    found = _structured(
                        await client.call_tool(
                            "search", {"query": "budget code", "collection": "handbook", "k": 10}
                        )
                    )
                    answer = _structured(
                        await client.call_tool(
                            "ask",
                            {"question": "What is the budget code?", "collection": "handbook"},
                        )
                    )
                    listing = _structured(await client.call_tool("list_collections", {}))
                    seen[who] = {"found": found, "answer": answer, "listing": listing}
            # A chunk id of bob's names nothing for alice: the same answer as one that does
            # not exist.
            bobs = next(
                r["chunk_id"]
                for r in seen["bob"]["found"]["results"]
                if r["source"].endswith("bonus.md")
            )
            async with _http(s.url, keys["alice"]) as client:
                hidden = await client.call_tool("fetch_document", {"chunk_id": bobs})
                missing = await client.call_tool("fetch_document", {"chunk_id": 10**12})
                assert hidden.is_error and f"no chunk {bobs}" in _text(hidden)
                assert _text(missing).replace(str(10**12), "N") == _text(hidden).replace(
                    str(bobs), "N"
                )
            async with _http(s.url, keys["bob"]) as client:
                own = _structured(await client.call_tool("fetch_document", {"chunk_id": bobs}))
                assert Path(own["source"]).name == "bonus.md"

        _run(main)
    for who, other in (("alice", "bob"), ("bob", "alice")):
        mine, theirs = PRIVATE[who][0], PRIVATE[other][0]
        assert mine in _sources(seen[who]["found"]) and theirs not in _sources(seen[who]["found"])
        cited = {Path(c["source"]).name for c in seen[who]["answer"]["sources"]}
        assert mine in cited and theirs not in cited, (who, cited)
        # Each counts the public documents and its own.
        (handbook,) = seen[who]["listing"]["collections"]
        assert handbook["documents"] == len(PUBLIC) + 1


def test_a_key_without_the_read_scope_is_refused(corpus: Any, app_dsn: str) -> None:  # noqa: F811
    _, writer = create_key(corpus, principals=["alice"], scopes=["write"])
    with served(app_dsn, warm_model=False) as s:
        r = httpx.post(f"{s.url}/mcp", json=INITIALIZE, headers={**ACCEPT, **_bearer(writer)})
    assert r.status_code == 403 and "may not read" in r.json()["error"]["message"]


def test_mcp_over_http_needs_credentials(corpus: Any, keys: dict[str, str], dsn: str) -> None:
    forged = keys["alice"][:-4] + "AAAA"
    with served(dsn, warm_model=False) as s:
        refused = httpx.post(f"{s.url}/mcp", json=INITIALIZE, headers=ACCEPT)
        wrong = httpx.post(f"{s.url}/mcp", json=INITIALIZE, headers={**ACCEPT, **_bearer(forged)})
        right = httpx.post(
            f"{s.url}/mcp", json=INITIALIZE, headers={**ACCEPT, **_bearer(keys["alice"])}
        )
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer" in refused.json()["error"]["message"]
    assert wrong.status_code == 401 and forged not in wrong.text
    assert right.status_code == 200, right.text


def test_without_auth_mcp_answers_only_loopback_hosts(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True, warm_model=False) as s:
        ours = httpx.post(f"{s.url}/mcp", json=INITIALIZE, headers=ACCEPT)
        # What a page on another site reaching this port by DNS rebinding sends.
        rebound = httpx.post(
            f"{s.url}/mcp", json=INITIALIZE, headers={**ACCEPT, "Host": "evil.example:8000"}
        )
        foreign = httpx.post(
            f"{s.url}/mcp", json=INITIALIZE, headers={**ACCEPT, "Origin": "http://evil.example"}
        )
    assert ours.status_code == 200, ours.text
    assert rebound.status_code == 421 and foreign.status_code == 403


# -- stdio -----------------------------------------------------------------------------------


def _stdio_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {
        "PGRAG_DSN": dsn,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    for name in ("HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TMPDIR"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env | extra


def test_stdio_serves_the_tools_as_the_principal(corpus: Any, dsn: str) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pgrag.cli", "mcp", "--principal", "alice"],
        env=_stdio_env(dsn),
        cwd=str(ROOT),
    )
    stray: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):  # a line on stdout that is not an MCP message
            stray.append(message)

    with tempfile.TemporaryFile("w+") as errlog:

        async def main() -> None:
            transport = _stdio(params, errlog)
            async with Client(transport, message_handler=on_message) as client:
                assert {t.name for t in (await client.list_tools()).tools} == TOOLS
                found = _structured(
                    await client.call_tool(
                        "search", {"query": "budget code", "collection": "handbook", "k": 10}
                    )
                )
                assert "salary.md" in _sources(found) and "bonus.md" not in _sources(found)
                top = found["results"][0]
                doc = _structured(
                    await client.call_tool("fetch_document", {"chunk_id": top["chunk_id"]})
                )
                assert doc["source"] == top["source"]
                bad = await client.call_tool("search", {"query": "x", "k": 0})
                assert bad.is_error and "k: Input should be greater than or equal to 1" in _text(
                    bad
                )

        try:
            _run(main)
        finally:
            errlog.seek(0)
            log = errlog.read()
        assert not stray, (stray, log)


def test_stdio_reads_as_the_api_key(
    corpus: Any,
    keys: dict[str, str],
    app_dsn: str,  # noqa: F811
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pgrag.cli", "mcp"],
        env=_stdio_env(app_dsn, PGRAG_API_KEY=keys["bob"]),
        cwd=str(ROOT),
    )
    with tempfile.TemporaryFile("w+") as errlog:

        async def main() -> None:
            async with Client(_stdio(params, errlog)) as client:
                found = _structured(
                    await client.call_tool(
                        "search", {"query": "budget code", "collection": "handbook", "k": 10}
                    )
                )
                assert "bonus.md" in _sources(found) and "salary.md" not in _sources(found)
                # Revoked while the command runs: its next call is refused.
                revoke_key(corpus, keys["bob"].split("_")[1])
                refused = await client.call_tool(
                    "search", {"query": "budget code", "collection": "handbook"}
                )
                assert refused.is_error and "revoked" in str(refused.content)

        _run(main)


def test_stdio_refuses_a_key_that_is_not_valid(corpus: Any, keys: dict[str, str], dsn: str) -> None:
    forged = keys["alice"][:-4] + "AAAA"
    done = subprocess.run(
        [sys.executable, "-m", "pgrag.cli", "mcp"],
        env=os.environ | _stdio_env(dsn, PGRAG_API_KEY=forged),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "is not valid" in done.stderr and forged not in done.stderr


def _stdio(params: StdioServerParameters, errlog: Any) -> Any:
    from mcp.client.stdio import stdio_client

    return stdio_client(params, errlog=errlog)


def test_stdio_refuses_two_answers_to_who_reads(dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgrag.cli", "mcp", "--principal", "alice"],
        env=os.environ | _stdio_env(dsn, PGRAG_API_KEY="pgrag_abcdefgh_secret"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "--principal and $PGRAG_API_KEY both say who reads" in done.stderr


def _waiting(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgrag serve'"
            " AND wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_call_the_client_gives_up_on_stops_its_query_in_postgres(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:

        async def warm() -> None:
            async with _http(s.url) as client:
                _structured(
                    await client.call_tool("search", {"query": "warm", "collection": "handbook"})
                )

        _run(warm)
        blocker = psycopg.connect(dsn)
        blocker.execute("LOCK TABLE pgrag.chunks IN ACCESS EXCLUSIVE MODE")
        try:
            reached: list[bool] = []

            async def impatient() -> None:
                async with _http(s.url) as client, anyio.create_task_group() as group:

                    async def call() -> None:
                        await client.call_tool(
                            "search", {"query": "refund window again", "collection": "handbook"}
                        )

                    group.start_soon(call)
                    with anyio.move_on_after(20):
                        while await anyio.to_thread.run_sync(_waiting, dsn) == 0:
                            await anyio.sleep(0.1)
                        reached.append(True)
                    group.cancel_scope.cancel()  # the client gives up, and goes away

            _run(impatient)
            assert reached, "the search never reached the lock"
            deadline = time.monotonic() + 10
            while _waiting(dsn) and time.monotonic() < deadline:
                time.sleep(0.1)
            # The lock is still held: only the service's cancel can have ended the wait.
            assert _waiting(dsn) == 0
        finally:
            blocker.rollback()
            blocker.close()

        async def after() -> None:
            async with _http(s.url) as client:
                _structured(
                    await client.call_tool("search", {"query": "refund", "collection": "handbook"})
                )

        _run(after)
