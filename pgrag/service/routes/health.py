"""``/healthz`` (the process answers), ``/readyz`` (the database is reachable and its schema
this release's: route traffic here), ``/metrics`` (Prometheus), ``/v1/collections``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from pgrag.service.auth import Caller
from pgrag.service.deps import caller, service
from pgrag.service.runtime import Work, run
from pgrag.version import __version__

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok", "version": __version__}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    checks = await run_in_threadpool(service(request).ready)
    ok = all(v == "ok" for v in checks.values()) and "schema" in checks
    return JSONResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks},
        status_code=200 if ok else 503,
    )


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    payload, content_type = await run_in_threadpool(service(request).metrics.render)
    return Response(payload, media_type=content_type)


@router.get("/v1/collections")
async def collections(request: Request, who: Annotated[Caller, Depends(caller)]) -> JSONResponse:
    from pgrag.collections import list_collections

    svc = service(request)
    who.require("read")

    def work(job: Work) -> list[dict[str, Any]]:
        with svc.database(who, job) as db:
            return list_collections(db)

    return JSONResponse({"collections": await run(request, work)})
