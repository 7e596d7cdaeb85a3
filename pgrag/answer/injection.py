"""Flagging instruction-like text in retrieved passages (prompt injection).

Retrieved text goes into the prompt fenced as data, and the instructions say so; a passage
that nevertheless reads like an instruction to the model ("ignore previous instructions",
"you are now ...", "reveal the system prompt") is worth knowing about when an answer is
checked afterwards. ``ask`` records what it found per source (``Answer.flagged``, and in the
trace's retrieved chunks). Nothing is removed: a flag is evidence, not a verdict, and a
security page may quote such a phrase legitimately.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pgrag.answer.prompt import Source

_PATTERNS = [
    r"\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|"
    r"all|any|your|the)\b[^.\n]{0,30}?\b(?:instructions?|prompts?|rules|directions|guidelines)\b",
    r"\byou are now\b",
    r"\b(?:new|updated|real) (?:system )?instructions?\s*:",
    r"\b(?:reveal|print|show|output|repeat)\b[^.\n]{0,30}?\b(?:system prompt|hidden prompt|"
    r"instructions above|api key|password)s?\b",
    r"\b(?:do not|don't|never) (?:cite|mention|tell|reveal)\b[^.\n]{0,40}?\b(?:user|sources?)\b",
    r"(?:^|\n)\s*(?:system|assistant)\s*:",
    r"<\|?(?:im_start|im_end|system|endoftext)\|?>",
]
_RE = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE)


def instruction_like(text: str, limit: int = 3) -> list[str]:
    """The instruction-like phrases in ``text`` (at most ``limit``, each cut to 80 chars)."""
    found: list[str] = []
    for match in _RE.finditer(text):
        phrase = " ".join(match.group(0).split())[:80]
        if phrase and phrase not in found:
            found.append(phrase)
        if len(found) >= limit:
            break
    return found


def flagged_sources(sources: Sequence[Source]) -> list[dict[str, Any]]:
    """The sources whose section path or text reads like an instruction to the model:
    ``[{n, chunk_id, phrases}]`` (``Answer.flagged``)."""
    out = []
    for s in sources:
        phrases = instruction_like(f"{s.result.section or ''}\n{s.result.text}")
        if phrases:
            out.append({"n": s.n, "chunk_id": s.result.chunk_id, "phrases": phrases})
    return out
