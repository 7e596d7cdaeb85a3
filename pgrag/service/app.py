"""The ASGI app: :func:`create_app` builds it from a :class:`ServiceConfig`; uvicorn runs it
(``pgrag serve``, :func:`serve`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pgrag.service import errors, web
from pgrag.service.guard import guard
from pgrag.service.metrics import Metrics, middleware
from pgrag.service.runtime import Service
from pgrag.version import __version__

if TYPE_CHECKING:
    from fastapi import FastAPI

    from pgrag.service.config import ServiceConfig

log = logging.getLogger("pgrag.service")


def create_app(config: ServiceConfig) -> FastAPI:
    from fastapi import FastAPI
    from starlette.concurrency import run_in_threadpool

    from pgrag.service.mcp import HttpTransport
    from pgrag.service.routes import ask, chat, documents, embeddings, health, search

    config.check()
    metrics = Metrics()
    svc = Service(config, metrics)
    mcp = HttpTransport(svc)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(svc.open)
        await run_in_threadpool(_remove_stale_uploads)
        log.info("pgrag %s serving %s", __version__, svc.dsn)
        try:
            async with mcp.running():  # MCP's session manager lives as long as the app
                yield
        finally:
            await run_in_threadpool(svc.close)

    app = FastAPI(
        title="pgrag",
        version=__version__,
        summary="Answers from your documents, with sources, on PostgreSQL.",
        lifespan=lifespan,
        # The interactive docs page loads its script from a CDN (offline: blank, and a third
        # party's script on the service's origin); /openapi.json describes the API instead.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = svc
    errors.install(app)
    for module in (search, ask, embeddings, chat, documents, health):
        app.include_router(module.router)
    app.router.routes.append(mcp.route())  # streamable HTTP at /mcp, before the page's "/"
    metrics.add_collector(lambda: _gauges(svc))
    if config.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    web.mount(app)  # the page at / and its files under /static/ (pgrag/service/web.py)
    app.add_middleware(
        _Wrapped,
        wrap=lambda inner: guard(
            inner,
            no_auth=config.no_auth,
            max_body=config.max_json_bytes,
            origins=config.cors_origins,
        ),
    )
    # Outermost, so a response is timed and counted whatever answered it.
    app.add_middleware(_Wrapped, wrap=lambda inner: middleware(inner, metrics))
    return app


class _Wrapped:
    """A plain ASGI wrapper (``wrap(app) -> app``) as Starlette middleware."""

    def __init__(self, app: Any, wrap: Callable[[Any], Any]) -> None:
        self._inner = wrap(app)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._inner(scope, receive, send)


def _remove_stale_uploads() -> None:
    """Upload directories a service killed mid-upload left behind (pgrag-upload-<pid>-...)."""
    from pgrag.service.uploads import remove_stale_upload_directories

    for path in remove_stale_upload_directories():
        log.warning("removed %s, left by a pgrag serve that was killed mid-upload", path)


def _gauges(svc: Service) -> Iterable[Any]:
    from prometheus_client.core import GaugeMetricFamily

    pool = svc.pool
    if pool is not None:
        stats = pool.get_stats()
        size = GaugeMetricFamily("pgrag_pool_connections", "Connections the pool holds.")
        size.add_metric([], stats.get("pool_size", 0))
        yield size
        idle = GaugeMetricFamily("pgrag_pool_idle_connections", "Pooled connections idle now.")
        idle.add_metric([], stats.get("pool_available", 0))
        yield idle
        waiting = GaugeMetricFamily(
            "pgrag_pool_waiting_requests", "Requests waiting for a pooled connection now."
        )
        waiting.add_metric([], stats.get("requests_waiting", 0))
        yield waiting
    yield from _replica_metrics(svc.replica)
    depth = _queue_depth(svc)
    if depth is not None:
        queue = GaugeMetricFamily(
            "pgrag_embedding_queue_depth",
            "Chunks waiting for an embedding (pgrag worker), by collection.",
            labels=["collection"],
        )
        for collection, pending in depth:
            queue.add_metric([collection], pending)
        yield queue


def _replica_metrics(replicas: Any) -> Iterable[Any]:
    """Each read replica's state and reads (PGRAG_READ_DSN; one per host)."""
    if replicas is None:
        return
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from pgrag.db.replica import ReplicaSet

    members = replicas.members if isinstance(replicas, ReplicaSet) else [replicas]
    up = GaugeMetricFamily(
        "pgrag_read_replica_up",
        "1 while reads go to the read replica; 0 while it is passed over (down, or too far"
        " behind the primary).",
        labels=["replica"],
    )
    reads = CounterMetricFamily(
        "pgrag_read_replica_reads",
        "Reads the read replica answered (served) and reads meant for it that went elsewhere"
        " (passed_over: to another replica or the primary).",
        labels=["replica", "outcome"],
    )
    for member in members:
        up.add_metric([member.label], 1 if member.up else 0)
        reads.add_metric([member.label, "served"], member.served)
        reads.add_metric([member.label, "passed_over"], member.passed_over)
    yield up
    yield reads


def _queue_depth(svc: Service) -> list[tuple[str, int]] | None:
    """Pending embedding-queue items per collection (None when the service's role may not
    count the queue, or the database does not answer)."""
    from pgrag.embeddings.worker import status
    from pgrag.service.auth import Caller

    try:
        with svc.database(Caller("metrics", None, "local", frozenset())) as db:
            rows = status(db)
    except Exception as err:  # a scrape must not fail because the database is away
        log.debug("metrics: no queue depth: %s", err)
        return None
    return [(r["collection"], int(r["pending"])) for r in rows if r.get("pending") is not None]


def serve(config: ServiceConfig, *, log_level: str = "info") -> None:
    """Run the service in the foreground until SIGINT/SIGTERM, which stops accepting new
    connections and drains in-flight requests (streams included) for up to
    ``config.drain_seconds``."""
    import math
    import signal

    import uvicorn

    one_model_thread_per_request()
    app = create_app(config)
    # uvicorn handles SIGINT/SIGTERM itself (stop accepting, drain, shut down), then raises the
    # signal again to the handler that was there before it. With Python's defaults that kills
    # the process by SIGTERM (exit status 143) or raises KeyboardInterrupt ("Aborted!", 1)
    # after a clean drain. A handler of our own takes that second delivery, so a drained
    # service exits 0, as process supervisors and `docker stop` expect of a clean stop.
    stops: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda number, _frame: stops.append(number))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        uvicorn.run(
            app,
            host=config.host,
            port=config.port,
            log_level=log_level,
            timeout_graceful_shutdown=math.ceil(config.drain_seconds),
            proxy_headers=True,
            server_header=False,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stops:
        log.info("pgrag serve stopped by %s", signal.Signals(stops[0]).name)


def one_model_thread_per_request() -> None:
    """Run each request's model call (a query's embedding) on the request's own thread, unless
    ``OMP_NUM_THREADS`` says otherwise. The service's parallelism is its concurrent requests:
    with torch's default of one OpenMP thread per CPU for every call, the threads of
    concurrent embeddings outnumber the CPUs, and on a busy machine an embedding waits for a
    descheduled thread of its own (measured in the service on 2 busy CPUs: a query's
    embedding took 42-51 ms at the median on one thread, 159-199 ms on two;
    docs/benchmarks.md)."""
    import os
    import sys

    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return
    os.environ["OMP_NUM_THREADS"] = "1"  # read when torch (and its OpenMP) loads
    torch = sys.modules.get("torch")
    if torch is not None:  # already loaded by the caller: tell it directly
        torch.set_num_threads(1)
