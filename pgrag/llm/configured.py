"""The language model the connection's settings name, as one chat client.

``ask``, the judge (:mod:`pgrag.evaluation.judge`), query rewriting and contextual ingest all
need "the configured model": an OpenAI-compatible endpoint (``PGRAG_LLM_BASE_URL``) or a local
GGUF file (``PGRAG_LLM_GGUF``). :func:`chat_client` builds the client for a configuration and
:func:`configured_chat` for the connection's settings, so each caller names the generator the
same way and a missing extra fails the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgrag.llm.chat import ChatClient, LLMConfig
from pgrag.llm.local import LocalChatClient, LocalLLMConfig, config_from_settings

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Client = ChatClient | LocalChatClient


def label(config: LLMConfig | LocalLLMConfig) -> str:
    """The generator as answers, reports and the query log name it."""
    if isinstance(config, LocalLLMConfig):
        return config.label
    out = f"openai-compatible:{config.model}"
    if config.template == "base":
        out += " (base template, /v1/completions)"
    return out


def chat_client(config: LLMConfig | LocalLLMConfig) -> Client:
    """The chat client for ``config`` (a local model is loaded once per process)."""
    if isinstance(config, LocalLLMConfig):
        return LocalChatClient(config)
    return ChatClient(config)


def configured_chat(db: Database) -> tuple[Client, str] | None:
    """The client and label of the model ``db.settings`` names, or None when none is set."""
    config = config_from_settings(db.settings)
    if config is None:
        return None
    return chat_client(config), label(config)
