"""Conversations (pgrag.answer.conversation): follow-ups rewritten before retrieval, turns
stored per caller under the database's rules, citation numbers kept across turns. On the real
model and database; the only fake is an LLM endpoint (tests/fakes.py)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.answer import conversation
from pgrag.answer.rewrite import REWRITE_SYSTEM
from pgrag.db.connect import Database
from pgrag.errors import (
    CollectionNotFound,
    ConversationConflict,
    ConversationNotFound,
    DatabaseError,
    InputError,
)
from pgrag.ingest.loaders import from_text
from pgrag.llm.chat import LLMConfig
from tests.fakes import LLMServer

# Made-up places, so that what the model was trained on cannot stand in for retrieval; each
# fact a document of its own, and several documents say when something was founded or built.
DOCS = {
    "lakemont-history.md": (
        "Lakemont University",
        "Lakemont University was founded in 1871 by the shipbuilder Anna Verhoef, who gave"
        " her shipyard's profits to open a college for the children of dock workers.",
    ),
    "lakemont-campus.md": (
        "Lakemont University campus",
        "The campus of Lakemont University lies on the northern shore of Lake Orvis and has"
        " fourteen libraries; the largest holds the Verhoef map collection.",
    ),
    "brightwater-bridge.md": (
        "Brightwater Bridge",
        "The Brightwater Bridge was built in 1932 by the engineer Tomas Ferreira. It spans"
        " 840 metres across the Salt River and carries a tram line.",
    ),
    "corvin-observatory.md": (
        "Corvin Observatory",
        "The Corvin Observatory was founded in 1903 on Mount Halden. Its main telescope has a"
        " mirror of 2.1 metres and was ground by hand over six years.",
    ),
    "orvis-ferry.md": (
        "Orvis ferry",
        "A ferry has crossed Lake Orvis since 1850; it was started by fishermen and runs every"
        " forty minutes in summer.",
    ),
}


@pytest.fixture
def docs(db: Database) -> Database:
    pgrag.ingest_documents(
        db,
        [from_text(source, text, title=title) for source, (title, text) in DOCS.items()],
        collection="places",
    )
    return db


def _turns(db: Database, cid: str) -> list[tuple[Any, ...]]:
    return db.conn.execute(
        "SELECT turn, role, content, standalone_query, sources, query_id"
        " FROM pgrag.conversation_turns WHERE conversation_id = %s ORDER BY turn",
        (cid,),
    ).fetchall()


# -- rewriting -----------------------------------------------------------------------------------


def test_a_follow_up_is_searched_and_logged_as_its_standalone_query(docs: Database) -> None:
    first = pgrag.ask(
        docs, "Who founded Lakemont University?", collection="places", llm=None,
        conversation_id="new", owner="key:alice",
    )  # fmt: skip
    assert first.conversation_id and not first.abstained, first.reason
    assert first.standalone_query == "Who founded Lakemont University?" and first.rewrite is None
    follow = pgrag.ask(
        docs, "When was it founded?", collection="places", llm=None,
        conversation_id=first.conversation_id, owner="key:alice",
    )  # fmt: skip
    assert follow.question == "When was it founded?"
    assert follow.rewrite == "heuristic"
    assert follow.standalone_query == "When was Lakemont University founded?"
    assert follow.to_dict()["standalone_query"] == follow.standalone_query
    assert follow.to_dict()["conversation_id"] == first.conversation_id
    # What was searched: the passage about Lakemont's founding comes first, and holds the year.
    top = min(follow.sources, key=lambda s: s.result.rank)
    assert top.result.source == "lakemont-history.md"
    assert "1871" in follow.answer
    logged = docs.conn.execute(
        "SELECT question, checks -> 'rewrite' FROM pgrag.queries WHERE id = %s",
        (follow.query_id,),
    ).fetchone()
    assert logged == (
        "When was Lakemont University founded?",
        {"question": "When was it founded?", "method": "heuristic"},
    )


def test_history_as_messages_rewrites_without_storing_anything(docs: Database) -> None:
    answer = pgrag.ask(
        docs,
        "How long is it?",
        collection="places",
        llm=None,
        history=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Who built the Brightwater Bridge?"},
            {"role": "assistant", "content": "Tomas Ferreira built it [1]."},
        ],
    )
    assert answer.standalone_query == "How long is Brightwater Bridge?"
    assert answer.conversation_id is None
    assert min(answer.sources, key=lambda s: s.result.rank).result.source == "brightwater-bridge.md"
    assert docs.conn.execute("SELECT count(*) FROM pgrag.conversations").fetchone() == (0,)


def test_the_configured_model_rewrites_the_follow_up(docs: Database) -> None:
    with LLMServer() as server:

        def reply(body: dict[str, Any]) -> str:
            messages = body["messages"]
            if messages[0]["content"] == REWRITE_SYSTEM:
                return "Standalone question: How many libraries does Lakemont University have?"
            prompt = messages[-1]["content"]
            found = re.search(r"^\[(\d+)\][^\n]*\n<<<\n[^>]*fourteen libraries", prompt, re.M)
            return f"It has fourteen libraries [{found.group(1)}]." if found else "I don't know."

        server.answer = reply
        llm = LLMConfig(base_url=server.url, model="test", max_retries=0)
        first = pgrag.ask(
            docs, "Tell me about Lakemont University.", collection="places", llm=llm,
            conversation_id="new", owner="key:alice",
        )  # fmt: skip
        requests_before = len(server.requests)
        follow = pgrag.ask(
            docs, "And how many libraries?", collection="places", llm=llm,
            conversation_id=first.conversation_id, owner="key:alice",
        )  # fmt: skip
        asked = [r.body for r in server.requests[requests_before:]]
    # Two calls: the rewrite (not streamed, showing the conversation), then the answer.
    assert len(asked) == 2 and asked[0]["messages"][0]["content"] == REWRITE_SYSTEM
    shown = asked[0]["messages"][1]["content"]
    assert "User: Tell me about Lakemont University." in shown
    assert shown.rstrip().endswith("Last question: And how many libraries?\n\nStandalone question:")
    assert follow.rewrite == "llm"
    assert follow.standalone_query == "How many libraries does Lakemont University have?"
    prompt = asked[1]["messages"][-1]["content"]
    assert "Question: How many libraries does Lakemont University have?" in prompt
    assert not follow.abstained and "fourteen libraries" in follow.answer


def test_a_first_question_is_not_rewritten(docs: Database) -> None:
    answer = pgrag.ask(docs, "When was it built?", collection="places", llm=None)
    assert answer.standalone_query == "When was it built?" and answer.rewrite is None


# -- storage -------------------------------------------------------------------------------------


def test_turns_are_stored_with_their_sources_and_log_entries(docs: Database) -> None:
    first = pgrag.ask(
        docs, "Who founded Lakemont University?", collection="places", llm=None,
        conversation_id="new", owner="key:alice",
    )  # fmt: skip
    cid = first.conversation_id
    assert cid is not None
    second = pgrag.ask(
        docs, "Where is its campus?", collection="places", llm=None,
        conversation_id=cid, owner="key:alice",
    )  # fmt: skip
    rows = _turns(docs, cid)
    assert [(r[0], r[1]) for r in rows] == [(1, "user"), (2, "assistant"), (3, "user"),
                                            (4, "assistant")]  # fmt: skip
    assert rows[0][2] == "Who founded Lakemont University?"
    assert rows[2][2] == "Where is its campus?"
    assert rows[2][3] == "Where is Lakemont University's campus?"
    assert rows[1][2] == first.answer and rows[3][2] == second.answer
    assert rows[1][5] == first.query_id and rows[3][5] == second.query_id
    assert rows[3][4] == [
        {
            "n": s.n,
            "chunk_id": s.result.chunk_id,
            "document_id": s.result.document_id,
            "source": s.result.source,
            "title": s.result.title,
        }
        for s in second.sources
    ]
    stored = conversation.get(docs, cid, owner="key:alice")
    assert stored.collection == "places" and stored.title == "Who founded Lakemont University?"
    assert [t.turn for t in stored.turns] == [1, 2, 3, 4] and stored.last_turn == 4
    listed = conversation.list_conversations(docs, owner="key:alice")
    assert [(c["id"], c["turns"]) for c in listed] == [(cid, 4)]
    # The collection goes: its conversations go with it.
    docs.conn.execute("DELETE FROM pgrag.collections WHERE name = 'places'")
    assert docs.conn.execute("SELECT count(*) FROM pgrag.conversation_turns").fetchone() == (0,)


def test_citation_numbers_stay_with_their_chunks_across_turns(docs: Database) -> None:
    asked = [
        "Who founded Lakemont University?",
        "How many libraries does it have?",
        "When was the Brightwater Bridge built?",
        "Who founded Lakemont University?",
    ]
    answers = []
    cid = conversation.NEW
    for question in asked:
        a = pgrag.ask(
            docs, question, collection="places", k=2, llm=None, conversation_id=cid,
            owner="key:alice",
        )  # fmt: skip
        cid = a.conversation_id or ""
        answers.append(a)
    seen: dict[int, int] = {}
    for a in answers:
        numbers = {s.result.chunk_id: s.n for s in a.sources}
        assert len(set(numbers.values())) == len(numbers)  # one number per chunk in a prompt
        for chunk, n in numbers.items():
            if chunk in seen:
                assert n == seen[chunk], (a.question, chunk)  # the number it had before
            else:
                assert n not in seen.values() and n > max(seen.values(), default=0)
                seen[chunk] = n
        for c in a.citations:
            assert c.chunk_id in numbers and numbers[c.chunk_id] == c.n
    # Turn 4 asks turn 1's question again: the same passages, under the same numbers.
    assert {s.result.chunk_id: s.n for s in answers[3].sources} == {
        s.result.chunk_id: s.n for s in answers[0].sources
    }
    assert answers[3].answer == answers[0].answer
    # The bridge came later, so its passage has a number after the first turns' ones.
    bridge = [s.n for s in answers[2].sources if s.result.source == "brightwater-bridge.md"]
    assert bridge and bridge[0] > max(s.n for s in answers[0].sources)


def test_a_turn_made_from_stale_turns_is_refused(docs: Database) -> None:
    first = pgrag.ask(
        docs, "Who founded Lakemont University?", collection="places", llm=None,
        conversation_id="new", owner="key:alice",
    )  # fmt: skip
    cid = first.conversation_id or ""
    turn = conversation.Turn("user", "again?")
    assert conversation.append(docs, cid, [turn], after_turn=2, owner="key:alice") == 3
    with pytest.raises(ConversationConflict, match="ask the question again"):
        conversation.append(docs, cid, [turn], after_turn=2, owner="key:alice")
    assert len(_turns(docs, cid)) == 3


def test_bad_arguments_are_one_line_errors(docs: Database) -> None:
    with pytest.raises(InputError, match="conversation_id must be a UUID"):
        pgrag.ask(docs, "x?", collection="places", llm=None, conversation_id="nope")
    first = pgrag.ask(
        docs, "Who built the Brightwater Bridge?", collection="places", llm=None,
        conversation_id="new",
    )  # fmt: skip
    cid = first.conversation_id or ""
    with pytest.raises(InputError, match="not both"):
        pgrag.ask(
            docs, "x?", collection="places", llm=None, conversation_id=cid,
            history=[{"role": "user", "content": "y"}],
        )  # fmt: skip
    pgrag.ingest_documents(docs, [from_text("a.md", "Another text.")], collection="other")
    with pytest.raises(InputError, match="is of collection 'places', not 'other'"):
        pgrag.ask(docs, "x?", collection="other", llm=None, conversation_id=cid)
    with pytest.raises(InputError, match="history\\[0\\]: role must be"):
        pgrag.ask(docs, "x?", collection="places", llm=None, history=[{"role": "tool"}])
    with pytest.raises(InputError, match="invalid conversation owner"):
        pgrag.ask(docs, "x?", collection="places", llm=None, conversation_id="new", owner=" x")
    with pytest.raises(CollectionNotFound):
        conversation.start(docs, "nowhere")


# -- whose conversation it is ----------------------------------------------------------------------


def test_another_caller_can_neither_read_nor_continue_it(docs: Database) -> None:
    first = pgrag.ask(
        docs, "Who founded Lakemont University?", collection="places", llm=None,
        conversation_id="new", owner="key:alice",
    )  # fmt: skip
    cid = first.conversation_id or ""
    with pytest.raises(ConversationNotFound, match="does not exist or is another caller's"):
        conversation.get(docs, cid, owner="key:bob")
    with pytest.raises(ConversationNotFound):
        pgrag.ask(
            docs, "When was it founded?", collection="places", llm=None,
            conversation_id=cid, owner="key:bob",
        )  # fmt: skip
    with pytest.raises(ConversationNotFound):
        conversation.append(docs, cid, [conversation.Turn("user", "mine now")], owner="key:bob")
    assert conversation.list_conversations(docs, owner="key:bob") == []
    assert conversation.delete(docs, cid, owner="key:bob") is False
    # Without an owner, the session's own (the superuser's role) is someone else too.
    assert conversation.session_caller(docs).startswith("db:")
    with pytest.raises(ConversationNotFound):
        conversation.get(docs, cid)
    assert len(_turns(docs, cid)) == 2
    assert conversation.delete(docs, cid, owner="key:alice") is True
    assert _turns(docs, cid) == []


@dataclass
class Roles:
    app_dsn: str  # a member of pgrag_app
    reader_dsn: str  # a member of pgrag_reader
    granted_dsn: str  # a plain role an administrator granted the tables to
    reader: str
    granted: str


@pytest.fixture
def roles(docs: Database, admin_dsn: str) -> Iterator[Roles]:
    suffix = uuid.uuid4().hex[:8]
    app, reader, granted = f"app_{suffix}", f"reader_{suffix}", f"granted_{suffix}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in (app, reader, granted):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT pgrag_app TO {}").format(sql.Identifier(app)))
        conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(reader)))
    docs.conn.execute(
        sql.SQL(
            "GRANT USAGE ON SCHEMA pgrag TO {0};"
            " GRANT SELECT, INSERT ON pgrag.conversations, pgrag.conversation_turns TO {0}"
        ).format(sql.Identifier(granted))
    )
    docs.conn.commit()
    try:
        yield Roles(
            app_dsn=make_conninfo(docs.dsn, user=app),
            reader_dsn=make_conninfo(docs.dsn, user=reader),
            granted_dsn=make_conninfo(docs.dsn, user=granted),
            reader=reader,
            granted=granted,
        )
    finally:
        docs.conn.rollback()
        docs.conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(granted)))
        docs.conn.commit()
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for role in (app, reader, granted):
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_pgrag_app_session_reads_only_the_caller_it_names(roles: Roles, embedder: Any) -> None:
    with pgrag.connect(roles.app_dsn, embedder=embedder) as app:
        first = pgrag.ask(
            app, "Who founded Lakemont University?", collection="places", llm=None,
            conversation_id="new", owner="key:alice",
        )  # fmt: skip
        cid = first.conversation_id or ""
        follow = pgrag.ask(
            app, "When was it founded?", collection="places", llm=None,
            conversation_id=cid, owner="key:alice",
        )  # fmt: skip
        assert follow.standalone_query == "When was Lakemont University founded?"
        assert len(conversation.get(app, cid, owner="key:alice").turns) == 4
        with pytest.raises(ConversationNotFound):
            conversation.get(app, cid, owner="key:bob")
        with pytest.raises(ConversationNotFound):
            pgrag.ask(
                app, "And the campus?", collection="places", llm=None,
                conversation_id=cid, owner="key:bob",
            )  # fmt: skip
        # Naming no caller is refused: the app's users would share one history.
        with pytest.raises(DatabaseError, match="names no caller"):
            conversation.list_conversations(app)
        # The tables themselves are closed to it: only the entry points answer.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.conn.execute("SELECT count(*) FROM pgrag.conversation_turns")
        app.conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.conn.execute(
                "INSERT INTO pgrag.conversation_turns (conversation_id, turn, role, content)"
                " VALUES (%s, 9, 'user', 'planted')",
                (cid,),
            )
        app.conn.rollback()
        # Through SQL, the same rules: the entry point shows bob nothing of alice's.
        app.conn.execute("SELECT set_config('pgrag.caller', 'key:bob', false)")
        shown = app.conn.execute("SELECT * FROM pgrag.conversation_turns_v1(%s)", (cid,))
        assert shown.fetchall() == []
        with pytest.raises(psycopg.errors.NoDataFound):
            app.conn.execute(
                'SELECT pgrag.conversation_append_v1(%s, NULL, \'[{"role": "user",'
                ' "content": "planted"}]\')',
                (cid,),
            )
        app.conn.rollback()


def test_a_reader_role_is_its_own_caller_and_cannot_name_another(
    roles: Roles, embedder: Any
) -> None:
    with pgrag.connect(roles.reader_dsn, embedder=embedder) as reader:
        assert conversation.session_caller(reader) == f"db:{roles.reader}"
        mine = conversation.start(reader, "places")
        assert conversation.get(reader, mine.id).id == mine.id
        with pytest.raises(DatabaseError, match="may not act as caller 'key:alice'"):
            conversation.start(reader, "places", owner="key:alice")
        # Naming itself is allowed, and is the same caller.
        assert conversation.get(reader, mine.id, owner=f"db:{roles.reader}").id == mine.id


def test_row_level_security_shows_a_granted_role_only_its_own(
    roles: Roles, docs: Database, embedder: Any
) -> None:
    alice = conversation.start(docs, "places", owner="key:alice", title="alice's")
    row = docs.conn.execute("SELECT id FROM pgrag.collections WHERE name = 'places'").fetchone()
    assert row is not None
    places = row[0]
    with psycopg.connect(roles.granted_dsn) as granted:
        own = f"db:{roles.granted}"
        granted.execute(
            "INSERT INTO pgrag.conversations (owner, collection_id, title) VALUES (%s, %s, 'mine')",
            (own, places),
        )
        rows = granted.execute("SELECT title, owner FROM pgrag.conversations").fetchall()
        assert rows == [("mine", own)]
        assert granted.execute(
            "SELECT count(*) FROM pgrag.conversations WHERE id = %s", (alice.id,)
        ).fetchone() == (0,)
        granted.commit()
        # It may not add a turn to alice's, nor a conversation in alice's name.
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            granted.execute(
                "INSERT INTO pgrag.conversation_turns (conversation_id, turn, role, content)"
                " VALUES (%s, 1, 'user', 'planted')",
                (alice.id,),
            )
        granted.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            granted.execute(
                "INSERT INTO pgrag.conversations (owner, collection_id) VALUES ('key:alice', %s)",
                (places,),
            )
        granted.rollback()
        # Naming alice as its caller is refused, so the policy cannot be talked round.
        granted.execute("SELECT set_config('pgrag.caller', 'key:alice', false)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not act as caller"):
            granted.execute("SELECT count(*) FROM pgrag.conversations")
        granted.rollback()
    assert conversation.get(docs, alice.id, owner="key:alice").turns == []


def test_a_downgrade_past_0013_keeps_them_for_the_next_upgrade(docs: Database, dsn: str) -> None:
    from pgrag.db import schema as migrate

    first = pgrag.ask(
        docs, "Who founded Lakemont University?", collection="places", llm=None,
        conversation_id="new", owner="key:alice",
    )  # fmt: skip
    cid = first.conversation_id or ""
    before = conversation.get(docs, cid, owner="key:alice")
    docs.conn.commit()
    docs.close()
    with pytest.raises(InputError, match="conversations: 1 \\(kept for the next upgrade\\)"):
        migrate.downgrade(dsn, "0012")
    moved = migrate.downgrade(dsn, "0012", confirm=True)
    assert "turns of conversations: 2 (kept for the next upgrade)" in moved.removed
    migrate.upgrade(dsn)
    with pgrag.connect(dsn) as again:
        after = conversation.get(again, cid, owner="key:alice")
        assert after.to_dict() == before.to_dict()
        # and the entry points are back: the conversation goes on
        more = [conversation.Turn("user", "more?")]
        assert conversation.append(again, cid, more, owner="key:alice") == 3
