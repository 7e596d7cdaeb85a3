"""Fakes at the edge of the system."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


# --- a stand-in for llama-cpp-python's Llama (pgrag[local]), at the edge ------------------


class StandInLlama:
    """Stands in for ``llama_cpp.Llama``: one token per UTF-8 byte, a canned reply streamed
    in 3-character pieces the way llama-cpp-python yields chunks."""

    loads: list[dict[str, Any]] = []
    reply = "Monthly subscriptions can be refunded within 14 days [1]."
    fail_with: Exception | None = None

    def __init__(self, **kwargs: Any) -> None:
        if str(kwargs["model_path"]).endswith("broken.gguf"):
            raise ValueError("Failed to load model from file: broken.gguf")
        StandInLlama.loads.append(kwargs)
        self.calls: list[dict[str, Any]] = []

    def tokenize(self, text: bytes, add_bos: bool = True) -> list[int]:
        assert isinstance(text, bytes) and add_bos is False
        return list(text)

    def create_chat_completion(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if not kwargs["stream"]:
            if StandInLlama.fail_with is not None:
                raise StandInLlama.fail_with
            return {"choices": [{"message": {"role": "assistant", "content": self.reply}}]}
        return self._chunks()

    def _chunks(self) -> Iterator[dict[str, Any]]:
        # A generator, like llama-cpp-python's: errors surface while it is iterated.
        yield {"choices": [{"delta": {"role": "assistant"}}]}
        for i in range(0, len(self.reply), 3):
            if StandInLlama.fail_with is not None and i == 6:
                raise StandInLlama.fail_with
            yield {"choices": [{"delta": {"content": self.reply[i : i + 3]}}]}
        yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}
