"""Who the session reads as: principals, validated here and told to the database per
transaction (``pgrag.principals``). The database decides what they may see (row-level security
and the SECURITY DEFINER entry points); this module only says who is asking. A principal is a
name such as ``alice``, ``group:billing`` or ``alice@example.com``; ``public`` means everyone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pgrag.db import queries
from pgrag.errors import InputError

Q = queries.load(__name__)

# Must agree with pgrag.principals_valid (tests/integration/test_access.py checks both ways).
PRINCIPAL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,127}")


def check_principals(principals: Iterable[str], what: str = "principal") -> list[str]:
    """The principals, validated: a bad one is an InputError naming it. A principal with a
    comma would split into two when sent to the session, so it is rejected like any other."""
    if isinstance(principals, str):
        principals = [principals]
    out: list[str] = []
    for p in principals:
        if not isinstance(p, str) or not PRINCIPAL.fullmatch(p):
            raise InputError(
                f"invalid {what} {p!r}: use 1-128 letters, digits or _ . : @ + -"
                " (such as alice or group:billing)"
            )
        if p not in out:
            out.append(p)
    return out


def apply(conn: Any, principals: Sequence[str] | None) -> None:
    """Make this transaction read as ``principals`` (plus public); None leaves the session as
    it is. Call inside a transaction: the setting ends with it, so a pooled connection never
    carries one request's principals into the next. An empty list reads as public only."""
    if principals is None:
        return
    names = check_principals(principals) or ["public"]
    conn.execute(Q.read_as, {"principals": ",".join(names)})


@contextmanager
def acting_for(conn: Any, principals: Sequence[str] | None) -> Iterator[None]:
    """Within this block, the session reads as ``principals`` (plus public) and writes for them
    only: PostgreSQL refuses a document any other principal may read, and any change to or
    deletion of one (``pgrag.write_principals``, sql/functions/access.sql). None changes
    nothing. Set for the session, across the block's transactions (each commits or rolls back
    on its own), and ended when the block ends; a connection that cannot be told so (it broke)
    is closed, so that it is never handed on still acting for them. An empty list is public."""
    if principals is None:
        yield
        return
    from psycopg.pq import TransactionStatus

    names = check_principals(principals) or ["public"]
    with conn.transaction():
        conn.execute(Q.act_for, {"principals": ",".join(names)})
    try:
        yield
    finally:
        try:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()  # (whatever the block left open)
            with conn.transaction():
                conn.execute(Q.act_for_none)
        except Exception:  # noqa: BLE001 - a broken connection: closed, so never reused
            conn.close()
