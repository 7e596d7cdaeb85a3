"""``pgrag ask --agentic``: a tool-calling model that may search again.

The question is answered as ``ask`` does it: retrieve, number the sources, fence them as data.
The model is also offered the ``pgrag_search`` tool (:mod:`pgrag.answer.tools`): an
OpenAI-compatible endpoint gets it as ``tools``, a local GGUF model (``PGRAG_LLM_GGUF``) as text
in its prompt, in the tool-calling format Qwen2.5 is trained on (:mod:`pgrag.llm.local_tools`);
the loop, the checks and the record below are the same for both. Each call it makes
runs under the user's principals, and the passages it returns are numbered on from the ones
the model already has, and fenced the same way. After ``max_steps`` searches the model is
asked once more without the tool, so it must answer. The answer is checked as ``ask`` checks
one (:mod:`pgrag.answer.verdict`): citations must name a source the model was given, and a
short answer is cited where it stands in the sources; there is no second try. The whole
exchange, tool calls included, is the recorded prompt.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pgrag.answer.ask import budget_counter
from pgrag.answer.injection import flagged_sources
from pgrag.answer.prompt import (
    ABSTAIN_TEXT,
    SYSTEM,
    Source,
    build_messages,
    fit_budget,
    number_sources,
)
from pgrag.answer.result import Answer
from pgrag.answer.tools import NAME, run_search_call, search_tool
from pgrag.answer.traces import log_answer
from pgrag.answer.verdict import check_reply, ground
from pgrag.embeddings.local import configured_embedder
from pgrag.errors import ConfigError, InputError
from pgrag.llm.chat import LLMConfig
from pgrag.llm.configured import chat_client
from pgrag.llm.local import LocalLLMConfig
from pgrag.retrieval.confidence import collection_model, retrieval_confidence
from pgrag.retrieval.search import search

if TYPE_CHECKING:
    from pgrag.db.connect import Database

AGENT_SYSTEM = SYSTEM + (
    "\n- If the sources do not answer the question, call the pgrag_search tool with other"
    " words: it returns more numbered sources. Search at most {steps} times."
)


def _blocks(sources: Sequence[Source]) -> str:
    # The same fencing as the first message (pgrag.answer.prompt.build_messages).
    user = build_messages("", sources)[1]["content"]
    return user.removeprefix("Sources:\n\n").rsplit("\n\nQuestion:", 1)[0]


def _render(messages: Sequence[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        text = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            f = call.get("function", {})
            text += f"\n(tool call {f.get('name')}: {f.get('arguments')})"
        parts.append(f"### {m['role']}\n{text.strip()}")
    return "\n\n".join(parts)


def _normalised(call: dict[str, Any], fallback_id: str) -> dict[str, Any]:
    """A tool call as the API expects it back: an id, and ``arguments`` as a JSON string
    (some servers send an object, or no id)."""
    function = dict(call["function"])
    if not isinstance(function.get("arguments"), str):
        function["arguments"] = json.dumps(function.get("arguments") or {})
    return {**call, "id": call.get("id") or fallback_id, "type": "function", "function": function}


def ask_agentic(
    db: Database,
    question: str,
    *,
    config: LLMConfig | LocalLLMConfig,
    collection: str = "default",
    k: int = 5,
    budget_tokens: int = 1500,
    max_steps: int = 3,
    log: bool = True,
    principals: Sequence[str] | None = None,
) -> Answer:
    """Answer ``question`` with a model that may search ``collection`` again, at most
    ``max_steps`` times; cited and checked as :func:`pgrag.ask`'s answers are. ``config`` is
    an endpoint that calls tools or a local GGUF model (loaded once per process)."""
    if not question or not question.strip():
        raise InputError(
            'the question is empty; ask something, e.g. pgrag ask "How do refunds work?"'
        )
    if not 0 <= max_steps <= 10:
        raise InputError(f"--max-steps must be between 0 and 10, got {max_steps}")
    if isinstance(config, LLMConfig) and config.template != "chat":
        raise ConfigError(
            "--agentic needs a chat model that calls tools; unset PGRAG_LLM_TEMPLATE=base"
        )
    if principals is None:
        principals = db.principals
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    client = chat_client(config)  # a local model is loaded here, before the search
    if isinstance(config, LocalLLMConfig):
        timings["load_model_ms"] = round((time.perf_counter() - t_start) * 1000, 2)
    results = search(
        db, question, collection=collection, k=k, timings=timings, principals=principals
    )
    count, tokenizer = budget_counter(db, config, client)
    sources = number_sources(fit_budget(results, budget_tokens, count))

    def cost(r: Any) -> int:
        return count(r.text) + 16  # as fit_budget counts a passage

    # What the searches add shares the one budget, so the prompt stays within it.
    spent = sum(cost(s.result) for s in sources)
    retrieved = list(results)
    messages: list[dict[str, Any]] = build_messages(question, sources)
    messages[0] = {"role": "system", "content": AGENT_SYSTEM.format(steps=max_steps)}
    tools = [search_tool(collection)]
    steps = 0
    t_gen = time.perf_counter()
    while True:
        reply = client.respond(messages, tools if steps < max_steps else None)
        calls = reply["tool_calls"]
        if not calls or steps >= max_steps:
            raw = reply["content"] or ""
            break
        steps += 1
        calls = [_normalised(call, f"call_{steps}_{i}") for i, call in enumerate(calls)]
        messages.append({"role": "assistant", "content": reply["content"], "tool_calls": calls})
        for call in calls:
            function = call["function"]
            found: list[Any] | str
            if function["name"] != NAME:
                found = f"there is no tool {function['name']!r}; use {NAME}"
            else:
                found = run_search_call(
                    db, collection, function.get("arguments") or "{}", principals=principals
                )
            if isinstance(found, str):
                content = json.dumps({"error": found})
            else:
                known = {s.result.chunk_id for s in sources}
                fresh = [r for r in found if r.chunk_id not in known]
                fitting = []
                for r in fresh:
                    if spent + cost(r) <= budget_tokens:
                        fitting.append(r)
                        spent += cost(r)
                new = [Source(len(sources) + i + 1, r) for i, r in enumerate(fitting)]
                sources += new
                retrieved += fresh
                if new:
                    content = _blocks(new)
                elif fresh:
                    content = (
                        f"(the prompt's budget of {budget_tokens} tokens is spent: answer with"
                        " the sources you have)"
                    )
                else:
                    content = "(no new sources were found)"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    timings["generate_ms"] = round((time.perf_counter() - t_gen) * 1000, 2)
    model = collection_model(db, collection)
    first = retrieval_confidence(
        question, results, model[1] if model else configured_embedder(db).distance
    )
    timings["total_ms"] = round((time.perf_counter() - t_start) * 1000, 2)
    timings["searches"] = float(steps)
    short, evidence = None, None
    if sources:
        # Checked and grounded as ask's answer is (its short answer cited where it stands),
        # without ask's second try: the exchange already gave the model its turns.
        verdict = ground(check_reply(raw, sources), question, sources)
        text, abstained, reason = verdict.text, verdict.abstained, verdict.reason
        citations, invalid = verdict.citations, verdict.invalid
        short, evidence = verdict.short, verdict.evidence
    else:
        text, abstained, reason, citations, invalid = (
            ABSTAIN_TEXT, True, "nothing was retrieved for this question", [], []
        )  # fmt: skip
    name = config.label if isinstance(config, LocalLLMConfig) else config.model
    answer = Answer(
        question=question,
        answer=text,
        abstained=abstained,
        reason=reason,
        citations=citations,
        sources=sources,
        generator=f"agentic:{name}",
        timings=timings,
        prompt=_render(messages),
        invalid_citations=invalid,
        raw_answer=raw,
        flagged=flagged_sources(sources),
        # The first search's, for the record: the model may search again, so a low value
        # does not stop it here.
        confidence=first.value if first else None,
        confidence_detail=first.to_dict() if first else None,
        tokenizer=tokenizer,
        short_answer=short,
        evidence=evidence,
    )
    answer.check_support()
    if log:
        log_answer(db, collection, answer, retrieved, principals)
    return answer
