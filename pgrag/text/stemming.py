"""A light English stemmer for matching a question's or an answer's words against a passage.

Enough to match "bicycles" with "bicycle", "parked" with "park", "policies" with "policy" and
"charges" with "charged"; not a linguist (use/used, run/running still differ). The extractive
reader, the retrieval confidence's coverage and the support scores all stem with it.
"""

from __future__ import annotations

import re

# Words in any script (Cyrillic, Greek, CJK runs …), with an inner apostrophe.
_WORD = re.compile(r"[^\W_]+(?:['’][^\W\d_]+)*")
STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being
    do does did doing have has had having i you he she it we they me him her us them my your his
    its our their this that these those what which who whom whose when where why how can could
    should would will shall may might must not no nor so than too very just about into over
    after before under again there here all any both each few more most other some such only
    own same s t don't isn't aren't much many often long""".split()
)

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


def content_stems(text: str) -> set[str]:
    """The stems of ``text``'s words in any script, English stop words left out."""
    words = (re.sub(r"['’]s$", "", w) for w in _WORD.findall(text.lower()))
    return {stem(w) for w in words if w not in STOPWORDS}
