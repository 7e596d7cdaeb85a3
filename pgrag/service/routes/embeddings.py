"""OpenAI-compatible ``POST /v1/embeddings`` with a collection's active model, so an
application in any language can embed its query exactly as pgrag does and call
``pgrag.search_v5`` from SQL (the README's "From any language").

``model`` names a collection (its active model embeds), or a registered model by name; the
extension field ``collection`` picks the collection and ``model`` then one of its models. The
answer's ``model`` is the embedding model's own name: pass it as ``search_v5(..., model =>)``.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

from pgrag.errors import CollectionNotFound, InputError
from pgrag.retrieval.search import MAX_QUERY_CHARS, check_text
from pgrag.service.auth import Caller
from pgrag.service.deps import caller, service
from pgrag.service.runtime import Work, run

router = APIRouter()

MAX_INPUTS = 256


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False
    )  # OpenAI clients send fields we do not use
    input: str | list[str] | list[int] | list[list[int]]
    model: str = Field(description="A collection name, or a registered model's name.")
    collection: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not value:
        raise InputError("input is empty: send a string or a list of strings to embed")
    if not all(isinstance(v, str) for v in value):
        raise InputError(
            "input: token arrays are not accepted (the tokenizer is the model's own);"
            " send the text itself"
        )
    if len(value) > MAX_INPUTS:
        raise InputError(f"input has {len(value)} texts; send at most {MAX_INPUTS} per request")
    for i, text in enumerate(value):
        if not text.strip():
            raise InputError(f"input[{i}] is empty; every text to embed needs some words")
        if len(text) > MAX_QUERY_CHARS:
            raise InputError(
                f"input[{i}] is {len(text)} characters; the limit is {MAX_QUERY_CHARS}"
            )
        check_text(text, f"input[{i}]")
    return list(value)


@router.post("/v1/embeddings")
async def embeddings_route(
    body: EmbeddingsRequest, request: Request, who: Annotated[Caller, Depends(caller)]
) -> JSONResponse:
    svc = service(request)
    who.require("read")
    texts = _texts(body.input)

    def work(job: Work) -> dict[str, Any]:
        import numpy as np

        from pgrag.embeddings.models import embedder_for, get_model, query_model

        with svc.database(who, job) as db:
            resolved = None
            if body.collection is not None:
                resolved = query_model(db, body.collection, body.model)
                if resolved is None:
                    raise InputError(f"collection {body.collection!r} has no embedding model yet")
            else:
                try:
                    resolved = query_model(db, body.model)
                except CollectionNotFound:
                    spec = get_model(db, body.model)
                    resolved = spec, embedder_for(spec, db.settings)
                if resolved is None:
                    raise InputError(
                        f"collection {body.model!r} has no embedding model yet: ingest into it"
                        " first"
                    )
            spec, embedder = resolved
            if body.dimensions is not None and body.dimensions != spec.dimension:
                raise InputError(
                    f"dimensions: model {spec.name!r} makes {spec.dimension}-dimensional"
                    f" vectors, not {body.dimensions}; leave dimensions out"
                )
            vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
            tokens = getattr(embedder, "tokens", None)
            used = sum(tokens.count(t) for t in texts) if tokens is not None else 0
        data = []
        for i, v in enumerate(vectors):
            value: Any = (
                base64.b64encode(v.astype("<f4").tobytes()).decode()
                if body.encoding_format == "base64"
                else [float(x) for x in v]
            )
            data.append({"object": "embedding", "index": i, "embedding": value})
        return {
            "object": "list",
            "data": data,
            "model": spec.name,
            "usage": {"prompt_tokens": used, "total_tokens": used},
        }

    return JSONResponse(await run(request, work))
