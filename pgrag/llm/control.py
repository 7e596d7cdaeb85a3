"""Text that must not speak as the chat template: control-token spellings defused.

A local model's prompt is its chat template rendered to text and tokenised with control
tokens read as such (llama-cpp-python's chat handler does it, as llama.cpp's server does), so
``<|im_end|>`` written in a document would end the user's turn right there and let the
document open a system turn of its own. Every text pgrag puts into a prompt from a document
(passages, titles, a document window) goes through :func:`defused`.
"""

from __future__ import annotations

import re

# ``<|im_start|>`` (ChatML, Qwen), ``<|start_header_id|>`` / ``<|eot_id|>`` (Llama 3),
# ``<|end|>`` (Phi), ``<start_of_turn>`` (Gemma), ``<s>`` / ``</s>`` (Llama 2, Mistral).
_CONTROL = re.compile(
    r"<(\|[^|<>\s]{1,48}\|)>|<(/?(?:s|start_of_turn|end_of_turn|bos|eos))>", re.IGNORECASE
)


def defused(text: str) -> str:
    """``text`` with every control-token spelling spaced out (``< |im_end| >``), which no
    tokenizer reads as its control token; everything else is left as it is."""
    return _CONTROL.sub(lambda m: f"< {m.group(1) or m.group(2)} >", text)
