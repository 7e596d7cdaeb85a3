"""What the benchmark scripts share: their own databases, phase timings, latency summaries.

Each script keeps the database it loads (named by --database, marked with a comment saying which
script made it, so that only such a database is ever dropped) for reruns with --reuse.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

Timings = dict[str, float]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


def latency(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "mean_ms": float(a.mean()),
        "max_ms": float(a.max()),
    }


class Phases:
    """Seconds per named phase, logged to stderr as each one ends."""

    def __init__(self) -> None:
        self.seconds: Timings = {}

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = fn()
        self.add(name, time.perf_counter() - t0)
        return result

    def add(self, name: str, seconds: float, quiet: bool = False) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if not quiet:
            log(f"  {name:<34} {seconds:9.2f} s")


def database_exists(admin: str, name: str) -> tuple[bool, str | None]:
    """Whether the database exists, and its comment."""
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %(n)s",
            {"n": name},
        ).fetchone()
    return row is not None, None if row is None else row[0]


def create_database(admin: str, name: str, marker: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(
                sql.Identifier(name), sql.Literal(marker)
            )
        )


def drop_database(admin: str, name: str, marker: str) -> None:
    """Drop the database if it exists and carries ``marker``; refuse any other."""
    exists, comment = database_exists(admin, name)
    if not exists:
        return
    if comment != marker:
        sys.exit(
            f"database {name!r} was not created by this benchmark (no marker comment);"
            " drop it yourself or pick another --database"
        )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))


def fresh_database(dsn: str | None, name: str, marker: str) -> str:
    """The DSN of database ``name``, created anew (dropping one this benchmark made before,
    by ``marker``) and migrated to head, on the server of ``dsn`` (default: PGRAG_DSN, PG*,
    the embedded server)."""
    from psycopg.conninfo import make_conninfo

    from pgrag.db import schema as migrate
    from pgrag.db.dsn import resolve_dsn

    base = resolve_dsn(dsn)
    admin = make_conninfo(base, dbname="postgres")
    drop_database(admin, name, marker)
    create_database(admin, name, marker)
    target = make_conninfo(base, dbname=name)
    migrate.upgrade(target)
    return target
