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
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)

PRUNE_BATCH = 1000  # entries one transaction of prune() removes
_AGE = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` or ``45s`` as a duration; a one-line error otherwise."""
    found = _AGE.match(text)
    if not found or int(found.group(1)) == 0:
        raise InputError(
            f"invalid age {text!r}: use a positive number and a unit s, m, h, d or w (such as 30d)"
        )
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def set_retention(
    db: Database, collection: str, *, max_age: timedelta | None, max_rows: int | None
) -> dict[str, Any]:
    """Keep at most ``max_age`` and at most ``max_rows`` of ``collection``'s questions (None:
    no limit); the retention now in effect."""
    if max_age is not None and max_age <= timedelta(0):
        raise InputError(f"invalid max_age {max_age}: it must be positive (None: no limit)")
    if max_rows is not None and max_rows < 0:
        raise InputError(f"invalid max_rows {max_rows}: use 0 or more (None: no limit)")
    with transaction(db) as conn:
        cid = require_collection_id(conn, collection)
        conn.execute(Q.set_retention, {"id": cid, "max_age": max_age, "max_rows": max_rows})
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
