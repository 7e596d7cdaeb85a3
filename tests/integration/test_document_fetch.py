"""Reading a whole document (``pgrag.document_chunks_v1``, :func:`fetch_document`, the MCP
fetch_document tool): by source or by any chunk id, and only a document the session may read;
one it may not is answered exactly like one that does not exist."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgrag
from pgrag.retrieval.documents import DocumentNotFound, fetch_document
from tests.integration.test_access import DOCS, Tenants, tenants, visible  # noqa: F401 - fixture


def _chunk_ids(dsn: str) -> dict[str, list[int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT d.source, c.id FROM pgrag.chunks c JOIN pgrag.documents d"
            " ON d.id = c.document_id ORDER BY d.source, c.ordinal"
        ).fetchall()
    out: dict[str, list[int]] = {}
    for source, chunk in rows:
        out.setdefault(source, []).append(chunk)
    return out


@pytest.mark.parametrize(
    ("role", "principals", "session"),
    [
        ("reader", None, {"tenant:acme"}),  # a plain reader, mapped to tenant:acme
        ("app", ["tenant:globex", "alice"], {"tenant:globex", "alice"}),  # asserted per call
        ("writer", None, None),  # sees everything
    ],
)
def test_a_document_is_read_only_by_who_may_read_it(
    tenants: Tenants,  # noqa: F811
    embedder: Any,
    role: str,
    principals: list[str] | None,
    session: set[str] | None,
) -> None:
    chunks = _chunk_ids(tenants.dsn)
    dsn = {"reader": tenants.reader_dsn, "app": tenants.app_dsn, "writer": tenants.writer_dsn}
    db = pgrag.connect(dsn[role], embedder=embedder, principals=principals)
    try:
        for source, doc_principals, _, text in DOCS:
            may = session is None or visible(doc_principals, session)
            if may:
                doc = fetch_document(db, source, collection="t")
                assert doc.source == source and doc.collection == "t"
                assert " ".join(doc.text.split()) == " ".join(text.split())
                assert [p.chunk_id for p in doc.parts] == chunks[source]
                by_chunk = fetch_document(db, chunk_id=chunks[source][0], collection=None)
                assert by_chunk.source == source
            else:
                with pytest.raises(DocumentNotFound) as hidden:
                    fetch_document(db, source, collection="t")
                with pytest.raises(DocumentNotFound) as missing:
                    fetch_document(db, source + ".nope", collection="t")
                assert str(hidden.value).replace(source, "S") == str(missing.value).replace(
                    source + ".nope", "S"
                )
                with pytest.raises(DocumentNotFound):
                    fetch_document(db, chunk_id=chunks[source][0], collection=None)
    finally:
        db.close()


def test_a_reader_reads_documents_only_through_the_function(tenants: Tenants) -> None:  # noqa: F811
    with psycopg.connect(tenants.reader_dsn) as conn:
        n = conn.execute(
            "SELECT count(DISTINCT source) FROM pgrag.document_chunks_v1('t', NULL, NULL)"
        ).fetchone()
        assert n == (0,)  # neither a source nor a chunk: nothing
        acme = next(s for s, p, _, _ in DOCS if p == ["tenant:acme"])
        rows = conn.execute(
            "SELECT source, chunks, content FROM pgrag.document_chunks_v1('t', %s)", (acme,)
        ).fetchall()
        assert rows and {r[0] for r in rows} == {acme} and rows[0][1] == len(rows)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT content FROM pgrag.chunks LIMIT 1")


def test_a_chunk_of_another_collection_is_not_found_there(db: Any, tmp_path: Any) -> None:
    (tmp_path / "a.md").write_text("# A\n\nApples are harvested in the autumn.\n")
    pgrag.ingest(db, [tmp_path], collection="fruit")
    pgrag.ingest(db, [tmp_path], collection="other")
    (hit,) = pgrag.search(db, "apples", collection="fruit", k=1)
    assert fetch_document(db, chunk_id=hit.chunk_id, collection="fruit").collection == "fruit"
    assert fetch_document(db, chunk_id=hit.chunk_id, collection=None).collection == "fruit"
    with pytest.raises(DocumentNotFound, match=f"no chunk {hit.chunk_id} in collection 'other'"):
        fetch_document(db, chunk_id=hit.chunk_id, collection="other")
    with pytest.raises(pgrag.CollectionNotFound):
        fetch_document(db, "a.md", collection="nope")
    with pytest.raises(pgrag.InputError, match="max_chunks must be between 1 and 10000"):
        fetch_document(db, chunk_id=hit.chunk_id, max_chunks=0)
