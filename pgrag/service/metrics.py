"""Prometheus metrics at ``GET /metrics``: requests by route and status, latency per route and
per stage (embed, retrieve, generate, ...), the connection pool, and the embedding queue.

Each app has its own registry, so two apps in one process (tests) do not share counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Request latency buckets: from a cached keyword search to a long streamed answer.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "pgrag_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pgrag_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response (a stream's last byte).",
            ["route", "method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.stages = Histogram(
            "pgrag_stage_duration_seconds",
            "Time per stage of a search or an answer (embed, retrieve, rerank, generate, ...).",
            ["route", "stage"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.disconnects = Counter(
            "pgrag_client_disconnects",
            "Requests whose client went away before the answer; their work was stopped.",
            ["route"],
            registry=self.registry,
        )

    def observe_timings(self, route: str, timings: Mapping[str, Any]) -> None:
        """Record a library ``timings`` dict (``embed_ms``, ``retrieve_ms``, ...) as stages."""
        for name, value in timings.items():
            if name.endswith("_ms") and isinstance(value, int | float):
                self.stages.labels(route, name[:-3]).observe(float(value) / 1000.0)

    def add_collector(self, collect: Callable[[], Iterable[Any]]) -> None:
        self.registry.register(_Collector(collect))

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Collector:
    """Metrics read when scraped (the pool's and the queue's state)."""

    def __init__(self, collect: Callable[[], Iterable[Any]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Any]:
        return self._collect()

    def describe(self) -> list[Any]:
        return []


def middleware(app: Any, metrics: Metrics) -> Any:
    """Pure ASGI middleware (streams are timed to their end): count and time each request by
    the route template it matched (``/v1/documents/{id}``, not the path), so the label set
    stays small whatever the paths."""

    async def timed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "GET")
            if method not in METHODS:  # any client may send any method: keep the labels few
                method = "other"
            metrics.requests.labels(template, method, str(status[0])).inc()
            metrics.latency.labels(template, method).observe(time.perf_counter() - start)

    return timed


__all__ = ["Metrics", "middleware", "Collector"] if TYPE_CHECKING else ["Metrics", "middleware"]
