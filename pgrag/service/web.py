"""The web page at ``/``: one static HTML page with its script and style sheet (static/), no
build step and nothing fetched from elsewhere. The page calls the service's own routes
(``/v1/collections``, ``/v1/ask``, ``/v1/search``) with the caller's key, so it sees what that
caller may read and nothing more; the page itself needs no credentials."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

STATIC = Path(__file__).parent / "static"

# Documents are untrusted and the page shows their text: a policy that runs only the page's own
# script (no inline script, no other origin) is the second line behind inserting text only.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def mount(app: FastAPI) -> None:
    """Serve the page at ``/`` and its files under ``/static/``."""
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers=HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
