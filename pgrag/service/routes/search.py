"""``POST /v1/search``: the library's :func:`pgrag.search`, under the caller's principals."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from pgrag.errors import InputError
from pgrag.retrieval.grouping import DEFAULT_CHUNKS_PER_DOCUMENT, MAX_CHUNKS_PER_DOCUMENT
from pgrag.retrieval.search import SearchSettings, search
from pgrag.service.auth import Caller
from pgrag.service.deps import caller, service
from pgrag.service.runtime import Work, run

router = APIRouter()


class Tuning(BaseModel):
    """search_v5's knobs (docs/search.md); unset ones keep the function's defaults."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    rrf_k: int | None = None
    vector_weight: float | None = None
    keyword_weight: float | None = None
    vector_depth: int | None = None
    keyword_depth: int | None = None
    temperature: float | None = None
    postings_per_term: int | None = None
    fallback_chunks: int | None = None


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    query: str = Field(description="What to search for.")
    collection: str | None = Field(None, description="Default: the service's PGRAG_COLLECTION.")
    k: int = Field(10, ge=1, le=1000)
    mode: Literal["hybrid", "keyword", "vector"] = "hybrid"
    filter: dict[str, Any] | None = Field(None, description="docs/search.md#filters")
    model: str | None = Field(None, description="Another of the collection's models.")
    settings: Tuning | None = None
    rerank: bool = Field(False, description="Rerank with the service's PGRAG_RERANKER.")
    mmr: float | None = Field(None, ge=0.0, le=1.0)
    group: Literal["chunk", "document"] = Field(
        "chunk",
        description='"document": up to k distinct documents, each with its best chunks,'
        ' answered as "documents" (docs/search.md#document-level-results).',
    )
    chunks_per_document: int = Field(
        DEFAULT_CHUNKS_PER_DOCUMENT,
        ge=1,
        le=MAX_CHUNKS_PER_DOCUMENT,
        description='With "group": "document": the most chunks listed per document.',
    )


@router.post("/v1/search")
async def search_route(
    body: SearchRequest, request: Request, who: Annotated[Caller, Depends(caller)]
) -> dict[str, Any]:
    svc = service(request)
    who.require("read")
    collection = body.collection or svc.settings.collection
    reranker = None
    if body.rerank:
        from pgrag.retrieval.rerank import reranker_from_settings

        reranker = reranker_from_settings(svc.settings)
        if reranker is None:
            raise InputError("rerank: the service has no reranker (set PGRAG_RERANKER)")

    def work(job: Work) -> dict[str, Any]:
        timings: dict[str, float] = {}
        with svc.database(who, job) as db:
            results = search(
                db,
                body.query,
                collection=collection,
                k=body.k,
                mode=body.mode,
                filter=body.filter,
                settings=SearchSettings(**body.settings.model_dump()) if body.settings else None,
                model=body.model,
                reranker=reranker,
                mmr=body.mmr,
                timings=timings,
                group=body.group,
                chunks_per_document=body.chunks_per_document,
            )
        svc.metrics.observe_timings("/v1/search", timings)
        # Chunks answer as "results", documents (another shape) as "documents".
        key = "documents" if body.group == "document" else "results"
        return {
            "collection": collection,
            "query": body.query,
            key: [r.to_dict() for r in results],
            "timings": timings,
        }

    return await run(request, work)
