"""Every error the service answers, as OpenAI's envelope:
``{"error": {"message": ..., "type": ..., "code": ...}}`` with the status that fits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgrag.errors import (
    CollectionNotFound,
    ConversationConflict,
    ConversationNotFound,
    DatabaseError,
    InputError,
    PgragError,
    SchemaError,
)

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse


class Unavailable(PgragError):
    """The service cannot answer now (no pooled connection in time, the database down): 503."""


def status_of(err: BaseException) -> tuple[int, str]:
    """(HTTP status, OpenAI error type) for a library or service error."""
    from pgrag.service.auth import Forbidden, Unauthorized
    from pgrag.service.jwt import IssuerUnavailable

    if isinstance(err, Unauthorized):
        return 401, "authentication_error"
    if isinstance(err, Forbidden):
        return 403, "permission_error"
    if isinstance(err, CollectionNotFound | ConversationNotFound):
        return 404, "not_found_error"
    if isinstance(err, ConversationConflict):
        return 409, "conflict_error"
    if isinstance(err, InputError):
        return 400, "invalid_request_error"
    if isinstance(err, SchemaError | Unavailable | IssuerUnavailable):
        return 503, "service_unavailable"
    if isinstance(err, DatabaseError):
        # A value the database refused (a RAISE of a function's argument check, a number out
        # of range, a malformed filter) is the request's fault; anything else is ours.
        from pgrag.db.connect import connection_lost

        if connection_lost(err.__cause__):  # the database went away: try again soon
            return 503, "service_unavailable"
        import psycopg

        if isinstance(err.__cause__, psycopg.DataError):  # refused before sending (a NUL)
            return 400, "invalid_request_error"
        state = getattr(err.__cause__, "sqlstate", None) or ""
        if state.startswith("22") or state in ("P0001", "42883"):
            return 400, "invalid_request_error"
        return 500, "database_error"
    return 500, "server_error"


def body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def error_response(err: BaseException) -> JSONResponse:
    from starlette.responses import JSONResponse

    status, kind = status_of(err)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": "5"}  # a busy pool or a database coming back
    message = str(err) if isinstance(err, PgragError) else "internal error (see the server log)"
    return JSONResponse(body(message, kind), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Answer pgrag's errors, request validation and unknown routes in the envelope."""
    import logging

    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse

    log = logging.getLogger("pgrag.service")

    async def pgrag_error(request: Request, err: Exception) -> JSONResponse:
        if status_of(err)[0] >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, err)
        return error_response(err)

    async def invalid(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, RequestValidationError)
        kind = request.headers.get("content-type", "")
        if request.method == "POST" and "json" not in kind and "multipart" not in kind:
            return JSONResponse(
                body(
                    f"send the request as JSON with Content-Type: application/json (it was"
                    f" {kind[:60] or 'not given'!r})",
                    "invalid_request_error",
                ),
                status_code=400,
            )
        problems = []
        for e in err.errors()[:5]:
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            problems.append(f"{where}: {e.get('msg', 'invalid')}")
        return JSONResponse(
            body("invalid request: " + "; ".join(problems), "invalid_request_error"),
            status_code=400,
        )

    async def http_error(request: Request, err: Exception) -> JSONResponse:
        assert isinstance(err, HTTPException)
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return JSONResponse(
            body(str(err.detail), kind), status_code=err.status_code, headers=err.headers
        )

    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(err)

    app.add_exception_handler(PgragError, pgrag_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
