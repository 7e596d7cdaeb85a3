"""``POST /v1/chat/completions`` and ``GET /v1/models`` driven by the official ``openai`` client
against a real ``pgrag serve`` on 127.0.0.1 (tests/serving.py); the only fake is the LLM
endpoint the service answers with (tests/fakes.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import openai
import pytest

import pgrag
from pgrag.collections import ensure_collection
from pgrag.config import Settings
from pgrag.db.connect import Database
from pgrag.ingest.loaders import from_text
from pgrag.service import keys
from tests.fakes import LLMServer, Reply, sse_data
from tests.integration.test_conversations import DOCS
from tests.integration.test_service_access import app_dsn  # noqa: F401 - fixture
from tests.serving import served, sse_events


@pytest.fixture
def places(db: Database) -> Database:
    pgrag.ingest_documents(
        db,
        [from_text(source, text, title=title) for source, (title, text) in DOCS.items()],
        collection="places",
    )
    ensure_collection(db, "empty")
    return db


def _anonymous() -> httpx.Client:
    """What a client of a --no-auth service sends: no credentials (the openai client insists on
    an API key, so its Authorization header is taken off)."""

    def strip(request: httpx.Request) -> None:
        request.headers.pop("Authorization", None)

    return httpx.Client(event_hooks={"request": [strip]})


@pytest.fixture
def client(places: Database, dsn: str) -> Iterator[openai.OpenAI]:
    with served(dsn, no_auth=True) as s:
        yield openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", http_client=_anonymous())


def _pgrag(obj: Any) -> dict[str, Any]:
    extra = obj.model_extra or {}
    assert "pgrag" in extra, obj
    field: dict[str, Any] = extra["pgrag"]
    return field


def test_a_cited_answer_with_its_sources_in_the_extension_field(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(
        model="places", messages=[{"role": "user", "content": "Who founded Lakemont University?"}]
    )
    assert done.object == "chat.completion" and done.model == "places"
    choice = done.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    text = choice.message.content or ""
    assert "Anna Verhoef" in text
    meta = _pgrag(done)
    assert meta["abstained"] is False and meta["reason"] is None
    assert isinstance(meta["query_id"], int) and meta["conversation_id"]
    assert meta["standalone_query"] == "Who founded Lakemont University?"
    assert meta["citations"] and all(f"[{c['n']}]" in text for c in meta["citations"])
    by_n = {s["n"]: s for s in meta["sources"]}
    cited = by_n[meta["citations"][0]["n"]]
    assert cited["source"] == "lakemont-history.md" and "Anna Verhoef" in cited["text"]


def test_a_client_resending_its_history_continues_one_conversation(client: openai.OpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "You are a guide."},
        {"role": "user", "content": "Who founded Lakemont University?"},
    ]
    first = client.chat.completions.create(model="places", messages=messages)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "When was it founded?"},
    ]
    second = client.chat.completions.create(model="places", messages=messages)
    one, two = _pgrag(first), _pgrag(second)
    assert two["conversation_id"] == one["conversation_id"]
    assert two["standalone_query"] == "When was Lakemont University founded?"
    assert two["rewrite"] == "heuristic"
    assert "1871" in (second.choices[0].message.content or "")
    before = {s["chunk_id"]: s["n"] for s in one["sources"]}
    now = {s["chunk_id"]: s["n"] for s in two["sources"]}
    assert set(before) & set(now)
    assert all(now[c] == before[c] for c in set(before) & set(now))
    # A history the service never answered starts a conversation of its own.
    other = client.chat.completions.create(
        model="places",
        messages=[
            {"role": "user", "content": "Who founded Lakemont University?"},
            {"role": "assistant", "content": "Someone else [1]."},
            {"role": "user", "content": "When was it founded?"},
        ],
    )
    assert _pgrag(other)["conversation_id"] != one["conversation_id"]


def test_the_conversation_id_extension_continues_a_stored_conversation(
    client: openai.OpenAI,
) -> None:
    first = client.chat.completions.create(
        model="places", messages=[{"role": "user", "content": "Who built the Brightwater Bridge?"}]
    )
    cid = _pgrag(first)["conversation_id"]
    follow = client.chat.completions.create(
        model="ignored",
        messages=[{"role": "user", "content": "How long is it?"}],
        extra_body={"conversation_id": cid, "collection": "places"},
    )
    meta = _pgrag(follow)
    assert meta["conversation_id"] == cid
    assert meta["standalone_query"] == "How long is Brightwater Bridge?"
    stored = client.get(f"/conversations/{cid}", cast_to=httpx.Response).json()
    assert [t["role"] for t in stored["turns"]] == ["user", "assistant"] * 2
    assert stored["turns"][2]["standalone_query"] == "How long is Brightwater Bridge?"
    listed = client.get("/conversations", cast_to=httpx.Response).json()["conversations"]
    assert cid in [c["id"] for c in listed]
    client.delete(f"/conversations/{cid}", cast_to=httpx.Response)
    with pytest.raises(openai.NotFoundError, match="does not exist or is another caller's"):
        client.chat.completions.create(
            model="places",
            messages=[{"role": "user", "content": "And the tram?"}],
            extra_body={"conversation_id": cid},
        )


def test_streamed_chunks_end_with_the_finish_reason_and_the_extension_field(
    places: Database, dsn: str
) -> None:
    llm = LLMServer()
    llm.answer = lambda body: (
        "Lakemont University was founded by Anna Verhoef [1]."
        if "Anna Verhoef" in body["messages"][-1]["content"]
        else "I don't know based on the sources."
    )
    settings = Settings(llm_base_url=llm.url, llm_model="test", min_confidence="off")
    with llm, served(dsn, settings, no_auth=True) as s:
        client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", http_client=_anonymous())
        chunks = list(
            client.chat.completions.create(
                model="places",
                messages=[{"role": "user", "content": "Who founded Lakemont University?"}],
                stream=True,
            )
        )
        # The wire format itself: bare data lines, ending in [DONE].
        with httpx.stream(
            "POST",
            f"{s.url}/v1/chat/completions",
            json={
                "model": "places",
                "stream": True,
                "messages": [{"role": "user", "content": "Who founded Lakemont University?"}],
            },
        ) as r:
            raw = list(sse_events(r.iter_lines()))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == "Lakemont University was founded by Anna Verhoef [1]."
    assert len([c for c in chunks if c.choices[0].delta.content]) >= 5  # as the model wrote
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    meta = _pgrag(last)
    assert meta["answer"] == streamed and meta["abstained"] is False
    assert meta["citations"][0]["n"] == 1 and meta["citations"][0]["source"].endswith(".md")
    assert all("pgrag" not in (c.model_extra or {}) for c in chunks[:-1])
    assert [name for name, _ in raw] == ["message"] * len(raw)
    assert raw[-1][1] == "[DONE]" and json.loads(raw[-2][1])["pgrag"]["conversation_id"]


def test_the_offline_reader_streams_its_answer_in_one_piece(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="places",
            messages=[{"role": "user", "content": "What is the capital of Mongolia?"}],
            stream=True,
        )
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    meta = _pgrag(chunks[-1])
    assert meta["abstained"] is True and meta["reason"]
    assert texts == [meta["answer"]] == ["I don't know based on the sources."]


def test_requests_it_cannot_answer_are_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="collection 'nowhere' does not exist"):
        client.chat.completions.create(
            model="nowhere", messages=[{"role": "user", "content": "Hello?"}]
        )
    with pytest.raises(openai.NotFoundError, match="collection 'nowhere' does not exist"):
        client.chat.completions.create(
            model="nowhere", messages=[{"role": "user", "content": "Hello?"}], stream=True
        )
    with pytest.raises(openai.BadRequestError, match="must be the user's question"):
        client.chat.completions.create(
            model="places",
            messages=[
                {"role": "user", "content": "Hello?"},
                {"role": "assistant", "content": "Hi."},
            ],
        )
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(
            model="places", messages=[{"role": "user", "content": "Hello?"}], n=2
        )
    with pytest.raises(openai.BadRequestError, match="conversation_id must be a UUID"):
        client.chat.completions.create(
            model="places",
            messages=[{"role": "user", "content": "Hello?"}],
            extra_body={"conversation_id": "yesterday's"},
        )
    with pytest.raises(openai.BadRequestError, match=r"content\[0\]: only text parts"):
        client.chat.completions.create(
            model="places",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                }
            ],
        )
    chatter: list[Any] = [
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hi."},
    ]
    with pytest.raises(openai.BadRequestError, match="messages: List should have at most 200"):
        client.chat.completions.create(
            model="places", messages=[*chatter * 100, {"role": "user", "content": "And now?"}]
        )
    parts = client.chat.completions.create(
        model="places",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Who built the bridge?"}]}],
    )
    assert _pgrag(parts)["standalone_query"] == "Who built the bridge?"


def test_models_are_the_collections_the_caller_can_read(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["places"]  # "empty" has nothing to read
    assert models.data[0].object == "model" and models.data[0].owned_by == "pgrag"
    assert client.models.retrieve("places").id == "places"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("empty")


@pytest.mark.parametrize("role", ["owner", "pgrag_app"])
def test_two_keys_have_their_own_conversations_and_models(
    places: Database,
    dsn: str,
    app_dsn: str,  # noqa: F811 - the fixture imported above
    role: str,
) -> None:
    pgrag.ingest_documents(
        places,
        [from_text("alice-notes.md", "Alice keeps the spare keys of the Corvin Observatory.")],
        collection="alice-only",
        allow=["alice"],
    )
    _, alice_key = keys.create_key(places, principals=["alice"])
    _, bob_key = keys.create_key(places, principals=["bob"])
    # The service logs in as the schema's owner (RLS does not apply to it: the entry points
    # filter) or as a pgrag_app member, as it should run.
    with served(dsn if role == "owner" else app_dsn) as s:
        alice = openai.OpenAI(base_url=f"{s.url}/v1", api_key=alice_key)
        bob = openai.OpenAI(base_url=f"{s.url}/v1", api_key=bob_key)
        assert {m.id for m in alice.models.list().data} == {"places", "alice-only"}
        assert {m.id for m in bob.models.list().data} == {"places"}
        first = alice.chat.completions.create(
            model="places",
            messages=[{"role": "user", "content": "Who founded Lakemont University?"}],
        )
        cid = _pgrag(first)["conversation_id"]
        with pytest.raises(openai.NotFoundError, match="another caller's"):
            bob.chat.completions.create(
                model="places",
                messages=[{"role": "user", "content": "When was it founded?"}],
                extra_body={"conversation_id": cid},
            )
        with pytest.raises(openai.NotFoundError):
            bob.get(f"/conversations/{cid}", cast_to=httpx.Response)
        # Bob resending alice's history does not continue her conversation either.
        copied = bob.chat.completions.create(
            model="places",
            messages=[
                {"role": "user", "content": "Who founded Lakemont University?"},
                {"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "When was it founded?"},
            ],
        )
        assert _pgrag(copied)["conversation_id"] != cid
        hidden = bob.chat.completions.create(
            model="alice-only", messages=[{"role": "user", "content": "Who keeps the spare keys?"}]
        )
        assert _pgrag(hidden)["abstained"] is True and _pgrag(hidden)["sources"] == []


def test_an_error_mid_stream_is_an_error_event_the_client_raises(
    places: Database, dsn: str
) -> None:
    llm = LLMServer()
    pieces = [
        sse_data({"choices": [{"index": 0, "delta": {"content": w}}]}) for w in "Lake mont".split()
    ]
    llm.replies = [Reply(sse=[*pieces, "data: [DONE]"], drop_after=2)]
    settings = Settings(llm_base_url=llm.url, llm_model="test", min_confidence="off")
    with llm, served(dsn, settings, no_auth=True) as s:
        client = openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", http_client=_anonymous())
        stream = client.chat.completions.create(
            model="places",
            messages=[{"role": "user", "content": "Who founded Lakemont University?"}],
            stream=True,
        )
        got: list[str] = []
        with pytest.raises(openai.APIError, match="dropped the connection mid-answer"):
            for chunk in stream:
                got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "Lakemont"
