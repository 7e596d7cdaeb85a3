"""``POST /v1/ask``: a cited answer (or an abstention with its reason), as JSON or streamed
as Server-Sent Events: ``token`` events while the generator writes, then ``answer`` (the
checked answer: citations, abstention and reason, query id), then ``done``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from pgrag.service.auth import Caller
from pgrag.service.deps import caller, service
from pgrag.service.runtime import Service, Work, run
from pgrag.service.streaming import Emit, stream

router = APIRouter()


class AskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    question: str
    collection: str | None = Field(None, description="Default: the service's PGRAG_COLLECTION.")
    k: int = Field(8, ge=1, le=1000)
    budget_tokens: int = Field(1500, ge=1, le=1_000_000)
    context: Literal["chunk", "section"] = "chunk"
    min_confidence: float | None = Field(
        None, description="Abstain below this retrieval confidence (default: the configured one)."
    )
    stream: bool = False
    conversation_id: str | None = Field(
        None,
        description='Continue this conversation (an id an earlier answer returned), or "new"'
        " to start one; the answer's conversation_id names it.",
    )
    log: bool = True


def answer_json(answer: Any) -> dict[str, Any]:
    """What the service returns of an :class:`pgrag.Answer` (its prompt stays on the server)."""
    out: dict[str, Any] = answer.to_dict()
    out["raw_answer"] = answer.raw_answer  # what the generator wrote, before the checks
    return out


def _answer(svc: Service, who: Caller, body: AskRequest, job: Work, on_token: Any) -> Any:
    from pgrag.answer.ask import ask

    with svc.database(who, job) as db:
        answer = ask(
            db,
            body.question,
            collection=body.collection or svc.settings.collection,
            k=body.k,
            budget_tokens=body.budget_tokens,
            on_token=on_token,
            log=body.log,
            context=body.context,
            min_confidence="configured" if body.min_confidence is None else body.min_confidence,
            conversation_id=body.conversation_id,
            owner=who.id,
        )
    svc.metrics.observe_timings("/v1/ask", answer.timings)
    return answer


@router.post("/v1/ask", response_model=None)
async def ask_route(
    body: AskRequest, request: Request, who: Annotated[Caller, Depends(caller)]
) -> Any:
    svc = service(request)
    who.require("read")
    wants_stream = body.stream or "text/event-stream" in request.headers.get("accept", "")
    if not wants_stream:
        answer = await run(request, lambda job: _answer(svc, who, body, job, job_check(job)))
        return JSONResponse(answer_json(answer))

    def work(job: Work, emit: Emit) -> None:
        sent: list[str] = []

        def on_token(text: str) -> None:
            sent.append(text)
            emit("token", {"text": text})

        answer = _answer(svc, who, body, job, on_token)
        if not sent and not answer.abstained:  # the extractive reader writes at once
            emit("token", {"text": answer.answer})
        emit("answer", answer_json(answer))
        emit("done", {})

    return stream(request, work, route="/v1/ask", metrics=svc.metrics)


def job_check(job: Work) -> Any:
    """An on_token that only stops a generation whose client went away."""

    def check(_text: str) -> None:
        job.check()

    return check
