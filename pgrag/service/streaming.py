"""Server-Sent Events from blocking work: the work runs in a worker thread and ``emit``s
events; the response sends them as they come. When the client disconnects mid-stream, the
work is stopped (:class:`~pgrag.service.runtime.Work`): the statement it runs is cancelled in
PostgreSQL and the generator's next token raises, so nothing keeps running for nobody."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from pgrag.errors import PgragError
from pgrag.service.errors import body, status_of
from pgrag.service.runtime import Cancelled, Work

log = logging.getLogger("pgrag.service")

Emit = Callable[[str, Any], None]
_END = object()


def event(name: str | None, data: Any) -> bytes:
    """One SSE event; ``name`` None sends a bare ``data:`` line (OpenAI's chunk stream)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {name}\n" if name else ""
    return (head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n").encode()


def error_data(err: BaseException) -> dict[str, Any]:
    kind = status_of(err)[1]
    message = str(err) if isinstance(err, PgragError) else "internal error (see the server log)"
    return body(message, kind)


def stream(
    request: Any,
    work: Callable[[Work, Emit], None],
    *,
    route: str,
    metrics: Any = None,
    named: bool = True,
    on_error: Callable[[BaseException], bytes] | None = None,
) -> Any:
    """A StreamingResponse of the events ``work(job, emit)`` emits (``emit(name, data)``);
    an exception becomes an ``error`` event (or ``on_error``'s bytes)."""
    from starlette.responses import StreamingResponse

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    job = Work()

    def emit(name: str, data: Any) -> None:
        job.check()  # a client gone: stop generating
        loop.call_soon_threadsafe(queue.put_nowait, event(name if named else None, data))

    def run() -> None:
        try:
            work(job, emit)
        except Cancelled:
            pass
        except BaseException as err:  # sent to the client, which is still there
            if job.stopped.is_set():
                pass
            else:
                if status_of(err)[0] >= 500:
                    log.exception("%s failed mid-stream", route)
                data = on_error(err) if on_error else event("error", error_data(err))
                loop.call_soon_threadsafe(queue.put_nowait, data)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _END)

    async def events() -> AsyncIterator[bytes]:
        # On the threads every other route's work runs on (anyio's limiter, 40 by default),
        # not asyncio's default executor: that one has min(32, CPUs + 4) threads, so on a
        # 2-CPU machine a seventh stream waiting on a slow LLM would wait for a thread.
        thread = asyncio.ensure_future(run_in_threadpool(run))
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    finished = True
                    break
                yield item
        finally:
            if not finished:  # the client went away (the response task was cancelled)
                job.stop()
                if metrics is not None:
                    metrics.disconnects.labels(route).inc()
            await asyncio.shield(thread)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
