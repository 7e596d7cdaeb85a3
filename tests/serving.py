"""A real ``pgrag serve`` for tests: the app on uvicorn in a thread, on 127.0.0.1 at a port
the kernel picks, against a test database. The embedder is the process's one (the model loads
once per test session, as in the service itself)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pgrag.config import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    url: str
    app: Any
    server: Any

    @property
    def service(self) -> Any:
        return self.app.state.service


@contextmanager
def served(dsn: str, settings: Settings | None = None, **options: Any) -> Iterator[Running]:
    """Serve ``dsn`` until the block ends (then shut down as SIGTERM would: drain, close)."""
    import uvicorn

    from pgrag.service.app import create_app
    from pgrag.service.config import ServiceConfig

    port = free_port()
    options.setdefault("pool_min", 1)
    options.setdefault("pool_max", 4)
    config = ServiceConfig(
        settings=settings or Settings(), dsn=dsn, host="127.0.0.1", port=port, **options
    )
    app = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=int(config.drain_seconds),
        )
    )
    failed: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as err:  # noqa: BLE001 - reported to the test below
            failed.append(err)

    thread = threading.Thread(target=run, name=f"pgrag-serve-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if failed or not thread.is_alive():
            raise RuntimeError(f"the service did not start: {failed or 'it exited'}")
        if time.monotonic() > deadline:
            raise RuntimeError("the service did not start within 120 s")
        time.sleep(0.05)
    try:
        yield Running(f"http://127.0.0.1:{port}", app, server)
    finally:
        server.should_exit = True
        thread.join(60)


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs from the lines of a text/event-stream response."""
    name, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield name, "\n".join(data)
