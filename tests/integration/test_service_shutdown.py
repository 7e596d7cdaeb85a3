"""A SIGTERM'd ``pgrag serve`` (the real command, in its own process) stops taking connections,
finishes the answer it is streaming, and exits 0. A correctness check, not a timing one: the
fake LLM holds the stream open until the test has seen the service refuse a new connection."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx

import pgrag
from tests.fakes import LLMServer, Reply, sse_data
from tests.serving import free_port, sse_events

REPLY = "Monthly plans can be refunded within 14 days [1]."


def _refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _start(dsn: str, llm: LLMServer, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGRAG_LLM_", "OPENAI_"))}
    env |= {
        "PGRAG_LLM_BASE_URL": llm.url,
        "PGRAG_LLM_MODEL": "test",
        "PGRAG_MIN_CONFIDENCE": "off",
        "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "pgrag.cli", "--dsn", dsn, "serve", "--no-auth"]
    command += ["--port", str(port), "--drain", "60", "--log-level", "warning"]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"pgrag serve exited: {log.read_text()}"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise AssertionError(f"pgrag serve was not ready: {log.read_text()}")


def test_sigterm_finishes_the_streamed_answer_then_exits_0(
    db: Any, dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "refunds.md").write_text(
        "# Refunds\n\nMonthly plans can be refunded within 14 days of the charge.\n"
    )
    pgrag.ingest(db, [tmp_path / "refunds.md"], collection="handbook")
    llm = LLMServer()
    words = [w if i == 0 else " " + w for i, w in enumerate(REPLY.split(" "))]
    events = [sse_data({"choices": [{"index": 0, "delta": {"content": w}}]}) for w in words]
    # Two words, then the stream waits on llm.release (set below, after the SIGTERM).
    llm.replies.append(Reply(sse=[*events, "data: [DONE]"], sse_delay_after=2, delay=120))
    port = free_port()
    proc = _start(dsn, llm, port, tmp_path / "serve.log")
    got: dict[str, Any] = {"events": []}
    two_tokens = threading.Event()

    def client() -> None:
        try:
            with httpx.stream(
                "POST",
                f"http://127.0.0.1:{port}/v1/ask",
                json={"question": "How long is the refund window?", "collection": "handbook"},
                headers={"Accept": "text/event-stream"},
                timeout=httpx.Timeout(120.0),
            ) as r:
                got["status"] = r.status_code

                def lines() -> Any:
                    for line in r.iter_lines():
                        yield line
                        if line.startswith("event: token"):
                            got["tokens"] = got.get("tokens", 0) + 1
                            if got["tokens"] == 2:
                                two_tokens.set()

                got["events"] = list(sse_events(lines()))
        except Exception as err:  # reported by the assertions below
            got["error"] = repr(err)
        finally:
            two_tokens.set()

    reader = threading.Thread(target=client)
    try:
        reader.start()
        assert two_tokens.wait(120), "no tokens arrived"
        assert "error" not in got, got
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while not _refuses(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = _refuses(port)
        llm.release.set()  # the LLM finishes its answer
        reader.join(120)
        code = proc.wait(120)
    finally:
        llm.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        llm.close()
    log = (tmp_path / "serve.log").read_text()
    assert refused, "the service still accepted connections after SIGTERM"
    assert "error" not in got, got
    assert got["status"] == 200
    names = [name for name, _ in got["events"]]
    assert names[-2:] == ["answer", "done"], (names, log)
    streamed = "".join(json.loads(d)["text"] for n, d in got["events"] if n == "token")
    answer = json.loads(got["events"][-2][1])
    assert streamed == answer["raw_answer"] == REPLY
    assert answer["citations"][0]["source"].endswith("refunds.md")
    assert code == 0, log
