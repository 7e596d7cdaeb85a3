"""FastAPI dependencies: the :class:`~pgrag.service.runtime.Service` and who is calling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

if TYPE_CHECKING:
    from pgrag.service.auth import Caller
    from pgrag.service.runtime import Service


def service(request: Request) -> Service:
    found: Service = request.app.state.service
    return found


async def caller(request: Request) -> Caller:
    """The caller the request's ``Authorization`` header names (401 without one, unless the
    service runs with --no-auth). A key is looked up in the database, so off the loop."""
    found = service(request)
    header = request.headers.get("authorization")
    who: Caller = await run_in_threadpool(found.authenticate, header)
    request.state.caller = who
    return who
