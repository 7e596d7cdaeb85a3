"""Document-level results (``pgrag.search(..., group="document")``, ``pgrag search
--documents``, ``"group": "document"`` on ``POST /v1/search``) on the real model and a real
PostgreSQL: distinct documents ranked by their best chunk, each with its best chunks in rank
order, k respected (searching deeper when one document fills the chunk list), and only what
search_v5 returned for the caller, so a restricted reader never sees a document it may not read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag import access
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.ingest.loaders import from_text
from pgrag.retrieval.grouping import DocumentHit, first_depth, group_by_document, next_depth
from pgrag.retrieval.search import SearchResult
from tests.fakes import LLMServer
from tests.integration.conftest import TEMPLATE, _create_database, _drop_database
from tests.serving import served

ROOT = Path(__file__).resolve().parents[2]
QUERY = "Zanzibar ferry tickets"
SECTIONS = 16  # the handbook's chunks: each of them outranks every other document's


def _handbook() -> str:
    sections = "\n\n".join(
        f"## Crossing {i}\n\nThe Zanzibar ferry crossing {i} leaves the harbour at {6 + i}:00"
        " every morning. Tickets for the Zanzibar ferry are sold at the pier kiosk, cash only,"
        " and the ferry carries bicycles."
        for i in range(SECTIONS)
    )
    return f"# Zanzibar ferry handbook\n\n{sections}\n"


@pytest.fixture
def loaded(db: Database, corpus: Path, tmp_path: Path) -> Database:
    """tests/conftest.py's corpus, a 16-chunk handbook on the Zanzibar ferry, and five
    one-chunk travel notes that mention the ferry once."""
    root = tmp_path / "travel"
    root.mkdir()
    (root / "handbook.md").write_text(_handbook())
    for j in range(5):
        (root / f"note{j}.txt").write_text(
            f"Travel note {j}: "
            + "we walked around the old town and ate well. " * 8
            + "Later we took the Zanzibar ferry once.\n"
        )
    report = pgrag.ingest(db, [root, corpus], collection="docs")
    assert not report.failed and report.chunks_written == SECTIONS + 5 + 5
    return db


def _name(source: str) -> str:
    return source.rsplit("/", 1)[1]


def _check_shape(hits: list[DocumentHit], k: int, per_document: int) -> None:
    """What every grouped result must be, whatever the query."""
    assert 0 < len(hits) <= k
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert len({h.document_id for h in hits}) == len(hits)
    best = [h.chunks[0].rank for h in hits]
    assert best == sorted(best) and len(set(best)) == len(best)
    for h in hits:
        assert 1 <= len(h.chunks) <= per_document and len(h.chunks) <= h.matched
        ranks = [c.rank for c in h.chunks]
        assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
        assert {c.document_id for c in h.chunks} == {h.document_id}
        assert {c.source for c in h.chunks} == {h.source}
        assert h.score == h.chunks[0].score
        assert h.metadata == h.chunks[0].metadata


def test_one_document_no_longer_fills_the_list(loaded: Database) -> None:
    # Plain chunk search: the handbook's sections take every place.
    plain = pgrag.search(loaded, QUERY, collection="docs", k=5)
    assert len(plain) == 5 and {_name(r.source) for r in plain} == {"handbook.md"}

    timings: dict[str, float] = {}
    hits = pgrag.search(loaded, QUERY, collection="docs", k=5, group="document", timings=timings)
    _check_shape(hits, 5, 3)
    assert len(hits) == 5
    assert _name(hits[0].source) == "handbook.md"
    assert hits[0].title == "Zanzibar ferry handbook"
    assert hits[0].matched == SECTIONS and len(hits[0].chunks) == 3
    assert [c.rank for c in hits[0].chunks] == [1, 2, 3]
    # The four other places go to the travel notes, the only other documents that mention
    # the ferry, and the first search (7 chunks deep at k = 5) could not find them.
    assert {_name(h.source) for h in hits[1:]} < {f"note{j}.txt" for j in range(5)}
    assert timings["group_searches"] >= 2 and timings["group_depth"] > first_depth(5)
    assert timings["embed_ms"] >= 0 and timings["retrieve_ms"] > 0


def test_documents_are_the_deep_search_folded(loaded: Database) -> None:
    """The grouped result is exactly the chunk search at the depth it used, folded by hand:
    documents in the order of their first chunk, each with its first N chunks."""
    for mode in ("hybrid", "keyword", "vector"):
        timings: dict[str, float] = {}
        hits = pgrag.search(
            loaded,
            "refund within days",
            collection="docs",
            k=4,
            mode=mode,
            group="document",
            chunks_per_document=1,
            timings=timings,
        )
        _check_shape(hits, 4, 1)
        deep = pgrag.search(
            loaded,
            "refund within days",
            collection="docs",
            k=int(timings["group_depth"]),
            mode=mode,
        )
        order: list[int] = []
        for r in deep:
            if r.document_id not in order:
                order.append(r.document_id)
        assert [h.document_id for h in hits] == order[:4], mode
        for h in hits:
            mine = [r for r in deep if r.document_id == h.document_id]
            assert h.chunks == mine[:1] and h.matched == len(mine)
            total = sum(r.probability or 0.0 for r in mine)
            assert h.probability == pytest.approx(total)


def test_k_and_chunks_per_document_are_respected(loaded: Database) -> None:
    for k in (1, 2, 3):
        for per_document in (1, 2, 5):
            hits = pgrag.search(
                loaded,
                QUERY,
                collection="docs",
                k=k,
                group="document",
                chunks_per_document=per_document,
            )
            _check_shape(hits, k, per_document)
            assert len(hits) == k
            assert len(hits[0].chunks) == per_document  # the handbook has 16 to give
    # More documents asked for than the collection holds: every document once, and the
    # search stopped when it ran out of chunks rather than at 1,000.
    timings: dict[str, float] = {}
    every = pgrag.search(loaded, QUERY, collection="docs", k=50, group="document", timings=timings)
    _check_shape(every, 50, 3)
    assert len(every) == 9  # the handbook, five notes, refunds.md, security.md, office.txt
    assert timings["group_searches"] == 1 and timings["group_depth"] == first_depth(50) == 60
    # The default is chunk search, unchanged.
    chunks = pgrag.search(loaded, QUERY, collection="docs", k=3)
    assert all(isinstance(r, SearchResult) for r in chunks) and len(chunks) == 3


def test_grouping_keeps_the_filter_and_the_other_arguments(loaded: Database) -> None:
    hits = pgrag.search(
        loaded, QUERY, collection="docs", k=10, group="document", filter={"format": "text"}
    )
    _check_shape(hits, 10, 3)
    assert {_name(h.source) for h in hits} == {f"note{j}.txt" for j in range(5)} | {"office.txt"}
    keyword = pgrag.search(loaded, QUERY, collection="docs", k=10, group="document", mode="keyword")
    assert all(c.vector_rank is None for h in keyword for c in h.chunks)
    assert "security.md" not in {_name(h.source) for h in keyword}  # no word of the query


def test_a_rewritten_search_is_grouped_too(
    loaded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HyDE with group="document": each search the grouping runs is the rewritten one (the
    model asked once per search), the same as searching with the passage's embedding."""
    from pgrag.llm.chat import LLMConfig
    from pgrag.retrieval.expansion import QueryRewrite

    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    passage = "The pier kiosk sells Zanzibar ferry tickets for cash; crossings leave at dawn."
    server = LLMServer(reply=passage)
    try:
        timings: dict[str, float] = {}
        rewrite = QueryRewrite("hyde", llm=LLMConfig(base_url=server.url, model="t", max_retries=0))
        hits = pgrag.search(
            loaded,
            QUERY,
            collection="docs",
            k=3,
            group="document",
            rewrite=rewrite,
            timings=timings,
        )
        asked = len(server.requests)
    finally:
        server.close()
    _check_shape(hits, 3, 3)
    assert len(hits) == 3 and asked == timings["group_searches"] == 2
    assert timings["expand_ms"] > 0
    same = pgrag.search(
        loaded, QUERY, collection="docs", k=3, group="document", embed_text=[passage, QUERY]
    )
    assert [[c.chunk_id for c in h.chunks] for h in hits] == [
        [c.chunk_id for c in h.chunks] for h in same
    ]
    assert [c.vector_distance for c in hits[0].chunks] == pytest.approx(
        [c.vector_distance for c in same[0].chunks]
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group": "paragraph"}, "unknown group 'paragraph'; use one of chunk, document"),
        ({"group": "document", "chunks_per_document": 0}, "chunks_per_document must be"),
        ({"group": "document", "chunks_per_document": 101}, "chunks_per_document must be"),
        ({"group": "document", "k": 1001}, "k must be between 1 and 1000"),
    ],
)
def test_bad_group_arguments_are_one_line_errors(
    loaded: Database, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(pgrag.InputError, match=message):
        pgrag.search(loaded, QUERY, collection="docs", **options)


def test_group_by_document_folds_ranked_chunks() -> None:
    def chunk(rank: int, document: int) -> SearchResult:
        return SearchResult(
            rank,
            1.0 / rank,
            100 + rank,
            document,
            f"doc{document}",
            None,
            None,
            "",
            None,
            rank,
            None,
            1.0,
            {},
            0.1,
        )

    chunks = [chunk(r, d) for r, d in ((1, 7), (2, 7), (3, 8), (4, 7), (5, 9), (6, 8))]
    hits = group_by_document(list(reversed(chunks)), k=2, chunks_per_document=2)
    assert [(h.rank, h.document_id, h.matched) for h in hits] == [(1, 7, 3), (2, 8, 2)]
    assert [c.rank for c in hits[0].chunks] == [1, 2]
    assert hits[0].probability == pytest.approx(0.3) and hits[1].score == 1.0 / 3
    assert group_by_document([], k=3, chunks_per_document=3) == []
    # How deep: a little deeper than k (room for the first document's chunks), then sized by
    # the chunks per document seen so far, never past search_v5's 1,000.
    assert [first_depth(k) for k in (1, 5, 10, 100, 900)] == [3, 7, 12, 120, 1000]
    assert first_depth(1, 5) == 5 and first_depth(10, 8) == 17
    assert next_depth(10, 12, 4) == 45 and next_depth(10, 12, 11) == 24
    assert next_depth(10, 640, 1) == 1000


# -- under access control ---------------------------------------------------------------------


@pytest.fixture
def tenants(admin_dsn: str, template_dsn: str, embedder: Any) -> Iterator[tuple[str, str]]:
    """(superuser DSN, a pgrag_reader role's DSN mapped to tenant:acme): a hidden globex
    handbook whose every chunk outranks the rest, and visible acme and public documents."""
    suffix = uuid.uuid4().hex[:8]
    name = f"pgrag_groups_{suffix}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    reader = f"reader_{suffix}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(reader)))
        conn.execute(sql.SQL("GRANT pgrag_reader TO {}").format(sql.Identifier(reader)))
    db = pgrag.connect(dsn, embedder=embedder)
    try:
        pgrag.ingest_documents(
            db,
            [from_text("globex/handbook.md", _handbook(), format="markdown")],
            collection="t",
            allow=["tenant:globex"],
        )
        for i in range(6):
            owner = ("tenant:acme", "tenant:globex", "public")[i % 3]
            text = (
                f"Note {i}: the Zanzibar ferry tickets were {10 + i} dollars.\n\n"
                + "Nothing else happened that day. " * 30
            )
            pgrag.ingest_documents(
                db, [from_text(f"{owner}/note-{i}.txt", text)], collection="t", allow=[owner]
            )
        access.map_role(db, reader, ["tenant:acme"])
    finally:
        db.close()
    yield dsn, make_conninfo(dsn, user=reader)
    _drop_database(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(reader)))


VISIBLE_TO_ACME = {
    "tenant:acme/note-0.txt",
    "public/note-2.txt",
    "tenant:acme/note-3.txt",
    "public/note-5.txt",
}


def test_a_restricted_reader_sees_only_its_documents(
    tenants: tuple[str, str], embedder: Any
) -> None:
    owner_dsn, reader_dsn = tenants
    owner = pgrag.connect(owner_dsn, embedder=embedder)
    try:
        everything = pgrag.search(owner, QUERY, collection="t", k=3, group="document")
        assert everything[0].source == "globex/handbook.md"  # the hidden document ranks first
        as_acme = pgrag.search(
            owner, QUERY, collection="t", k=100, group="document", principals=["tenant:acme"]
        )
    finally:
        owner.close()
    db = pgrag.connect(reader_dsn, embedder=embedder)
    try:
        for mode in ("hybrid", "keyword", "vector"):
            hits = pgrag.search(db, QUERY, collection="t", k=100, group="document", mode=mode)
            _check_shape(hits, 100, 3)
            assert {h.source for h in hits} == VISIBLE_TO_ACME, mode
            assert all(c.source in VISIBLE_TO_ACME for h in hits for c in h.chunks)
        # k documents, none of them hidden, though the hidden handbook's 16 chunks outrank them.
        top = pgrag.search(db, QUERY, collection="t", k=3, group="document")
        assert len(top) == 3 and {h.source for h in top} < VISIBLE_TO_ACME
    finally:
        db.close()
    assert {h.source for h in as_acme} == VISIBLE_TO_ACME


# -- the command line and the service ---------------------------------------------------------


def _cli(dsn: str, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--dsn", dsn, *args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_cli_documents_text_and_json(loaded: Database, dsn: str) -> None:
    text = _cli(
        dsn, "search", QUERY, "-c", "docs", "-k", "3", "--documents", "--chunks-per-document", "2"
    )
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    entries = [ln for ln in lines if ln[:1].isdigit()]
    assert [e.split(".", 1)[0] for e in entries] == ["1", "2", "3"]
    assert entries[0].startswith("1. Zanzibar ferry handbook  (")
    assert entries[0].endswith(f"; {SECTIONS} chunks matched)")
    assert "1 chunk matched)" in entries[1]
    chunk_lines = [ln for ln in lines if ln.startswith("   #")]
    assert chunk_lines[:2] == [ln for ln in chunk_lines if "Crossing" in ln]
    # The section below the title the entry names; the text on one line.
    assert re.match(r"   #1 Crossing (\d+): The Zanzibar ferry crossing \1 leaves", chunk_lines[0])
    assert len(chunk_lines) == 2 + 1 + 1  # two of the handbook's, one per note

    as_json = _cli(dsn, "search", QUERY, "-c", "docs", "-k", "3", "--documents", "--json")
    assert as_json.exit_code == 0, as_json.stderr
    got = json.loads(as_json.stdout)
    local = pgrag.search(loaded, QUERY, collection="docs", k=3, group="document")
    assert [d["document_id"] for d in got] == [h.document_id for h in local]
    assert [[c["chunk_id"] for c in d["chunks"]] for d in got] == [
        [c.chunk_id for c in h.chunks] for h in local
    ]
    assert set(got[0]) == {
        "rank",
        "score",
        "document_id",
        "source",
        "title",
        "metadata",
        "probability",
        "matched",
        "chunks",
    }
    assert len(got[0]["chunks"]) == 3 and got[0]["chunks"][0]["section"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chunks-per-document", "2"], "--chunks-per-document lists chunks per document"),
        (["--documents", "--sql"], "--sql prints search_v5's statement"),
        (["--documents", "--chunks-per-document", "0"], "0 is not in the range 1<=x<=100"),
    ],
)
def test_cli_documents_usage_errors(dsn: str, args: list[str], message: str) -> None:
    result = _cli(dsn, "search", QUERY, *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr


def test_service_groups_by_document(loaded: Database, dsn: str) -> None:
    base = {"query": QUERY, "collection": "docs", "k": 4}
    with served(dsn, no_auth=True) as s:
        grouped = httpx.post(
            f"{s.url}/v1/search", json={**base, "group": "document", "chunks_per_document": 2}
        )
        plain = httpx.post(f"{s.url}/v1/search", json=base)
        bad = httpx.post(f"{s.url}/v1/search", json={**base, "group": "paragraph"})
        too_many = httpx.post(
            f"{s.url}/v1/search", json={**base, "group": "document", "chunks_per_document": 101}
        )
        remote = _remote_cli(
            s.url,
            "search",
            QUERY,
            "-c",
            "docs",
            "-k",
            "4",
            "--documents",
            "--chunks-per-document",
            "2",
            "--json",
        )
    assert grouped.status_code == 200, grouped.text
    body = grouped.json()
    assert "results" not in body and body["timings"]["group_searches"] >= 1
    local = pgrag.search(
        loaded, QUERY, collection="docs", k=4, group="document", chunks_per_document=2
    )
    assert [d["document_id"] for d in body["documents"]] == [h.document_id for h in local]
    assert [[c["chunk_id"] for c in d["chunks"]] for d in body["documents"]] == [
        [c.chunk_id for c in h.chunks] for h in local
    ]
    assert plain.status_code == 200 and "documents" not in plain.json()
    assert {_name(r["source"]) for r in plain.json()["results"]} == {"handbook.md"}
    assert bad.status_code == 400 and "group" in bad.json()["error"]["message"]
    assert too_many.status_code == 400
    # `pgrag search --documents` with PGRAG_URL: the service groups; the output is the local one.
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == [h.to_dict() for h in local]


def _remote_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own with PGRAG_URL set and a database that is nowhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PGRAG_"))}
    env.update(
        PGRAG_URL=url,
        PGRAG_DSN="host=/nonexistent/pgrag dbname=nowhere connect_timeout=1",
        PYTHONPATH=str(ROOT),
    )
    return subprocess.run(
        [sys.executable, "-m", "pgrag.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
