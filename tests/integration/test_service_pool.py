"""The service's pool pings a connection that idled before handing it out, so one the server
ended while it idled is replaced rather than failing a request (a connection handed back
moments ago is not pinged: that saves a round trip per request under load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest

import pgrag
from pgrag.service import runtime
from tests.serving import served


def _terminate_service_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'pgrag serve' AND datname = current_database()"
        ).fetchall()
    return len(rows)


def test_a_connection_ended_while_idle_is_replaced(
    db: Any, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.md").write_text("# Parcels\n\nParcels to Norway take five working days.\n")
    pgrag.ingest(db, [tmp_path], collection="handbook")
    query = {"query": "parcels to norway", "collection": "handbook"}
    with served(dsn, no_auth=True, pool_min=1, pool_max=1) as s:
        assert httpx.post(f"{s.url}/v1/search", json=query).status_code == 200
        assert _terminate_service_connections(dsn) == 1
        monkeypatch.setattr(runtime, "CHECK_AFTER_IDLE_SECONDS", 0.0)  # it idled "long enough"
        r = httpx.post(f"{s.url}/v1/search", json=query)
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["source"].endswith("a.md")
