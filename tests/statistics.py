"""Reading PostgreSQL's cumulative statistics in a test, on every server version the matrix
runs (scripts/test-matrix)."""

from __future__ import annotations

import time
from typing import Any


def flush_statistics(conn: Any) -> None:
    """Make this session's counts visible to the statistics views, and have the next read of
    them take a fresh snapshot. Commits an open transaction. From PostgreSQL 15 on a function
    asks for it; before, a transaction's end sends the counts to the statistics collector when
    500 ms have passed since the last sending, and the collector writes them out when asked."""
    if conn.info.server_version >= 150000:
        conn.execute("SELECT pg_stat_force_next_flush()")
        _commit(conn)
    else:
        _commit(conn)
        time.sleep(0.6)
        conn.execute("SELECT 1")
        _commit(conn)  # sends them
        time.sleep(0.6)
    conn.execute("SELECT pg_stat_clear_snapshot()")


def _commit(conn: Any) -> None:
    if not conn.autocommit:
        conn.commit()
