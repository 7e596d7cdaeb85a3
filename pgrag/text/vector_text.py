"""The text a chunk's vector is made from: its heading, its context line and its own text.

Ingest (:mod:`pgrag.ingest.plan`), the embedding worker and ``pgrag models reembed`` build it
the same way, so that a chunk re-embedded with another model is embedded from the same text.
The heading (the section path, cut to :data:`~pgrag.text.chunking.CONTEXT_TOKENS`) comes
first; a context line (contextual ingest, :mod:`pgrag.ingest.contextual`) comes next, cut to
what is left of the model's input beside the chunk, so the model never truncates the chunk
itself. A contextual ingest chunks :data:`CONTEXT_LINE_TOKENS` shorter, so every chunk keeps at
least that much room for its context line.
"""

from __future__ import annotations

from pgrag.text.tokens import TokenCounter

# The room a contextual ingest keeps for the context line in every chunk's vector (model
# tokens): the chunks are that much shorter than the collection's chunk size would make them.
CONTEXT_LINE_TOKENS = 48


def vector_text(
    heading: str,
    text: str,
    context: str | None,
    counter: TokenCounter,
    max_tokens: int,
    text_tokens: int | None = None,
) -> str:
    """``heading``, ``context`` and ``text`` on lines of their own (those that are not empty),
    the context cut to the tokens left of ``max_tokens`` (the model's input, special tokens
    included) beside the other two. ``text_tokens`` is the text's count when the caller has
    it."""
    line = ""
    if context:
        used = (counter.count(heading) if heading else 0) + (
            counter.count(text) if text_tokens is None else text_tokens
        )
        room = max_tokens - 2 - used  # ([CLS] and [SEP], or their like)
        pieces = counter.cut(context, room) if room > 0 else []
        line = pieces[0] if pieces else ""
    return "\n".join(part for part in (heading, line, text) if part)
