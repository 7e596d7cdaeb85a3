"""Two API keys bound to different principals see only their own documents through the
service's core routes, whether it connects as a pgrag_app member or as the owner; a key
cannot widen its principals, and a revoked key stops working at once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.service.keys import create_key, revoke_key
from tests.serving import served

DOCS = {
    "alice/plan.md": ("alice", "# Alice plan\n\nThe zeppelin budget for Alice is 400 crowns.\n"),
    "bob/plan.md": ("bob", "# Bob plan\n\nThe zeppelin budget for Bob is 900 crowns.\n"),
    "all/hours.md": ("public", "# Hours\n\nThe office opens at nine; zeppelin tours on Fridays.\n"),
}


@pytest.fixture
def app_dsn(admin_dsn: str, dsn: str) -> Iterator[str]:
    """A login role that is a member of pgrag_app, as the service should run."""
    role = f"serve_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgrag_app").format(sql.Identifier(role)))
    yield make_conninfo(dsn, user=role)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def keys(db: Any, tmp_path: Path) -> dict[str, str]:
    for name, (principal, text) in DOCS.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        pgrag.ingest(db, [path], collection="plans", allow=[principal])
    return {
        who: create_key(db, principals=[who], name=f"{who}-test")[1] for who in ("alice", "bob")
    }


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _sources(hits: list[dict[str, Any]]) -> set[str]:
    return {Path(h["source"]).parent.name + "/" + Path(h["source"]).name for h in hits}


@pytest.mark.parametrize("role", ["pgrag_app member", "owner"])
def test_each_key_sees_only_its_own_documents(
    keys: dict[str, str], dsn: str, app_dsn: str, role: str
) -> None:
    with served(app_dsn if role == "pgrag_app member" else dsn) as s:
        seen: dict[str, Any] = {}
        for who, key in keys.items():
            for mode in ("hybrid", "keyword", "vector"):
                r = httpx.post(
                    f"{s.url}/v1/search",
                    json={"query": "zeppelin budget", "collection": "plans", "k": 10, "mode": mode},
                    headers=_bearer(key),
                )
                assert r.status_code == 200, r.text
                seen[f"{who}/{mode}"] = _sources(r.json()["results"])
            answer = httpx.post(
                f"{s.url}/v1/ask",
                json={
                    "question": "What is the zeppelin budget?",
                    "collection": "plans",
                    "min_confidence": 0.0,
                },
                headers=_bearer(key),
            ).json()
            seen[f"{who}/ask"] = _sources(answer["sources"])
            listing = httpx.get(f"{s.url}/v1/collections", headers=_bearer(key)).json()
            seen[f"{who}/documents"] = {c["name"]: c["documents"] for c in listing["collections"]}
            emb = httpx.post(
                f"{s.url}/v1/embeddings",
                json={"input": "x", "model": "plans"},
                headers=_bearer(key),
            )
            assert emb.status_code == 200, emb.text
    for who, other in (("alice", "bob"), ("bob", "alice")):
        for mode in ("hybrid", "keyword", "vector", "ask"):
            assert f"{who}/plan.md" in seen[f"{who}/{mode}"], (who, mode)
            assert f"{other}/plan.md" not in seen[f"{who}/{mode}"], (who, mode)
        assert seen[f"{who}/documents"] == {"plans": 2}


def test_a_key_cannot_widen_its_principals(keys: dict[str, str], app_dsn: str) -> None:
    with served(app_dsn) as s:
        r = httpx.post(
            f"{s.url}/v1/search",
            json={"query": "zeppelin", "collection": "plans", "principals": ["bob"]},
            headers=_bearer(keys["alice"]),
        )
        forged = httpx.post(
            f"{s.url}/v1/search",
            json={"query": "zeppelin", "collection": "plans"},
            headers=_bearer(keys["alice"][:-4] + "AAAA"),
        )
    assert r.status_code == 400 and "principals" in r.json()["error"]["message"]
    assert forged.status_code == 401 and keys["alice"] not in forged.text


def test_a_revoked_key_stops_at_once(db: Any, keys: dict[str, str], app_dsn: str) -> None:
    query = {"query": "zeppelin", "collection": "plans"}
    with served(app_dsn) as s:
        before = httpx.post(f"{s.url}/v1/search", json=query, headers=_bearer(keys["bob"]))
        revoke_key(db, keys["bob"].split("_")[1])
        after = httpx.post(f"{s.url}/v1/search", json=query, headers=_bearer(keys["bob"]))
    assert before.status_code == 200
    assert after.status_code == 401 and "revoked" in after.json()["error"]["message"]
