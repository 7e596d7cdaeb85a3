"""SQL-first sync: documents written with plain SQL (or through an application table's trigger)
get chunks and keyword postings at commit and vectors from `pgrag worker`; the query cache."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.embeddings import query_cache
from pgrag.embeddings.local import configured_embedder
from pgrag.embeddings.worker import run as run_worker
from pgrag.embeddings.worker import run_once
from tests.tables import read_table

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version

BODY = (
    "Refunds for hardware are accepted within 45 days of delivery.\n\n"
    "The warehouse in Porto ships orders every weekday before noon."
)


def cli_run(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--dsn", dsn, *args])


@pytest.fixture
def loaded(db: Any, corpus: Path) -> Any:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def _insert(conn: psycopg.Connection[Any], source: str, body: str, title: str = "KB") -> int:
    row = conn.execute(
        "INSERT INTO pgrag.documents (collection_id, source, title, body, content_hash)"
        " SELECT id, %s, %s, %s, '' FROM pgrag.collections WHERE name = 'docs' RETURNING id",
        (source, title, body),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _keyword(dsn: str, query: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT source FROM pgrag.search_v5('docs', %s, k => 3)", (query,)
            ).fetchall()
        ]


def _queued(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT chunk_id, attempts, last_error FROM pgrag.embedding_queue ORDER BY chunk_id"
        ).fetchall()


def test_plain_sql_documents_are_searchable_at_commit_and_embedded_by_the_worker(
    loaded: Any,
) -> None:
    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        doc = _insert(conn, "kb/hardware", BODY, "Hardware")
        # Inside the transaction nobody else sees it yet.
        assert "kb/hardware" not in _keyword(dsn, "Porto warehouse")
    # Committed: keyword search finds it at once, before any worker ran.
    assert _keyword(dsn, "Porto warehouse")[0] == "kb/hardware"
    with psycopg.connect(dsn) as conn:
        chunks = conn.execute(
            "SELECT id, section, content, content_hash FROM pgrag.chunks WHERE document_id = %s",
            (doc,),
        ).fetchall()
        digest = conn.execute(
            "SELECT content_hash = encode(sha256(convert_to(body, 'UTF8')), 'hex')"
            " FROM pgrag.documents WHERE id = %s",
            (doc,),
        ).fetchone()
    assert len(chunks) == 1 and chunks[0][1] == "Hardware" and "Porto" in chunks[0][2]
    assert digest == (True,)
    assert [q[0] for q in _queued(dsn)] == [chunks[0][0]]
    [status] = [r for r in read_table(cli_run(dsn, "status").stdout) if r["COLLECTION"] == "docs"]
    assert status["PENDING"] == "1" and status["FAILED"] == "0"

    # Vector-only search does not see it until the worker embedded it.
    def vector_hit() -> bool:
        got = pgrag.search(loaded, "shipping from Portugal", collection="docs", mode="vector")
        return any(r.source == "kb/hardware" for r in got[:1])

    assert not vector_hit()
    worked = cli_run(dsn, "worker", "--once")
    assert worked.exit_code == 0, worked.output
    assert "1 embedded, 0 failed" in worked.stdout
    assert _queued(dsn) == []
    assert vector_hit()
    # The vector is the one pgrag ingest would have made for the same section and text.
    with psycopg.connect(dsn) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        row = conn.execute(
            "SELECT embedding FROM pgrag.chunk_embeddings WHERE chunk_id = %s", (chunks[0][0],)
        ).fetchone()
    assert row is not None
    expected = configured_embedder(loaded).embed([f"Hardware\n{chunks[0][2]}"])[0]
    assert abs(float(row[0].to_numpy() @ expected) - 1.0) < 1e-4


def test_updates_replace_changed_chunks_only_and_deletes_remove_everything(
    loaded: Any,
) -> None:
    dsn = loaded.dsn
    paragraphs = [f"Paragraph {i} talks about topic{i} " + "filler " * 100 for i in range(4)]
    with psycopg.connect(dsn) as conn:
        doc = _insert(conn, "kb/long", "\n\n".join(paragraphs))
    run_worker(loaded, once=True)
    with psycopg.connect(dsn) as conn:
        before = dict(
            conn.execute(
                "SELECT ordinal, id FROM pgrag.chunks WHERE document_id = %s", (doc,)
            ).fetchall()
        )
    assert len(before) == 4  # 150 words each at most: one paragraph per chunk
    paragraphs[2] = "Paragraph 2 now talks about zebras " + "filler " * 100
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgrag.documents SET body = %s WHERE id = %s", ("\n\n".join(paragraphs), doc)
        )
        after = dict(
            conn.execute(
                "SELECT ordinal, id FROM pgrag.chunks WHERE document_id = %s", (doc,)
            ).fetchall()
        )
    assert [o for o in before if before[o] == after[o]] == [0, 1, 3]
    assert len(_queued(dsn)) == 1
    assert _keyword(dsn, "zebras") == ["kb/long"] and _keyword(dsn, "topic2") == []
    with psycopg.connect(dsn) as conn:
        conn.execute("DELETE FROM pgrag.documents WHERE id = %s", (doc,))
    assert _queued(dsn) == [] and _keyword(dsn, "zebras") == []


def test_identical_text_reuses_vectors_instead_of_queueing(loaded: Any) -> None:
    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        _insert(conn, "kb/a", BODY)
    run_worker(loaded, once=True)
    with psycopg.connect(dsn) as conn:
        _insert(conn, "kb/b", BODY)  # same title and text: the vector is copied
    assert _queued(dsn) == []


def test_an_application_table_syncs_through_its_trigger(loaded: Any) -> None:
    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE SCHEMA app;"
            " CREATE TABLE app.articles (id int PRIMARY KEY, headline text, body text,"
            "                            readers text[]);"
            " CREATE TRIGGER articles_pgrag AFTER INSERT OR UPDATE OR DELETE ON app.articles"
            " FOR EACH ROW EXECUTE FUNCTION"
            " pgrag.sync_row_v1('docs', 'id', 'body', 'headline', 'readers')"
        )
        conn.execute(
            "INSERT INTO app.articles VALUES (1, 'Bikes', 'Bicycle repairs happen on Fridays.',"
            " NULL), (2, 'Secret', 'The quarterly bonus pool is confidential.', '{alice}')"
        )
    assert _keyword(dsn, "bicycle repairs")[0] == "app.articles/1"
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT source, title, principals, metadata FROM pgrag.documents"
            " WHERE source LIKE 'app.articles/%' ORDER BY source"
        ).fetchall()
    assert rows[0] == ("app.articles/1", "Bikes", ["public"], {"table": "app.articles", "key": "1"})
    assert rows[1][2] == ["alice"]
    # Readers: bob sees nothing of alice's article, alice does.
    bob = pgrag.search(loaded, "quarterly bonus", collection="docs", principals=["bob"])
    assert all(r.source != "app.articles/2" for r in bob)
    alice = pgrag.search(loaded, "quarterly bonus", collection="docs", principals=["alice"])
    assert alice[0].source == "app.articles/2"
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE app.articles SET body = 'Scooter repairs happen on Mondays.' WHERE id = 1"
        )
        conn.execute("UPDATE app.articles SET id = 3 WHERE id = 2")
    assert _keyword(dsn, "scooter")[0] == "app.articles/1"
    assert "app.articles/1" not in _keyword(dsn, "bicycle")
    with psycopg.connect(dsn) as conn:
        sources = {r[0] for r in conn.execute("SELECT source FROM pgrag.documents").fetchall()}
        assert "app.articles/3" in sources and "app.articles/2" not in sources
        conn.execute("DELETE FROM app.articles")
        sources = {r[0] for r in conn.execute("SELECT source FROM pgrag.documents").fetchall()}
    assert not any(s.startswith("app.articles/") for s in sources)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TABLE app.bad (id int); CREATE TRIGGER bad_pgrag AFTER INSERT ON app.bad"
            " FOR EACH ROW EXECUTE FUNCTION pgrag.sync_row_v1('nope', 'id', 'body')"
        )
        with pytest.raises(psycopg.errors.UndefinedObject, match="collection 'nope'"):
            conn.execute("INSERT INTO app.bad VALUES (1)")


def test_failed_items_are_kept_with_their_error_and_retried(loaded: Any) -> None:
    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        _insert(conn, "kb/x", BODY)

    def broken(model: Any) -> Any:
        raise pgrag.PgragError("the embedding server is down")

    report = run_once(loaded, embedders=broken)
    assert report.failed == 1 and report.embedded == 0
    [(chunk_id, attempts, error)] = _queued(dsn)
    assert attempts == 1 and error == "the embedding server is down"
    with psycopg.connect(dsn) as conn:
        wait = conn.execute(
            "SELECT not_before - now() FROM pgrag.embedding_queue WHERE chunk_id = %s",
            (chunk_id,),
        ).fetchone()
    assert wait is not None and wait[0].total_seconds() > 3  # backed off
    assert [r["FAILED"] for r in read_table(cli_run(dsn, "status").stdout)] == ["1"]
    assert run_once(loaded).batches == 0  # not due yet
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgrag.embedding_queue SET not_before = now()")
    assert run_once(loaded).embedded == 1
    assert _queued(dsn) == []


def test_parallel_workers_embed_each_item_once(loaded: Any) -> None:
    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        for i in range(40):
            _insert(conn, f"kb/{i}", f"Fact number {i}: locker {i} holds item {i * 13}.")
    assert len(_queued(dsn)) == 40
    seen: list[str] = []
    lock = threading.Lock()
    from pgrag.config import Settings
    from pgrag.embeddings.models import embedder_for

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def embed(self, texts: Any) -> Any:
            with lock:
                seen.extend(texts)
            return self.inner.embed(texts)

    def counting(model: Any) -> Any:
        return Counting(embedder_for(model, Settings()))

    def work() -> None:
        db = pgrag.connect(dsn)
        try:
            run_worker(db, once=True, batch_size=3, embedders=counting)
        finally:
            db.close()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 40 and len(set(seen)) == 40
    assert _queued(dsn) == []


def test_repeated_questions_skip_the_encoder(loaded: Any) -> None:
    query_cache.clear_memory()
    start = dict(query_cache.stats)
    pgrag.search(loaded, "How long is the refund window?", collection="docs")
    pgrag.search(loaded, "How long is the refund window?", collection="docs")
    assert query_cache.stats["encoded"] - start["encoded"] == 1
    assert query_cache.stats["memory"] - start["memory"] == 1
    query_cache.clear_memory()  # a new process: the database has it
    pgrag.search(loaded, "How long is the refund window?", collection="docs")
    assert query_cache.stats["database"] - start["database"] == 1
    assert query_cache.stats["encoded"] - start["encoded"] == 1
    # Someone else (other principals) does not get this session's entry.
    pgrag.search(loaded, "How long is the refund window?", collection="docs", principals=["bob"])
    assert query_cache.stats["encoded"] - start["encoded"] == 2
    with psycopg.connect(loaded.dsn) as conn:
        scopes = [r[0] for r in conn.execute("SELECT scope FROM pgrag.query_embedding_cache")]
    assert sorted(scopes) == ["postgres|*", "postgres|bob,public"]
    # Turned off: nothing is read from or written to the table.
    loaded.query_cache = False
    query_cache.clear_memory()
    pgrag.search(loaded, "How long is the refund window?", collection="docs")
    assert query_cache.stats["encoded"] - start["encoded"] == 3


def test_the_query_cache_setting_is_the_connections(
    loaded: Any, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag.config import from_env

    off = pgrag.connect(
        loaded.dsn, embedder=embedder, settings=from_env({"PGRAG_QUERY_CACHE": "off"})
    )
    try:
        # Read when the connections opened: the environment now changes neither.
        monkeypatch.setenv("PGRAG_QUERY_CACHE", "on")
        assert not query_cache.enabled(off)
        monkeypatch.setenv("PGRAG_QUERY_CACHE", "off")
        assert query_cache.enabled(loaded)
        question = "Which plans can be refunded?"
        query_cache.clear_memory()
        start = dict(query_cache.stats)
        pgrag.search(off, question, collection="docs")
        query_cache.clear_memory()
        pgrag.search(off, question, collection="docs")
        assert query_cache.stats["encoded"] - start["encoded"] == 2
        with psycopg.connect(loaded.dsn) as conn:
            assert conn.execute("SELECT count(*) FROM pgrag.query_embedding_cache").fetchone() == (
                0,
            )
        query_cache.clear_memory()
        pgrag.search(loaded, question, collection="docs")
        query_cache.clear_memory()
        pgrag.search(loaded, question, collection="docs")
        assert query_cache.stats["database"] - start["database"] == 1
        assert query_cache.stats["encoded"] - start["encoded"] == 3
    finally:
        off.close()


def test_a_running_worker_makes_psql_inserts_searchable(loaded: Any) -> None:
    """The worker polls every 600 s here: only the queue's notification (LISTEN
    pgrag_embedding_queue) can wake it within the test's deadlines."""
    import signal
    import subprocess
    import sys
    import time

    dsn = loaded.dsn
    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "pgrag"), "--dsn", dsn, "worker", "--poll", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def vector_top(query: str) -> str:
            got = pgrag.search(loaded, query, collection="docs", mode="vector", k=1)
            return got[0].source

        with psycopg.connect(dsn) as conn:
            _insert(conn, "kb/porto", BODY, "Hardware")
        deadline = time.monotonic() + 60
        while vector_top("warehouse shipping before noon") != "kb/porto":
            assert time.monotonic() < deadline, "the worker never embedded the new document"
            time.sleep(0.2)
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "UPDATE pgrag.documents SET body = 'Lunch is served on the roof terrace at 12:30.'"
                " WHERE source = 'kb/porto'"
            )
        deadline = time.monotonic() + 60
        while vector_top("where is lunch served") != "kb/porto":
            assert time.monotonic() < deadline, "the worker never embedded the update"
            time.sleep(0.2)
        assert _queued(dsn) == []
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "worker: 2 embedded, 0 failed" in out


def test_a_writer_role_syncs_and_works_the_queue_and_a_reader_uses_the_cache(
    loaded: Any, admin_dsn: str
) -> None:
    import uuid

    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    suffix = uuid.uuid4().hex[:8]
    writer, reader = f"writer_{suffix}", f"reader_{suffix}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role, group in ((writer, "pgrag_writer"), (reader, "pgrag_reader")):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role))
            )
    try:
        with psycopg.connect(loaded.dsn) as conn:  # the writer's own table
            conn.execute(
                sql.SQL("CREATE SCHEMA app AUTHORIZATION {}").format(sql.Identifier(writer))
            )
        writer_dsn = make_conninfo(loaded.dsn, user=writer)
        with psycopg.connect(writer_dsn) as conn:
            conn.execute(
                "CREATE TABLE app.notes (id int PRIMARY KEY, body text);"
                " CREATE TRIGGER notes_pgrag AFTER INSERT OR UPDATE OR DELETE ON app.notes"
                " FOR EACH ROW EXECUTE FUNCTION pgrag.sync_row_v1('docs', 'id', 'body')"
            )
            conn.execute("INSERT INTO app.notes VALUES (1, 'The rooftop garden opens in May.')")
        wdb = pgrag.connect(writer_dsn)
        try:
            assert pgrag.embeddings.worker.run(wdb, once=True).embedded == 1
        finally:
            wdb.close()
        rdb = pgrag.connect(make_conninfo(loaded.dsn, user=reader))
        try:
            query_cache.clear_memory()
            got = pgrag.search(rdb, "when does the rooftop garden open", collection="docs", k=1)
            assert got[0].source == "app.notes/1" and got[0].vector_rank == 1
            with psycopg.connect(make_conninfo(loaded.dsn, user=reader)) as conn:
                scope = conn.execute("SELECT pgrag.query_cache_scope()").fetchone()
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("SELECT * FROM pgrag.query_embedding_cache")
        finally:
            rdb.close()
        assert scope == (f"{reader}|public",)
        with psycopg.connect(loaded.dsn) as conn:
            stored = conn.execute("SELECT scope FROM pgrag.query_embedding_cache").fetchall()
        assert stored == [(f"{reader}|public",)]
    finally:
        with psycopg.connect(loaded.dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS app CASCADE")
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for role in (writer, reader):
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_file_identical_to_a_sql_body_is_not_stored_as_its_copy(
    loaded: Any, tmp_path: Path
) -> None:
    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        _insert(conn, "kb/same", BODY)
    twin = tmp_path / "same.txt"
    twin.write_bytes(BODY.encode())
    pgrag.ingest(loaded, [twin], collection="docs")
    with psycopg.connect(dsn) as conn:
        # SQL may rewrite the body at any time: the file keeps chunks of its own.
        conn.execute(
            "UPDATE pgrag.documents SET body = 'Something else entirely.' WHERE source = 'kb/same'"
        )
        row = conn.execute(
            "SELECT d.metadata ? 'duplicate_of', count(c.id) FROM pgrag.documents d"
            " LEFT JOIN pgrag.chunks c ON c.document_id = d.id WHERE d.source = %s"
            " GROUP BY d.id",
            (str(twin.resolve()),),
        ).fetchone()
    assert row == (False, 1)
    assert _keyword(dsn, "Porto warehouse")[0] == str(twin.resolve())


def test_a_copy_keeps_its_content_when_sql_rewrites_its_original(
    loaded: Any, tmp_path: Path
) -> None:
    dsn = loaded.dsn
    folder = tmp_path / "twins"
    folder.mkdir()
    for name in ("a.md", "b.md"):
        (folder / name).write_text("# Garage\n\nThe barrier code for the blue garage is 4711.\n")
    pgrag.ingest(loaded, [folder], collection="docs")
    a, b = str((folder / "a.md").resolve()), str((folder / "b.md").resolve())
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgrag.documents SET body = 'Visitors use the red lot.' WHERE source = %s",
            (a,),
        )
    hits = _keyword(dsn, "barrier code blue garage")
    assert hits[0] == b  # b.md still holds its own file's text
    assert _keyword(dsn, "red lot")[0] == a
    # Re-ingesting the files: a.md is its file again (the body is cleared), b.md unchanged.
    pgrag.ingest(loaded, [folder], collection="docs")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT body FROM pgrag.documents WHERE source = %s", (a,)).fetchone()
        conn.execute("UPDATE pgrag.documents SET title = 'Renamed' WHERE source = %s", (a,))
    assert row == (None,)
    assert set(_keyword(dsn, "barrier code blue garage")[:2]) == {a, b}
    assert "red" not in " ".join(_keyword(dsn, "red lot"))


def test_writers_do_not_wait_for_the_model_and_one_bad_chunk_does_not_block_others(
    loaded: Any,
) -> None:
    from pgrag.config import Settings
    from pgrag.embeddings.models import embedder_for

    dsn = loaded.dsn
    with psycopg.connect(dsn) as conn:
        for i in range(4):
            _insert(conn, f"kb/{i}", f"Shelf {i} holds the blue folders.")
        _insert(conn, "kb/poison", "POISON chunk the server refuses")
    embedding = threading.Event()
    release = threading.Event()

    class Slow:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def embed(self, texts: Any) -> Any:
            embedding.set()
            release.wait(30)
            if any("POISON" in t for t in texts):
                raise pgrag.PgragError("HTTP 413: input too long")
            return self.inner.embed(texts)

    def slow(model: Any) -> Any:
        return Slow(embedder_for(model, Settings()))

    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(run_once(loaded, batch_size=10, embedders=slow))
    )
    worker.start()
    try:
        assert embedding.wait(30)
        # While the model runs, an application rewrites a queued document: no lock waits.
        with psycopg.connect(dsn) as conn:
            conn.execute("SET lock_timeout = '2s'")
            conn.execute(
                "UPDATE pgrag.documents SET body = 'Shelf 0 holds the red folders.'"
                " WHERE source = 'kb/0'"
            )
    finally:
        release.set()
        worker.join()
    report = result[0]
    assert report.embedded == 4 and report.failed == 1  # the batch, then one at a time
    queued = _queued(dsn)
    errors = [q for q in queued if q[2] is not None]
    assert len(errors) == 1 and "413" in errors[0][2]
    assert len(queued) == 2  # the poison chunk, and kb/0's new chunk


def test_sync_row_refuses_a_misnamed_or_mistyped_principals_column(loaded: Any) -> None:
    with psycopg.connect(loaded.dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.secrets (id int, body text, readers text[], reader text);"
            " CREATE TRIGGER typo AFTER INSERT ON public.secrets FOR EACH ROW EXECUTE FUNCTION"
            " pgrag.sync_row_v1('docs', 'id', 'body', '', 'reeders')"
        )
        with pytest.raises(psycopg.errors.UndefinedColumn, match="reeders"):
            conn.execute("INSERT INTO public.secrets VALUES (1, 'CEO salary', '{alice}', NULL)")
        conn.execute(
            "DROP TRIGGER typo ON public.secrets;"
            " CREATE TRIGGER wrong_type AFTER INSERT ON public.secrets FOR EACH ROW"
            " EXECUTE FUNCTION pgrag.sync_row_v1('docs', 'id', 'body', '', 'reader')"
        )
        with pytest.raises(psycopg.errors.DatatypeMismatch, match="not an array"):
            conn.execute("INSERT INTO public.secrets VALUES (1, 'CEO salary', NULL, 'alice')")
        leaked = conn.execute(
            "SELECT count(*) FROM pgrag.documents WHERE source LIKE 'public.secrets/%'"
        ).fetchone()
        assert leaked == (0,)
        with pytest.raises(psycopg.errors.DataException, match="expected 384 dimensions"):
            conn.execute(
                "SELECT pgrag.query_cache_put(1, sha256('x'), %s)",
                ("[" + ",".join(["0.1"] * 16000) + "]",),
            )


def test_a_failing_model_fails_only_its_own_items(loaded: Any, hash_server: Any) -> None:
    from pgrag.config import Settings
    from pgrag.embeddings.models import embedder_for

    dsn = loaded.dsn
    result = cli_run(
        dsn, "models", "add", "remote", "--provider", "openai", "--url", hash_server.url
    )
    assert result.exit_code == 0, result.output
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.collection_models (collection_id, model_id)"
            " SELECT c.id, m.id FROM pgrag.collections c, pgrag.embedding_models m"
            " WHERE c.name = 'docs' AND m.name = 'remote'"
        )
        for i in range(3):
            _insert(conn, f"kb/{i}", f"Room {i} has a projector and {i + 2} chairs.")
    assert len(_queued(dsn)) == 6  # three chunks, two models
    calls: list[str] = []

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def embed(self, texts: Any) -> Any:
            calls.extend(self.inner.name for _ in texts)
            if self.inner.name == "remote":
                raise pgrag.PgragError("cannot reach the embedding server (Connection refused)")
            return self.inner.embed(texts)

    report = run_worker(
        loaded, once=True, batch_size=2, embedders=lambda m: Counting(embedder_for(m, Settings()))
    )
    # Every due item was worked on (--once goes on after a failed batch) ...
    assert report.embedded == 3 and report.failed == 3
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT m.name, count(*) FROM pgrag.chunk_embeddings e"
            " JOIN pgrag.embedding_models m ON m.id = e.model_id"
            " JOIN pgrag.chunks c ON c.id = e.chunk_id"
            " JOIN pgrag.documents d ON d.id = c.document_id"
            " WHERE d.source LIKE 'kb/%' GROUP BY m.name"
        ).fetchall()
    # ... no vector was stored under the failing model (none of another model's either) ...
    assert rows == [("sentence-transformers/all-MiniLM-L6-v2", 3)]
    failed = [q for q in _queued(dsn) if q[2] is not None]
    assert len(failed) == 3 and all("cannot reach" in q[2] for q in failed)
    # ... and a server that is down is not asked again item by item: each text once.
    assert calls.count("remote") == 3 and len(calls) == 6


def test_a_copy_given_a_body_becomes_a_document_of_its_own(loaded: Any, tmp_path: Path) -> None:
    dsn = loaded.dsn
    folder = tmp_path / "twins"
    folder.mkdir()
    for name in ("a.md", "b.md"):
        (folder / name).write_text("# Garage\n\nThe barrier code for the blue garage is 4711.\n")
    pgrag.ingest(loaded, [folder], collection="docs")
    a, b = str((folder / "a.md").resolve()), str((folder / "b.md").resolve())
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgrag.documents SET body = 'Bikes go to the cellar.' WHERE source = %s", (b,)
        )
        meta = conn.execute("SELECT metadata FROM pgrag.documents WHERE source = %s", (b,))
        assert "duplicate_of" not in meta.fetchone()[0]  # type: ignore[index]
        # The original can be deleted and have its access changed as before.
        conn.execute("UPDATE pgrag.documents SET principals = '{alice}' WHERE source = %s", (a,))
        conn.execute("DELETE FROM pgrag.documents WHERE source = %s", (a,))
    assert _keyword(dsn, "bikes cellar")[0] == b
    assert b not in _keyword(dsn, "barrier code 4711")  # (its title, Garage, stays)


def test_copies_materialised_by_a_body_are_queued_for_models_still_waiting(
    loaded: Any, hash_server: Any, tmp_path: Path
) -> None:
    dsn = loaded.dsn
    result = cli_run(
        dsn, "models", "add", "remote", "--provider", "openai", "--url", hash_server.url
    )
    assert result.exit_code == 0, result.output
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.collection_models (collection_id, model_id)"
            " SELECT c.id, m.id FROM pgrag.collections c, pgrag.embedding_models m"
            " WHERE c.name = 'docs' AND m.name = 'remote'"
        )
    folder = tmp_path / "twins"
    folder.mkdir()
    for name in ("c.md", "d.md"):
        (folder / name).write_text("# Lockers\n\nLockers are emptied every Friday evening.\n")
    pgrag.ingest(loaded, [folder], collection="docs")  # d.md: a copy; c.md's chunk is queued
    c, d = str((folder / "c.md").resolve()), str((folder / "d.md").resolve())
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pgrag.documents SET body = 'Rewritten.' WHERE source = %s", (c,))
    assert cli_run(dsn, "worker", "--once").exit_code == 0
    with psycopg.connect(dsn) as conn:
        models = conn.execute(
            "SELECT m.name FROM pgrag.chunk_embeddings e"
            " JOIN pgrag.embedding_models m ON m.id = e.model_id"
            " JOIN pgrag.chunks k ON k.id = e.chunk_id"
            " JOIN pgrag.documents x ON x.id = k.document_id WHERE x.source = %s ORDER BY 1",
            (d,),
        ).fetchall()
    assert models == [("remote",), ("sentence-transformers/all-MiniLM-L6-v2",)]
