"""Talking to a language model: OpenAI-compatible chat and completions, and a local GGUF model."""
