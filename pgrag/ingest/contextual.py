"""Contextual retrieval: a line per chunk, written by a language model from its document.

``ingest(..., contextual=True)`` (``pgrag ingest --contextual``) asks the configured model
(:func:`pgrag.llm.configured.chat_client`: ``PGRAG_LLM_BASE_URL`` or ``PGRAG_LLM_GGUF``) for
one short line that situates each chunk within its document (Anthropic's "Contextual
Retrieval" prompt). The line is stored beside the chunk (``pgrag.chunks.context``), embedded
in front of the chunk's text and keyword-indexed with it; search results and prompts keep
showing the chunk's own text.

**The document is a shared prefix.** Every prompt of a document starts with the same text (the
document window, then the instruction's first words) and ends with the chunk, so an engine
that reuses the longest common prefix of consecutive prompts evaluates the document once and
each later chunk costs only its own tokens and the reply: llama-cpp-python does it by itself
with its last call, llama.cpp's server with ``cache_prompt``, vLLM with prefix caching. The
chunks of a document are asked one after the other, in order, before the next document's.

**The window.** A document longer than :data:`DOCUMENT_WINDOW` tokens (``context_window``) is
represented by its first that many tokens (the same for every chunk of it, so the prefix
still repeats), counted with the model's own tokenizer where pgrag has it (a local GGUF model,
``PGRAG_LLM_TOKENIZER``), else with the embedding model's. A local model's window is also kept
within ``PGRAG_LLM_CTX`` with room for the chunk and the reply.

**The reply** is cut to one line (:func:`context_line`): at most :data:`MAX_TOKENS` tokens are
asked for, the first line of text kept, a "Context:" label and quotes dropped. An empty reply,
or one that is not a sentence, is no context (the chunk is written without one, with a
warning) and is not asked again for that version of the document. The model failing (its
server down, a timeout) stops the asking for the rest of the run with a warning; the chunks
are written without contexts, and a later ``--contextual`` ingest of the unchanged documents
asks for them. Either way each document's write stays one transaction, as without contexts;
the model is asked before it, holding no lock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import ConfigError, GenerationError
from pgrag.http import one_line
from pgrag.ingest.document import LoadedFile
from pgrag.ingest.plan import PreparedDoc
from pgrag.llm.configured import chat_client, label
from pgrag.llm.control import defused
from pgrag.llm.local import LocalLLMConfig, config_from_settings

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.embeddings.embedder import Embedder
    from pgrag.llm.configured import Client

Q = queries.load(__name__)

DOCUMENT_WINDOW = 2000  # tokens of the document each prompt holds: its beginning
MAX_TOKENS = 80  # the reply asked for: one short line
MAX_CHARS = 500  # a longer line is cut at a word
ORDERS = ("document-first", "chunk-first")  # chunk-first only to measure the prefix's effect

SITUATE = "Here is the chunk we want to situate within the whole document"
INSTRUCTION = (
    "Please give a short succinct context to situate this chunk within the overall document"
    " for the purposes of improving search retrieval of the chunk. Answer only with the"
    " succinct context and nothing else."
)
NOT_CONFIGURED = (
    "contextual ingest needs a language model to write the context lines: set"
    " PGRAG_LLM_BASE_URL (an OpenAI-compatible server) or PGRAG_LLM_GGUF (a local model),"
    " or ingest without --contextual (docs/ingest.md#contextual-retrieval)"
)

_LABEL = re.compile(r"^\W*(?:succinct\s+)?context\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]{2,}")
_TAGS = re.compile(r"</?\s*(?:document|chunk)\s*>", re.IGNORECASE)


def messages(window: str, chunk: str, order: str = "document-first") -> list[dict[str, str]]:
    """The chat messages asking for ``chunk``'s context within the document ``window``:
    the document first (a prefix shared by all of its chunks), the chunk and the instruction
    last. ``chunk-first`` puts the chunk before the document (no shared prefix), only to
    measure what the order saves."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    document = f"<document>\n{defused(window)}\n</document>"
    piece = f"{SITUATE}\n<chunk>\n{defused(chunk)}\n</chunk>"
    parts = (document, piece) if order == "document-first" else (piece, document)
    return [{"role": "user", "content": f"{parts[0]}\n{parts[1]}\n{INSTRUCTION}"}]


def context_line(reply: str) -> str | None:
    """The context line in a model's reply: its first line of text (after a "Context:" label
    on a line of its own, if any), without the label, surrounding quotes or markup, at most
    :data:`MAX_CHARS` long (cut at a word); None when that is empty or not a sentence (fewer
    than three words, or the prompt's own tags)."""
    lines = [line.strip() for line in reply.replace("\r", "\n").split("\n") if line.strip()]
    if lines and not _LABEL.sub("", lines[0]).strip(" \"'`*"):
        lines = lines[1:]  # "Context:" alone, the line itself next
    if not lines:
        return None
    line = _LABEL.sub("", lines[0]).strip(" \t\"'`*").strip()
    line = re.sub(r"\s+", " ", line)
    if _TAGS.search(line) or len(_WORD.findall(line)) < 3:
        return None
    if len(line) > MAX_CHARS:
        line = line[:MAX_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return line


def document_window(text: str, count: Callable[[str], int], tokens: int) -> str:
    """The beginning of ``text`` that is at most ``tokens`` tokens by ``count``, cut at a word
    (found by bisection: a few counts per document, not one per word)."""
    if count(text) <= tokens:
        return text
    ends = [m.start() for m in re.finditer(r"\s+", text)] + [len(text)]
    low, high = 0, len(ends) - 1  # ends[low] fits (or low = 0); ends[high + 1] does not
    if count(text[: ends[0]]) > tokens:
        return text[: ends[0]]  # one word longer than the window: itself
    while low < high:
        mid = (low + high + 1) // 2
        if count(text[: ends[mid]]) <= tokens:
            low = mid
        else:
            high = mid - 1
    return text[: ends[low]]


def check_configured(db: Database) -> None:
    """A one-line :class:`ConfigError` unless a model for contexts is configured (nothing is
    loaded)."""
    if config_from_settings(db.settings) is None:
        raise ConfigError(NOT_CONFIGURED)


@dataclass
class ContextStats:
    """What asking for contexts took in a run."""

    written: int = 0  # chunks given a context line by the model
    empty: int = 0  # replies of no use (the chunk has no context for this version)
    missing: int = 0  # chunks left without a context: the model failed (asked again later)
    reused: int = 0  # chunks whose context for this version was stored already
    seconds: float = 0.0  # spent waiting for the model
    first_seconds: list[float] = field(default_factory=list)  # each document's first chunk
    later_seconds: list[float] = field(default_factory=list)  # the later ones (prefix reused)


class Contextualizer:
    """Asks the configured model for the context lines of an ingest's chunks; see the module's
    docstring. The client is built (a local model loaded) on the first question only, so an
    ingest that writes nothing new costs nothing."""

    def __init__(
        self,
        db: Database,
        embedder: Embedder,
        *,
        window: int | None = None,
        order: str = "document-first",
        client: Client | None = None,
    ) -> None:
        config = config_from_settings(db.settings)
        if config is None and client is None:
            raise ConfigError(NOT_CONFIGURED)
        if window is not None and window < 1:
            raise ConfigError(
                f"the context window must be a positive number of tokens, got {window}"
            )
        self.db = db
        self.embedder = embedder
        self.order = order
        self.config = None if config is None else replace(config, max_tokens=MAX_TOKENS)
        self.label = "given client" if self.config is None else label(self.config)
        self.window_tokens = window or DOCUMENT_WINDOW
        if isinstance(self.config, LocalLLMConfig):
            # The prompt's words, the chunk (in the model's tokens: up to ~1.5x the embedding
            # model's) and the reply must fit beside the window.
            reserve = 200 + MAX_TOKENS + 2 * embedder.max_tokens
            self.window_tokens = max(64, min(self.window_tokens, self.config.n_ctx - reserve))
        self._client = client
        self._count: Callable[[str], int] | None = None
        self.stats = ContextStats()
        self.failure: str | None = None  # what stopped the asking, once the model failed

    @property
    def client(self) -> Client:
        if self._client is None:
            assert self.config is not None
            self._client = chat_client(self.config)
        return self._client

    def count(self, text: str) -> int:
        """Tokens of ``text`` as the window counts them."""
        if self._count is None:
            self._count = _counter(self.config, self.client, self.embedder)
        return self._count(text)

    def window(self, file: LoadedFile) -> str:
        """The document as each of its prompts holds it: its title (unless it has none but
        its source, or its text starts with it) and the beginning of its text, within the
        window."""
        text = file.text.strip()
        title = (file.title or "").strip()
        if title and title != file.source and title not in text[: len(title) + 200]:
            text = f"{title}\n\n{text}"
        return document_window(text, self.count, self.window_tokens)

    def ask(self, window: str, chunk: str) -> str:
        """The model's reply for one chunk (a :class:`GenerationError` when it fails)."""
        return self.client.complete(messages(window, chunk, self.order))

    def write(
        self,
        doc: PreparedDoc,
        stored: dict[tuple[str | None, int | None, str], str | None],
        on_chunk: Callable[[], None] | None = None,
    ) -> str | None:
        """Give the document's chunks their context lines for its version: a stored one when
        ``stored`` has it (by section, page and text), else the model's. Returns a warning for
        the document, if there is one to give."""
        counter, max_tokens = self.embedder.tokens, self.embedder.max_tokens
        asked_for = doc.file.content_hash
        window: str | None = None
        first = True
        empty = missing = 0
        for chunk in doc.chunks:
            key = (chunk.section, chunk.page, chunk.text)
            if key in stored:
                chunk.set_context(stored[key], asked_for, counter, max_tokens)
                self.stats.reused += 1
            elif self.failure is not None:
                missing += 1
            else:
                try:
                    if window is None:
                        window = self.window(doc.file)
                    t0 = time.perf_counter()
                    reply = self.ask(window, chunk.text)
                    took = time.perf_counter() - t0
                except GenerationError as err:
                    self.failure = one_line(str(err), 300)
                    missing += 1
                else:
                    self.stats.seconds += took
                    (self.stats.first_seconds if first else self.stats.later_seconds).append(took)
                    first = False
                    line = context_line(reply)
                    if line is None:
                        empty += 1
                    else:
                        self.stats.written += 1
                    chunk.set_context(line, asked_for, counter, max_tokens)
            if on_chunk:
                on_chunk()
        self.stats.empty += empty
        self.stats.missing += missing
        notes = []
        if empty:
            notes.append(
                f"the model's reply for {empty} of {len(doc.chunks)} chunks was empty or not a"
                " sentence: they are indexed without a context line"
            )
        if missing:
            notes.append(
                f"{missing} of {len(doc.chunks)} chunks are written without a context line"
                f" (the model failed: {self.failure}); ingest again with --contextual to write"
                " them"
            )
        return "; ".join(notes) or None


def stored_contexts(
    db: Database, doc: PreparedDoc
) -> dict[tuple[str | None, int | None, str], str | None]:
    """The context lines the stored document has for its current version, by (section, page,
    text) of their chunks: what a rewrite of an unchanged document keeps."""
    if doc.replaces is None:
        return {}
    with transaction(db) as conn:
        rows = conn.execute(
            Q.stored_contexts,
            {"document_id": doc.replaces, "content_hash": doc.file.content_hash},
        ).fetchall()
    return {(section, page, text): context for section, page, text, context in rows}


def _counter(config: Any, client: Any, embedder: Embedder) -> Callable[[str], int]:
    """What counts the window: a local model's own tokenizer, the generator's tokenizer.json
    (``PGRAG_LLM_TOKENIZER``), else the embedding model's."""
    if isinstance(config, LocalLLMConfig) or (config is None and hasattr(client, "count_tokens")):
        return client.count_tokens  # type: ignore[no-any-return]
    if config is not None and getattr(config, "tokenizer", None):
        from pgrag.text.tokens import generator_counter

        return generator_counter(config.tokenizer).count
    return embedder.tokens.count
