"""DDL that must not stand in the lock queue: a statement that needs a strong lock (attaching
a partition's index to its partitioned index takes ACCESS EXCLUSIVE on that index, and
validating the parent waits for every reader of the partition) waits behind sessions that hold
a weaker one, and every search or write that comes after it then waits behind it. Run with a
short lock_timeout instead, and tried again after a pause, it never holds others up for more
than that moment, and gives way before PostgreSQL's deadlock check (deadlock_timeout, 1 s by
default) would cancel a writer caught in a cycle with it."""

from __future__ import annotations

import time
from typing import Any

from pgrag.db import queries

Q = queries.load(__name__)

TRY_MS = 200  # each try's lock_timeout
PAUSE_S = 0.2  # between tries, doubled up to 2 s


def run(conn: Any, statement: Any, *, give_up_s: float = 60.0) -> None:
    """Run ``statement`` on an autocommit connection, each try waiting at most
    :data:`TRY_MS` for its locks, until it runs or ``give_up_s`` have passed (then the last
    try's LockNotAvailable is raised). The session's lock_timeout is put back after."""
    import psycopg

    (before,) = conn.execute(Q.show_lock_timeout).fetchone()
    conn.execute(Q.set_lock_timeout, {"ms": f"{TRY_MS}ms"})
    deadline = time.monotonic() + give_up_s
    pause = PAUSE_S
    try:
        while True:
            try:
                conn.execute(statement)
                return
            except psycopg.errors.LockNotAvailable:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 2.0)
    finally:
        if not (conn.closed or conn.broken):
            conn.execute(Q.set_lock_timeout, {"ms": before})
