"""A client for OpenAI-compatible ``/v1/completions``: plain-text prompts and token log-probs.

Two uses: generating an answer from a base model's few-shot prompt (``PGRAG_LLM_TEMPLATE=base``,
streamed like the chat client), and reading the log-probabilities of a continuation, with
``echo`` (the prompt's own tokens scored, in OpenAI's legacy ``logprobs`` format:
``tokens``, ``token_logprobs``, ``text_offset``), for answer scoring (:mod:`pgrag.answer.scoring`).
The same retries, timeouts and one-line errors as :class:`pgrag.llm.chat.ChatClient`.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from pgrag.errors import GenerationError
from pgrag.http import one_line
from pgrag.llm.chat import ChatClient, LLMConfig, json_payload, read_stream

NO_LOGPROBS = (
    "does not return token log-probabilities for /v1/completions with echo (vLLM does;"
    " llama.cpp's server returns them for generated tokens only); point PGRAG_LLM_BASE_URL at"
    " a server that does"
)


class _Stopped(Exception):
    """The stop sequence arrived: read no more of the stream."""


class _Stopper:
    """Passes text on until the first stop sequence, holding back a tail that may be the
    start of one; :meth:`finish` gives the text before the stop."""

    def __init__(self, stops: Sequence[str], emit: Callable[[str], None] | None) -> None:
        self.stops = [s for s in stops if s]
        self.emit = emit
        self.text = ""
        self.sent = 0
        self.cut: int | None = None

    def feed(self, piece: str) -> None:
        if self.cut is not None:
            return
        self.text += piece
        found = [i for s in self.stops if (i := self.text.find(s)) >= 0]
        if found:
            self.cut = min(found)
            self._send(self.cut)
            raise _Stopped
        hold = max(
            (k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])),
            default=0,
        )
        self._send(len(self.text) - hold)

    def _send(self, upto: int) -> None:
        if upto > self.sent:
            if self.emit is not None:
                self.emit(self.text[self.sent : upto])
            self.sent = upto

    def finish(self) -> str:
        if self.cut is None:
            self._send(len(self.text))
            return self.text
        return self.text[: self.cut]


class CompletionClient:
    """Sends plain-text prompts to ``config.completions_url``."""

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.url = config.completions_url
        self._sleep = sleep
        # The chat client's endpoint (retries, hints), aimed at /completions.
        chat = ChatClient(config, sleep=sleep)
        self.endpoint = dataclasses.replace(chat.endpoint, url=self.url)

    def _headers(self, stream: bool) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "User-Agent": "pgrag"}
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def complete(
        self,
        prompt: str,
        *,
        stop: Sequence[str] = (),
        on_token: Callable[[str], None] | None = None,
    ) -> str:
        """The model's continuation of ``prompt``; streamed piece by piece to ``on_token``."""
        cfg, stream = self.config, on_token is not None
        body: dict[str, Any] = {"model": cfg.model, "prompt": prompt}
        body |= {"max_tokens": cfg.max_tokens, "temperature": cfg.temperature, "stream": stream}
        if stop:
            body["stop"] = list(stop)
        data = json.dumps(body).encode("utf-8")

        def read(response: http.client.HTTPResponse) -> str:
            # Servers that ignore "stop" are cut here, so a base model's next invented
            # example never reaches the terminal or the answer.
            stopper = _Stopper(stop, on_token)
            try:  # (reading stops at the stop sequence: the rest is never waited for)
                if on_token is not None and "event-stream" in response.headers.get(
                    "Content-Type", ""
                ):
                    self._read_stream(response, stopper.feed)
                else:  # not streamed, or the server ignored "stream": true
                    stopper.feed(
                        self._text(self._payload(self.endpoint.read(response.read)), stream=False)
                    )
            except _Stopped:
                pass
            return stopper.finish()

        return self.endpoint.post(data, self._headers(stream), read, sleep=self._sleep)

    def prompt_logprobs(self, text: str) -> list[tuple[int, float | None]]:
        """``(text_offset, log-probability)`` of every token of ``text`` as the model reads
        it (``echo``; the first token has no log-probability). One token is generated, because
        some servers refuse ``max_tokens: 0``; its offset is ``len(text)`` or more."""
        cfg = self.config
        body = {"model": cfg.model, "prompt": text, "max_tokens": 1, "temperature": 0.0}
        body |= {"echo": True, "logprobs": 1, "stream": False}
        data = json.dumps(body).encode("utf-8")

        def read(response: http.client.HTTPResponse) -> list[tuple[int, float | None]]:
            return self._logprobs(self._payload(self.endpoint.read(response.read)))

        return self.endpoint.post(data, self._headers(False), read, sleep=self._sleep)

    def _logprobs(self, payload: dict[str, Any]) -> list[tuple[int, float | None]]:
        choice = self._choice(payload, json.dumps(payload).encode())
        lp = choice.get("logprobs")
        offsets = lp.get("text_offset") if isinstance(lp, dict) else None
        values = lp.get("token_logprobs") if isinstance(lp, dict) else None
        if not (isinstance(offsets, list) and isinstance(values, list) and offsets):
            raise GenerationError(f"the LLM endpoint {self.url} {NO_LOGPROBS}")
        if len(offsets) != len(values) or not all(
            isinstance(o, int) and (v is None or isinstance(v, int | float))
            for o, v in zip(offsets, values, strict=False)
        ):
            raise self._malformed(
                "logprobs.text_offset and token_logprobs do not pair up", json.dumps(lp).encode()
            )
        return [(o, None if v is None else float(v)) for o, v in zip(offsets, values, strict=True)]

    def _read_stream(
        self, response: http.client.HTTPResponse, on_token: Callable[[str], None]
    ) -> str:
        def parse(raw: bytes) -> str:
            return self._text(self._payload(raw), stream=True)

        return read_stream(self.endpoint, response, parse, on_token)

    def _payload(self, raw: bytes) -> dict[str, Any]:
        payload = json_payload(raw, self.url, self._malformed)
        if not isinstance(payload, dict):
            raise self._malformed("not a JSON object", raw)
        return payload

    def _choice(self, payload: dict[str, Any], raw: bytes) -> dict[str, Any]:
        choices = payload.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            raise self._malformed("no choices[0]", raw)
        return choice

    def _text(self, payload: dict[str, Any], *, stream: bool) -> str:
        """``choices[0].text``; stream chunks without text (finish, usage) give ``""``."""
        if stream and payload.get("choices") == []:
            return ""
        choice = self._choice(payload, json.dumps(payload).encode())
        text = choice.get("text")
        if isinstance(text, str):
            return text
        if stream and text is None:
            return ""
        raise self._malformed("no choices[0].text", json.dumps(payload).encode())

    def _malformed(self, what: str, raw: bytes) -> GenerationError:
        excerpt = one_line(raw.decode("utf-8", errors="replace"), 120)
        return GenerationError(
            f"LLM endpoint {self.url} answered something that is not a text completion "
            f"({what}: {excerpt!r}); check that PGRAG_LLM_BASE_URL points at an OpenAI API"
            " that serves /v1/completions"
        )
