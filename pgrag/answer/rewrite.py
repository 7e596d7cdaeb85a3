"""Follow-up questions rewritten into standalone queries, before anything is searched.

"When was it founded?" after "Who founded the University of Chicago?" finds nothing about the
university: "it" is not in any passage. :func:`standalone_query` turns a question and the
conversation before it into a query that stands on its own; that query is what is searched,
put in the prompt and logged, and the question as asked is kept beside it.

With a language model configured (``db.settings``: the same generator that answers), the model
rewrites it (:data:`REWRITE_SYSTEM`, a short prompt, not streamed). Without one, a heuristic
does (:func:`heuristic_rewrite`):

1. The *focus* of the conversation is found in the previous turn: the proper-noun phrases of
   the previous question (its standalone form, so a chain of follow-ups keeps its subject) and
   the title of the first source the previous answer cited. The focus is the phrase that the
   title names (or that names the title), else the longest phrase, else the title, else the
   previous question's content words.
2. A question with a referring word (it, its, they, their, he, she, his, her, this, these,
   those, there) has its first one replaced by the focus ("its" by "<focus>'s", "there" by
   "in <focus>").
3. "What about X?" / "How about X?" / "And X?", X a name, reuse the previous question with
   its focus replaced by X ("Who founded Harvard?" after "Who founded Yale?").
4. Any other short question (three words or fewer, or one starting "and") gets the focus
   appended in parentheses ("And the mascot?" → "And the mascot? (University of Chicago)").
5. A question that names an entity of its own and refers to nothing is a new topic: unchanged.

Measured in docs/conversations.md (benchmarks/conversation_eval.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pgrag.answer.citations import cited_numbers, without_citations

# How the standalone query was made.
NO_HISTORY = "none"  # the first question of a conversation: searched as asked
UNCHANGED = "unchanged"  # the heuristic found nothing to resolve
HEURISTIC = "heuristic"
LLM = "llm"

# The model's prompt. The history is shown as a transcript, assistant answers cut short and
# without their citation marks; the model answers with the query alone.
REWRITE_SYSTEM = (
    "You rewrite the user's last question as a standalone search query for a document search."
    " Use the conversation to resolve pronouns (it, they, this, ...) and elliptical follow-ups"
    ' ("what about ...?", "and the second?") into the names they stand for. Keep the question\'s'
    " meaning and language; do not answer it, add nothing it does not ask. If it already stands"
    " on its own, repeat it unchanged. Reply with the rewritten question only, on one line."
)
HISTORY_TURNS = 6  # the turns shown to the model (the most recent)
ANSWER_CHARS = 400  # of each assistant turn shown to the model
MAX_QUERY_CHARS = 1000  # a longer rewrite is not a query: the heuristic's is used


class Completer(Protocol):
    """A chat client: :class:`pgrag.llm.chat.ChatClient` or
    :class:`pgrag.llm.local.LocalChatClient`."""

    def complete(
        self, messages: list[dict[str, str]], *, on_token: Callable[[str], None] | None = None
    ) -> str: ...


@dataclass(frozen=True)
class HistoryTurn:
    """What the rewrite reads of one earlier turn: its role and text, the standalone query a
    user turn was searched as, and the titles of an assistant turn's numbered sources."""

    role: str
    content: str
    standalone_query: str | None = None
    titles: dict[int, str | None] | None = None  # source number -> title

    @property
    def query(self) -> str:
        return self.standalone_query or self.content

    def cited_title(self) -> str | None:
        """The title of the first source the answer cites that has one."""
        for n in cited_numbers(self.content):
            title = (self.titles or {}).get(n)
            if title:
                return title
        return None


@dataclass(frozen=True)
class Rewrite:
    question: str  # as asked
    standalone: str  # what is searched, put in the prompt and logged
    method: str  # NO_HISTORY, UNCHANGED, HEURISTIC or LLM

    def to_dict(self) -> dict[str, str]:
        return {"question": self.question, "standalone": self.standalone, "method": self.method}


def standalone_query(
    question: str, history: Sequence[HistoryTurn], client: Completer | None = None
) -> Rewrite:
    """``question`` as a query that stands without ``history`` (earlier turns, oldest first):
    rewritten by ``client`` (a chat model) when given, else by :func:`heuristic_rewrite`. A
    model's reply that is empty or too long to be a query is replaced by the heuristic's."""
    question = question.strip()
    if not any(t.role == "user" for t in history):
        return Rewrite(question, question, NO_HISTORY)
    if client is not None:
        reply = client.complete(rewrite_messages(question, history))
        rewritten = clean_reply(reply)
        if rewritten:
            return Rewrite(question, rewritten, LLM)
    rewritten = heuristic_rewrite(question, history)
    return Rewrite(question, rewritten, HEURISTIC if rewritten != question else UNCHANGED)


def rewrite_messages(question: str, history: Sequence[HistoryTurn]) -> list[dict[str, str]]:
    """The chat messages that ask a model for the standalone query."""
    lines = []
    for turn in list(history)[-HISTORY_TURNS:]:
        if turn.role == "user":
            lines.append(f"User: {turn.content.strip()}")
        else:
            text = " ".join(without_citations(turn.content).split())
            if len(text) > ANSWER_CHARS:
                text = text[:ANSWER_CHARS].rsplit(" ", 1)[0] + " …"
            lines.append(f"Assistant: {text}")
    transcript = "\n".join(lines)
    user = f"Conversation:\n{transcript}\n\nLast question: {question}\n\nStandalone question:"
    return [{"role": "system", "content": REWRITE_SYSTEM}, {"role": "user", "content": user}]


_LABEL = re.compile(
    r"^\s*(?:standalone\s+(?:question|query)|rewritten(?:\s+question)?)\s*:\s*", re.IGNORECASE
)


def clean_reply(reply: str) -> str | None:
    """The query in a model's reply: its first non-empty line without a label or quotes; None
    when there is none or it is too long to be a query."""
    for line in reply.strip().splitlines():
        line = _LABEL.sub("", line)
        line = line.strip().strip("\"'“”‘’`").strip()
        if line:
            return line if len(line) <= MAX_QUERY_CHARS else None
    return None


# --- the heuristic --------------------------------------------------------------------------

_WORD = re.compile(r"[\w][\w'’.-]*[\w]|[\w]")
_REFERRING = re.compile(
    r"\b(it|its|itself|they|them|their|theirs|themselves|he|him|his|himself|she|her|hers"
    r"|herself|this|these|those|there)\b",
    re.IGNORECASE,
)
_POSSESSIVE = {"its", "their", "his"}
# "there" is existential after these ("is there", "were there") and before them ("there is").
_BE = {"is", "are", "was", "were", "be", "been", "being", "'s"}
_SHIFT = re.compile(
    r"^\s*(?:and\s+)?(?:what|how)\s+about\s+(.+?)\s*\??\s*$|^\s*and\s+(.+?)\s*\?\s*$",
    re.IGNORECASE,
)
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having here how i if in into is it its itself just me more most my no
    nor not now of off on once only or other our out over own same should so some such than that
    the their them then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your also many much one
    ones did name named called""".split()
)
_QUESTION_WORDS = frozenset(
    "what when where which who whom whose why how is are was were do does did can could".split()
)
_SHORT = 3  # words: a question this short leans on the one before it


def heuristic_rewrite(question: str, history: Sequence[HistoryTurn]) -> str:
    """``question`` made standalone from ``history`` without a model (see the module's
    docstring for the rules); ``question`` itself when nothing needs resolving."""
    question = " ".join(question.split())
    previous = _last(history, "user")
    if previous is None:
        return question
    answer = _last(history, "assistant")
    title = answer.cited_title() if answer is not None else None
    focus = _focus(previous.query, title)
    if not focus or focus.lower() in question.lower():
        return question
    shift = _SHIFT.match(question)
    if shift:
        new = (shift.group(1) or shift.group(2) or "").strip()
        if new and _only_names(new):  # "What about Edison?", not "What about Bob's budget?"
            return _substitute(previous.query, focus, new)
    referring = _referring_word(question)
    if referring is not None:
        start, end, word = referring
        if word.lower() == "there":
            replacement = f"in {focus}"
        elif _is_possessive(word, question[end:]):
            replacement = _possessive(focus)
        else:
            replacement = focus
        return question[:start] + replacement + question[end:]
    words = _WORD.findall(question)
    if _proper_phrases(question):
        return question  # a new topic of its own
    if len(words) <= _SHORT or question.lower().startswith("and "):
        return f"{question} ({focus})"
    return question


def _last(history: Sequence[HistoryTurn], role: str) -> HistoryTurn | None:
    for turn in reversed(history):
        if turn.role == role and turn.content.strip():
            return turn
    return None


def _focus(previous: str, title: str | None) -> str | None:
    """What the previous question was about (see the module's docstring)."""
    phrases = _proper_phrases(previous)
    if title:
        t = set(_lower_words(title))
        for phrase in phrases:
            p = set(_lower_words(phrase))
            if p and t and (p <= t or t <= p):
                return phrase if len(p) >= len(t) else title
    if phrases:
        return max(phrases, key=lambda p: (len(_lower_words(p)), -phrases.index(p)))
    if title:
        return title
    content = [w for w in _WORD.findall(previous) if w.lower() not in STOPWORDS]
    return " ".join(content[-4:]) or None


def _only_names(text: str) -> bool:
    """Whether ``text`` is names alone ("Edison", "the University of Chicago"), with nothing
    else a question of its own would add ("Bob's Osprey budget" is a new question)."""
    phrases = _proper_phrases(text)
    if not phrases:
        return False
    named = {w.lower() for p in phrases for w in _WORD.findall(p)}
    rest = [
        w
        for w in _WORD.findall(text)
        if w.lower().removesuffix("'s").removesuffix("’s") not in named
        and w.lower() not in {"the", "a", "an", "and", "or", "of"}
    ]
    return not rest


def _proper_phrases(text: str) -> list[str]:
    """Runs of capitalised words (and numbers after them), joined by "of", "the", "and", "de",
    "for": "University of Chicago", "Super Bowl 50". The first word of the text counts only
    when it is not a common word ("When", "The")."""
    tokens = [(m.group(), m.start()) for m in _WORD.finditer(text)]
    phrases: list[str] = []
    run: list[str] = []
    joiners = {"of", "the", "and", "de", "for", "von", "van", "la", "le", "del"}

    def close() -> None:
        while run and run[-1].lower() in joiners:
            run.pop()
        if run:
            phrases.append(" ".join(run))
        run.clear()

    for i, (word, _) in enumerate(tokens):
        capital = word[:1].isupper() or (word[:1].isdigit() and bool(run))
        if i == 0 and word.lower() in STOPWORDS | _QUESTION_WORDS:
            capital = False
        if capital and word.lower() != "i":
            run.append(word.removesuffix("'s").removesuffix("’s"))
        elif run and word.lower() in joiners:
            run.append(word)
        else:
            close()
    close()
    return [p for p in phrases if p.lower() not in STOPWORDS]


def _lower_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in STOPWORDS]


def _referring_word(question: str) -> tuple[int, int, str] | None:
    """The first word of ``question`` that refers to something said before: (start, end, word)."""
    for m in _REFERRING.finditer(question):
        word = m.group(1).lower()
        if word == "there":
            before = question[: m.start()].split()[-1:] or [""]
            after = question[m.end() :].split()[:1] or [""]
            if before[0].lower() in _BE or after[0].lower().strip("?,.") in _BE:
                continue
        return m.start(), m.end(), m.group(1)
    return None


def _is_possessive(word: str, rest: str) -> bool:
    w = word.lower()
    if w in _POSSESSIVE:
        return True
    if w == "her":  # "her husband" (possessive) or "marry her" (object)
        nxt = (rest.split()[:1] or [""])[0].strip("?,.!;:")
        return nxt.isalpha() and nxt.lower() not in STOPWORDS
    return False


def _possessive(phrase: str) -> str:
    return phrase + ("'" if phrase.endswith("s") else "'s")


def _substitute(previous: str, focus: str, new: str) -> str:
    """The previous question about ``new`` instead of ``focus``."""
    pattern = re.compile(re.escape(focus), re.IGNORECASE)
    if pattern.search(previous):
        return pattern.sub(lambda _: new, previous, count=1)
    return f"{previous} ({new})"
