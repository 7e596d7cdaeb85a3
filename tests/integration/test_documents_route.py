"""``POST/GET/DELETE /v1/documents`` against a real service: uploads of every format with
errors per file, re-uploads, the request size limit, scopes, and two callers who can neither
see, overwrite nor delete each other's uploads, nor publish to principals they do not hold,
because PostgreSQL refuses it (the service connecting as a pgrag_app + pgrag_writer member,
and as the owner)."""

from __future__ import annotations

import socket
import time
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
from pgrag.ingest.loaders import from_text
from pgrag.service.keys import create_key
from tests.samples import HTML, write_pdf
from tests.serving import served

REFUNDS = "# Refunds\n\nMonthly plans can be refunded within 14 days of the charge.\n"


@pytest.fixture
def service_dsn(admin_dsn: str, dsn: str) -> Iterator[str]:
    """A login role that is a member of pgrag_app and pgrag_writer: the service as
    docs/serve.md says to run it for uploads (neither the owner nor a superuser)."""
    role = f"serve_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgrag_app, pgrag_writer").format(
                sql.Identifier(role)
            )
        )
    yield make_conninfo(dsn, user=role)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def keys(db: Any) -> dict[str, str]:
    """Write keys for alice and bob, a read-only key for alice; and a public document
    (written by an administrator) that neither may change."""
    pgrag.ingest_documents(
        db,
        [from_text("shared/hours.md", "# Hours\n\nThe office opens at nine.\n", format="markdown")],
        collection="docs",
    )
    out = {
        who: create_key(db, principals=[who], scopes=["read", "write"])[1]
        for who in ("alice", "bob")
    }
    out["alice-read"] = create_key(db, principals=["alice"], scopes=["read"])[1]
    return out


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _files(tmp_path: Path) -> list[tuple[str, tuple[str, bytes, str]]]:
    pdf = write_pdf(tmp_path / "annual.pdf").read_bytes()
    return [
        ("files", ("refunds.md", REFUNDS.encode(), "text/markdown")),
        ("files", ("billing.html", HTML.encode(), "text/html")),
        ("files", ("annual.pdf", pdf, "application/pdf")),
        ("files", ("broken.pdf", b"this is no PDF at all", "application/pdf")),
    ]


def _upload(url: str, key: str | None, files: Any, **data: Any) -> httpx.Response:
    headers = _auth(key) if key else {}
    return httpx.post(f"{url}/v1/documents", files=files, data=data, headers=headers, timeout=120)


def _search(url: str, key: str, query: str) -> list[dict[str, Any]]:
    r = httpx.post(
        f"{url}/v1/search",
        json={"query": query, "collection": "docs", "k": 20},
        headers=_auth(key),
    )
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["results"]
    return hits


def _sources_of(dsn: str) -> dict[str, list[str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT d.source, d.principals, d.metadata::text FROM pgrag.documents d"
            " JOIN pgrag.collections c ON c.id = d.collection_id WHERE c.name = 'docs'"
        ).fetchall()
    for _, _, metadata in rows:
        assert "pgrag-upload-" not in metadata  # no temporary path leaks into the metadata
    return {r[0]: list(r[1]) for r in rows}


def test_one_upload_of_every_format_with_a_broken_file(
    keys: dict[str, str], service_dsn: str, dsn: str, tmp_path: Path
) -> None:
    with served(service_dsn) as s:
        r = _upload(s.url, keys["alice"], _files(tmp_path), collection="docs")
        assert r.status_code == 200, r.text
        body = r.json()
        by_name = {f["filename"]: f for f in body["files"]}
        assert [f["filename"] for f in body["files"]] == [
            "refunds.md",
            "billing.html",
            "annual.pdf",
            "broken.pdf",
        ]
        for name in ("refunds.md", "billing.html", "annual.pdf"):
            assert by_name[name]["status"] == "added", by_name[name]
            assert by_name[name]["source"] == f"upload/{name}"
            assert by_name[name]["chunks"] > 0
        broken = by_name["broken.pdf"]
        assert broken["status"] == "failed" and "does not start like a PDF" in broken["reason"]
        assert "\n" not in broken["reason"] and "pgrag-upload-" not in broken["reason"]
        assert (body["added"], body["failed"], body["allow"]) == (3, 1, ["alice"])
        # Searchable at once, as alice, under the upload's name.
        assert _search(s.url, keys["alice"], "refunded within 14 days")[0]["source"] == (
            "upload/refunds.md"
        )
        pdf_hit = next(
            h for h in _search(s.url, keys["alice"], "dividend") if h["source"].endswith(".pdf")
        )
        assert pdf_hit["source"] == "upload/annual.pdf"
        assert all(
            h["source"] != "upload/refunds.md" for h in _search(s.url, keys["bob"], "refunded")
        )
        listing = httpx.get(
            f"{s.url}/v1/documents", params={"collection": "docs"}, headers=_auth(keys["alice"])
        ).json()
    assert [d["source"] for d in listing["documents"]] == [
        "shared/hours.md",
        "upload/annual.pdf",
        "upload/billing.html",
        "upload/refunds.md",
    ]
    stored = _sources_of(dsn)
    assert stored["upload/refunds.md"] == ["alice"] and "upload/broken.pdf" not in stored


def test_a_re_upload_is_unchanged_and_a_change_re_embeds_only_what_changed(
    keys: dict[str, str], service_dsn: str, tmp_path: Path
) -> None:
    long = "# Policy\n\n" + "\n\n".join(
        f"## Part {i}\n\nClause {i}: the tenant {' '.join(['pays'] * 40)} rent number {i}."
        for i in range(12)
    )
    with served(service_dsn) as s:
        first = _upload(
            s.url, keys["alice"], [("files", ("policy.md", long.encode()))], collection="docs"
        ).json()
        again = _upload(
            s.url, keys["alice"], [("files", ("policy.md", long.encode()))], collection="docs"
        ).json()
        edited = long.replace("rent number 11.", "rent number eleven, due monthly.")
        changed = _upload(
            s.url, keys["alice"], [("files", ("policy.md", edited.encode()))], collection="docs"
        ).json()
        hits = _search(s.url, keys["alice"], "rent number eleven due monthly")
    assert first["files"][0]["status"] == "added" and first["files"][0]["chunks"] > 3
    assert again["files"][0]["status"] == "unchanged" and again["chunks_embedded"] == 0
    assert changed["files"][0]["status"] == "updated"
    assert 0 < changed["chunks_embedded"] < first["files"][0]["chunks"]
    assert hits[0]["source"] == "upload/policy.md" and "eleven" in hits[0]["text"]


@pytest.mark.parametrize("role", ["pgrag_app + pgrag_writer member", "owner"])
def test_callers_cannot_see_overwrite_delete_or_publish_beyond_their_principals(
    keys: dict[str, str], service_dsn: str, dsn: str, role: str
) -> None:
    alice, bob = keys["alice"], keys["bob"]
    plan = [("files", ("plan.md", b"# Plan\n\nAlice's zeppelin budget is 400 crowns.\n"))]
    with served(service_dsn if role != "owner" else dsn) as s:
        assert _upload(s.url, alice, plan, collection="docs").status_code == 200
        # Bob sees nothing of it: not in the listing, not in search; he cannot delete it.
        listing = httpx.get(
            f"{s.url}/v1/documents", params={"collection": "docs"}, headers=_auth(bob)
        ).json()
        assert [d["source"] for d in listing["documents"]] == ["shared/hours.md"]
        assert not any(h["source"] == "upload/plan.md" for h in _search(s.url, bob, "zeppelin"))
        gone = httpx.delete(
            f"{s.url}/v1/documents",
            params={"collection": "docs", "source": "upload/plan.md"},
            headers=_auth(bob),
        )
        # (Row-level security hides it from a writer role naming bob; the owner, whom it does
        # not filter, finds it, and the document's trigger refuses the delete.)
        assert gone.status_code == (403 if role == "owner" else 404), gone.text
        # Nor overwrite it by uploading the same name: the database refuses.
        forged = [("files", ("plan.md", b"# Plan\n\nThe zeppelin budget is zero.\n"))]
        over = _upload(s.url, bob, forged, collection="docs")
        assert over.status_code == 403, over.text
        assert over.json()["files"][0]["refused"] is True
        assert "refused by the database" in over.json()["error"]["message"]
        # The answer says the name is taken (unavoidable: a source is unique in its
        # collection), the same whatever role the service runs as, and nothing more.
        assert over.json()["files"][0]["reason"] == (
            "refused by the database: the source 'upload/plan.md' is taken by a document this"
            " credential may not change; upload it under another source (such as one that"
            " starts with your own name)"
        )
        # Alice cannot publish to bob, nor to bob as well as herself, nor to everyone.
        for allow in (["bob"], ["alice", "bob"], ["public"]):
            note = [("files", ("note.md", b"# Note\n\nA note for someone else.\n"))]
            r = _upload(s.url, alice, note, collection="docs", allow=allow)
            assert r.status_code == 403, (allow, r.text)
            assert "may not write document 'upload/note.md'" in r.json()["files"][0]["reason"]
        # The public document, which both may read, neither may change or delete.
        hours = [("files", ("hours.md", b"# Hours\n\nClosed forever.\n"))]
        r = _upload(s.url, alice, hours, collection="docs", source="shared/hours.md")
        assert r.status_code == 403 and "the source 'shared/hours.md' is taken" in r.text
        r = httpx.delete(
            f"{s.url}/v1/documents",
            params={"collection": "docs", "source": "shared/hours.md"},
            headers=_auth(alice),
        )
        assert r.status_code == 403 and "may not delete document 'shared/hours.md'" in r.text
        # Alice deletes her own.
        mine = httpx.delete(
            f"{s.url}/v1/documents",
            params={"collection": "docs", "source": "upload/plan.md"},
            headers=_auth(alice),
        )
        assert mine.status_code == 200, mine.text
        assert [d["source"] for d in mine.json()["removed"]] == ["upload/plan.md"]
    stored = _sources_of(dsn)
    assert stored == {"shared/hours.md": ["public"]}
    # Nothing of the refused writes is left behind: no chunk without its document.
    with psycopg.connect(dsn) as conn:
        texts = [r[0] for r in conn.execute("SELECT content FROM pgrag.chunks").fetchall()]
    assert texts and all("opens at nine" in t for t in texts)


def test_the_database_refuses_what_a_session_writing_for_alice_may_not(dsn: str) -> None:
    """The rule itself, in SQL as any role (here a superuser, whom row-level security never
    filters): with pgrag.write_principals set, no insert, access change or delete of a
    document any other principal may read."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cid = conn.execute(
            "INSERT INTO pgrag.collections (name) VALUES ('w') RETURNING id"
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, content_hash, principals)"
            " VALUES (%s, 'open', 'h', '{public}'), (%s, 'hers', 'h', '{alice}')",
            (cid, cid),
        )
        conn.execute("SET pgrag.write_principals = 'alice'")
        refused = [
            ("INSERT INTO pgrag.documents (collection_id, source, content_hash, principals)"
             " VALUES (%s, 'x', 'h', '{alice,bob}')", "may not write document 'x'"),
            ("UPDATE pgrag.documents SET principals = '{alice}' WHERE collection_id = %s"
             " AND source = 'open'", "may not change document 'open'"),
            ("UPDATE pgrag.documents SET principals = '{bob}' WHERE collection_id = %s"
             " AND source = 'hers'", "readable by bob"),
            ("UPDATE pgrag.documents SET principals = '{}' WHERE collection_id = %s"
             " AND source = 'hers'", "readable by nobody"),
            ("DELETE FROM pgrag.documents WHERE collection_id = %s AND source = 'open'",
             "may not delete document 'open'"),
        ]  # fmt: skip
        for statement, message in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=message):
                conn.execute(statement, (cid,))
        conn.execute(
            "UPDATE pgrag.documents SET principals = '{alice}', title = 't' WHERE source = 'hers'"
        )
        conn.execute("SET pgrag.write_principals = 'alice,bob'")
        conn.execute("UPDATE pgrag.documents SET principals = '{bob}' WHERE source = 'hers'")
        conn.execute("SET pgrag.write_principals = 'alice, no good'")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a list of principals"):
            conn.execute("DELETE FROM pgrag.documents WHERE source = 'hers'")
        conn.execute("RESET pgrag.write_principals")  # unset: as the role's grants allow
        conn.execute("DELETE FROM pgrag.documents WHERE collection_id = %s", (cid,))


def test_an_upload_over_the_limit_is_413_with_nothing_stored(
    keys: dict[str, str], service_dsn: str, dsn: str
) -> None:
    big = b"# Big\n\n" + b"All work and no play. " * 20_000  # ~440 kB
    small = [("files", ("small.md", REFUNDS.encode()))]
    with served(service_dsn, max_upload_bytes=200_000) as s:
        r = _upload(s.url, keys["alice"], [*small, ("files", ("big.md", big))], collection="new")

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            boundary = b"--b0undary"
            yield boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="x.md"'
            yield b"\r\n\r\n"
            for _ in range(10):
                yield b"# x\n\n" + b"y " * 20_000
            yield b"\r\n" + boundary + b"--\r\n"

        streamed = httpx.post(
            f"{s.url}/v1/documents",
            content=chunked(),
            headers={
                **_auth(keys["alice"]),
                "Content-Type": "multipart/form-data; boundary=b0undary",
            },
        )
        within = _upload(s.url, keys["alice"], small, collection="new")
    for refused in (r, streamed):
        assert refused.status_code == 413, refused.text
        message = refused.json()["error"]["message"]
        assert "over this service's limit of 200000 bytes" in message and "\n" not in message
    declared = r.request.headers["content-length"]
    assert r.json()["error"]["message"].startswith(f"the upload is {declared} bytes")
    assert within.status_code == 200  # the limit is the request's, not the service's state
    with psycopg.connect(dsn) as conn:
        sources = [
            row[0]
            for row in conn.execute(
                "SELECT d.source FROM pgrag.documents d JOIN pgrag.collections c"
                " ON c.id = d.collection_id WHERE c.name = 'new'"
            )
        ]
    assert sources == ["upload/small.md"]


def test_a_read_only_key_may_list_but_not_upload_or_delete(
    keys: dict[str, str], service_dsn: str, dsn: str
) -> None:
    with served(service_dsn) as s:
        up = _upload(s.url, keys["alice-read"], [("files", ("a.md", REFUNDS.encode()))])
        down = httpx.delete(
            f"{s.url}/v1/documents",
            params={"collection": "docs", "source": "shared/hours.md"},
            headers=_auth(keys["alice-read"]),
        )
        listing = httpx.get(
            f"{s.url}/v1/documents",
            params={"collection": "docs"},
            headers=_auth(keys["alice-read"]),
        )
        anonymous = _upload(s.url, None, [("files", ("a.md", REFUNDS.encode()))])
    for r in (up, down):
        assert r.status_code == 403, r.text
        assert "may not write" in r.json()["error"]["message"]
        assert "--scope write" in r.json()["error"]["message"]
    assert listing.status_code == 200
    assert anonymous.status_code == 401
    assert set(_sources_of(dsn)) == {"shared/hours.md"}


def test_names_sources_paging_and_bad_requests(keys: dict[str, str], service_dsn: str) -> None:
    alice = keys["alice"]
    with served(service_dsn) as s:
        named = _upload(
            s.url,
            alice,
            [
                ("files", ("../../etc/passwd.md", b"# P\n\nNot a path of the server's.\n")),
                ("files", ("a.md", b"# A\n\nalpha\n")),
                ("files", ("b.md", b"# B\n\nbeta\n")),
            ],
            collection="docs",
            source=["x/../y.md", "team/a.md", "team/b.md"],
        )
        traversal = _upload(
            s.url,
            alice,
            [("files", ("../../etc/passwd.md", b"# P\n\ntext\n")), ("files", ("c.md", b"gamma"))],
            collection="docs",
        )
        absolute = _upload(
            s.url, alice, [("files", ("d.md", b"delta"))], collection="docs", source="/etc/d.md"
        )
        pages = []
        after = None
        while True:
            params: dict[str, Any] = {"collection": "docs", "limit": 2}
            if after:
                params["after"] = after
            page = httpx.get(f"{s.url}/v1/documents", params=params, headers=_auth(alice)).json()
            pages.append([d["source"] for d in page["documents"]])
            after = page["next_after"]
            if after is None:
                break
        not_multipart = httpx.post(
            f"{s.url}/v1/documents", json={"files": []}, headers=_auth(alice)
        )
        no_files = httpx.post(
            f"{s.url}/v1/documents", data={"collection": "docs"}, files={}, headers=_auth(alice)
        )
        unknown = _upload(s.url, alice, [("files", ("e.md", b"e"))], colection="docs")
        missing = httpx.get(
            f"{s.url}/v1/documents", params={"collection": "nope"}, headers=_auth(alice)
        )
        nothing = httpx.delete(
            f"{s.url}/v1/documents",
            params={"collection": "docs", "source": "team/zzz.md"},
            headers=_auth(alice),
        )
    statuses = [(f["source"], f["status"]) for f in named.json()["files"]]
    assert statuses == [("", "failed"), ("team/a.md", "added"), ("team/b.md", "added")]
    assert "'..' segment" in named.json()["files"][0]["reason"]
    files = traversal.json()["files"]
    assert files[0]["status"] == "failed" and "'..' segment" in files[0]["reason"]
    assert files[1]["status"] == "added" and files[1]["source"] == "upload/c.md"
    assert absolute.status_code == 400 and "absolute path" in absolute.json()["error"]["message"]
    assert pages == [["shared/hours.md", "team/a.md"], ["team/b.md", "upload/c.md"]]
    assert not_multipart.status_code == 400 and "multipart/form-data" in not_multipart.text
    assert no_files.status_code == 400
    assert unknown.status_code == 400 and "'colection'" in unknown.json()["error"]["message"]
    assert missing.status_code == 404 and "'nope'" in missing.json()["error"]["message"]
    assert nothing.status_code == 404 and "'team/zzz.md'" in nothing.json()["error"]["message"]


def test_without_auth_or_principals_uploads_are_public_as_pgrag_ingest_makes_them(
    db: Any, dsn: str
) -> None:
    with served(dsn, no_auth=True) as s:
        r = _upload(s.url, None, [("files", ("open.md", REFUNDS.encode()))], collection="docs")
        assert r.status_code == 200, r.text
        assert r.json()["allow"] is None  # (new documents public, as pgrag ingest makes them)
    assert _sources_of(dsn) == {"upload/open.md": ["public"]}


@pytest.mark.parametrize("role", ["pgrag_app + pgrag_writer member", "owner"])
def test_an_upload_reuses_only_vectors_of_documents_its_caller_may_read(
    keys: dict[str, str], service_dsn: str, dsn: str, role: str
) -> None:
    """Bob uploading alice's exact text learns nothing from the count of texts embedded, even
    with the service as the owner (whom row-level security does not filter); his own texts
    are still reused."""
    secret = "# Pay\n\nThe salary is 123456.\n"
    with served(service_dsn if role != "owner" else dsn) as s:
        hers = _upload(s.url, keys["alice"], [("files", ("pay.md", secret.encode()))])
        assert hers.status_code == 200 and hers.json()["chunks_embedded"] >= 1, hers.text
        guess = _upload(s.url, keys["bob"], [("files", ("guess.md", secret.encode()))])
        assert guess.status_code == 200, guess.text
        assert guess.json()["files"][0]["status"] == "added"
        assert guess.json()["chunks_embedded"] == guess.json()["files"][0]["chunks"] >= 1
        more = secret + "\n# Other\n\nSomething else entirely.\n"
        his = _upload(s.url, keys["bob"], [("files", ("more.md", more.encode()))])
    assert his.status_code == 200, his.text
    # (The Pay chunk is bob's own now: its vector is reused, the other one embedded.)
    assert his.json()["files"][0]["chunks"] == 2
    assert his.json()["chunks_embedded"] == 1


def _stored_in(dsn: str, collection: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgrag.documents d JOIN pgrag.collections c"
            " ON c.id = d.collection_id WHERE c.name = %s",
            (collection,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_client_that_goes_away_stops_its_upload_between_files(
    keys: dict[str, str], service_dsn: str, dsn: str
) -> None:
    """The client sends many files and closes its connection once the first is stored: the
    service stops at its next file or batch, leaving only whole documents."""
    sent = 200
    files = [
        ("files", (f"note{i:03}.md", f"# Note {i}\n\nNote {i} is about topic {i * 7}.\n".encode()))
        for i in range(sent)
    ]
    with served(service_dsn) as s:
        request = httpx.Request(
            "POST", f"{s.url}/v1/documents", files=files, data={"collection": "gone"}
        )
        body = request.read()
        port = int(s.url.rsplit(":", 1)[1])
        head = (
            f"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {keys['alice']}\r\n"
            f"Content-Type: {request.headers['content-type']}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(head.encode() + body)
            deadline = time.monotonic() + 120
            while _stored_in(dsn, "gone") == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _stored_in(dsn, "gone") > 0, "the upload never stored a file"
        # (The client is gone.) The upload's connection comes back to the pool when its work
        # ends, stopped or not.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            stats = s.service.pool.get_stats()
            if stats.get("pool_available", 0) == stats.get("pool_size", 0):
                break
            time.sleep(0.1)
        stored = _stored_in(dsn, "gone")
        after = _upload(s.url, keys["alice"], [("files", ("last.md", REFUNDS.encode()))])
    assert 0 < stored < sent
    assert after.status_code == 200, after.text  # the pooled connection came back usable
    with psycopg.connect(dsn) as conn:
        half = conn.execute(
            "SELECT count(*) FROM pgrag.documents d WHERE NOT EXISTS"
            " (SELECT 1 FROM pgrag.chunks c WHERE c.document_id = d.id)"
            " OR EXISTS (SELECT 1 FROM pgrag.chunks c WHERE c.document_id = d.id AND NOT EXISTS"
            " (SELECT 1 FROM pgrag.chunk_embeddings e WHERE e.chunk_id = c.id))"
        ).fetchone()
    assert half == (0,)  # every stored document whole: its chunks, and their vectors


def test_a_check_that_raises_mid_file_rolls_that_file_back(db: Any, tmp_path: Path) -> None:
    """ingest_uploads' check, raising once a large file has embedded its first batch of texts,
    stops it with nothing of that file stored and the session no longer writing for anyone."""
    from pgrag.ingest.uploads import Upload, ingest_uploads

    large = tmp_path / "large.md"
    large.write_text(
        "\n\n".join(f"## Part {i}\n\nClause {i}: {'rent ' * 30}number {i}." for i in range(150))
    )
    calls: list[None] = []

    class Gone(Exception):
        pass

    def check() -> None:
        calls.append(None)
        if len(calls) == 3:  # before the file, before its first batch, after 64 texts
            raise Gone

    with pytest.raises(Gone):
        ingest_uploads(
            db,
            [Upload(large, "large.md", "a/large.md")],
            collection="halted",
            allow=["alice"],
            write_for=["alice"],
            check=check,
        )
    db.conn.rollback()
    stored = db.conn.execute(
        "SELECT count(*) FROM pgrag.documents d JOIN pgrag.collections k"
        " ON k.id = d.collection_id WHERE k.name = 'halted'"
    ).fetchone()
    setting = db.conn.execute("SELECT current_setting('pgrag.write_principals', true)").fetchone()
    db.conn.rollback()
    assert len(calls) == 3 and stored == (0,)
    assert setting in ((None,), ("",))  # (acting_for ended with the upload)
    # The same upload, not stopped, stores the file whole.
    done = ingest_uploads(
        db,
        [Upload(large, "large.md", "a/large.md")],
        collection="halted",
        allow=["alice"],
        write_for=["alice"],
    )
    assert done[0].status == "added" and done[0].chunks > 64


def test_the_service_removes_upload_directories_a_killed_one_left(
    keys: dict[str, str], service_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])  # noqa: S603 - our interpreter
    child.wait()  # (a service killed mid-upload: its pid names no process now)
    stale = tmp_path / f"pgrag-upload-{child.pid}-abcd"
    (stale / "0").mkdir(parents=True)
    (stale / "0" / "private.md").write_text("what someone uploaded")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with served(service_dsn) as s:
        assert not stale.exists()
        r = _upload(s.url, keys["alice"], [("files", ("a.md", REFUNDS.encode()))])
        assert r.status_code == 200, r.text
    assert list(tmp_path.iterdir()) == []  # (the request's own directory went with it)
