"""A light English stemmer for matching a question's or an answer's words against a passage.

Enough to match "bicycles" with "bicycle", "parked" with "park", "policies" with "policy" and
"charges" with "charged"; not a linguist. Used by the extractive reader, the retrieval
confidence's coverage and the support scores, so the three agree on what counts as the same
word.
"""

from __future__ import annotations

_ES = ("sses", "xes", "zes", "ches", "shes")


def stem(word: str) -> str:
    """``word`` (lower case) without one inflectional suffix and a final "e"."""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(_ES) and len(word) > 4:
        word = word[:-2]
    elif word.endswith("ing") and len(word) >= 6:
        word = word[:-3]
    elif word.endswith("ed") and len(word) >= 5:
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) >= 4:
        word = word[:-1]
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word
