"""Each file's budget of work: reading, converting and chunking one file stops with a clear
error once it has taken longer than ``PGRAG_INGEST_FILE_SECONDS`` (default 300 s), so that
one pathological file cannot hold an ingest for hours. Embedding and writing are not counted
(a large file legitimately takes long to embed; it shows progress by chunks).

The budget is set for the current thread by :func:`file_budget` around a file's work, and the
long loops (HTML conversion, chunking) call :func:`check`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pgrag.errors import ConfigError, InputError

DEFAULT_SECONDS = 300.0

_deadline: ContextVar[tuple[float, float] | None] = ContextVar("pgrag_file_budget", default=None)


def seconds() -> float:
    """The per-file budget, from PGRAG_INGEST_FILE_SECONDS (0 or `off` for none)."""
    from pgrag.config import from_env

    raw = from_env().ingest_file_seconds
    if raw is None:
        return DEFAULT_SECONDS
    if raw.lower() in ("off", "none", "0"):
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(
            f"PGRAG_INGEST_FILE_SECONDS={raw!r} is not a number of seconds; set it to e.g. 600,"
            " or to off for no limit"
        )
    return value


@contextmanager
def file_budget(limit: float | None = None) -> Iterator[None]:
    """Within this block, :func:`check` raises once ``limit`` seconds (default: the
    configured budget) have passed; a limit of 0 is none."""
    limit = seconds() if limit is None else limit
    token = _deadline.set((time.monotonic() + limit, limit) if limit > 0 else None)
    try:
        yield
    finally:
        _deadline.reset(token)


@contextmanager
def paused() -> Iterator[None]:
    """Time spent within this block is not counted against the current file's budget (the
    sentences semantic chunking embeds: embedding is not counted)."""
    start = time.monotonic()
    try:
        yield
    finally:
        deadline = _deadline.get()
        if deadline is not None:
            _deadline.set((deadline[0] + time.monotonic() - start, deadline[1]))


def check(doing: str) -> None:
    """Raise an InputError when the current file's budget is spent."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline[0]:
        raise InputError(
            f"took over {deadline[1]:g} s {doing} (the per-file limit); raise"
            " PGRAG_INGEST_FILE_SECONDS (or set it to off), or split the file"
        )
