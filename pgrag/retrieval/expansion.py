"""Query rewriting before a search, by the configured language model: HyDE and multi-query.

Both are opt-in (``rewrite=`` of :func:`pgrag.search` and :func:`pgrag.ask`, ``--rewrite``
of ``pgrag search`` and ``pgrag ask``) and cost one call of the language model per question,
with a short prompt and a small cap on what it may write (the local model is slow):

- **HyDE** (Gao et al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels"):
  the model writes a short passage that would answer the question, and the vector arm
  searches with that passage's embedding -- by default averaged with the question's, as the
  paper counts the question as one more hypothesis -- while the keyword arm still reads the
  question, so words the model made up match nothing.
- **multi-query** (RAG-Fusion): the model writes N paraphrases of the question, one per line;
  the question and each paraphrase are searched as usual and the rankings fused with
  Reciprocal Rank Fusion (k = 60) into k results (:func:`fuse`).

The model sees the question only, never a passage, and every search is an ordinary
:func:`pgrag.retrieval.search.search` under the caller's principals and filter: a paraphrase
finds nothing its asker may not read. When the model fails (a :class:`GenerationError`, or a
reply with nothing usable in it) the question is searched as asked, with a warning saying so
(:attr:`Expanded.warnings`; a :class:`RewriteWarning` from :func:`pgrag.search`): a rewrite
never makes a search fail. Measured in docs/benchmarks.md (benchmarks/rewrite_eval.py).
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from pgrag.errors import ConfigError, GenerationError, InputError
from pgrag.retrieval.search import (
    SearchResult,
    candidates,
    check_arguments,
    reranked,
    search,
)

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.llm.chat import LLMConfig
    from pgrag.llm.local import LocalLLMConfig
    from pgrag.retrieval.rerank import Reranker
    from pgrag.retrieval.search import SearchSettings

METHODS = ("hyde", "multi")
RRF_K = 60  # multi-query's fusion constant (RAG-Fusion's; search_v5's is docs/search.md#fusion)
HYDE_TOKENS = 80  # the most the model may write for a hypothetical passage
PARAPHRASE_TOKENS = 40  # ... for each paraphrase
MAX_PARAPHRASES = 10
MAX_LINE_CHARS = 300  # a longer line is not a paraphrase of a question
MAX_PASSAGE_CHARS = 2000

HYDE_SYSTEM = (
    "Write a short passage, two or three sentences, that answers the user's question the way"
    " an encyclopedia or a manual would. State the facts plainly; if you are not sure of them,"
    " write what such a passage would most likely say. Reply with the passage only."
)
MULTI_SYSTEM = (
    "Write {n} different ways to ask the user's question for a document search: each a"
    " complete question with the same meaning, in other words (synonyms, names spelled out)."
    " Reply with the {n} questions only, one per line, without numbers."
)

_BULLET = re.compile(
    r"^\s*(?:[-*\u2022\u00b7>]+|\(?\d{1,2}\s*[.):\]]|"
    r"(?:paraphrase|question|rewrite|query|version|alternative|option)\s*\d*\s*[:.)-])\s*",
    re.IGNORECASE,
)
_PREAMBLE = re.compile(
    r"^(?:sure|certainly|of course|okay|ok|here (?:are|is)|below|these are)\b", re.IGNORECASE
)
_LABEL = re.compile(r"^\s*(?:hypothetical\s+)?(?:passage|answer)\s*:\s*", re.IGNORECASE)
_REFUSAL = re.compile(
    r"^(?:i(?:'m| am)? (?:sorry|unable|cannot|can't|do not know|don't know)|sorry\b|"
    r"as an ai\b)",
    re.IGNORECASE,
)


class RewriteWarning(UserWarning):
    """A query rewrite failed, so the question was searched as asked (the message says why)."""


class Chat(Protocol):
    """A chat client: :class:`pgrag.llm.chat.ChatClient` or
    :class:`pgrag.llm.local.LocalChatClient`."""

    def complete(
        self, messages: list[dict[str, str]], *, on_token: Callable[[str], None] | None = None
    ) -> str: ...


@dataclass(frozen=True)
class QueryRewrite:
    """How to rewrite a question before it is searched (see the module's docstring).

    ``method`` is ``"hyde"`` or ``"multi"``; ``paraphrases`` is how many questions multi-query
    has the model write; ``with_question`` makes HyDE search with the mean of the passage's
    and the question's embeddings (False: the passage's alone); ``llm`` is the model that
    rewrites (None: the generator ``ask`` uses, else the connection's configured one)."""

    method: str
    paraphrases: int = 3
    with_question: bool = True
    llm: LLMConfig | LocalLLMConfig | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError(
                f"unknown query rewrite {self.method!r}; use one of {', '.join(METHODS)}"
            )
        if not 1 <= self.paraphrases <= MAX_PARAPHRASES:
            raise InputError(
                f"paraphrases must be between 1 and {MAX_PARAPHRASES}, got {self.paraphrases}"
            )

    @property
    def max_tokens(self) -> int:
        """The cap on what the model may write for this rewrite."""
        return HYDE_TOKENS if self.method == "hyde" else PARAPHRASE_TOKENS * self.paraphrases


def as_rewrite(value: str | QueryRewrite | None) -> QueryRewrite | None:
    """``"hyde"`` / ``"multi"`` (any case) as a :class:`QueryRewrite` with its defaults."""
    if value is None or isinstance(value, QueryRewrite):
        return value
    if isinstance(value, str):
        return QueryRewrite(value.strip().lower())
    raise InputError(f"rewrite must be 'hyde', 'multi', a QueryRewrite or None, got {value!r}")


@dataclass
class Expanded:
    """What a rewritten search found, and what the model wrote for it."""

    results: list[SearchResult]
    method: str
    # The hypothetical passage (hyde) or the paraphrases (multi) searched with; empty when
    # the model gave nothing usable and the question was searched as asked.
    generated: list[str]
    warnings: list[str] = field(default_factory=list)
    # multi: the question's own ranking (candidates(k) deep), as a plain search gives it.
    question_results: list[SearchResult] | None = None

    @property
    def fell_back(self) -> bool:
        return not self.generated

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "generated": self.generated,
            "fallback": self.fell_back,
            "skipped": False,  # (ask skips the rewrite of a question it abstains on)
        }


# --- the model's part -------------------------------------------------------------------------


def hyde_messages(question: str) -> list[dict[str, str]]:
    """The chat messages that ask for a hypothetical passage answering ``question``."""
    return [{"role": "system", "content": HYDE_SYSTEM}, {"role": "user", "content": question}]


def multi_messages(question: str, n: int) -> list[dict[str, str]]:
    """The chat messages that ask for ``n`` paraphrases of ``question``, one per line."""
    system = MULTI_SYSTEM.format(n=n)
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def clean_passage(reply: str) -> str | None:
    """The hypothetical passage in a model's reply: a leading "Passage:" label, quotes and
    line breaks taken out; None when it is empty, a refusal, or fewer than three words."""
    text = _searchable(reply).strip()
    text = " ".join(_LABEL.sub("", text).split()).strip("\"'\u201c\u201d ")
    if len(re.findall(r"\w+", text)) < 3 or _REFUSAL.match(text):
        return None
    return text[:MAX_PASSAGE_CHARS]


def parse_paraphrases(reply: str, question: str, n: int) -> list[str]:
    """Up to ``n`` distinct paraphrases in a model's reply, one per line: numbering, bullets,
    labels ("Paraphrase 2:"), quotes and emphasis taken off; a preamble ("Here are three
    ways:"), a line that repeats the question or another paraphrase, one of fewer than two
    words and one longer than :data:`MAX_LINE_CHARS` left out. Several questions on one line
    ("Who? Where?") count as several."""
    seen = {_key(question)}
    found: list[str] = []
    for line in _searchable(reply).splitlines():
        for text in _questions(_clean_line(line)):
            key = _key(text)
            if (
                not key
                or key in seen
                or len(key.split()) < 2
                or len(text) > MAX_LINE_CHARS
                or text.endswith(":")
                or _PREAMBLE.match(text)
            ):
                continue
            seen.add(key)
            found.append(text)
            if len(found) == n:
                return found
    return found


def _clean_line(line: str) -> str:
    text = line.strip()
    for _ in range(3):  # "1. **Paraphrase 1:** ..." has a bullet, emphasis and a label
        stripped = _BULLET.sub("", text).strip().strip("*_`").strip()
        stripped = stripped.strip("\"'\u201c\u201d").strip()
        if stripped == text:
            break
        text = stripped
    return text


def _questions(text: str) -> list[str]:
    """``text``, or the questions in it when it holds more than one."""
    parts = [p.strip() for p in re.findall(r"[^?]*\?", text)]
    if len(parts) > 1 and not text[text.rfind("?") + 1 :].strip():
        return [p for p in parts if p]
    return [text] if text else []


def _key(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _searchable(text: str) -> str:
    """``text`` without what no search can take (NUL, unpaired surrogates)."""
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def generate(chat: Chat, rewrite: QueryRewrite, question: str) -> tuple[list[str], str | None]:
    """What the model writes for ``question``: ([passage]) for hyde, the paraphrases for
    multi; ([], why) when it failed or wrote nothing usable."""
    if rewrite.method == "hyde":
        messages = hyde_messages(question)
    else:
        messages = multi_messages(question, rewrite.paraphrases)
    try:
        reply = chat.complete(messages)
    except GenerationError as err:
        return [], str(err)
    if rewrite.method == "hyde":
        passage = clean_passage(reply)
        if passage is None:
            return [], f"the model's reply held no passage ({_excerpt(reply)})"
        return [passage], None
    found = parse_paraphrases(reply, question, rewrite.paraphrases)
    if not found:
        return [], f"the model's reply held no paraphrase ({_excerpt(reply)})"
    return found, None


def _excerpt(reply: str) -> str:
    text = " ".join(reply.split())
    return repr(text[:80] + ("…" if len(text) > 80 else "")) if text else "it was empty"


def rewrite_client(
    db: Database, rewrite: QueryRewrite, generator: LLMConfig | LocalLLMConfig | None = None
) -> Chat:
    """The chat client that rewrites: ``rewrite.llm``, else ``generator``, else the model the
    connection's settings name, capped at :attr:`QueryRewrite.max_tokens`. None of them, or a
    base model (which follows no instructions), is a :class:`ConfigError`."""
    from pgrag.llm.chat import LLMConfig
    from pgrag.llm.configured import chat_client
    from pgrag.llm.local import config_from_settings

    config = rewrite.llm or generator or config_from_settings(db.settings)
    if config is None:
        raise ConfigError(
            f"query rewriting ({rewrite.method}) needs a language model: set PGRAG_LLM_BASE_URL"
            " to an OpenAI-compatible endpoint or PGRAG_LLM_GGUF to a local model, or search"
            " without a rewrite"
        )
    if isinstance(config, LLMConfig) and config.template == "base":
        raise ConfigError(
            f"query rewriting ({rewrite.method}) needs a chat model, and PGRAG_LLM_TEMPLATE=base"
            " names a base model, which follows no instructions; search without a rewrite"
        )
    return chat_client(replace(config, max_tokens=min(config.max_tokens, rewrite.max_tokens)))


# --- the searches -----------------------------------------------------------------------------


def fuse(
    rankings: Sequence[Sequence[SearchResult]], k: int, rrf_k: int = RRF_K
) -> list[SearchResult]:
    """Reciprocal Rank Fusion of several rankings of one collection into the best ``k``.

    A chunk scores ``sum(1 / (rrf_k + position))`` over the rankings that hold it (its
    ``score``); ties go to the better best position, then to the earlier ranking. Its other
    fields (arm ranks, distance, keyword score) are those of the ranking that placed it best,
    the earlier one on a tie. Its probability is its mean probability over the rankings (0
    where it is absent), renormalised over the ``k`` kept; None when no ranking had any."""
    scores: dict[int, float] = {}
    mass: dict[int, float] = {}
    best: dict[int, tuple[int, int, SearchResult]] = {}  # chunk -> (position, ranking, row)
    for number, ranking in enumerate(rankings):
        for position, row in enumerate(ranking, start=1):
            chunk = row.chunk_id
            scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (rrf_k + position)
            mass[chunk] = mass.get(chunk, 0.0) + (row.probability or 0.0) / len(rankings)
            if chunk not in best or position < best[chunk][0]:
                best[chunk] = (position, number, row)
    kept = sorted(scores, key=lambda c: (-scores[c], best[c][0], best[c][1]))[:k]
    total = sum(mass[c] for c in kept)
    return [
        replace(
            best[c][2],
            rank=i + 1,
            score=scores[c],
            probability=mass[c] / total if total else None,
        )
        for i, c in enumerate(kept)
    ]


def expanded_search(
    db: Database,
    query: str,
    rewrite: str | QueryRewrite,
    *,
    client: Chat | None = None,
    generator: LLMConfig | LocalLLMConfig | None = None,
    collection: str = "default",
    k: int = 10,
    mode: str = "hybrid",
    filter: dict[str, Any] | None = None,
    settings: SearchSettings | None = None,
    reranker: Reranker | None = None,
    mmr: float | None = None,
    timings: dict[str, float] | None = None,
    principals: Sequence[str] | None = None,
    model: str | None = None,
) -> Expanded:
    """:func:`pgrag.search` of ``query`` rewritten as ``rewrite`` says, with what the model
    wrote and any warning. ``client`` is the model that rewrites (default:
    :func:`rewrite_client` with ``generator``); the other arguments are :func:`pgrag.search`'s,
    passed to every search. A reranker reorders the final candidates by the question as asked;
    ``mmr`` is for HyDE only. ``timings`` gets ``expand_ms`` (the model's time) and the
    searches' own, summed over them (multi: also ``searches``)."""
    spec = as_rewrite(rewrite)
    if spec is None:
        raise InputError("expanded_search needs a rewrite: 'hyde' or 'multi'")
    check_arguments(query, mode=mode, k=k, filter=filter, mmr=mmr)
    if spec.method == "hyde" and mode == "keyword":
        raise InputError(
            "hyde changes only what the vector arm searches with: search in mode hybrid or"
            " vector, or rewrite with multi"
        )
    if spec.method == "multi" and mmr is not None:
        raise InputError(
            "mmr does not apply to a multi-query rewrite (its results are fused from several"
            " searches): search without mmr, or rewrite with hyde"
        )
    chat = client if client is not None else rewrite_client(db, spec, generator)
    common: dict[str, Any] = {
        "collection": collection,
        "mode": mode,
        "filter": filter,
        "settings": settings,
        "principals": principals,
        "model": model,
    }
    t0 = time.perf_counter()
    generated, problem = generate(chat, spec, query.strip())
    spent: dict[str, float] = {"expand_ms": round((time.perf_counter() - t0) * 1000, 2)}
    notes = []
    if problem is not None:
        notes.append(
            f"query rewriting ({spec.method}) failed, so the question was searched as asked:"
            f" {problem}"
        )
    question_results = None
    if spec.method == "hyde" or not generated:
        embed: list[str] | str | None = None
        if generated:
            embed = [generated[0], query] if spec.with_question else generated[0]
        results = search(
            db,
            query,
            k=k,
            reranker=reranker,
            mmr=mmr,
            timings=spent,
            embed_text=embed,
            **common,
        )
    else:
        depth = candidates(k)
        rankings = []
        for text in [query, *generated]:
            own: dict[str, float] = {}
            rankings.append(search(db, text, k=depth, timings=own, **common))
            for name, ms in own.items():
                spent[name] = round(spent.get(name, 0.0) + ms, 2)
        spent["searches"] = len(rankings)
        question_results = rankings[0]
        results = fuse(rankings, depth if reranker is not None else k)
        if reranker is not None:
            t_rerank = time.perf_counter()
            results = reranked(query, results, reranker, k)
            spent["rerank_ms"] = round((time.perf_counter() - t_rerank) * 1000, 2)
    if timings is not None:
        timings.update(spent)
    return Expanded(results, spec.method, generated, notes, question_results)


def search_rewritten(
    db: Database, query: str, rewrite: str | QueryRewrite, **options: Any
) -> list[SearchResult]:
    """:func:`expanded_search`'s results, its warnings issued as :class:`RewriteWarning`
    (what :func:`pgrag.search` with ``rewrite=`` returns)."""
    expanded = expanded_search(db, query, rewrite, **options)
    for note in expanded.warnings:
        warnings.warn(note, RewriteWarning, stacklevel=3)
    return expanded.results
