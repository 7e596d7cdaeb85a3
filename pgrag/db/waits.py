"""Saying what a command waits for. PostgreSQL makes a statement that needs a lock another
session holds wait, silently, for as long as that session keeps it; :func:`reporting_waits`
watches the connection from a second one while a command runs and, once a statement has waited
a moment, reports who it waits for and on what (once per holder). The statement keeps
waiting: nothing is cancelled or retried."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pgrag.db import queries
from pgrag.db.dsn import open_connection

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)


def describe(pid: int, who: str, what: str, query: str | None) -> str:
    """One line: ``waiting for pgrag (pid 123) holding rows it changed ...``."""
    query = (query or "").strip().rstrip(";").strip()  # (its own ";" would double the next)
    last = f"; its statement: {query}" if query else ""
    return f"waiting for {who} (pid {pid}) holding {what}{last}"


@contextmanager
def reporting_waits(
    db: Database, on_wait: Callable[[str], None] | None, *, after: float = 2.0
) -> Iterator[None]:
    """While the block runs, call ``on_wait(line)`` when ``db``'s connection has waited at
    least about ``after`` seconds for a lock; a line per holder and lock. Best effort: a
    watcher that cannot connect says nothing."""
    if on_wait is None:
        yield
        return
    with watching(db.dsn, db.conn.info.backend_pid, on_wait, after=after):
        yield


@contextmanager
def watching(
    dsn: str, pid: int, on_wait: Callable[[str], None] | None, *, after: float = 2.0
) -> Iterator[None]:
    """:func:`reporting_waits` for any backend ``pid`` of the database at ``dsn`` (such as a
    connection of its own that builds an index)."""
    if on_wait is None:
        yield
        return
    stop = threading.Event()

    def watch() -> None:
        told: set[tuple[int, str]] = set()
        try:
            with open_connection(dsn, autocommit=True) as conn:
                while not stop.wait(after):
                    for holder, who, what, query in conn.execute(
                        Q.blockers, {"pid": pid}
                    ).fetchall():
                        if (holder, what) not in told:
                            told.add((holder, what))
                            on_wait(describe(holder, who, what, query))
        except Exception:  # noqa: BLE001 - reporting must never break the command
            return

    watcher = threading.Thread(target=watch, name="pgrag-waits", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=5)
