"""OpenAI's chat API with pgrag as the model: ``POST /v1/chat/completions`` answers the last
user message from a collection, with numbered citations; ``GET /v1/models`` lists the
collections the caller can read as models. The caller's stored conversations are listed, read
and deleted at ``/v1/conversations``.

- ``model`` names the collection (or the extension field ``collection`` does, and ``model`` is
  then only echoed). Sampling options (temperature, max_tokens, tools, ...) are ignored: the
  service's configured generator answers; ``n`` must be 1.
- The last message is the question (a user message); the earlier user and assistant messages
  are the conversation before it (system messages are ignored). The conversation is stored as
  the caller's: the extension field ``conversation_id`` continues a stored one (the messages
  before the question are then not read); without it, the caller's conversation whose turns
  are exactly the earlier messages is continued, else a new one is started with them. So a
  chat UI that resends the whole history keeps one conversation, rewritten follow-ups and
  citation numbers that stay with their passages.
- ``choices[0].message.content`` is the checked answer with its ``[n]`` markers; the extension
  field ``pgrag`` holds {sources, citations, abstained, reason, query_id, conversation_id,
  standalone_query, rewrite, answer}.
- ``stream: true`` answers ``chat.completion.chunk`` events (``data: {...}``), the generator's
  text as it comes, then a chunk with ``finish_reason`` and ``pgrag`` (whose ``answer`` is the
  checked text, which may differ from what streamed: an invalid citation removed, an
  abstention), then ``data: [DONE]``. An error after the stream began is a ``data:
  {"error": {...}}`` event, as OpenAI sends it.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from pgrag.errors import CollectionNotFound, InputError
from pgrag.service.auth import Caller
from pgrag.service.deps import caller, service
from pgrag.service.runtime import Service, Work, run
from pgrag.service.streaming import Emit, error_data, event, stream

router = APIRouter()
MAX_MESSAGES = 200


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    # OpenAI clients send many options pgrag does not use (temperature, top_p, user, ...).
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    model: str
    # A stored conversation keeps every turn a request brings: a bound on what one request
    # may make the database hold for its caller.
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    n: int = 1
    # pgrag's extensions
    collection: str | None = None
    conversation_id: str | None = None
    k: int = Field(8, ge=1, le=1000)
    budget_tokens: int = Field(1500, ge=1, le=1_000_000)
    context: Literal["chunk", "section"] = "chunk"


def text_of(message: ChatMessage, where: str) -> str:
    """A message's text: its content, or its text parts joined (OpenAI's content parts)."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    pieces = []
    for i, part in enumerate(content):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise InputError(
                f"{where}.content[{i}]: only text parts can be answered, got type"
                f" {part.get('type')!r}"
            )
        pieces.append(part["text"])
    return "\n".join(pieces)


def split_messages(messages: list[ChatMessage]) -> tuple[str, list[dict[str, str]]]:
    """(the question, the earlier turns as {role, content}) of a chat request."""
    last = messages[-1]
    if last.role != "user":
        raise InputError(
            f"messages[{len(messages) - 1}]: the last message must be the user's question,"
            f" got role {last.role!r}"
        )
    question = text_of(last, f"messages[{len(messages) - 1}]")
    if not question.strip():
        raise InputError(f"messages[{len(messages) - 1}]: the question is empty")
    earlier = []
    for i, m in enumerate(messages[:-1]):
        if m.role in ("system", "developer", "tool"):
            continue
        if m.role not in ("user", "assistant"):
            raise InputError(
                f"messages[{i}]: role must be system, user or assistant, got {m.role!r}"
            )
        text = text_of(m, f"messages[{i}]")
        if text.strip():
            earlier.append({"role": m.role, "content": text})
    return question, earlier


def pgrag_field(answer: Any) -> dict[str, Any]:
    """The ``pgrag`` extension field of a chat completion."""
    return {
        "sources": [s.to_dict() for s in answer.sources],
        "citations": [c.to_dict() for c in answer.citations],
        "abstained": answer.abstained,
        "reason": answer.reason,
        "query_id": answer.query_id,
        "conversation_id": answer.conversation_id,
        "standalone_query": answer.standalone_query,
        "rewrite": answer.rewrite,
        "answer": answer.answer,
    }


def _collection(svc: Service, body: ChatRequest) -> str:
    return body.collection or body.model or svc.settings.collection


def _prepare(svc: Service, who: Caller, body: ChatRequest, job: Work) -> tuple[str, str, Any]:
    """Before anything streams: the collection exists, and the conversation to continue is
    the caller's (so these fail with their own status). (question, collection, the
    conversation_id and history to ask with)."""
    from pgrag.answer import conversation
    from pgrag.collections import get_collection

    if body.n != 1:
        raise InputError(f"n must be 1 (pgrag gives one answer), got {body.n}")
    question, earlier = split_messages(body.messages)
    name = _collection(svc, body)
    with svc.database(who, job) as db:
        if get_collection(db, name) is None:
            raise CollectionNotFound(name)
        if body.conversation_id is not None:
            conversation.get(db, body.conversation_id, owner=who.id)
            return question, name, (body.conversation_id, None)
        turns = conversation.history_from_messages(earlier)
        found = conversation.find(db, name, turns, owner=who.id)
    if found is not None:
        return question, name, (found, None)
    return question, name, (conversation.NEW, earlier)


def _answer(
    svc: Service, who: Caller, body: ChatRequest, job: Work, prepared: Any, on_token: Any
) -> Any:
    from pgrag.answer.ask import ask

    question, name, (conversation_id, history) = prepared
    with svc.database(who, job) as db:
        answer = ask(
            db,
            question,
            collection=name,
            k=body.k,
            budget_tokens=body.budget_tokens,
            context=body.context,
            on_token=on_token,
            conversation_id=conversation_id,
            history=history,
            owner=who.id,
        )
    svc.metrics.observe_timings("/v1/chat/completions", answer.timings)
    return answer


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(
    body: ChatRequest, request: Request, who: Annotated[Caller, Depends(caller)]
) -> Any:
    svc = service(request)
    who.require("read")
    prepared = await run(request, lambda job: _prepare(svc, who, body, job))
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if not body.stream:

        def check(job: Work) -> Any:
            return lambda _text: job.check()

        answer = await run(request, lambda job: _answer(svc, who, body, job, prepared, check(job)))
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": body.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer.answer},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "pgrag": pgrag_field(answer),
            }
        )

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": body.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }

    def work(job: Work, emit: Emit) -> None:
        emit("", chunk({"role": "assistant", "content": ""}))
        sent: list[str] = []

        def on_token(text: str) -> None:
            sent.append(text)
            emit("", chunk({"content": text}))

        answer = _answer(svc, who, body, job, prepared, on_token)
        if not sent:  # the extractive reader, or an abstention before any generation
            emit("", chunk({"content": answer.answer}))
        emit("", chunk({}, "stop", pgrag=pgrag_field(answer)))
        emit("", "[DONE]")

    return stream(
        request,
        work,
        route="/v1/chat/completions",
        metrics=svc.metrics,
        named=False,
        on_error=lambda err: event(None, error_data(err)),
    )


# -- models --------------------------------------------------------------------------------------


def _models(svc: Service, who: Caller, job: Work) -> list[dict[str, Any]]:
    """The collections ``who`` can read some document of, as OpenAI models."""
    from pgrag.collections import list_collections

    with svc.database(who, job) as db:
        rows = list_collections(db)
    return [
        {"id": r["name"], "object": "model", "created": 0, "owned_by": "pgrag"}
        for r in rows
        if (r.get("documents") or 0) > 0
    ]


@router.get("/v1/models")
async def list_models(request: Request, who: Annotated[Caller, Depends(caller)]) -> Any:
    svc = service(request)
    who.require("read")
    models = await run(request, lambda job: _models(svc, who, job))
    return {"object": "list", "data": models}


@router.get("/v1/models/{model}")
async def get_model(model: str, request: Request, who: Annotated[Caller, Depends(caller)]) -> Any:
    svc = service(request)
    who.require("read")
    models = await run(request, lambda job: _models(svc, who, job))
    for m in models:
        if m["id"] == model:
            return m
    raise CollectionNotFound(model)


# -- the caller's conversations ------------------------------------------------------------------


def _stamp(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in row.items()}


@router.get("/v1/conversations")
async def list_conversations(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    collection: str | None = None,
    limit: int = 50,
) -> Any:
    from pgrag.answer import conversation

    svc = service(request)
    who.require("read")

    def work(job: Work) -> list[dict[str, Any]]:
        with svc.database(who, job) as db:
            found = conversation.list_conversations(
                db, collection=collection, limit=limit, owner=who.id
            )
        return [_stamp(c) for c in found]

    return {"conversations": await run(request, work)}


@router.get("/v1/conversations/{conversation_id}")
async def get_conversation(
    conversation_id: str, request: Request, who: Annotated[Caller, Depends(caller)]
) -> Any:
    from pgrag.answer import conversation

    svc = service(request)
    who.require("read")

    def work(job: Work) -> dict[str, Any]:
        with svc.database(who, job) as db:
            return conversation.get(db, conversation_id, owner=who.id).to_dict()

    return await run(request, work)


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(
    conversation_id: str, request: Request, who: Annotated[Caller, Depends(caller)]
) -> Any:
    from pgrag.answer import conversation
    from pgrag.errors import ConversationNotFound

    svc = service(request)
    who.require("read")

    def work(job: Work) -> bool:
        with svc.database(who, job) as db:
            return conversation.delete(db, conversation_id, owner=who.id)

    if not await run(request, work):
        raise ConversationNotFound(conversation_id)
    return {"id": conversation_id, "deleted": True}
