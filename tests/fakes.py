"""Fakes at the edge of the system, and only there: model servers pgrag talks to over HTTP.

:class:`FakeServer` is a real local HTTP server (``ThreadingHTTPServer`` on 127.0.0.1, a port
the kernel picks) that answers the routes a test registers (``route(path, handler)``), records
every request, and has the knobs a client's error handling needs: ``replies`` (scripted answers
that come first, whatever the path), ``fail_next`` / ``fail_after`` / ``fail_status``, ``delay``,
streams of server-sent events that may stall or break off, and connections closed without an
answer. pgrag's own code runs unchanged against it, through its real HTTP client.

Built on it, the servers the tests need:

- :class:`EmbeddingServer`: ``POST /v1/embeddings`` as TEI, vLLM or OpenAI answer it, with
  feature-hashed bags of words by default (texts that share words get similar vectors, so
  retrieval with it means something) or any vector function a test gives.
- :class:`LLMServer`: ``POST /v1/chat/completions`` (plain or streamed, scripted assistant
  messages with tool calls, or replies computed from the prompt) and ``POST /v1/completions``
  (generation, streaming, and echoed prompt tokens with log-probabilities, as vLLM does).
- :class:`OracleLLM`: a chat model that answers from the numbered sources in the prompt.
- :class:`RerankServer`: ``POST /rerank`` in TEI's or Cohere's dialect.

:class:`StandInLlama` stands in for llama-cpp-python's ``Llama`` (a library, not a server).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pgrag.evaluation.judge import QUESTION_SYSTEM
from pgrag.evaluation.judge import SYSTEM as JUDGE_SYSTEM
from pgrag.llm.chat import LLMConfig

# --- the server -------------------------------------------------------------------------------


@dataclass
class Request:
    """One request as the server received it; ``body`` is the parsed JSON (None if not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""


@dataclass
class Reply:
    """One answer. ``body`` None means: what the route answers (status < 400), or a scripted
    failure body (status >= 400); a dict or list is sent as JSON. ``sse`` lines make it a
    text/event-stream answer (each line followed by a blank line); ``sse_delay_after`` pauses
    ``delay`` seconds before that line instead of before the answer; ``drop_after`` sends the
    stream chunked and cuts the connection after that many lines. ``hang_up`` closes the
    connection without answering at all."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    sse: list[str] | None = None
    sse_delay_after: int | None = None
    drop_after: int | None = None
    hang_up: bool = False


Answer = Reply | dict[str, Any] | list[Any] | bytes | str
Handler = Callable[[Request], Answer]

SCRIPTED_FAILURE = {"error": {"message": "scripted failure"}}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and went away is what some tests are about


class FakeServer:
    """A real local HTTP server with routes a test registers; see the module's docstring.

    Each request is recorded in ``requests`` (its ``paths`` too), then answered by, in order:
    the first of ``replies``; a failure (``fail_status`` with ``fail_body``) while
    ``fail_next`` > 0 or once more than ``fail_after`` requests came; the route for its method
    and path (404 if none), after ``delay`` seconds. ``max_in_flight`` is the most requests it
    was ever handling at once. Waits end at :meth:`close`."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[Request] = []
        self.replies: list[Reply] = []
        self.fail_next = 0
        self.fail_after: int | None = None
        self.fail_status = 503
        self.fail_body: bytes | dict[str, Any] = {"error": {"message": "overloaded"}}
        self.delay = 0.0
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self._closed = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                fake._handle(self)

            def do_POST(self) -> None:  # noqa: N802
                fake._handle(self)

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass  # the connection was cut on purpose (hang_up, drop_after)

        self.server = _HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    # -- addresses and routes

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return self.base_url

    @property
    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def route(self, path: str, handler: Handler, method: str = "POST") -> None:
        self.routes[(method, path)] = handler

    # -- answering

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = Request(handler.command, handler.path, dict(handler.headers.items()), body, raw)
        with self.lock:
            self.requests.append(request)
            scripted = self.replies.pop(0) if self.replies else None
            failing = scripted is None and (
                self.fail_next > 0
                or (self.fail_after is not None and len(self.requests) > self.fail_after)
            )
            if failing and self.fail_next > 0:
                self.fail_next -= 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if scripted is None:
                if self.delay:
                    self.release.wait(self.delay)
                failure = Reply(self.fail_status, self.fail_body) if failing else None
                reply = failure or _reply(self._route(request))
            else:
                reply = scripted
                if reply.body is None and reply.status < 400 and reply.sse is None:
                    if not reply.hang_up:  # "answer as the route would", after the delay
                        self._wait(reply)
                        reply = _reply(self._route(request))
            self._wait(reply)
        finally:
            with self.lock:  # before answering: the client may send the next request at once
                self.in_flight -= 1
        self._send(handler, reply)

    def _wait(self, reply: Reply) -> None:
        if reply.delay and reply.sse_delay_after is None:
            self.release.wait(reply.delay)

    def _route(self, request: Request) -> Answer:
        route = self.routes.get((request.method, request.path))
        if route is None:
            message = f"no route for {request.method} {request.path}"
            return Reply(404, {"error": {"message": message}})
        return route(request)

    def _send(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.hang_up:
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.sse is not None:
            self._stream(handler, reply)
            return
        body = reply.body
        if body is None:
            body = SCRIPTED_FAILURE if reply.status >= 400 else b""
        raw = body.encode() if isinstance(body, str) else body
        raw = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
        handler.send_response(reply.status)
        if not any(name.lower() == "content-type" for name in reply.headers):
            handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(raw)))
        handler.send_header("Connection", "close")
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(raw)

    def _stream(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        assert reply.sse is not None
        chunked = reply.drop_after is not None
        handler.send_response(reply.status)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        if chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        for number, line in enumerate(reply.sse):
            if number == reply.drop_after:
                handler.wfile.flush()
                handler.connection.shutdown(socket.SHUT_RDWR)
                return
            if number == reply.sse_delay_after:
                self.release.wait(reply.delay)
            data = (line + "\n\n").encode()
            if chunked:
                data = b"%x\r\n%s\r\n" % (len(data), data)
            handler.wfile.write(data)
            handler.wfile.flush()
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")

    # -- lifetime

    def close(self) -> None:
        """Stop serving (pending waits end at once). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    stop = close

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reply(answer: Answer) -> Reply:
    return answer if isinstance(answer, Reply) else Reply(200, answer)


def sse_data(value: Any) -> str:
    """One server-sent event carrying ``value`` as JSON."""
    return "data: " + json.dumps(value)


# --- embeddings -------------------------------------------------------------------------------


def hash_vector(text: str, dimension: int) -> list[float]:
    """A feature-hashed bag of words: ``dimension`` buckets, signed, L2-normalised."""
    v = [0.0] * dimension
    for word in re.findall(r"\w+", text.lower()):
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        v[int.from_bytes(h[:4], "little") % dimension] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


class EmbeddingServer(FakeServer):
    """``POST /v1/embeddings`` like TEI or OpenAI. Each text's vector is ``vector(text,
    dimension)`` (:func:`hash_vector` unless given); ``dimension`` can be changed under a
    running client. With ``model`` set, any other model name is answered 404 as OpenAI does.
    ``base64`` answers base64 float32 whatever ``encoding_format`` asked; ``reverse`` lists the
    embeddings in reverse index order. Every text embedded is recorded in ``texts``."""

    def __init__(
        self,
        dimension: int = 64,
        *,
        model: str | None = None,
        vector: Callable[[str, int], list[float]] | None = None,
    ) -> None:
        super().__init__()
        self.dimension = dimension
        self.model = model
        self.make_vector = vector or hash_vector
        self.base64 = False
        self.reverse = False
        self.texts: list[str] = []
        self.route("/v1/embeddings", self.embeddings)

    @property
    def url(self) -> str:
        return self.base_url + "/v1"

    def vector(self, text: str) -> list[float]:
        return self.make_vector(text, self.dimension)

    def embeddings(self, request: Request) -> Answer:
        body = request.body
        if self.model is not None and body.get("model") != self.model:
            message = f"model {body.get('model')!r} not found"
            return Reply(404, {"error": {"message": message}})
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self.lock:
            self.texts.extend(texts)
        data = []
        for i, text in enumerate(texts):
            vector: Any = self.vector(text)
            if self.base64:
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        if self.reverse:
            data.reverse()
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return {"object": "list", "data": data, "model": body["model"], "usage": usage}


# --- chat and completions ---------------------------------------------------------------------


def toy_logprob(token: str, passage: str) -> float:
    """The toy model: a word found in the prompt's (first) fenced passage is likely, any other
    word unlikely."""
    word = re.sub(r"\W", "", token.lower())
    return -0.1 if word and word in set(re.findall(r"\w+", passage.lower())) else -4.0


Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class LLMServer(FakeServer):
    """An OpenAI-compatible model server.

    ``POST /v1/chat/completions`` answers, in order: the next of ``script`` (an assistant
    message such as ``{"content": None, "tool_calls": [...]}``, or a callable that gets the
    request body and returns one); else ``answer(body)`` when set; else ``reply``. When the
    body says ``stream`` and ``stream_chat`` is on, the answer comes as server-sent events, a
    word at a time, then ``[DONE]``; otherwise as one JSON body.

    ``POST /v1/completions`` (base models, as vLLM serves them): without ``echo`` it generates
    ``reply`` (streamed when the body says ``stream``). With ``echo`` and ``logprobs`` it
    returns the prompt's tokens (whitespace-led words, with their ``text_offset``) and their
    log-probabilities under :func:`toy_logprob`, the first ``null``, plus one generated token;
    ``logprobs_mode`` "none" answers ``logprobs: null`` and "generated" only the generated
    token (llama.cpp's server). Every echo answer is recorded in ``echoed`` as
    ``(prompt, tokens, offsets, logprobs)``."""

    def __init__(self, reply: str = "The answer [1].", *, stream_chat: bool = True) -> None:
        super().__init__()
        self.reply = reply
        self.stream_chat = stream_chat
        self.script: list[Step] = []
        self.answer: Callable[[dict[str, Any]], str] | None = None
        self.logprobs_mode = "echo"
        self.echoed: list[tuple[str, list[str], list[int], list[float | None]]] = []
        self.route("/v1/chat/completions", self.chat)
        self.route("/v1/completions", self.completions)

    @property
    def url(self) -> str:
        return self.base_url + "/v1"

    @property
    def chat_url(self) -> str:
        return self.base_url + "/v1/chat/completions"

    @property
    def env(self) -> dict[str, str | None]:
        """The variables that point pgrag at this server (the model is called "test")."""
        return {"PGRAG_LLM_BASE_URL": self.url, "PGRAG_LLM_MODEL": "test"}

    def chat(self, request: Request) -> Answer:
        body = request.body
        with self.lock:
            step = self.script.pop(0) if self.script else None
        if step is not None:
            message = step(body) if callable(step) else step
            return {"choices": [{"index": 0, "message": {"role": "assistant", **message}}]}
        text = self.answer(body) if self.answer is not None else self.reply
        if body.get("logprobs"):
            return self.first_token(text)
        if body.get("stream") and self.stream_chat:
            pieces = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]
            events = [
                sse_data({"choices": [{"index": 0, "delta": {"content": piece}}]})
                for piece in pieces
            ]
            return Reply(sse=[*events, "data: [DONE]"])
        message = {"role": "assistant", "content": text}
        return {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}

    def first_token(self, text: str) -> dict[str, object]:
        """A one-token chat reply with ``logprobs`` (what ``choice_logprobs`` asks for): the
        reply's first word at probability 0.8, "Yes" or "No" (whichever it is not) at 0.15,
        and "Other" at 0.05; ``logprobs_mode`` "none" leaves the log-probabilities out."""
        first = (text.split() or [""])[0].strip(".,:")
        other = "No" if first == "Yes" else "Yes"
        top = [
            {"token": first, "logprob": math.log(0.8)},
            {"token": other, "logprob": math.log(0.15)},
            {"token": "Other", "logprob": math.log(0.05)},
        ]
        choice: dict[str, object] = {
            "index": 0,
            "message": {"role": "assistant", "content": first},
            "logprobs": {"content": [{"token": first, "logprob": top[0]["logprob"],
                                      "top_logprobs": top}]},
        }  # fmt: skip
        if self.logprobs_mode == "none":
            choice["logprobs"] = None
        return {"object": "chat.completion", "choices": [choice]}

    def completions(self, request: Request) -> Answer:
        body = request.body
        if body.get("echo"):
            return self.echo(body["prompt"])
        if body.get("stream"):
            events = [
                sse_data({"choices": [{"index": 0, "text": piece}]})
                for piece in re.findall(r"\s*\S+", self.reply)
            ]
            done = {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
            return Reply(sse=[*events, sse_data(done), "data: [DONE]"])
        choice = {"index": 0, "text": self.reply, "finish_reason": "stop"}
        return {"object": "text_completion", "choices": [choice]}

    def echo(self, prompt: str) -> dict[str, object]:
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


class OracleLLM(LLMServer):
    """Answers from the numbered sources in the prompt: the known answer (``answers`` maps a
    question to it) with the number of the source holding it, else "I don't know". ``cite``
    overrides the number cited. Failures (``fail_after``) are HTTP 500 with an empty body."""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__()
        self.answers = answers
        self.cite: int | None = None
        self.answer = self.oracle
        self.fail_status, self.fail_body = 500, b""

    def oracle(self, body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        if system == JUDGE_SYSTEM:
            return self.grade(body["messages"][-1]["content"])
        if system == QUESTION_SYSTEM:  # the judge's "which question does this answer?"
            said = body["messages"][-1]["content"].lower()
            asked = [q for q, a in self.answers.items() if a.lower() in said]
            return asked[0] if asked else "What is this about?"
        # The sources and question; after a correction (ask's second try) the last message is
        # the correction, and the question is in an earlier one.
        prompt = next(
            m["content"] for m in reversed(body["messages"]) if "Question:" in m["content"]
        )
        question = prompt.rsplit("Question:", 1)[1].strip()
        wanted = self.answers.get(question)
        for n, text in re.findall(r"^\[(\d+)\][^\n]*\n<<<\n(.*?)\n>>>", prompt, re.M | re.S):
            if wanted and wanted in text:
                return f"{wanted[0].upper() + wanted[1:]} [{self.cite or n}]."
        return "I don't know based on the sources."

    def grade(self, asked: str) -> str:
        """The judge's Yes/No, as a grader who reads exactly: a statement is supported when
        its answer (after "is:") or every word of it stands in the passages; a passage is
        useful when it holds the answer."""
        if "\n\nStatement:\n<<<\n" in asked:
            passages, _, rest = asked.partition("\n\nStatement:\n<<<\n")
            claim = rest.split("\n>>>", 1)[0]
            said = claim.split(" is: ", 1)[1] if " is: " in claim else claim
            words = re.findall(r"\w+", said.lower())
            found = set(re.findall(r"\w+", passages.lower()))
            return "Yes" if words and all(w in found for w in words) else "No"
        answer = re.search(r"^Answer: (.*)$", asked, re.M)
        passage = asked.split("Passage:\n<<<\n", 1)[-1]
        return "Yes" if answer and answer.group(1).strip(" .").lower() in passage.lower() else "No"

    @property
    def config(self) -> LLMConfig:
        return LLMConfig(base_url=self.url, model="oracle", max_retries=0)


# --- rerank -----------------------------------------------------------------------------------


def overlap(query: str, text: str) -> float:
    """How many of the passage's words are words of the query."""
    words = set(query.lower().split())
    return float(sum(word.strip(".?,") in words for word in text.lower().split()))


class RerankServer(FakeServer):
    """``POST /rerank`` (and ``/v1/rerank``) in one dialect: ``accepts`` "tei" (``texts``) or
    "cohere" (``documents`` and a ``model``, else 422), answering in ``answers`` (the same
    unless given). Scores are ``score(query, passage)`` (:func:`overlap` unless given); results
    come back sorted by score, as real servers send them, so the client must map them back by
    index."""

    def __init__(
        self,
        accepts: str = "tei",
        answers: str | None = None,
        *,
        score: Callable[[str, str], float] = overlap,
    ) -> None:
        super().__init__()
        self.accepts, self.answers = accepts, answers or accepts
        self.score = score
        for path in ("/rerank", "/v1/rerank"):
            self.route(path, self.rerank)

    def rerank(self, request: Request) -> Answer:
        body = request.body
        key = "texts" if self.accepts == "tei" else "documents"
        if key not in body or (self.accepts == "cohere" and "model" not in body):
            return Reply(422, {"error": f"missing field {key} or model"})
        texts = body[key]
        scores = [self.score(body["query"], text) for text in texts]
        ranked = sorted(range(len(texts)), key=lambda i: -scores[i])
        if self.answers == "tei":
            return [{"index": i, "score": scores[i]} for i in ranked]
        results = [{"index": i, "relevance_score": scores[i]} for i in ranked]
        return {"id": "r-1", "results": results, "meta": {"api_version": {}}}


# --- a stand-in for llama-cpp-python's Llama (pgrag[local]) ----------------------------------


class StandInLlama:
    """Stands in for ``llama_cpp.Llama``: one token per UTF-8 byte (and 256, the start token),
    a canned reply streamed in 3-character pieces the way llama-cpp-python yields chunks.

    ``replies``, when a test sets it, scripts the chat replies instead, one per request (a
    callable gets the request's messages). For answer scoring it has llama.cpp's low-level
    surface pgrag reads logits through: ``eval`` appends to ``input_ids`` at ``n_tokens``
    (which the caller may set back, as with llama.cpp, to drop what came after), and
    :func:`stand_in_logits_ith` (``llama_cpp.llama_get_logits_ith``) gives the logits after
    the last token evaluated, from a toy model that copies what it has read
    (:func:`copying_logits`)."""

    loads: list[dict[str, Any]] = []
    reply = "Monthly subscriptions can be refunded within 14 days [1]."
    replies: list[str | Callable[[list[dict[str, Any]]], str]] = []
    fail_with: Exception | None = None
    BOS = 256

    def __init__(self, **kwargs: Any) -> None:
        if str(kwargs["model_path"]).endswith("broken.gguf"):
            raise ValueError("Failed to load model from file: broken.gguf")
        StandInLlama.loads.append(kwargs)
        self.calls: list[dict[str, Any]] = []
        self.n_tokens = 0
        self.input_ids: list[int] = []
        self.evaluated: list[list[int]] = []  # each eval() call's tokens
        self._logits: list[float] = []
        self.ctx = self

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        assert isinstance(text, bytes) and special is False
        return ([self.BOS] if add_bos else []) + list(text)

    def n_vocab(self) -> int:
        return 257

    def eval(self, tokens: list[int]) -> None:
        assert tokens, "llama.cpp evaluates at least one token"
        self.evaluated.append(list(tokens))
        for token in tokens:
            del self.input_ids[self.n_tokens :]
            self.input_ids.append(token)
            self.n_tokens += 1
        self._logits = copying_logits(self.input_ids[: self.n_tokens])

    def create_chat_completion(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        reply = self.reply
        if StandInLlama.replies:
            scripted = StandInLlama.replies.pop(0)
            reply = scripted(kwargs["messages"]) if callable(scripted) else scripted
        if not kwargs["stream"]:
            if StandInLlama.fail_with is not None:
                raise StandInLlama.fail_with
            return {"choices": [{"message": {"role": "assistant", "content": reply}}]}
        return self._chunks(reply)

    def _chunks(self, reply: str) -> Iterator[dict[str, Any]]:
        # A generator, like llama-cpp-python's: errors surface while it is iterated.
        yield {"choices": [{"delta": {"role": "assistant"}}]}
        for i in range(0, len(reply), 3):
            if StandInLlama.fail_with is not None and i == 6:
                raise StandInLlama.fail_with
            yield {"choices": [{"delta": {"content": reply[i : i + 3]}}]}
        yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}


def copying_logits(context: list[int]) -> list[float]:
    """The stand-in's next-token logits: each earlier place where the context's last 1, 2 or
    3 tokens occurred adds 4 to the token that followed them there."""
    logits = [0.0] * 257
    for n in (1, 2, 3):
        if len(context) <= n:
            break
        tail = context[-n:]
        for j in range(n, len(context)):
            if context[j - n : j] == tail:
                logits[context[j]] += 4.0
    return logits


def stand_in_logits_ith(ctx: StandInLlama, i: int) -> Any:
    """``llama_cpp.llama_get_logits_ith`` for the stand-in: a C float array of the last logits."""
    import ctypes

    assert i == -1, "pgrag reads the last position's logits only"
    values = (ctypes.c_float * ctx.n_vocab())(*ctx._logits)
    return ctypes.cast(values, ctypes.POINTER(ctypes.c_float))
