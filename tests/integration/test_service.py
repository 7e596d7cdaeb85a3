"""``pgrag serve``'s core routes against a real server: search, ask (JSON and streamed),
embeddings, listing, health, metrics, errors, and a client that goes away mid-request."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import numpy as np
import psycopg
import pytest
from psycopg import sql

import pgrag
from pgrag.config import Settings
from pgrag.errors import InputError
from pgrag.service.config import ServiceConfig
from tests.fakes import LLMServer
from tests.serving import served, sse_events

DOCS = {
    "refunds.md": "# Refunds\n\nMonthly plans can be refunded within 14 days of the charge.\n",
    "shipping.md": "# Shipping\n\nParcels to Norway take five working days by road.\n",
}


@pytest.fixture
def corpus(db: Any, tmp_path: Path) -> Any:
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    pgrag.ingest(db, [tmp_path], collection="handbook")
    return db


def test_search_over_http_is_the_library_search(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        r = httpx.post(
            f"{s.url}/v1/search", json={"query": "refund window", "collection": "handbook", "k": 2}
        )
        assert r.status_code == 200, r.text
        body = r.json()
    local = pgrag.search(corpus, "refund window", collection="handbook", k=2)
    assert [h["chunk_id"] for h in body["results"]] == [h.chunk_id for h in local]
    assert body["results"][0]["source"].endswith("refunds.md")
    assert set(body["timings"]) >= {"embed_ms", "retrieve_ms"}


def test_embeddings_let_sql_search_as_the_service_does(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        r = httpx.post(
            f"{s.url}/v1/embeddings", json={"input": "parcel to norway", "model": "handbook"}
        )
        assert r.status_code == 200, r.text
        out = r.json()
        vector_hits = httpx.post(
            f"{s.url}/v1/search",
            json={"query": "parcel to norway", "collection": "handbook", "mode": "vector"},
        ).json()["results"]
    assert out["object"] == "list" and out["data"][0]["index"] == 0
    embedding = np.asarray(out["data"][0]["embedding"], dtype=np.float32)
    assert embedding.shape == (384,)
    assert np.allclose(embedding, corpus.given_embedder.embed(["parcel to norway"])[0], atol=1e-5)
    # What an application in another language does with it: search_v5 from SQL.
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT chunk_id FROM pgrag.search_v5('handbook', NULL,"
            " %s::text::vector, k => 10, model => %s)",
            (json.dumps(out["data"][0]["embedding"]), out["model"]),
        ).fetchall()
    assert [r[0] for r in rows] == [h["chunk_id"] for h in vector_hits]


def test_embeddings_refuse_what_they_cannot_embed(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        tokens = httpx.post(f"{s.url}/v1/embeddings", json={"input": [1, 2], "model": "handbook"})
        empty = httpx.post(f"{s.url}/v1/embeddings", json={"input": [], "model": "handbook"})
        dims = httpx.post(
            f"{s.url}/v1/embeddings", json={"input": "x", "model": "handbook", "dimensions": 3}
        )
        unknown = httpx.post(f"{s.url}/v1/embeddings", json={"input": "x", "model": "nope"})
    assert tokens.status_code == 400 and "token arrays" in tokens.json()["error"]["message"]
    assert empty.status_code == 400 and "input is empty" in empty.json()["error"]["message"]
    assert dims.status_code == 400 and "384-dimensional" in dims.json()["error"]["message"]
    assert unknown.status_code == 400 and "'nope'" in unknown.json()["error"]["message"]


def test_ask_streams_tokens_then_the_checked_answer(corpus: Any, dsn: str) -> None:
    llm = LLMServer("Monthly plans can be refunded within 14 days [1].")
    settings = Settings(llm_base_url=llm.url, llm_model="test", min_confidence="off")
    question = {"question": "How long is the refund window?", "collection": "handbook"}
    with served(dsn, settings, no_auth=True) as s:
        with httpx.stream("POST", f"{s.url}/v1/ask", json={**question, "stream": True}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = list(sse_events(r.iter_lines()))
    names = [n for n, _ in events]
    assert names[-2:] == ["answer", "done"] and names.count("token") >= 5
    streamed = "".join(json.loads(d)["text"] for n, d in events if n == "token")
    answer = json.loads(events[-2][1])
    assert streamed == answer["raw_answer"] == "Monthly plans can be refunded within 14 days [1]."
    assert answer["abstained"] is False and answer["citations"][0]["n"] == 1
    assert answer["citations"][0]["source"].endswith("refunds.md")
    assert isinstance(answer["query_id"], int) and "prompt" not in answer


def test_ask_as_json_abstains_with_its_reason(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        r = httpx.post(
            f"{s.url}/v1/ask",
            json={"question": "What is the capital of Mongolia?", "collection": "handbook"},
        )
    body = r.json()
    assert r.status_code == 200 and body["abstained"] is True
    assert body["reason"] and "confidence" in body["reason"]


def test_errors_are_one_line_envelopes(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        empty = httpx.post(f"{s.url}/v1/search", json={"query": " ", "collection": "handbook"})
        missing = httpx.post(f"{s.url}/v1/search", json={"query": "x", "collection": "nope"})
        extra = httpx.post(f"{s.url}/v1/search", json={"query": "x", "colection": "handbook"})
        broken = httpx.post(
            f"{s.url}/v1/search", content=b"{not json", headers={"content-type": "application/json"}
        )
        nowhere = httpx.get(f"{s.url}/v1/nothing-here")
    assert empty.status_code == 400 and "query is empty" in empty.json()["error"]["message"]
    assert missing.status_code == 404 and "'nope'" in missing.json()["error"]["message"]
    assert extra.status_code == 400 and "colection" in extra.json()["error"]["message"]
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_request_error"
    assert nowhere.status_code == 404
    for r in (empty, missing, extra, broken):
        assert "\n" not in r.json()["error"]["message"]


def test_without_credentials_a_request_is_refused(corpus: Any, dsn: str) -> None:
    with served(dsn) as s:
        r = httpx.post(f"{s.url}/v1/search", json={"query": "refund", "collection": "handbook"})
        health = httpx.get(f"{s.url}/healthz")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "pgrag keys create" in r.json()["error"]["message"]
    assert health.status_code == 200  # probes need no credentials


def test_no_auth_is_only_for_loopback() -> None:
    with pytest.raises(InputError, match="only on a loopback address"):
        ServiceConfig(host="0.0.0.0", no_auth=True).check()  # noqa: S104
    ServiceConfig(host="::1", no_auth=True).check()


def test_readiness_and_metrics(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        ready = httpx.get(f"{s.url}/readyz")
        httpx.post(f"{s.url}/v1/search", json={"query": "refund", "collection": "handbook"})
        httpx.post(f"{s.url}/v1/search", json={"query": "", "collection": "handbook"})
        text = httpx.get(f"{s.url}/metrics").text
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "schema": "ok"}
    assert 'pgrag_http_requests_total{method="POST",route="/v1/search",status="200"} 1.0' in text
    assert 'pgrag_http_requests_total{method="POST",route="/v1/search",status="400"} 1.0' in text
    assert 'pgrag_stage_duration_seconds_count{route="/v1/search",stage="embed"} 1.0' in text
    assert 'pgrag_embedding_queue_depth{collection="handbook"} 0.0' in text
    assert "pgrag_pool_connections" in text


def test_readiness_fails_when_the_schema_is_not_this_release(corpus: Any, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT table_schema FROM information_schema.tables"
            " WHERE table_name = 'alembic_version_pgrag'"
        ).fetchone()
        assert row is not None
        table = sql.Identifier(row[0], "alembic_version_pgrag")
        (head,) = conn.execute(sql.SQL("SELECT version_num FROM {}").format(table)).fetchone() or (
            "",
        )
    with served(dsn, no_auth=True, pool_timeout=2.0) as s:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {} SET version_num = '0001'").format(table))
        try:
            r = httpx.get(f"{s.url}/readyz")
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("UPDATE {} SET version_num = %s").format(table), (head,))
    assert r.status_code == 503 and r.json()["status"] == "unavailable"
    assert "0001" in r.json()["checks"]["schema"]


def _waiting(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgrag serve'"
            " AND wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_client_that_goes_away_stops_its_query_in_postgres(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        httpx.post(f"{s.url}/v1/search", json={"query": "warm", "collection": "handbook"})
        blocker = psycopg.connect(dsn)
        blocker.execute("LOCK TABLE pgrag.chunks IN ACCESS EXCLUSIVE MODE")
        try:

            def impatient() -> None:
                try:
                    httpx.post(
                        f"{s.url}/v1/search",
                        json={"query": "refund window again", "collection": "handbook"},
                        timeout=httpx.Timeout(2.0),
                    )
                except httpx.TimeoutException:
                    pass  # the client gives up and closes its connection

            client = threading.Thread(target=impatient)
            client.start()
            deadline = time.monotonic() + 20
            while _waiting(dsn) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _waiting(dsn) == 1, "the search never reached the lock"
            client.join(10)
            deadline = time.monotonic() + 10
            while _waiting(dsn) and time.monotonic() < deadline:
                time.sleep(0.1)
            # The lock is still held: only the service's cancel can have ended the wait.
            assert _waiting(dsn) == 0
        finally:
            blocker.rollback()
            blocker.close()
        after = httpx.post(f"{s.url}/v1/search", json={"query": "refund", "collection": "handbook"})
    assert after.status_code == 200  # the pooled connection came back usable


def test_without_credentials_only_this_machines_pages_may_call(corpus: Any, dsn: str) -> None:
    query = {"query": "refund", "collection": "handbook"}
    with served(dsn, no_auth=True) as s:
        # DNS rebinding: a site's name resolved to 127.0.0.1 reads nothing.
        rebound = httpx.post(f"{s.url}/v1/search", json=query, headers={"Host": "evil.example"})
        # Cross-site request forgery: a page elsewhere may not post (an upload needs no
        # preflight), while the service's own page (a loopback origin) may.
        forged = httpx.post(
            f"{s.url}/v1/documents",
            files={"files": ("planted.md", b"# Planted\n\nRefunds take 365 days.\n")},
            data={"collection": "handbook"},
            headers={"Origin": "http://evil.example"},
        )
        own = httpx.post(f"{s.url}/v1/search", json=query, headers={"Origin": s.url})
        listing = httpx.post(f"{s.url}/v1/search", json={**query, "query": "365 days planted"})
    assert rebound.status_code == 421 and "evil.example" in rebound.json()["error"]["message"]
    assert forged.status_code == 403 and "--cors-origin" in forged.json()["error"]["message"]
    assert own.status_code == 200
    assert all("planted" not in h["source"] for h in listing.json()["results"])


def test_with_keys_the_host_is_not_checked(corpus: Any, dsn: str) -> None:
    with served(dsn) as s:
        r = httpx.post(
            f"{s.url}/v1/search", json={"query": "x"}, headers={"Host": "pgrag.example.com"}
        )
    assert r.status_code == 401  # a name behind a proxy is fine; the key decides


def test_a_body_past_the_bound_is_refused_before_it_is_read(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True, max_json_bytes=1 << 20) as s:
        big = {"query": "x" * (2 << 20), "collection": "handbook"}
        declared = httpx.post(f"{s.url}/v1/search", json=big)

        def chunks() -> Any:  # no Content-Length: the bound counts what arrives
            for _ in range(40):
                yield b" " * 65536

        streamed = httpx.post(
            f"{s.url}/v1/search", content=chunks(), headers={"content-type": "application/json"}
        )
        after = httpx.post(f"{s.url}/v1/search", json={"query": "refund", "collection": "handbook"})
    assert declared.status_code == 413 and "1 MiB" in declared.json()["error"]["message"]
    assert streamed.status_code == 413
    assert after.status_code == 200


def test_values_the_database_refuses_are_the_requests_fault(corpus: Any, dsn: str) -> None:
    base = {"query": "refund", "collection": "handbook"}
    with served(dsn, no_auth=True) as s:
        rrf = httpx.post(f"{s.url}/v1/search", json={**base, "settings": {"rrf_k": -1}})
        nan = httpx.post(
            f"{s.url}/v1/search",
            content=b'{"query": "refund", "settings": {"vector_weight": NaN}}',
            headers={"content-type": "application/json"},
        )
        form = httpx.post(f"{s.url}/v1/search", data={"query": "refund"})
    assert rrf.status_code == 400, rrf.text
    assert nan.status_code == 400, nan.text
    assert form.status_code == 400 and "Content-Type: application/json" in form.text


def test_a_key_sent_without_bearer_is_not_echoed(corpus: Any, db: Any, dsn: str) -> None:
    from pgrag.service.keys import create_key

    _, key = create_key(db, principals=["alice"])
    with served(dsn) as s:
        r = httpx.post(f"{s.url}/v1/search", json={"query": "x"}, headers={"Authorization": key})
    assert r.status_code == 401 and key[:12] not in r.text and "Bearer" in r.text


def test_readiness_is_about_the_database_not_a_busy_pool(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True, pool_min=1, pool_max=1, pool_timeout=1.0) as s:
        with s.service.connection():  # the only pooled connection, taken
            ready = httpx.get(f"{s.url}/readyz")
            busy = httpx.post(
                f"{s.url}/v1/search", json={"query": "refund", "collection": "handbook"}
            )
    assert ready.status_code == 200
    assert busy.status_code == 503 and busy.headers["retry-after"]
    assert "overloaded" in busy.json()["error"]["message"]


def test_a_superuser_service_is_warned(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        warnings = s.service.warnings
    assert len(warnings) == 1 and "pgrag_app" in warnings[0]


def test_metrics_labels_stay_few_whatever_clients_send(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        for i in range(5):
            httpx.request(f"M{i}XYZ", f"{s.url}/random-{i}")
        httpx.request("M" * 500, f"{s.url}/v1/search")
        text = httpx.get(f"{s.url}/metrics").text
    assert "XYZ" not in text and "MMMM" not in text and "random-" not in text
    assert 'method="other",route="unmatched"' in text


def test_a_nul_in_a_name_is_the_requests_fault(corpus: Any, dsn: str) -> None:
    with served(dsn, no_auth=True) as s:
        r = httpx.post(f"{s.url}/v1/search", json={"query": "refund", "collection": "a\x00b"})
    assert r.status_code == 400, r.text
