"""Ask: retrieve, assemble the prompt, generate, check the citations, log.

Without an LLM endpoint configured the offline extractive reader answers. With one
(``PGRAG_LLM_BASE_URL`` or ``OPENAI_BASE_URL``), any OpenAI-compatible chat server does; with
``PGRAG_LLM_GGUF``, a local GGUF model through llama-cpp-python (:mod:`pgrag.llm.local`).
The configuration is the connection's (``db.settings``, taken when it was opened), never the
environment at the time of the question. Either way the answer comes back with its citations
resolved to chunks and documents, or as an abstention with a reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pgrag.answer import conversation as conversations
from pgrag.answer.citations import Citation, check_citations
from pgrag.answer.injection import flagged_sources
from pgrag.answer.prompt import (
    ABSTAIN_TEXT,
    BASE_STOP,
    STYLES,
    build_base_prompt,
    build_messages,
    fit_budget,
    number_sources,
    render,
)
from pgrag.answer.reader import extractive_answer
from pgrag.answer.result import Answer
from pgrag.answer.rewrite import Completer, Rewrite, standalone_query
from pgrag.answer.traces import log_answer
from pgrag.answer.verdict import after_retry, check_reply, correction, ground
from pgrag.answer.verdict import judge as judge  # re-exported: callers that do not retry
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import InputError
from pgrag.llm.chat import ChatClient, LLMConfig
from pgrag.llm.completions import CompletionClient
from pgrag.llm.configured import label
from pgrag.llm.local import LocalChatClient, LocalLLMConfig, config_from_settings
from pgrag.retrieval.confidence import (
    Model,
    collection_model,
    describe,
    parse_threshold,
    retrieval_confidence,
    threshold_for,
)
from pgrag.retrieval.expansion import (
    Chat,
    Expanded,
    QueryRewrite,
    as_rewrite,
    expanded_search,
    rewrite_client,
)
from pgrag.retrieval.search import check_text, search
from pgrag.retrieval.sections import widen
from pgrag.text.tokens import generator_counter

if TYPE_CHECKING:
    from pgrag.db.connect import Database
    from pgrag.retrieval.rerank import Reranker

# The default of ``llm`` and ``min_confidence``: what the connection's settings name
# (``db.settings``, read from the environment when it was opened; see pgrag.config).
Configured = Literal["configured"]


def ask(
    db: Database,
    question: str,
    *,
    collection: str = "default",
    k: int = 8,
    budget_tokens: int = 1500,
    llm: LLMConfig | LocalLLMConfig | Configured | None = "configured",
    on_token: Callable[[str], None] | None = None,
    log: bool = True,
    reranker: Reranker | None = None,
    principals: Sequence[str] | None = None,
    context: str = "chunk",
    min_confidence: float | Configured | None = "configured",
    rewrite: str | QueryRewrite | None = None,
    conversation_id: str | None = None,
    history: Sequence[Mapping[str, Any]] | None = None,
    owner: str | None = None,
    style: str = "short",
) -> Answer:
    """Answer ``question`` from ``collection`` with numbered citations, or abstain.

    ``llm`` is the generator: by default the one the connection's settings name
    (``db.settings``: ``PGRAG_LLM_BASE_URL`` or ``OPENAI_BASE_URL``, or ``PGRAG_LLM_GGUF``, as
    the environment held them when :func:`pgrag.connect` ran), an :class:`LLMConfig` or
    :class:`LocalLLMConfig` given here, or None, which forces the offline extractive reader.

    ``principals`` overrides the connection's for this question (see :func:`pgrag.search`):
    the answer is built only from passages they (or public) may read. ``context="section"``
    is small-to-big retrieval: each retrieved chunk is handed to the prompt as its whole
    section (:mod:`pgrag.retrieval.sections`), within the same token budget.

    ``rewrite`` (``"hyde"``, ``"multi"`` or a :class:`pgrag.retrieval.expansion.QueryRewrite`)
    has a language model rewrite the query before it is searched: the rewrite's own ``llm``,
    else the generator, else the connection's configured model (so the offline reader, with
    ``llm=None``, can read passages a rewrite found). What it wrote is in
    ``answer.expansion``; a failed rewrite searches the question as asked, with a warning in
    ``answer.warnings``. Whether to abstain is still decided on the question's own search,
    which the threshold was calibrated on, and made first: a rewrite changes what the
    generator reads, not when ``ask`` says it does not know, and no model is asked to rewrite
    a question ``ask`` abstains on.

    When the retrieval confidence (:mod:`pgrag.retrieval.confidence`) is below
    ``min_confidence`` the answer is an abstention and no generator is asked. By default the
    threshold is
    ``PGRAG_MIN_CONFIDENCE`` (from ``db.settings``), else the one ``pgrag eval answers --save``
    calibrated for the collection's model, else the bundled model's default; None turns it
    off.

    A follow-up question is asked in a conversation (:mod:`pgrag.answer.conversation`):
    ``conversation_id`` continues one of ``owner``'s stored conversations (``"new"`` starts
    one; either way the answer's ``conversation_id`` names it and the question and answer are
    stored as its next turns), or ``history`` gives the earlier turns as chat messages
    (``{"role": "user" | "assistant", "content": ...}``, not stored unless ``conversation_id``
    is ``"new"``). The question is then rewritten into a standalone query
    (:mod:`pgrag.answer.rewrite`: by the configured model, else a heuristic), which is what is
    searched, shown to the generator and logged (``answer.standalone_query``); a chunk an
    earlier turn of a stored conversation numbered keeps its number. ``owner`` is whose
    conversation it is (see :mod:`pgrag.answer.conversation`; None: the session's).

    ``style`` is the form a chat model is asked to answer in: ``"short"`` (the default: a
    short answer, ``answer.short_answer``, and the cited sentence that supports it) or
    ``"prose"`` (a free answer with every statement cited). A reply that is only citation
    markers, or cites no source it was given, is asked for once more with a correction, then
    is an abstention with that reason (:mod:`pgrag.answer.verdict`)."""
    if not question or not question.strip():
        raise InputError(
            'the question is empty; ask something, e.g. pgrag ask "How do refunds work?"'
        )
    check_text(question, "the question")
    if budget_tokens < 1:
        raise InputError(f"budget_tokens must be at least 1, got {budget_tokens}")
    if context not in ("chunk", "section"):
        raise InputError(f"context must be 'chunk' or 'section', got {context!r}")
    if style not in STYLES:
        raise InputError(f"style must be one of {', '.join(map(repr, STYLES))}, got {style!r}")
    config = _generator(db, llm)
    rewriting = as_rewrite(rewrite)
    stored, earlier = _conversation(db, collection, conversation_id, history, owner)
    model = collection_model(db, collection)
    threshold, threshold_from = _threshold(db, model, min_confidence)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    client: ChatClient | LocalChatClient | None = None
    generator = "extractive"
    if isinstance(config, LocalLLMConfig):  # loaded first: a missing extra fails fast
        t_load = time.perf_counter()
        client = LocalChatClient(config)  # the model is loaded once per process
        timings["load_model_ms"] = round((time.perf_counter() - t_load) * 1000, 2)
        generator = config.label
    elif config is not None:
        client, generator = ChatClient(config), label(config)
    expander = None if rewriting is None else rewrite_client(db, rewriting, config)
    if principals is None:
        principals = db.principals
    t_rewrite = time.perf_counter()
    before = [t.for_rewrite() for t in earlier]
    followup = standalone_query(question, before, _rewriter(config, client))
    if earlier:
        timings["rewrite_ms"] = round((time.perf_counter() - t_rewrite) * 1000, 2)
    query = followup.standalone
    results = search(
        db,
        query,
        collection=collection,
        k=k,
        reranker=reranker,
        timings=timings,
        principals=principals,
    )
    measured = retrieval_confidence(
        query, results, model[1] if model else configured_embedder(db).distance
    )
    confidence = measured.value if measured else None
    doubtful = threshold is not None and confidence is not None and confidence < threshold
    expansion: dict[str, Any] | None = None
    warnings: list[str] = []
    if rewriting is not None and expander is not None:
        # Only for an answer the generator will write: an abstention asks no model.
        expansion = {
            "method": rewriting.method,
            "generated": [],
            "fallback": False,
            "skipped": True,
        }
        if results and not doubtful:
            expanded, spent = _rewritten(
                db, query, rewriting, expander, collection, k, reranker, principals
            )
            results, expansion, warnings = expanded.results, expanded.to_dict(), expanded.warnings
            for name, value in spent.items():
                timings[name] = round(timings.get(name, 0.0) + value, 2)
    passages = widen(db, results, principals=principals) if context == "section" else results
    # The budget is counted in the generator's own tokens when known.
    count, tokenizer = budget_counter(db, config, client)
    kept = fit_budget(passages, budget_tokens, count)
    sources = number_sources(kept, conversations.numbering(earlier) if stored else None)
    messages = build_messages(query, sources, style)
    prompt = render(messages)

    t_gen = time.perf_counter()
    raw: str | None = None
    reason: str | None
    invalid: list[int] = []
    citations: list[Citation] = []
    short: str | None = None
    retried: str | None = None
    evidence: dict[str, Any] | None = None
    if not sources:
        text, abstained, reason = ABSTAIN_TEXT, True, "nothing was retrieved for this question"
    elif doubtful:
        text, abstained = ABSTAIN_TEXT, True
        reason = describe(confidence, threshold, threshold_from)
    elif client is None:
        reader = extractive_answer(query, sources, configured_embedder(db))
        checked = check_citations(reader.text, sources)
        text, abstained, reason = checked.text, reader.abstained, reader.reason
        citations, short = checked.citations, reader.short
    else:
        if isinstance(config, LLMConfig) and config.template == "base":
            prompt = build_base_prompt(query, sources)
            raw = CompletionClient(config).complete(prompt, stop=BASE_STOP, on_token=on_token)
            verdict = ground(check_reply(raw, sources), query, sources)
        else:
            raw = client.complete(messages, on_token=on_token)
            verdict = ground(check_reply(raw, sources), query, sources)
            if verdict.fault is not None:  # only markers, or no valid citation: once more
                retried = verdict.fault
                again = [
                    *messages,
                    {"role": "assistant", "content": raw},
                    {"role": "user", "content": correction(verdict.fault)},
                ]
                if on_token is not None:
                    on_token("\n")  # the draft on the terminal is followed by the second try
                raw = client.complete(again, on_token=on_token)
                verdict = after_retry(ground(check_reply(raw, sources), query, sources))
                prompt = render(again)
        text, abstained, reason = verdict.text, verdict.abstained, verdict.reason
        citations, invalid, short = verdict.citations, verdict.invalid, verdict.short
        evidence = verdict.evidence
    timings["generate_ms"] = round((time.perf_counter() - t_gen) * 1000, 2)
    timings["total_ms"] = round((time.perf_counter() - t_start) * 1000, 2)

    answer = Answer(
        question=question,
        answer=text,
        abstained=abstained,
        reason=reason,
        citations=citations,
        sources=sources,
        generator=generator,
        timings=timings,
        prompt=prompt,
        invalid_citations=invalid,
        raw_answer=raw,
        flagged=flagged_sources(sources),
        confidence=confidence,
        confidence_detail=measured.to_dict() if measured else None,
        threshold=threshold,
        threshold_from=threshold_from,
        tokenizer=tokenizer,
        warnings=warnings,
        expansion=expansion,
        standalone_query=query,
        rewrite=followup.method if earlier else None,
        short_answer=short,
        retried=retried,
        evidence=evidence,
    )
    answer.check_support()
    if log:
        log_answer(db, collection, answer, results, principals)
    if conversation_id is not None:
        answer.conversation_id = _remember(db, collection, stored, earlier, followup, answer, owner)
    return answer


def _rewritten(
    db: Database,
    query: str,
    rewriting: QueryRewrite,
    client: Chat,
    collection: str,
    k: int,
    reranker: Reranker | None,
    principals: Sequence[str] | None,
) -> tuple[Expanded, dict[str, float]]:
    """The rewritten search whose passages the generator reads, and its timings."""
    spent: dict[str, float] = {}
    expanded = expanded_search(
        db,
        query,
        rewriting,
        client=client,
        collection=collection,
        k=k,
        reranker=reranker,
        timings=spent,
        principals=principals,
    )
    return expanded, spent


def _conversation(
    db: Database,
    collection: str,
    conversation_id: str | None,
    history: Sequence[Mapping[str, Any]] | None,
    owner: str | None,
) -> tuple[conversations.Conversation | None, list[conversations.Turn]]:
    """The stored conversation ``ask`` continues (None: none, or one it starts) and the turns
    before the question."""
    if conversation_id is None or conversation_id == conversations.NEW:
        if owner is not None:
            conversations.check_owner(owner)
        return None, conversations.history_from_messages(history or [])
    if history:
        raise InputError(
            "pass either conversation_id (a stored conversation's turns) or history (earlier"
            " turns as messages), not both"
        )
    stored = conversations.get(db, conversation_id, owner=owner)
    if stored.collection != collection:
        raise InputError(
            f"conversation {stored.id} is of collection {stored.collection!r}, not"
            f" {collection!r}; ask it in {stored.collection!r} or start a new conversation"
        )
    return stored, stored.turns


def _rewriter(
    config: LLMConfig | LocalLLMConfig | None, client: ChatClient | LocalChatClient | None
) -> Completer | None:
    """The model that rewrites follow-ups: the chat generator; None (the heuristic) for the
    offline reader and for a base model (``template="base"``), which follows no instructions."""
    if client is None or (isinstance(config, LLMConfig) and config.template == "base"):
        return None
    return client


def _remember(
    db: Database,
    collection: str,
    stored: conversations.Conversation | None,
    earlier: list[conversations.Turn],
    rewrite: Rewrite,
    answer: Answer,
    owner: str | None,
) -> str:
    """Store the question and the answer as the conversation's next turns (a new conversation
    holding ``earlier`` first, when ``stored`` is None); the conversation's id."""
    turns = [
        conversations.Turn("user", rewrite.question, standalone_query=rewrite.standalone),
        conversations.Turn(
            "assistant",
            answer.answer,
            sources=conversations.source_refs(answer.sources),
            query_id=answer.query_id,
        ),
    ]
    if stored is not None:
        conversations.append(db, stored.id, turns, after_turn=stored.last_turn, owner=owner)
        return stored.id
    first = next((t.content for t in earlier if t.role == "user"), rewrite.question)
    return conversations.create(
        db, collection, title=conversations.title_for(first), owner=owner, turns=earlier + turns
    )


def _generator(
    db: Database, llm: LLMConfig | LocalLLMConfig | Configured | None
) -> LLMConfig | LocalLLMConfig | None:
    """The generator ``ask`` uses: the one given, or the one ``db.settings`` names."""
    if llm == "configured":
        return config_from_settings(db.settings)
    if llm is None or isinstance(llm, LLMConfig | LocalLLMConfig):
        return llm
    raise InputError(
        "llm must be an LLMConfig, a LocalLLMConfig, None (the offline reader) or"
        f" 'configured' (the connection's settings), got {llm!r}"
    )


def _threshold(
    db: Database, model: Model | None, min_confidence: float | Configured | None
) -> tuple[float | None, str | None]:
    """The abstention threshold and where it comes from (see :func:`ask`)."""
    if min_confidence == "configured":
        return threshold_for(model, db.settings)
    if min_confidence is None:
        return None, None
    return parse_threshold(min_confidence, "min_confidence"), "min_confidence"


def budget_counter(
    db: Database, config: LLMConfig | LocalLLMConfig | None, client: Any
) -> tuple[Callable[[str], int], str]:
    """What counts the prompt's token budget, and its name: a local GGUF model's own
    tokenizer (``client``); the generator's tokenizer.json when ``PGRAG_LLM_TOKENIZER`` names
    one; else the embedding model's tokenizer."""
    if isinstance(config, LocalLLMConfig):
        return client.count_tokens, f"{config.label} (its own tokenizer)"
    if config is not None and config.tokenizer:
        return generator_counter(config.tokenizer).count, config.tokenizer
    return configured_embedder(db).tokens.count, f"embedding model {configured_embedder(db).name}"
