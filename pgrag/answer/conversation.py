"""Conversations: a caller's questions and answers in order, kept in PostgreSQL.

    conv = conversation.start(db, "handbook", owner="key:ab12cd34")
    first = pgrag.ask(db, "Who wrote the refund policy?", collection="handbook",
                      conversation_id=conv.id, owner="key:ab12cd34")
    again = pgrag.ask(db, "When did it change?", collection="handbook",
                      conversation_id=conv.id, owner="key:ab12cd34")
    # (or conversation_id="new": ask starts one; its id is first.conversation_id)

Each conversation belongs to one *owner*, the caller that started it: whoever the
application authenticated (``pgrag serve`` names callers ``key:<key id>``, ``jwt:<issuer>#<sub>``
or ``local``). The owner is told to the database per transaction (``pgrag.caller``), and the
database decides what that caller may read (``pgrag.session_caller()`` and the
``conversation_*_v1`` entry points, sql/functions/conversations.sql): only its own
conversations, whichever role the connection logs in as. ``owner=None`` leaves it to the
session: ``db:<login role>`` (a pgrag_app session must name one).

A follow-up is rewritten into a standalone query before it is searched
(:mod:`pgrag.answer.rewrite`), and a chunk keeps the citation number it was first given in the
conversation: each assistant turn stores its numbered sources ({n, chunk_id, document_id,
source, title}), and :func:`numbering` gives them back to the next prompt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgrag.answer.citations import cited_numbers
from pgrag.answer.rewrite import HistoryTurn
from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.errors import (
    CollectionNotFound,
    ConversationConflict,
    ConversationNotFound,
    DatabaseError,
    InputError,
)

if TYPE_CHECKING:
    from pgrag.answer.prompt import Source
    from pgrag.db.connect import Database

Q = queries.load(__name__)

NEW = "new"  # conversation_id that makes ask start a conversation
ROLES = ("user", "assistant")
TITLE_CHARS = 80  # of the first question, as a conversation's title
MAX_OWNER_CHARS = 512


@dataclass(frozen=True)
class Turn:
    """One turn: the user's question as asked (``standalone_query``: what it was searched as),
    or the assistant's answer with its prompt's numbered sources and its question-log entry."""

    role: str
    content: str
    standalone_query: str | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    query_id: int | None = None
    turn: int = 0  # its number in the conversation, from 1 (0: not stored yet)
    created_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "role": self.role,
            "content": self.content,
            "standalone_query": self.standalone_query,
            "sources": self.sources,
            "query_id": self.query_id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }

    def stored(self) -> dict[str, Any]:
        """The turn as conversation_append_v1 takes it."""
        return {
            "role": self.role,
            "content": self.content.replace("\x00", "\ufffd"),
            "standalone_query": self.standalone_query,
            "sources": self.sources,
            "query_id": self.query_id,
        }

    def for_rewrite(self) -> HistoryTurn:
        titles = {int(s["n"]): s.get("title") for s in self.sources if "n" in s}
        return HistoryTurn(self.role, self.content, self.standalone_query, titles or None)


@dataclass
class Conversation:
    id: str
    collection: str
    title: str | None
    turns: list[Turn]
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def last_turn(self) -> int:
        return self.turns[-1].turn if self.turns else 0

    def numbering(self) -> dict[int, int]:
        """Each chunk's citation number in this conversation (see :func:`numbering`)."""
        return numbering(self.turns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "collection": self.collection,
            "title": self.title,
            "turns": [t.to_dict() for t in self.turns],
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


def numbering(turns: Iterable[Turn]) -> dict[int, int]:
    """chunk_id -> the number it was first given in ``turns``' numbered sources."""
    out: dict[int, int] = {}
    for t in turns:
        for s in t.sources:
            chunk, n = s.get("chunk_id"), s.get("n")
            if isinstance(chunk, int) and isinstance(n, int) and chunk not in out:
                out[chunk] = n
    return out


def source_refs(sources: Sequence[Source]) -> list[dict[str, Any]]:
    """What an assistant turn keeps of its prompt's sources: number, chunk, document, source
    and title (never the text: the next turn reads it again, as the caller may then)."""
    return [
        {
            "n": s.n,
            "chunk_id": s.result.chunk_id,
            "document_id": s.result.document_id,
            "source": s.result.source,
            "title": s.result.title,
        }
        for s in sources
    ]


def cited_sources(turn: Turn) -> list[dict[str, Any]]:
    """The sources an assistant turn cites, in the order it first cites them."""
    by_n = {s.get("n"): s for s in turn.sources}
    seen: list[dict[str, Any]] = []
    for n in cited_numbers(turn.content):
        if n in by_n and by_n[n] not in seen:
            seen.append(by_n[n])
    return seen


def history_from_messages(messages: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """Earlier turns given as chat messages ({"role": "user" | "assistant", "content": str};
    system messages are left out). A message of another role, or without text, is an
    InputError naming it."""
    turns: list[Turn] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, Mapping) else None
        if role == "system":
            continue
        content = m.get("content") if isinstance(m, Mapping) else None
        if role not in ROLES:
            raise InputError(
                f"history[{i}]: role must be 'user' or 'assistant' (or 'system'), got {role!r}"
            )
        if not isinstance(content, str):
            raise InputError(f"history[{i}]: content must be text, got {type(content).__name__}")
        turns.append(Turn(role=role, content=content))
    return turns


def check_owner(owner: str) -> str:
    """``owner``, validated as pgrag.caller_valid does: an InputError naming it if not."""
    if (
        not isinstance(owner, str)
        or not 1 <= len(owner) <= MAX_OWNER_CHARS
        or owner != owner.strip()
        or any(ord(c) < 32 or ord(c) == 127 for c in owner)
    ):
        raise InputError(
            f"invalid conversation owner {owner!r}: use 1-{MAX_OWNER_CHARS} characters without"
            " control characters or surrounding spaces (such as key:ab12cd34)"
        )
    return owner


def check_id(conversation_id: str) -> str:
    """A conversation id in its canonical form; an InputError unless it is a UUID."""
    try:
        return str(uuid.UUID(str(conversation_id)))
    except ValueError:
        raise InputError(
            f"conversation_id must be a UUID such as 3f2b8c1e-0d4a-4e5b-9a7c-1b2c3d4e5f60 (or"
            f" {NEW!r} to start one), got {conversation_id!r}"
        ) from None


def act_as(conn: Any, owner: str | None) -> None:
    """Make this transaction's conversations ``owner``'s; None leaves it to the session."""
    if owner is not None:
        conn.execute(Q.act_as, {"caller": check_owner(owner)})


def start(
    db: Database,
    collection: str = "default",
    *,
    title: str | None = None,
    owner: str | None = None,
    turns: Sequence[Turn] = (),
) -> Conversation:
    """A new conversation of ``owner`` in ``collection`` (with ``turns`` in it already, in
    the same transaction)."""
    cid = create(db, collection, title=title, owner=owner, turns=turns)
    return get(db, cid, owner=owner)


def create(
    db: Database,
    collection: str,
    *,
    title: str | None = None,
    owner: str | None = None,
    turns: Sequence[Turn] = (),
) -> str:
    """:func:`start`, returning only the new conversation's id."""
    with _translated(None), transaction(db) as conn:
        act_as(conn, owner)
        row = conn.execute(Q.start, {"collection": collection, "title": title}).fetchone()
        if row is None or row[0] is None:
            raise CollectionNotFound(collection)
        cid = str(row[0])
        if turns:
            _append(conn, cid, None, turns)
    return cid


def get(db: Database, conversation_id: str, *, owner: str | None = None) -> Conversation:
    """One of ``owner``'s conversations with its turns; :class:`ConversationNotFound` when
    there is none of that id that is ``owner``'s."""
    cid = check_id(conversation_id)
    with _translated(cid), transaction(db) as conn:
        act_as(conn, owner)
        row = conn.execute(Q.conversation, {"id": cid}).fetchone()
        if row is None:
            raise ConversationNotFound(cid)
        rows = conn.execute(Q.turns, {"id": cid}).fetchall()
    turns = [
        Turn(
            role=r[1],
            content=r[2],
            standalone_query=r[3],
            sources=list(r[4] or []),
            query_id=r[5],
            turn=r[0],
            created_at=r[6],
        )
        for r in rows
    ]
    return Conversation(str(row[0]), row[1], row[2], turns, row[4], row[5])


def append(
    db: Database,
    conversation_id: str,
    turns: Sequence[Turn],
    *,
    after_turn: int | None = None,
    owner: str | None = None,
) -> int:
    """Append ``turns`` to one of ``owner``'s conversations; the new last turn's number.
    With ``after_turn`` (the last turn read), a conversation that went on meanwhile is a
    :class:`ConversationConflict` and nothing is appended."""
    cid = check_id(conversation_id)
    with _translated(cid), transaction(db) as conn:
        act_as(conn, owner)
        return _append(conn, cid, after_turn, turns)


def _append(conn: Any, cid: str, after_turn: int | None, turns: Sequence[Turn]) -> int:
    from psycopg.types.json import Jsonb

    for t in turns:
        if t.role not in ROLES:
            raise InputError(f"a turn's role must be 'user' or 'assistant', got {t.role!r}")
    row = conn.execute(
        Q.append, {"id": cid, "after": after_turn, "turns": Jsonb([t.stored() for t in turns])}
    ).fetchone()
    return int(row[0])


def list_conversations(
    db: Database, *, collection: str | None = None, limit: int = 50, owner: str | None = None
) -> list[dict[str, Any]]:
    """``owner``'s conversations (of ``collection``, or all), most recently continued first:
    id, collection, title, turns, created_at, updated_at."""
    if not 1 <= limit <= 1000:
        raise InputError(f"limit must be 1 to 1000, got {limit}")
    with _translated(None), transaction(db) as conn:
        act_as(conn, owner)
        rows = conn.execute(Q.conversations, {"collection": collection, "limit": limit}).fetchall()
    keys = ("id", "collection", "title", "turns", "created_at", "updated_at")
    return [{**dict(zip(keys, r, strict=True)), "id": str(r[0])} for r in rows]


def find(
    db: Database, collection: str, turns: Sequence[Turn], *, owner: str | None = None
) -> str | None:
    """The id of ``owner``'s conversation in ``collection`` whose turns are exactly ``turns``
    (roles and texts, oldest first; among its 100 most recently continued), or None. A chat
    client that resends the whole history continues the conversation it had this way."""
    from psycopg.types.json import Jsonb

    if not turns:
        return None
    transcript = Jsonb([{"role": t.role, "content": t.content} for t in turns])
    with _translated(None), transaction(db) as conn:
        act_as(conn, owner)
        row = conn.execute(Q.match, {"collection": collection, "transcript": transcript}).fetchone()
    return str(row[0]) if row and row[0] is not None else None


def delete(db: Database, conversation_id: str, *, owner: str | None = None) -> bool:
    """Delete one of ``owner``'s conversations; whether there was one."""
    cid = check_id(conversation_id)
    with _translated(cid), transaction(db) as conn:
        act_as(conn, owner)
        row = conn.execute(Q.delete, {"id": cid}).fetchone()
    return bool(row and row[0])


def session_caller(db: Database, owner: str | None = None) -> str:
    """Whom the database takes this session's conversations to belong to."""
    with _translated(None), transaction(db) as conn:
        act_as(conn, owner)
        row = conn.execute(Q.session_caller).fetchone()
    return str(row[0])


def title_for(question: str) -> str:
    """A conversation's title: its first question, cut at a word near TITLE_CHARS."""
    text = " ".join(question.split())
    if len(text) <= TITLE_CHARS:
        return text
    return text[:TITLE_CHARS].rsplit(" ", 1)[0] + "…"


class _translated:
    """Turns the entry points' errors into pgrag's: P0002 (not the caller's conversation)
    into ConversationNotFound, 40001 (it went on meanwhile) into ConversationConflict."""

    def __init__(self, cid: str | None) -> None:
        self.cid = cid

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, err: BaseException | None, tb: object) -> None:
        if not isinstance(err, DatabaseError):
            return
        state = getattr(err.__cause__, "sqlstate", None)
        if state == "P0002" and self.cid is not None:
            raise ConversationNotFound(self.cid) from err
        if state == "40001" and self.cid is not None:
            raise ConversationConflict(self.cid) from err
