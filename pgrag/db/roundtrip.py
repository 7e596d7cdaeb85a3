"""Downgrade and upgrade again without losing what the upgrade can restore.

A downgrade past a migration drops what that migration added. Before it does, :func:`plan`
counts the rows it would drop, per migration, and says what becomes of each: *kept* (saved in
``pgrag_saved.rows`` and put back by the next upgrade to this release: role mappings, model
links, the embedding queue, calibrated thresholds, half-precision index settings, bodies of
documents written with SQL, answer checks, keyword calibrations, API keys, conversations,
chunks' context lines),
*rebuilt* (access lists and keyword postings, which the upgrade recomputes from documents and
chunks), or *lost* (a cache, or everything, on a downgrade to base). An upgrade from before the
queue existed also queues every chunk that has no vector of its collection's model
(:func:`requeue`), whatever ran meanwhile.
:func:`pgrag.db.schema.downgrade` shows that list and needs ``confirm`` when any of it has rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pgrag.db import queries
from pgrag.errors import SchemaError

Q = queries.load(__name__)

# The migration that created the embedding queue: an upgrade from before it queues again.
QUEUE_REVISION = "0008"

KEPT = "kept for the next upgrade"
REBUILT = "rebuilt by the next upgrade"
COPIED = "each gets its own copy of the chunks and vectors, and stays a document of its own"
LOST = "lost"


@dataclass(frozen=True)
class Item:
    revision: str  # the migration whose downgrade removes it
    what: str
    count: str  # the named query that counts its rows
    fate: str
    saved_as: str | None = None  # the kind it is kept as


ITEMS = (
    Item(
        "0014",
        "context lines of chunks (contextual ingest)",
        "count_contexts",
        KEPT,
        "contexts",
    ),
    Item("0013", "API keys of pgrag serve", "count_api_keys", KEPT, "api_keys"),
    Item("0013", "conversations", "count_conversations", KEPT, "conversations"),
    Item(
        "0013",
        "turns of conversations",
        "count_conversation_turns",
        KEPT,
        "conversation_turns",
    ),
    Item("0009", "answer checks in the query log", "count_checks", KEPT, "checks"),
    Item("0009", "calibrated abstention thresholds", "count_thresholds", KEPT, "thresholds"),
    Item(
        "0008",
        "links of collections to models that are not active (building, standby, retired)",
        "count_model_links",
        KEPT,
        "model_links",
    ),
    Item("0008", "models indexed at half precision", "count_index_types", KEPT, "index_types"),
    Item("0008", "bodies of documents written with SQL", "count_bodies", KEPT, "bodies"),
    Item("0008", "chunks queued for a vector", "count_queue", KEPT, "queue"),
    Item("0008", "cached query vectors (a cache)", "count_cache", LOST),
    Item("0005", "documents stored once as copies of another", "count_duplicates", COPIED),
    Item("0003", "role mappings", "count_role_mappings", KEPT, "role_mappings"),
    Item("0003", "access lists (documents keep their principals)", "count_acls", REBUILT),
    Item(
        "0002",
        "keyword calibrations (each collection's reference length for impacts)",
        "count_keyword_settings",
        KEPT,
        "keyword_settings",
    ),
    Item("0002", "keyword postings", "count_postings", REBUILT),
    Item("0001", "embedding models", "count_models", LOST),
    Item("0001", "documents", "count_documents", LOST),
    Item("0001", "chunks", "count_chunks", LOST),
    Item("0001", "vectors", "count_vectors", LOST),
    Item("0001", "logged questions", "count_queries", LOST),
)
# Restored in this order: model links after their models' settings.
RESTORE = (
    "role_mappings",
    "index_types",
    "thresholds",
    "model_links",
    "queue",
    "bodies",
    "checks",
    "keyword_settings",
    "api_keys",
    "conversations",
    "conversation_turns",
    "contexts",  # last: the keyword trigger indexes their words at the restored calibration
)


@dataclass(frozen=True)
class Loss:
    item: Item
    rows: int
    fate: str  # the item's, except on a downgrade to base: everything is lost there

    def describe(self) -> str:
        return f"{self.item.what}: {self.rows} ({self.fate})"


def plan(conn: Any, start: str | None, target: str | None) -> list[Loss]:
    """What a downgrade from ``start`` to ``target`` (None: base) removes, with row counts:
    the items of every migration after ``target`` up to ``start``."""
    if start is None:
        return []
    undone = [i for i in ITEMS if i.revision <= start and (target is None or i.revision > target)]
    return [
        Loss(
            i,
            int(conn.execute(getattr(Q, i.count)).fetchone()[0]),
            LOST if target is None else i.fate,
        )
        for i in undone
    ]


def save(conn: Any, losses: list[Loss], target: str | None) -> None:
    """Keep aside, in the caller's transaction, what the next upgrade can put back. A
    downgrade to base keeps nothing (and removes what earlier downgrades kept)."""
    trust_saved(conn)
    if target is None:
        conn.execute(Q.drop_saved_table)
        conn.execute(Q.drop_saved_schema)
        return
    kept = [loss for loss in losses if loss.item.saved_as and loss.rows and loss.fate == KEPT]
    if not kept:
        return
    conn.execute(Q.create_saved_schema)
    conn.execute(Q.create_saved_table)
    for loss in kept:
        conn.execute(getattr(Q, f"save_{loss.item.saved_as}"))


def trust_saved(conn: Any) -> None:
    """Raise SchemaError unless schema pgrag_saved, if it exists, is pgrag's (the running
    role's, a superuser's or the owner of schema pgrag's) alone, and the running role may use
    it: one another role made or may write would let it plant role mappings that an upgrade
    restores, and one it may read would show it what a downgrade kept."""
    row = conn.execute(Q.saved_owner).fetchone()
    if row is None:
        return
    owner, others, trusted, usable = row
    if trusted and not others:
        if usable:
            return
        raise SchemaError(
            f"schema pgrag_saved, where a downgrade kept rows for the next upgrade, is {owner}'s:"
            f" run this as {owner} (or a superuser), so that what it kept is restored; nothing"
            " was changed"
        )
    whose = f"owned by {owner}" + (f", with {others} in it or given rights on it" if others else "")
    raise SchemaError(
        f"schema pgrag_saved is {whose}: it was not made by a pgrag downgrade, so pgrag"
        " neither keeps rows in it nor restores any from it (nothing was changed); look at what"
        " it holds, drop it (DROP SCHEMA pgrag_saved CASCADE) and retry"
    )


def restore(conn: Any) -> None:
    """Put back what downgrades kept (at the end of an upgrade to this release)."""
    row = conn.execute(Q.saved_exists).fetchone()
    if not (row and row[0]):
        return
    trust_saved(conn)
    for kind in RESTORE:
        conn.execute(getattr(Q, f"restore_{kind}"))
    conn.execute(Q.forget_restored, {"kinds": list(RESTORE)})
    conn.execute(Q.drop_saved_if_empty)


def requeue(conn: Any) -> int:
    """Queue every chunk that lacks a vector of a model its collection uses (not retired) and
    is not queued for it; returns the number of (chunk, model) pairs queued."""
    row = conn.execute(Q.requeue).fetchone()
    return int(row[0]) if row else 0
