"""What every request passes before a route sees it: a bound on its body, and — when the
service runs without credentials (``--no-auth``) — proof that it comes from this machine's
own pages, not from a web site the user happens to visit.

Without credentials, a loopback service is reachable from any page in the user's browser: a
form or ``fetch()`` can POST to it (cross-site request forgery: an upload needs no preflight),
and a site whose name is rebound to 127.0.0.1 can read its answers (DNS rebinding). So under
``--no-auth`` the ``Host`` must be a loopback name, and an ``Origin`` (which browsers send
with every cross-origin request and every POST) must be the service's own loopback origin or
one given with ``--cors-origin``. With keys or JWTs neither attack has the credential.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from pgrag.service.config import is_loopback
from pgrag.service.errors import body

ASGI = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
# Routes with a bound of their own (uploads: --max-upload-mb).
OWN_LIMIT = ("/v1/documents",)


def _host(value: str) -> str:
    """The host of a Host header or an origin's netloc, without port or brackets."""
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


async def _refuse(send: Any, status: int, message: str, kind: str) -> None:
    payload = json.dumps(body(message, kind)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def guard(app: ASGI, *, no_auth: bool, max_body: int, origins: tuple[str, ...]) -> ASGI:
    allowed_origins = {o.rstrip("/") for o in origins}

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if no_auth:
            host = headers.get("host", "")
            if not is_loopback(_host(host)):
                await _refuse(
                    send,
                    421,
                    f"this service runs without credentials (--no-auth) and answers only"
                    f" requests addressed to a loopback name, not {host[:100]!r}",
                    "invalid_request_error",
                )
                return
            origin = headers.get("origin")
            if origin is not None and origin.rstrip("/") not in allowed_origins:
                parts = urlsplit(origin)
                if not (parts.scheme in ("http", "https") and is_loopback(_host(parts.netloc))):
                    await _refuse(
                        send,
                        403,
                        f"this service runs without credentials (--no-auth): a page from"
                        f" {origin[:100]!r} may not call it (--cors-origin allows one)",
                        "permission_error",
                    )
                    return
        if scope["path"].startswith(OWN_LIMIT):
            await app(scope, receive, send)
            return
        declared = headers.get("content-length")
        too_big = (
            f"the request body is over {max_body // (1 << 20)} MiB; send less (uploads go to"
            " POST /v1/documents)"
        )
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            await _refuse(send, 413, too_big, "invalid_request_error")
            return
        seen = 0
        refused = False

        async def bounded() -> Any:
            # Past the bound, answer 413 here and tell the app the client went away (it
            # would turn an exception in its body reading into a 400); what the app sends
            # after that is dropped.
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > max_body:
                    refused = True
                    await _refuse(send, 413, too_big, "invalid_request_error")
                    return {"type": "http.disconnect"}
            return message

        async def sending(message: dict[str, Any]) -> None:
            if not refused:
                await send(message)

        await app(scope, bounded, sending)

    return guarded
