"""`pgrag serve` under load, a client that goes away mid-answer, and a graceful shutdown
(issue 17, item 8). Loopback only, bounded in time (about 4 minutes with the defaults).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/serve_load.py \\
        --questions ~/.cache/pgrag-bench/squad-dev-v1.1.json --out serve-load.json

It starts `pgrag serve --no-auth` as a subprocess (the console script, as a user would) against
the database of --dsn (default: PGRAG_DSN, PG*, else the embedded server) and its SQuAD dev
collection (`eval-squad-dev-v1.1`, the one `pgrag eval retrieval` builds; ingested here the same
way when it is missing), and then:

1. warm `/v1/search` against the in-process `pgrag.search` on the same questions, one at a time,
   alternating (the p50 ratio; target <= 1.3), with the service's own stage timings;
2. --clients concurrent clients for --seconds mixing `/v1/search` and `/v1/ask` (the offline
   extractive reader; half of the answers streamed as SSE): errors counted and classified,
   p50/p95 per route, requests/s, the service's resident memory at the start and end;
3. on a second service (its own scratch database of a few SQuAD paragraphs, and a fake LLM that
   streams slowly): a client that disconnects mid-stream (the fake LLM must see its connection
   closed before the stream ends), clients that give up while their query waits on a lock in
   PostgreSQL (the query must leave pg_stat_activity while the lock is still held), and SIGTERM
   with streams in flight (they finish with 200, new connections are refused, exit 0 within
   --drain).

The summary is printed as JSON (stdout, and --out) and as Markdown (stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import psycopg
from _bench import drop_database, fresh_database, latency, log

try:
    import httpx2 as httpx
except ImportError:  # pragma: no cover - the older name
    import httpx  # type: ignore[no-redef]

import pgrag
from pgrag.db.dsn import resolve_dsn

MARKER = "pgrag benchmark scratch database (benchmarks/serve_load.py)"
SCRATCH = "pgrag_bench_serve"
LLM_VARIABLES = ("PGRAG_LLM_", "OPENAI_")


# --- questions and collections --------------------------------------------------------------


def squad_questions(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        qa["question"].strip()
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
        if qa["question"].strip()
    ]


def ensure_collection(db: pgrag.Database, questions_path: Path, collection: str) -> None:
    """Ingest the SQuAD paragraphs into ``collection`` as `pgrag eval retrieval` does, unless
    it holds documents already."""
    from pgrag.collections import list_collections
    from pgrag.evaluation.datasets import load_squad
    from pgrag.ingest.loaders import from_text

    present = {c["name"]: c for c in list_collections(db)}
    if collection in present and present[collection].get("documents", 1):
        return
    dataset = load_squad(questions_path)
    log(f"collection {collection!r} is missing: ingesting {len(dataset.corpus)} paragraphs")
    pgrag.ingest_documents(
        db,
        (
            from_text(f"{dataset.name}:{d.id}", d.text, title=d.title, metadata={"doc_id": d.id})
            for d in dataset.corpus.values()
        ),
        collection=collection,
    )


def scratch_corpus(questions_path: Path, n: int) -> tuple[list[Any], list[str]]:
    """The first ``n`` SQuAD paragraphs as documents, and their questions."""
    from pgrag.ingest.loaders import from_text

    data = json.loads(questions_path.read_text(encoding="utf-8"))
    docs, questions = [], []
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(article["paragraphs"]):
            if len(docs) == n:
                return docs, questions
            docs.append(from_text(f"squad:{a}-{p}", paragraph["context"], title=article["title"]))
            questions.extend(qa["question"] for qa in paragraph["qas"])
    return docs, questions


# --- the service as a subprocess ------------------------------------------------------------


KEY_PRINCIPAL = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pgrag_command() -> list[str]:
    script = Path(sys.executable).with_name("pgrag")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pgrag.cli"]


class Service:
    """`pgrag serve` in a subprocess on a free loopback port; its log in a temporary file."""

    def __init__(
        self, dsn: str, *, env: dict[str, str], options: list[str], key: str | None = None
    ) -> None:
        self.port = free_port()
        # With an API key the service checks it on every request, as a deployment would, and
        # the in-process peer reads as the same principals.
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.principals = [KEY_PRINCIPAL] if key else None
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="pgrag-serve-", suffix=".log", delete=False
        )
        base = {k: v for k, v in os.environ.items() if not k.startswith(LLM_VARIABLES)}
        self.command = [
            *pgrag_command(),
            "--dsn",
            dsn,
            "serve",
            *([] if key else ["--no-auth"]),
            "--port",
            str(self.port),
            "--log-level",
            "warning",
            *options,
        ]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(  # noqa: S603 - our own console script
            self.command, env={**base, **env}, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.process = psutil.Process(self.proc.pid)
        self.wait_ready()
        self.startup_s = time.perf_counter() - t0

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"pgrag serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        self.proc.kill()
        sys.exit(f"pgrag serve was not ready within {timeout:.0f} s:\n{self.output()}")

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def metric(self, name: str) -> float:
        """The sum of the samples of one Prometheus metric (all label sets)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name)] in " {":
                total += float(line.rsplit(" ", 1)[1])
        return total

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return int(self.proc.returncode)


# --- a fake LLM that streams slowly and says how each stream ended --------------------------


class SlowLLM:
    """``POST /v1/chat/completions`` streamed a word every ``interval`` seconds, ``words``
    words, then ``[DONE]``. ``streams`` records each stream: words sent, and whether it
    ended "finished" or "client closed" (the reader went away before the last word)."""

    def __init__(self, words: int = 30, interval: float = 0.1) -> None:
        self.words, self.interval = words, interval
        self.streams: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.answer(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        words = [f"w{i}" for i in range(self.words - 1)] + ["[1]."]
        record: dict[str, Any] = {"sent": 0, "total": len(words), "ended": None}
        with self.lock:
            self.streams.append(record)
        if not body.get("stream"):
            payload = json.dumps({"choices": [{"message": {"content": " ".join(words)}}]})
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.end_headers()
            handler.wfile.write(payload.encode())
            record["ended"] = "finished"
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        try:
            for i, word in enumerate(words):
                if _peer_closed(handler.connection):
                    raise ConnectionResetError
                chunk = {
                    "choices": [{"index": 0, "delta": {"content": word if i == 0 else " " + word}}]
                }
                handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                handler.wfile.flush()
                record["sent"] = i + 1
                time.sleep(self.interval)
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
            record["ended"] = "finished"
        except OSError:
            record["ended"] = "client closed"
            record["closed_at"] = time.monotonic()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the other end closed the connection (readable, and reading would see EOF)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


# --- one request, timed and classified ------------------------------------------------------


def sse(lines: list[str]) -> Iterator[tuple[str, str]]:
    name, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield name, "\n".join(data)


async def one_search(
    client: Any, collection: str, question: str
) -> tuple[str | None, dict[str, Any]]:
    r = await client.post("/v1/search", json={"query": question, "collection": collection})
    if r.status_code != 200:
        return f"HTTP {r.status_code} {_error_type(r)}", {}
    body = r.json()
    return (None if isinstance(body.get("results"), list) else "no results list"), {}


async def one_ask(
    client: Any, collection: str, question: str, stream: bool
) -> tuple[str | None, dict[str, Any]]:
    payload = {"question": question, "collection": collection, "log": False, "stream": stream}
    if not stream:
        r = await client.post("/v1/ask", json=payload)
        if r.status_code != 200:
            return f"HTTP {r.status_code} {_error_type(r)}", {}
        body = r.json()
        return (None if "abstained" in body else "no answer in the body"), _answer_facts(body)
    t0 = time.perf_counter()
    first: float | None = None
    lines: list[str] = []
    async with client.stream("POST", "/v1/ask", json=payload) as r:
        if r.status_code != 200:
            await r.aread()
            return f"HTTP {r.status_code} {_error_type(r)}", {}
        async for line in r.aiter_lines():
            if first is None and line.startswith("event: token"):
                first = time.perf_counter() - t0
            lines.append(line)
    events = list(sse(lines))
    names = [n for n, _ in events]
    if "error" in names:
        data = json.loads(dict(events)["error"])
        return f"stream error event {data['error'].get('type')}", {}
    if names[-2:] != ["answer", "done"]:
        return "stream ended without answer+done", {}
    facts = _answer_facts(json.loads(events[-2][1]))
    facts["first_token_ms"] = (first if first is not None else time.perf_counter() - t0) * 1000
    return None, facts


def _answer_facts(body: dict[str, Any]) -> dict[str, Any]:
    return {"abstained": bool(body.get("abstained"))}


def _error_type(r: Any) -> str:
    try:
        return str(r.json()["error"]["type"])
    except Exception:
        return "(no error envelope)"


# --- phase 1: warm /v1/search against in-process pgrag.search -------------------------------


def warm_comparison(
    svc: Service, db: pgrag.Database, collection: str, questions: list[str], warmup: int
) -> dict[str, Any]:
    """Each question three times, one after the other: over HTTP, then in this process with
    the service's one model thread (what `pgrag serve` sets), then with torch's default (one
    per CPU). Neither side may reuse a vector: the database cache is off (see --query-cache)
    and this process's memory cache is emptied before each call."""
    import torch

    from pgrag.embeddings import query_cache

    default_threads = torch.get_num_threads()
    runs: dict[str, list[float]] = {"http": [], "lib_1": [], "lib_default": []}
    stages: dict[str, list[dict[str, float]]] = {"http": [], "lib_1": [], "lib_default": []}

    def library(q: str, threads: int) -> tuple[float, dict[str, float]]:
        torch.set_num_threads(threads)
        query_cache._memory.clear()
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        pgrag.search(db, q, collection=collection, timings=timings, principals=svc.principals)
        return (time.perf_counter() - t0) * 1000, timings

    with httpx.Client(base_url=svc.url, timeout=60, headers=svc.headers) as client:
        for i, q in enumerate(questions):
            t0 = time.perf_counter()
            r = client.post("/v1/search", json={"query": q, "collection": collection})
            measured = {"http": ((time.perf_counter() - t0) * 1000, {})}
            r.raise_for_status()
            measured["http"] = (measured["http"][0], r.json()["timings"])
            measured["lib_1"] = library(q, 1)
            measured["lib_default"] = library(q, default_threads)
            if i >= warmup:
                for name, (ms, timings) in measured.items():
                    runs[name].append(ms)
                    stages[name].append(timings)
    torch.set_num_threads(default_threads)
    out: dict[str, Any] = {"questions": len(runs["http"]), "default_threads": default_threads}
    for name, ms in runs.items():
        out[name] = latency(ms) | {"stage_p50_ms": _stage_p50(stages[name])}
    out["p50_ratio"] = out["http"]["p50_ms"] / out["lib_1"]["p50_ms"]
    out["p50_ratio_default_threads"] = out["http"]["p50_ms"] / out["lib_default"]["p50_ms"]
    return out


def _stage_p50(timings: list[dict[str, float]]) -> dict[str, float]:
    names = [k for k in timings[0] if k.endswith("_ms")] if timings else []
    return {k: latency([t[k] for t in timings if k in t])["p50_ms"] for k in names}


# --- phase 2: concurrent clients ------------------------------------------------------------


async def load(
    svc: Service,
    collection: str,
    questions: list[str],
    *,
    clients: int,
    seconds: float,
    ask_share: float,
    seed: int,
) -> dict[str, Any]:
    rng = random.Random(seed)
    latencies: dict[str, list[float]] = {
        "/v1/search": [],
        "/v1/ask (JSON)": [],
        "/v1/ask (SSE)": [],
    }
    first_token: list[float] = []
    abstained = Counter[str]()
    errors: Counter[str] = Counter()
    rss: list[int] = [svc.rss()]
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(1.0):
            rss.append(svc.rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(120.0)
    t0 = time.perf_counter()
    deadline = t0 + seconds

    async def user(n: int) -> None:
        local = random.Random(rng.random())
        async with httpx.AsyncClient(
            base_url=svc.url, limits=limits, timeout=timeout, headers=svc.headers
        ) as client:
            while time.perf_counter() < deadline:
                q = local.choice(questions)
                if local.random() < ask_share:
                    stream = local.random() < 0.5
                    route = "/v1/ask (SSE)" if stream else "/v1/ask (JSON)"
                    call = one_ask(client, collection, q, stream)
                else:
                    route, call = "/v1/search", one_search(client, collection, q)
                start = time.perf_counter()
                try:
                    failure, facts = await call
                except httpx.HTTPError as err:
                    failure, facts = type(err).__name__, {}
                elapsed = (time.perf_counter() - start) * 1000
                if failure:
                    errors[f"{route}: {failure}"] += 1
                    continue
                latencies[route].append(elapsed)
                if "first_token_ms" in facts:
                    first_token.append(facts["first_token_ms"])
                if facts.get("abstained"):
                    abstained[route] += 1

    await asyncio.gather(*(user(n) for n in range(clients)))
    wall = time.perf_counter() - t0
    stop_sampling.set()
    sampler.join()
    rss.append(svc.rss())
    done = sum(len(v) for v in latencies.values())
    routes = {
        route: {
            "requests": len(ms),
            "requests_per_s": len(ms) / wall,
            **(latency(ms) if ms else {}),
            "abstained": abstained[route],
        }
        for route, ms in latencies.items()
    }
    if first_token:
        routes["/v1/ask (SSE)"]["first_token"] = latency(first_token)
    return {
        "clients": clients,
        "seconds": seconds,
        "wall_s": wall,
        "requests": done,
        "errors": sum(errors.values()),
        "error_classes": dict(errors),
        "requests_per_s": done / wall,
        "routes": routes,
        "rss_start_bytes": rss[0],
        "rss_end_bytes": rss[-1],
        "rss_peak_bytes": max(rss),
    }


# --- phase 3: disconnects and shutdown on a second service ----------------------------------


def active_queries(dsn: str, database: str) -> int:
    """Statements the service runs in ``database`` now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgrag serve'"
            " AND datname = %s AND state = 'active'",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def lock_waiters(dsn: str, database: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgrag serve'"
            " AND datname = %s AND wait_event_type = 'Lock'",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def wait_until(predicate: Any, timeout: float) -> tuple[bool, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return True, time.monotonic() - t0
        time.sleep(0.05)
    return bool(predicate()), time.monotonic() - t0


def disconnect_mid_stream(svc: Service, llm: SlowLLM, question: str) -> dict[str, Any]:
    """Read three tokens of a long streamed answer, then hang up."""
    llm.words, llm.interval = 300, 0.1  # 30 s if nobody stopped it
    before = len(llm.streams)
    disconnects_before = svc.metric("pgrag_client_disconnects_total")
    tokens = 0
    with httpx.Client(base_url=svc.url, timeout=60) as client:
        with client.stream(
            "POST", "/v1/ask", json={"question": question, "collection": "squad", "stream": True}
        ) as r:
            for line in r.iter_lines():
                if line.startswith("event: token"):
                    tokens += 1
                    if tokens == 3:
                        break
    hung_up = time.monotonic()
    closed, _ = wait_until(lambda: len(llm.streams) > before and llm.streams[-1]["ended"], 15)
    record = llm.streams[-1] if len(llm.streams) > before else {}
    stopped_after = record.get("closed_at", hung_up) - hung_up if closed else None
    idle, _ = wait_until(lambda: active_queries(svc_dsn(svc), SCRATCH) == 0, 5)
    return {
        "tokens_read": tokens,
        "llm_stream": record.get("ended"),
        "llm_words_sent": record.get("sent"),
        "llm_words_total": record.get("total"),
        "llm_closed_after_hang_up_s": stopped_after,
        "disconnects_counted": svc.metric("pgrag_client_disconnects_total") - disconnects_before,
        "active_queries_after": active_queries(svc_dsn(svc), SCRATCH),
        "ok": record.get("ended") == "client closed" and idle,
    }


def svc_dsn(svc: Service) -> str:
    return str(svc.command[svc.command.index("--dsn") + 1])


def disconnect_in_postgres(svc: Service, question: str) -> dict[str, Any]:
    """Clients that give up while their query waits on a lock: the query must go from
    pg_stat_activity while the lock is still held (only the service's cancel ends it)."""
    dsn = svc_dsn(svc)
    out: dict[str, Any] = {}
    blocker = psycopg.connect(dsn)
    try:
        blocker.execute("LOCK TABLE pgrag.chunks IN ACCESS EXCLUSIVE MODE")
        for route, payload in (
            ("/v1/search", {"query": question, "collection": "squad"}),
            ("/v1/ask (SSE)", {"question": question, "collection": "squad", "stream": True}),
        ):
            path = route.split(" ")[0]

            def impatient(path: str = path, payload: dict[str, Any] = payload) -> None:
                try:
                    with httpx.stream(
                        "POST", f"{svc.url}{path}", json=payload, timeout=httpx.Timeout(2.0)
                    ) as r:
                        for _ in r.iter_lines():
                            pass
                except httpx.TimeoutException:
                    pass  # gives up and closes the connection

            client = threading.Thread(target=impatient)
            client.start()
            reached, _ = wait_until(lambda: lock_waiters(dsn, SCRATCH) == 1, 20)
            client.join(30)
            gone, after = wait_until(lambda: lock_waiters(dsn, SCRATCH) == 0, 10)
            out[route] = {
                "query_waited_on_the_lock": reached,
                "query_gone_while_lock_held": gone,
                "gone_after_client_left_s": round(after, 3) if gone else None,
            }
    finally:
        blocker.rollback()
        blocker.close()
    after = httpx.post(f"{svc.url}/v1/search", json={"query": question, "collection": "squad"})
    out["next_search_status"] = after.status_code
    out["ok"] = after.status_code == 200 and all(
        v["query_waited_on_the_lock"] and v["query_gone_while_lock_held"]
        for k, v in out.items()
        if k.startswith("/")
    )
    return out


def graceful_shutdown(
    svc: Service, llm: SlowLLM, questions: list[str], streams: int, drain: float
) -> dict[str, Any]:
    """SIGTERM with ``streams`` streamed answers in flight (each about 3 s of tokens)."""
    llm.words, llm.interval = 30, 0.1
    started = threading.Barrier(streams + 1, timeout=60)
    results: list[dict[str, Any]] = []

    def reader(q: str) -> None:
        record: dict[str, Any] = {"status": None, "events": [], "error": None}
        try:
            with httpx.Client(timeout=60) as client:
                with client.stream(
                    "POST",
                    f"{svc.url}/v1/ask",
                    json={"question": q, "collection": "squad", "stream": True},
                ) as r:
                    record["status"] = r.status_code
                    told = False
                    for line in r.iter_lines():
                        if line.startswith("event:"):
                            record["events"].append(line[6:].strip())
                            if not told and line.startswith("event: token"):
                                told = True
                                started.wait()
        except Exception as err:  # noqa: BLE001 - reported below
            record["error"] = f"{type(err).__name__}: {err}"
            try:
                started.abort()
            except threading.BrokenBarrierError:
                pass
        results.append(record)

    threads = [threading.Thread(target=reader, args=(q,)) for q in questions[:streams]]
    for t in threads:
        t.start()
    started.wait()  # every stream has its first token
    t0 = time.monotonic()
    svc.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    refused: str
    try:
        with socket.create_connection(("127.0.0.1", svc.port), timeout=2):
            refused = "accepted"
    except ConnectionRefusedError:
        refused = "refused"
    except OSError as err:
        refused = type(err).__name__
    for t in threads:
        t.join(drain + 30)
    try:
        rc = svc.proc.wait(drain + 30)
    except subprocess.TimeoutExpired:
        svc.proc.kill()
        rc = svc.proc.wait()
    exit_s = time.monotonic() - t0
    completed = sum(
        1 for r in results if r["status"] == 200 and r["events"][-2:] == ["answer", "done"]
    )
    return {
        "streams_in_flight": streams,
        "completed_with_200": completed,
        "failures": [r for r in results if r["error"] or r["events"][-2:] != ["answer", "done"]],
        "new_connection_after_sigterm": refused,
        "exit_code": rc,
        "exit_after_s": round(exit_s, 2),
        "drain_s": drain,
        "ok": completed == streams and refused == "refused" and rc == 0 and exit_s <= drain,
    }


# --- report ---------------------------------------------------------------------------------


def markdown(summary: dict[str, Any]) -> str:
    w, ld = summary["warm"], summary["load"]
    mib = 2**20
    lines = [
        f"Machine: {summary['machine']}",
        "",
        "Warm `/v1/search`, one client; each question over HTTP, then in-process with one"
        f" model thread, then with torch's default ({w['default_threads']}), one after the"
        f" other ({w['questions']} questions, no query-vector cache on either side):",
        "",
        "| | p50 ms | p95 ms | embed p50 ms | retrieve p50 ms |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {label} | {w[k]['p50_ms']:.2f} | {w[k]['p95_ms']:.2f} |"
            f" {w[k]['stage_p50_ms'].get('embed_ms', 0):.2f} |"
            f" {w[k]['stage_p50_ms'].get('retrieve_ms', 0):.2f} |"
            for k, label in (
                ("http", "`POST /v1/search` to `pgrag serve` (client-side time)"),
                ("lib_1", "`pgrag.search` in-process, 1 model thread (as the service)"),
                ("lib_default", f"`pgrag.search` in-process, {w['default_threads']} threads"),
            )
        ),
        "",
        f"p50 ratio HTTP / in-process (same threads): **{w['p50_ratio']:.2f}** (target <= 1.3);"
        f" against torch's default threads: {w['p50_ratio_default_threads']:.2f}",
        "",
        f"Load: {ld['clients']} clients for {ld['seconds']:.0f} s ({ld['wall_s']:.1f} s wall):"
        f" {ld['requests']} requests, **{ld['errors']} errors**"
        f"{' ' + json.dumps(ld['error_classes']) if ld['errors'] else ''},"
        f" {ld['requests_per_s']:.1f} requests/s",
        "",
        "| route | requests | req/s | p50 ms | p95 ms | max ms | abstained |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for route, r in ld["routes"].items():
        if r["requests"]:
            lines.append(
                f"| `{route}` | {r['requests']} | {r['requests_per_s']:.1f} | {r['p50_ms']:.0f} |"
                f" {r['p95_ms']:.0f} | {r['max_ms']:.0f} | {r['abstained']} |"
            )
    ft = ld["routes"]["/v1/ask (SSE)"].get("first_token")
    if ft:
        lines += ["", f"SSE first token: p50 {ft['p50_ms']:.0f} ms, p95 {ft['p95_ms']:.0f} ms"]
    lines += [
        "",
        f"Resident memory of the service: {summary['rss_after_start_bytes'] / mib:.0f} MiB ready,"
        f" {ld['rss_start_bytes'] / mib:.0f} MiB at the load's start,"
        f" {ld['rss_end_bytes'] / mib:.0f} MiB at its end (peak {ld['rss_peak_bytes'] / mib:.0f}"
        " MiB)",
        "",
    ]
    d, p, s = (
        summary["disconnect_mid_stream"],
        summary["disconnect_in_postgres"],
        summary["shutdown"],
    )
    lines += [
        "| check | result |",
        "|---|---|",
        f"| client hangs up after 3 tokens of a 300-token stream | fake LLM: {d['llm_stream']}"
        f" after {d['llm_words_sent']}/{d['llm_words_total']} words"
        f" ({_s(d['llm_closed_after_hang_up_s'])} after the hang-up); disconnects counted"
        f" {d['disconnects_counted']:.0f}; active queries after: {d['active_queries_after']}"
        f" — {'pass' if d['ok'] else 'FAIL'} |",
    ]
    for route in ("/v1/search", "/v1/ask (SSE)"):
        r = p[route]
        lines.append(
            f"| `{route}` client gives up while its query waits on a lock | waited:"
            f" {r['query_waited_on_the_lock']}, cancelled in PostgreSQL while the lock was held:"
            f" {r['query_gone_while_lock_held']} ({_s(r['gone_after_client_left_s'])})"
            f" — {'pass' if p['ok'] else 'FAIL'} |"
        )
    lines.append(
        f"| SIGTERM with {s['streams_in_flight']} streams in flight (drain {s['drain_s']:.0f} s)"
        f" | {s['completed_with_200']}/{s['streams_in_flight']} finished with 200 + answer + done;"
        f" a new connection: {s['new_connection_after_sigterm']}; exit code {s['exit_code']}"
        f" after {s['exit_after_s']:.1f} s — {'pass' if s['ok'] else 'FAIL'} |"
    )
    lines.append(
        f"| SIGTERM on the idle load service | exit code {summary['load_service_exit_code']} |"
    )
    return "\n".join(lines)


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="default: PGRAG_DSN, PG*, else the embedded server")
    parser.add_argument("--collection", default="eval-squad-dev-v1.1")
    parser.add_argument(
        "--questions",
        type=Path,
        default=Path.home() / ".cache/pgrag-bench/squad-dev-v1.1.json",
        help="SQuAD v1.1 JSON (dev-v1.1.json)",
    )
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--ask-share", type=float, default=0.5, help="share of /v1/ask requests")
    parser.add_argument("--warm-queries", type=int, default=300)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--drain", type=float, default=20.0)
    parser.add_argument("--streams", type=int, default=8, help="in flight at SIGTERM")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument(
        "--reader",
        choices=["fake-llm", "extractive"],
        default="fake-llm",
        help="what /v1/ask generates with under load: a local fake LLM that streams 24 words"
        " at 10 ms each, or the offline extractive reader (CPU-bound: it embeds every"
        " sentence of the retrieved passages)",
    )
    parser.add_argument(
        "--query-cache",
        action="store_true",
        help="leave the query-embedding cache on (off by default on both sides, so that every"
        " search embeds its question and neither side reads a vector the other stored)",
    )
    parser.add_argument(
        "--api-key",
        action="store_true",
        help="serve with credentials: a key made for the run (principal bench, revoked at the"
        " end) on every request, checked by the service as in a deployment; the in-process"
        " peer reads as the same principal (default: --no-auth)",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    args = parser.parse_args()

    dsn = resolve_dsn(args.dsn)
    questions = squad_questions(args.questions)
    random.Random(args.seed).shuffle(questions)
    summary: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs,"
        f" load average {os.getloadavg()[0]:.2f} at the start, Python {platform.python_version()}",
        "pgrag": pgrag.__version__,
        "reader": args.reader,
        "query_cache": "on" if args.query_cache else "off",
    }
    db = pgrag.connect(dsn)
    ensure_collection(db, args.questions, args.collection)
    db.conn.commit()
    db.query_cache = args.query_cache

    fast = SlowLLM(words=24, interval=0.01)
    env = {} if args.query_cache else {"PGRAG_QUERY_CACHE": "off"}
    if args.reader == "fake-llm":
        env |= {"PGRAG_LLM_BASE_URL": fast.url, "PGRAG_LLM_MODEL": "fake"}
    log(f"starting pgrag serve (the load service; /v1/ask with the {args.reader}) ...")
    key_id, key = None, None
    if args.api_key:
        from pgrag.service.keys import create_key

        info, key = create_key(db, principals=[KEY_PRINCIPAL], name="serve_load")
        key_id = info.id
    summary["auth"] = "api key" if key else "none (--no-auth)"
    svc = Service(dsn, env=env, options=["--pool-size", str(args.pool_size)], key=key)
    summary["startup_s"] = round(svc.startup_s, 1)
    summary["rss_after_start_bytes"] = svc.rss()
    try:
        warmup = 30
        log(f"warm /v1/search vs pgrag.search: {args.warm_queries} questions ...")
        summary["warm"] = warm_comparison(
            svc, db, args.collection, questions[: args.warm_queries + warmup], warmup
        )
        log(f"  p50 ratio {summary['warm']['p50_ratio']:.2f}")
        log(f"{args.clients} clients for {args.seconds:.0f} s ...")
        summary["load"] = asyncio.run(
            load(
                svc,
                args.collection,
                questions,
                clients=args.clients,
                seconds=args.seconds,
                ask_share=args.ask_share,
                seed=args.seed,
            )
        )
        log(f"  {summary['load']['requests']} requests, {summary['load']['errors']} errors")
    finally:
        summary["load_service_exit_code"] = svc.stop()
        fast.close()
        if key_id is not None:
            from pgrag.service.keys import revoke_key

            revoke_key(db, key_id)
    db.close()

    log("second service: scratch database, slow fake LLM ...")
    scratch = fresh_database(dsn, SCRATCH, MARKER)
    llm = SlowLLM()
    try:
        with pgrag.connect(scratch) as sdb:
            docs, scratch_questions = scratch_corpus(args.questions, 30)
            pgrag.ingest_documents(sdb, docs, collection="squad")
        env = {
            "PGRAG_LLM_BASE_URL": llm.url,
            "PGRAG_LLM_MODEL": "slow",
            "PGRAG_MIN_CONFIDENCE": "off",
        }
        svc2 = Service(scratch, env=env, options=["--drain", str(args.drain), "--pool-size", "12"])
        try:
            summary["disconnect_mid_stream"] = disconnect_mid_stream(
                svc2, llm, scratch_questions[0]
            )
            summary["disconnect_in_postgres"] = disconnect_in_postgres(svc2, scratch_questions[1])
            summary["shutdown"] = graceful_shutdown(
                svc2, llm, scratch_questions[2:], args.streams, args.drain
            )
        finally:
            svc2.stop()
    finally:
        llm.close()
        drop_database(resolve_admin(dsn), SCRATCH, MARKER)
    summary["machine"] += f", {os.getloadavg()[0]:.2f} at the end"
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    log("")
    log(markdown(summary))


def resolve_admin(dsn: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(dsn, dbname="postgres")


if __name__ == "__main__":
    main()
