"""A local GGUF model through llama-cpp-python: the optional extra ``pip install 'pgrag[local]'``.

``PGRAG_LLM_GGUF=/path/model.gguf`` makes :func:`pgrag.ask` generate in-process with that file
(see docs/local.md): nothing leaves the machine and no server is needed. The passage budget is
then counted with the model's own tokenizer (:meth:`LocalChatClient.count_tokens`).

``llama_cpp`` is imported only when a model is loaded, so ``pgrag --help`` and everything
else stay light, and pgrag works without the extra. The model is loaded once per process.

Precedence: ``PGRAG_LLM_GGUF`` together with ``PGRAG_LLM_BASE_URL`` is a configuration error --
both are explicit pgrag settings, and picking one silently could send text off the machine
that the user meant to keep local (or the other way round). ``PGRAG_LLM_GGUF`` does win over
the generic ``OPENAI_BASE_URL``, which is often set in a shell for other tools, just as
``PGRAG_LLM_BASE_URL`` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgrag.config import Settings
from pgrag.errors import ConfigError, GenerationError, PgragError
from pgrag.http import one_line
from pgrag.llm.chat import LLMConfig
from pgrag.llm.local_tools import parse_reply, plain_messages

ENV_GGUF = "PGRAG_LLM_GGUF"
GGUF_MAGIC = b"GGUF"
_INSTALL_HINT = "pip install 'pgrag[local]'"
_DOCS = "see docs/local.md"


@dataclass(frozen=True)
class LocalLLMConfig:
    """A GGUF model file and how to run it; see :meth:`from_settings`."""

    model_path: Path
    n_ctx: int = 4096
    n_threads: int | None = None
    temperature: float = 0.0
    max_tokens: int = 512

    @property
    def label(self) -> str:
        """The generator name recorded with each answer, e.g. ``llama-cpp:qwen2.5-1.5b.gguf``."""
        return f"llama-cpp:{self.model_path.name}"

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalLLMConfig | None:
        """The model ``PGRAG_LLM_GGUF`` names in ``settings``, or None when it is unset.

        ``PGRAG_LLM_CTX`` is the context window in tokens (4096): the prompt plus the answer
        (at most 512 tokens) must fit in it. ``PGRAG_LLM_THREADS`` is the number of CPU
        threads (llama.cpp's default when unset). The file is checked here -- it must exist
        and start with the GGUF magic bytes -- before anything is loaded."""
        if settings.llm_gguf is None:
            return None
        if settings.llm_base_url is not None:
            raise ConfigError(
                f"both {ENV_GGUF} (a local model) and PGRAG_LLM_BASE_URL (an endpoint) are set;"
                " unset the one you do not mean to use"
            )
        path = Path(settings.llm_gguf).expanduser()
        check_gguf(path)
        n_ctx = _positive_int(settings.llm_ctx, "PGRAG_LLM_CTX", 4096)
        threads = _positive_int(settings.llm_threads, "PGRAG_LLM_THREADS", 0) or None
        return cls(model_path=path, n_ctx=n_ctx, n_threads=threads)


def check_gguf(path: Path) -> None:
    """Raise a one-line :class:`ConfigError` unless ``path`` is a readable GGUF file."""
    where = f"{ENV_GGUF}={path}"
    if not path.exists():
        raise ConfigError(f"{where}: no such file; set it to a downloaded .gguf model ({_DOCS})")
    if path.is_dir():
        raise ConfigError(f"{where} is a directory; set it to the .gguf model file inside it")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ConfigError(
            f"{where} cannot be read ({exc.strerror}); check its permissions"
        ) from None
    if magic != GGUF_MAGIC:
        raise ConfigError(
            f"{where} is not a GGUF model file (it starts with {magic!r}, not {GGUF_MAGIC!r});"
            " download the .gguf build of the model or convert it with llama.cpp's"
            f" convert_hf_to_gguf.py ({_DOCS})"
        )


def _positive_int(raw: str | None, name: str, default: int) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{name} must be a positive whole number, got {raw!r}")
    return value


# The loaded model and the lock that keeps its one llama.cpp context to one generation at a
# time. Only the last configuration loaded is kept: a long-running process that switches
# models does not hold every one of them in memory.
_loaded: dict[tuple[str, int, int | None], tuple[Any, threading.Lock]] = {}
_load_lock = threading.Lock()


def _llama_class() -> Any:
    try:
        from llama_cpp import Llama
    except ImportError as exc:
        raise ConfigError(
            f"{ENV_GGUF} is set but llama-cpp-python is not installed ({one_line(str(exc), 80)});"
            f" {_INSTALL_HINT}, or unset {ENV_GGUF}"
        ) from None
    except Exception as exc:  # e.g. its shared library was built for another CPU
        raise ConfigError(
            f"llama-cpp-python is installed but cannot be imported ({one_line(str(exc), 160)});"
            " reinstall it: pip install --force-reinstall --no-cache-dir llama-cpp-python"
        ) from None
    return Llama


def load_model(config: LocalLLMConfig) -> tuple[Any, threading.Lock]:
    """The ``llama_cpp.Llama`` for ``config`` and its generation lock, loaded on first use and
    kept for the process."""
    key = (str(config.model_path.resolve()), config.n_ctx, config.n_threads)
    with _load_lock:
        if key not in _loaded:
            llama = _llama_class()
            _loaded.clear()
            try:
                model = llama(
                    model_path=key[0],
                    n_ctx=config.n_ctx,
                    n_threads=config.n_threads,
                    verbose=False,
                )
            except Exception as exc:  # llama.cpp reports failures as ValueError and others
                raise ConfigError(
                    f"llama.cpp could not load {ENV_GGUF}={config.model_path}"
                    f" ({one_line(str(exc), 160)}); check that the file is complete and its"
                    " architecture is supported by the installed llama-cpp-python"
                ) from None
            _loaded[key] = (model, threading.Lock())
        return _loaded[key]


class LocalChatClient:
    """Chat completions from a local GGUF model, with :class:`pgrag.llm.chat.ChatClient`'s
    :meth:`complete` interface."""

    def __init__(self, config: LocalLLMConfig) -> None:
        self.config = config
        self.model, self._lock = load_model(config)

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this model's own vocabulary (no BOS)."""
        return len(self.model.tokenize(text.encode("utf-8"), add_bos=False))

    def complete(
        self, messages: list[dict[str, str]], *, on_token: Callable[[str], None] | None = None
    ) -> str:
        """The model's answer to ``messages``; streamed piece by piece to ``on_token`` if given.
        An exception raised by ``on_token`` itself propagates as it is."""
        pieces: list[str] = []
        with self._lock:
            try:
                result = self.model.create_chat_completion(
                    messages=messages,
                    temperature=self.config.temperature,
                    max_tokens=self.config.max_tokens,
                    stream=on_token is not None,
                )
            except Exception as exc:
                raise self._failed(exc, pieces) from None
            if on_token is None:
                return _message_text(result)
            stream = _stream_texts(result)
            while True:
                try:
                    piece = next(stream)
                except StopIteration:
                    break
                except Exception as exc:  # generation is lazy: it fails while streaming
                    raise self._failed(exc, pieces) from None
                pieces.append(piece)
                on_token(piece)
        return "".join(pieces)

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The assistant's message for ``messages``, offered ``tools``, as
        :meth:`pgrag.llm.chat.ChatClient.respond` returns it (``{"content": ...,
        "tool_calls": [...]}``): tool calling written out as text in the model's prompt and
        read back from its reply (:mod:`pgrag.llm.local_tools`). Not streamed."""
        text = self.complete(plain_messages(messages, tools))
        if not tools:  # nothing was offered: the reply is the answer, whatever it says
            return {"content": text, "tool_calls": []}
        return parse_reply(text)

    def continuation_logprobs(self, prefix: str, continuations: list[str]) -> list[list[float]]:
        """The log-probabilities of each continuation's tokens after ``prefix``, read from the
        model's logits in-process (:mod:`pgrag.llm.local_logprobs`; the prompt is evaluated
        once for all of them)."""
        from pgrag.llm.local_logprobs import continuation_logprobs, failed

        with self._lock:
            try:
                return continuation_logprobs(self.model, prefix, continuations)
            except PgragError:
                raise
            except Exception as exc:  # llama.cpp reports a full context as RuntimeError
                raise failed(self.config.model_path.name, exc) from None

    def prompt_text(self, messages: list[dict[str, str]]) -> str:
        """``messages`` rendered as :meth:`complete` has llama.cpp read them, up to where the
        assistant's reply begins (see :meth:`_rendered`)."""
        return self._rendered(messages)[0]

    def _rendered(self, messages: list[dict[str, str]]) -> tuple[str, bool]:
        """The prompt text llama-cpp-python's chat handler makes of ``messages``, and whether
        it adds the model's start token when tokenising it: the formatter of the built-in chat
        format llama-cpp-python chose for the model (it picks one when the GGUF's template is
        exactly a known one), else the GGUF's own template (``tokenizer.chat_template``)."""
        from llama_cpp import llama_chat_format

        model = self.model
        builtin = _BUILTIN_FORMATTERS.get(str(getattr(model, "chat_format", "")))
        formatter = getattr(llama_chat_format, builtin, None) if builtin else None
        if formatter is None:
            template = (getattr(model, "metadata", None) or {}).get("tokenizer.chat_template")
            if not template:
                raise GenerationError(
                    f"{self.config.model_path.name} has no chat template"
                    " (tokenizer.chat_template); use a chat (instruct) GGUF model"
                )

            def text(token: int) -> str:
                return str(model._model.token_get_text(token)) if token != -1 else ""

            formatter = llama_chat_format.Jinja2ChatFormatter(
                template=template,
                eos_token=text(model.token_eos()),
                bos_token=text(model.token_bos()),
            )
        result = formatter(messages=messages)
        return str(result.prompt), not bool(result.added_special)

    def choice_logprobs(self, messages: list[dict[str, str]], options: list[str]) -> list[float]:
        """log p(the reply to ``messages`` begins with ``option``), for each of ``options``,
        read from llama.cpp's logits (:mod:`pgrag.llm.local_logprobs`): the prompt is read
        once, and a later :meth:`complete` of the same ``messages`` re-reads none of it."""
        import math

        from pgrag.llm.local_logprobs import continuation_logprobs, failed

        prefix, add_bos = self._rendered(messages)
        with self._lock:
            try:
                rows = continuation_logprobs(
                    self.model, prefix, options, special=True, add_bos=add_bos
                )
            except PgragError:
                raise
            except Exception as exc:
                raise failed(self.config.model_path.name, exc) from None
        return [math.fsum(row) for row in rows]

    def _failed(self, exc: Exception, pieces: list[str]) -> GenerationError:
        return GenerationError(
            f"llama.cpp failed on {self.config.model_path.name}"
            f"{' mid-answer' if pieces else ''} ({one_line(str(exc), 160)}); if the"
            " prompt is too long raise PGRAG_LLM_CTX or lower --budget"
        )


# llama-cpp-python's built-in chat formats that it picks for a GGUF whose template is exactly
# theirs (llama_chat_format.guess_chat_format_from_gguf_metadata), by their formatters' names.
_BUILTIN_FORMATTERS = {
    "chatml": "format_chatml",
    "mistral-instruct": "format_mistral_instruct",
    "llama-3": "format_llama3",
}


def _message_text(result: Any) -> str:
    try:
        content = result["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str):
        raise GenerationError(
            "llama.cpp answered something that is not a chat completion:"
            f" {one_line(repr(result), 120)}"
        )
    return content


def _stream_texts(chunks: Iterable[Any]) -> Iterator[str]:
    """The text of each streamed chunk that has some (role-only and finish chunks have none)."""
    for chunk in chunks:
        try:
            content = chunk["choices"][0]["delta"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            content = None
        if content:
            yield content


def config_from_settings(settings: Settings) -> LLMConfig | LocalLLMConfig | None:
    """The generator ``settings`` names: a local GGUF model (``PGRAG_LLM_GGUF``), an
    OpenAI-compatible endpoint (:meth:`LLMConfig.from_settings`), or None for the offline
    reader. Both ``PGRAG_LLM_GGUF`` and ``PGRAG_LLM_BASE_URL`` set is a :class:`ConfigError`,
    and so is a GGUF model with ``PGRAG_LLM_TEMPLATE`` or ``PGRAG_LLM_TOKENIZER``: the model
    brings its own chat template and tokenizer, and a setting that would be ignored is a
    mistake."""
    local = LocalLLMConfig.from_settings(settings)
    if local is None:
        return LLMConfig.from_settings(settings)
    for name in ("llm_template", "llm_tokenizer"):
        if getattr(settings, name) is not None:
            variable = Settings.variable_of(name)
            raise ConfigError(
                f"{variable} does not apply to PGRAG_LLM_GGUF (a GGUF model uses its own chat"
                f" template and tokenizer); unset {variable}"
            )
    return local
