"""How long, and how many, of a collection's questions the log (``pgrag.queries``) keeps.

A collection's retention is two columns of ``pgrag.collections``, ``query_log_max_age`` and
``query_log_max_rows`` (NULL: no limit), set with :func:`set_retention` or ``pgrag queries
retention``. Logging a question removes a bounded batch of what they no longer keep
(pgrag/answer/traces.py); :func:`prune` (``pgrag queries prune``) removes all of it, one
bounded batch per transaction, so a large backlog never holds a long lock.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pgrag.collections import require_collection_id
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import DatabaseError, InputError, PgragError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)

PRUNE_BATCH = 1000  # entries one transaction of prune() removes
_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# The longest retention (the CHECK on pgrag.collections.query_log_max_age says the same):
# beyond it, now() - max_age leaves PostgreSQL's timestamps.
MAX_AGE = timedelta(days=36500)
MAX_ROWS = 2**63 - 1  # a bigint


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` or ``45s`` as a duration, at most :data:`MAX_AGE`; a
    one-line error otherwise."""
    found = _AGE.match(text)
    if not found or int(found.group(1)) == 0:
        raise InputError(
            f"invalid age {text!r}: use a positive number and a unit s, m, h, d or w (such as 30d)"
        )
    seconds = int(found.group(1)) * _SECONDS[found.group(2)]
    if seconds > MAX_AGE.total_seconds():
        raise InputError(f"invalid age {text!r}: at most 36500d (100 years)")
    return timedelta(seconds=seconds)


def set_retention(
    db: Database, collection: str, *, max_age: timedelta | None, max_rows: int | None
) -> dict[str, Any]:
    """Keep at most ``max_age`` and at most ``max_rows`` of ``collection``'s questions (None:
    no limit); the retention now in effect."""
    import psycopg

    if max_age is not None and not timedelta(0) < max_age <= MAX_AGE:
        raise InputError(
            f"invalid max_age {max_age}: it must be positive and at most 36500 days (None: no"
            " limit)"
        )
    if max_rows is not None and not 0 <= max_rows <= MAX_ROWS:
        raise InputError(f"invalid max_rows {max_rows}: use 0 to {MAX_ROWS} (None: no limit)")
    try:
        with transaction(db) as conn:
            cid = require_collection_id(conn, collection)
            conn.execute(Q.set_retention, {"id": cid, "max_age": max_age, "max_rows": max_rows})
    except DatabaseError as err:
        if isinstance(err.__cause__, psycopg.errors.InsufficientPrivilege):
            raise PgragError(
                f"role {db.conn.info.user} may not set the retention of collection"
                f" {collection!r}: only the owner of schema pgrag or a pgrag_writer may"
            ) from err
        raise
    return get_retention(db, collection)


def get_retention(db: Database, collection: str) -> dict[str, Any]:
    """``{"collection", "max_age", "max_rows"}`` of ``collection`` (None: no limit)."""
    with transaction(db) as conn:
        cid = require_collection_id(conn, collection)
        row = conn.execute(Q.retention, {"id": cid}).fetchone()
    return {"collection": collection, "max_age": row[0], "max_rows": row[1]}


def prune(db: Database, collection: str | None = None, *, batch: int = PRUNE_BATCH) -> int:
    """Remove every entry of ``collection`` (None: of every collection) that its retention no
    longer keeps, ``batch`` entries per transaction; how many were removed."""
    if collection is not None:
        with transaction(db) as conn:
            require_collection_id(conn, collection)
    removed = 0
    while True:
        with transaction(db) as conn:
            row = conn.execute(Q.prune, {"collection": collection, "batch": batch}).fetchone()
        done = int(row[0]) if row else 0
        removed += done
        if done < batch:
            return removed
