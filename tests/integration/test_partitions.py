"""Vectors partitioned by collection (migration 0015, sql/functions/partitions.sql,
pgrag/db/partition.py): each collection's partition and its own HNSW graphs, the online copy
of a populated database ahead of the upgrade (killed, resumed, under concurrent writes), the
in-place upgrade and its limit, and what `pgrag db check` and `repair` say of partitions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag.db import drift, fingerprint, partition, repair
from pgrag.db import schema as migrate
from pgrag.errors import SchemaError

pytestmark = pytest.mark.matrix  # scripts/test-matrix runs these on each PostgreSQL version

DIM = 8
SAFETY = 120


def _vector(seed: int) -> str:
    """A vector of its own for each seed (as text)."""
    import math

    return (
        "["
        + ",".join(f"{math.sin(seed * 0.7 + k * 1.3 + seed * k * 0.01):.6f}" for k in range(DIM))
        + "]"
    )


def _at_0014(dsn: str) -> None:
    """A database at revision 0014 (the release before partitions). Its triggers are this
    release's functions (the migrations alone leave older ones behind), but for the vectors'
    own, which is 0014's: with those, they write what 0014's did for the statements these tests
    run (chunks and their vectors inserted, updated and deleted; no access changes, which this
    release's functions write with collection_id)."""
    migrate.upgrade(dsn, "0014")
    with psycopg.connect(dsn) as conn:
        conn.execute("SET check_function_bodies = off")  # (some read 0015's columns)
        migrate.apply_functions(conn)
        conn.execute(
            "CREATE OR REPLACE FUNCTION pgrag.chunk_embeddings_acl() RETURNS trigger"
            " LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN"
            " SELECT c.acl_id INTO NEW.acl_id FROM pgrag.chunks c WHERE c.id = NEW.chunk_id;"
            " RETURN NEW; END $fn$"
        )


def _old_database(dsn: str, sizes: dict[str, int]) -> int:
    """A database at revision 0014, its collections of one 8-dimension model filled with
    plain SQL as that release's writers would, with the model's HNSW index. Returns the model's
    id."""
    _at_0014(dsn)
    with psycopg.connect(dsn) as conn:
        (model,) = conn.execute(
            "INSERT INTO pgrag.embedding_models (name, provider, dimension)"
            " VALUES ('m8', 'test', %s) RETURNING id",
            (DIM,),
        ).fetchone()
        for name, n in sizes.items():
            _add_collection(conn, model, name, n)
        conn.execute("SELECT pgrag.ensure_model_index(%s)", (model,))
    return int(model)


def _add_collection(conn: psycopg.Connection[Any], model: int, name: str, n: int) -> int:
    (cid,) = conn.execute(
        "INSERT INTO pgrag.collections (name, model_id) VALUES (%s, %s) RETURNING id",
        (name, model),
    ).fetchone()
    (doc,) = conn.execute(
        "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
        " VALUES (%s, %s, 'h') RETURNING id",
        (cid, f"{name}.txt"),
    ).fetchone()
    _add_chunks(conn, model, cid, doc, 0, n)
    return int(cid)


def _add_chunks(
    conn: psycopg.Connection[Any],
    model: int,
    cid: int,
    doc: int,
    start: int,
    n: int,
    *,
    partitioned: bool = False,
) -> None:
    """n chunks of a document and a vector each (naming its collection: ``partitioned``, or
    as the release before partitions wrote them)."""
    ids = [
        r[0]
        for r in conn.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config)"
            " SELECT %s, %s, g, 'chunk number ' || g, 3, md5(g::text), 'english'"
            " FROM generate_series(%s::int, %s::int) g RETURNING id",
            (doc, cid, start, start + n - 1),
        ).fetchall()
    ]
    with conn.cursor() as cur:
        if partitioned:
            cur.executemany(
                "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " VALUES (%s, %s, %s::vector, %s)",
                [(model, i, _vector(i), cid) for i in ids],
            )
        else:
            cur.executemany(
                "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding)"
                " VALUES (%s, %s, %s::vector)",
                [(model, i, _vector(i)) for i in ids],
            )


def _vectors(dsn: str, table: str) -> set[tuple[Any, ...]]:
    """Every vector of a table: (model, chunk, its chunk's collection, acl, embedding)."""
    with psycopg.connect(dsn) as conn:
        return {
            tuple(r)
            for r in conn.execute(
                sql.SQL(
                    "SELECT e.model_id, e.chunk_id, c.collection_id, e.acl_id, e.embedding::text"
                    " FROM {} e JOIN pgrag.chunks c ON c.id = e.chunk_id"
                ).format(sql.Identifier("pgrag", table))
            )
        }


def _next_matches_chunks(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT bool_and(e.collection_id = c.collection_id) FROM pgrag.chunk_embeddings_next e"
            " JOIN pgrag.chunks c ON c.id = e.chunk_id"
        ).fetchone() == (True,)


def _differences(dsn: str) -> list[str]:
    live, shipped = (
        (lambda c: fingerprint.take(c))(psycopg.connect(dsn)),
        fingerprint.expected(),
    )
    out = []
    for section in sorted(set(live) | set(shipped)):
        a, b = live.get(section), shipped.get(section)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{section} {k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(section)
    return out


def test_online_copy_killed_resumed_under_writes_then_switched_over(empty_dsn: str) -> None:
    model = _old_database(empty_dsn, {"a": 1500, "b": 300})
    env = {**os.environ, "PGRAG_DSN": empty_dsn}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgrag.cli", "db", "partition", "--batch", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Killed half-way through the copy, as a crash would.
    deadline = time.monotonic() + SAFETY
    with psycopg.connect(empty_dsn, autocommit=True) as watch:
        while time.monotonic() < deadline:
            row = None
            if watch.execute("SELECT to_regclass('pgrag.partition_progress')").fetchone()[0]:
                row = watch.execute("SELECT copied FROM pgrag.partition_progress").fetchone()
            if row and row[0] >= 100:
                break
            assert proc.poll() is None, "it finished before it could be killed"
            time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(SAFETY)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        copied = conn.execute("SELECT copied, ready FROM pgrag.partition_progress").fetchone()
    assert 100 <= copied[0] < 1800 and copied[1] is False

    # The old release's writers go on meanwhile: new vectors, deleted chunks, vectors stored
    # again, a new collection; all of them reach the new table through the triggers.
    with psycopg.connect(empty_dsn) as conn:
        a, doc_a = conn.execute(
            "SELECT c.id, d.id FROM pgrag.collections c JOIN pgrag.documents d"
            " ON d.collection_id = c.id WHERE c.name = 'a'"
        ).fetchone()
        _add_chunks(conn, model, a, doc_a, 5000, 40)
        conn.execute(
            "DELETE FROM pgrag.chunks WHERE id IN (SELECT id FROM pgrag.chunks c"
            " WHERE c.collection_id = (SELECT id FROM pgrag.collections WHERE name = 'b')"
            " ORDER BY id LIMIT 50)"
        )
        # (a worker storing a vector again: an update)
        conn.execute(
            "UPDATE pgrag.chunk_embeddings SET embedding = '[1,0,0,0,0,0,0,1]' WHERE chunk_id IN"
            " (SELECT id FROM pgrag.chunks ORDER BY id DESC LIMIT 7)"
        )
        _add_collection(conn, model, "c", 30)

    # Resumed, with a writer adding and deleting vectors of "a" all through it.
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with psycopg.connect(empty_dsn) as conn:
                start = 6000
                while not stop.is_set():
                    _add_chunks(conn, model, a, doc_a, start, 3)
                    conn.execute(
                        "DELETE FROM pgrag.chunks WHERE id = (SELECT min(id) FROM pgrag.chunks"
                        " WHERE collection_id = %s AND ordinal BETWEEN 1 AND 1499)",
                        (a,),
                    )
                    conn.commit()
                    start += 3
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        done = partition.run(empty_dsn, batch=25)
    finally:
        stop.set()
        thread.join(SAFETY)
    assert not errors, [getattr(getattr(e, "diag", None), "message_detail", str(e)) for e in errors]
    assert not done.already and done.copied > 0
    assert done.indexes == [f"chunk_embeddings_next_hnsw_{model}"]
    assert _vectors(empty_dsn, "chunk_embeddings") == _vectors(empty_dsn, "chunk_embeddings_next")
    assert _next_matches_chunks(empty_dsn)
    # Run again: nothing to copy, nothing rebuilt.
    assert partition.run(empty_dsn).copied == 0

    # Writes after it is ready are still repeated; then the upgrade switches over.
    with psycopg.connect(empty_dsn) as conn:
        _add_chunks(conn, model, a, doc_a, 900_000, 5)
    before = _vectors(empty_dsn, "chunk_embeddings")
    assert before == _vectors(empty_dsn, "chunk_embeddings_next")
    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == migrate.head()
    after = _vectors(empty_dsn, "chunk_embeddings")
    assert after == before
    assert _differences(empty_dsn) == []
    assert drift.check_database(empty_dsn) == []
    with psycopg.connect(empty_dsn) as conn:
        # Each collection's partition, with its own index of the model's partitioned index.
        parts = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'pgrag.chunk_embeddings'::regclass ORDER BY 1"
        ).fetchall()
        ids = [r[0] for r in conn.execute("SELECT id FROM pgrag.collections ORDER BY id")]
        assert [p for (p,) in parts] == sorted(f"chunk_embeddings_c{i}" for i in ids)
        assert conn.execute(
            "SELECT i.indisvalid,"
            "       (SELECT count(*) FROM pg_inherits h WHERE h.inhparent = i.indexrelid)"
            " FROM pg_index i"
            " WHERE i.indexrelid = to_regclass('pgrag.chunk_embeddings_hnsw_' || %s)",
            (model,),
        ).fetchone() == (True, len(ids))
        assert conn.execute("SELECT to_regclass('pgrag.partition_progress')").fetchone() == (None,)
        # A search of "a" reads its partition (the query is one of its own vectors).
        (chunk,) = conn.execute(
            "SELECT max(id) FROM pgrag.chunks WHERE collection_id = %s", (a,)
        ).fetchone()
        rows = conn.execute(
            "SELECT chunk_id FROM pgrag.search_v5('a', NULL, %s::vector, k => 3)", (_vector(chunk),)
        ).fetchall()
        assert rows[0][0] == chunk


def test_a_large_table_is_not_copied_inside_the_upgrade_unless_asked(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _at_0014(empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        models = [
            conn.execute(
                "INSERT INTO pgrag.embedding_models (name, provider, dimension)"
                " VALUES (%s, 'test', 2) RETURNING id",
                (f"m{i}",),
            ).fetchone()[0]
            for i in range(11)
        ]
        (cid,) = conn.execute(
            "INSERT INTO pgrag.collections (name, model_id) VALUES ('big', %s) RETURNING id",
            (models[0],),
        ).fetchone()
        (doc,) = conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
            " VALUES (%s, 'big.txt', 'h') RETURNING id",
            (cid,),
        ).fetchone()
        conn.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config)"
            " SELECT %s, %s, g, 'x', 1, 'h', 'english' FROM generate_series(1, 9100) g",
            (doc, cid),
        )
        conn.execute(
            "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding)"
            " SELECT m, c.id, '[1,2]' FROM pgrag.chunks c, unnest(%s::int[]) m",
            (models,),
        )
    monkeypatch.delenv("PGRAG_PARTITION_IN_PLACE", raising=False)
    with pytest.raises(SchemaError) as caught:
        migrate.upgrade(empty_dsn)
    message = str(caught.value)
    assert "over 100,000 vectors" in message and "`pgrag db partition` first" in message
    assert "nothing was changed" in message and "\n" not in message
    assert migrate.current(empty_dsn) == "0014"
    monkeypatch.setenv("PGRAG_PARTITION_IN_PLACE", "1")
    migrate.upgrade(empty_dsn)
    assert migrate.current(empty_dsn) == migrate.head()
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pgrag.chunk_embeddings WHERE collection_id = %s", (cid,)
        ).fetchone() == (100_100,)


def test_each_collection_gets_its_partition_and_check_and_repair_keep_them(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        (model,) = conn.execute("SELECT pgrag.register_model('m8', 'test', %s)", (DIM,)).fetchone()
        conn.execute("SELECT pgrag.ensure_model_index(%s)", (model,))
        # pgrag_writer, which may not create tables, creates a collection: it gets its partition
        # (its model's index on it under pgrag's name for it).
        conn.execute("SET ROLE pgrag_writer")
        (cid,) = conn.execute(
            "INSERT INTO pgrag.collections (name, model_id) VALUES ('w', %s) RETURNING id",
            (model,),
        ).fetchone()
        conn.execute("RESET ROLE")
        (gone,) = conn.execute(
            "INSERT INTO pgrag.collections (name, model_id) VALUES ('gone', %s) RETURNING id",
            (model,),
        ).fetchone()
        conn.commit()
        assert conn.execute(
            "SELECT count(*) FROM pg_index i WHERE i.indrelid = to_regclass(%s)"
            " AND i.indexrelid = to_regclass(%s)",
            (f"pgrag.chunk_embeddings_c{cid}", f"pgrag.chunk_embeddings_c{cid}_hnsw_{model}"),
        ).fetchone() == (1,)
        # A vector must name its chunk's collection: another one is refused.
        (doc,) = conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
            " VALUES (%s, 'w.txt', 'h') RETURNING id",
            (cid,),
        ).fetchone()
        (chunk,) = conn.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config) VALUES (%s, %s, 0, 'x', 1, 'h', 'english') RETURNING id",
            (doc, cid),
        ).fetchone()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(
                "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " VALUES (%s, %s, %s::vector, %s)",
                (model, chunk, _vector(1), gone),
            )
        conn.rollback()
        conn.execute("DELETE FROM pgrag.collections WHERE id = %s", (gone,))
        conn.execute(f"DROP TABLE pgrag.chunk_embeddings_c{cid}")  # noqa: S608 - an id
        # A grant on a partition would read past row-level security (the parent's policies
        # apply to reads through the parent only).
        (kept,) = conn.execute(
            "INSERT INTO pgrag.collections (name, model_id) VALUES ('v', %s) RETURNING id",
            (model,),
        ).fetchone()
        conn.execute(f"GRANT SELECT ON pgrag.chunk_embeddings_c{kept} TO pgrag_reader")  # noqa: S608
        conn.commit()
    found = {(d.kind, d.name, d.problem.split(":")[0]) for d in drift.check_database(dsn)}
    assert found == {
        ("partition", "of collection 'w'", "is missing"),
        (
            "partition",
            f"pgrag.chunk_embeddings_c{kept}",
            "is granted to pgrag_reader",
        ),
    }
    done, left = repair.repair_database(dsn)
    assert not left, left
    assert "created the partition of collection 'w'" in done
    assert f"dropped pgrag.chunk_embeddings_c{gone} (its collection was deleted)" in done
    assert f"revoked the privileges of pgrag_reader on pgrag.chunk_embeddings_c{kept}" in done
    assert drift.check_database(dsn) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT has_table_privilege('pgrag_reader', %s, 'SELECT')",
            (f"pgrag.chunk_embeddings_c{kept}",),
        ).fetchone() == (False,)


def test_a_model_index_build_stopped_half_way_is_finished_not_redone(db: Any) -> None:
    """A concurrent build attaches each partition's index as it goes: stopped after the first
    partition, the next build makes the others' and keeps the one that was done."""
    import pgrag
    from pgrag.embeddings import index
    from pgrag.ingest.loaders import from_text

    for name in ("one", "two", "three"):
        docs = [from_text(f"{name}{i}", f"{name} text number {i}") for i in range(3)]
        assert not pgrag.ingest_documents(db, docs, collection=name).failed
    ids = dict(db.conn.execute("SELECT name, id FROM pgrag.collections").fetchall())
    (model,) = db.conn.execute("SELECT DISTINCT model_id FROM pgrag.collections").fetchone()
    db.conn.rollback()
    parent = f"chunk_embeddings_hnsw_{model}"
    first = f"chunk_embeddings_c{ids['one']}_hnsw_{model}"
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        # What a build stopped after its first partition leaves: the parent's index (invalid),
        # one partition's attached.
        conn.execute(sql.SQL("DROP INDEX pgrag.{}").format(sql.Identifier(parent)))
        conn.execute(conn.execute("SELECT pgrag.model_index_ddl(%s, true)", (model,)).fetchone()[0])
        conn.execute(
            conn.execute(
                "SELECT pgrag.model_index_partition_ddl(%s, %s, true)",
                (model, f"chunk_embeddings_c{ids['one']}"),
            ).fetchone()[0]
        )
        conn.execute(
            sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(
                sql.Identifier("pgrag", parent), sql.Identifier("pgrag", first)
            )
        )
        kept = conn.execute("SELECT to_regclass(%s)::oid", (f"pgrag.{first}",)).fetchone()
    assert [h.state for h in index.health(db, [model]) if h.model_id == model] == [index.INVALID]
    assert index.ensure(db, model, wait=True) is True
    assert [h.state for h in index.health(db, [model]) if h.model_id == model] == [index.OK]
    with psycopg.connect(db.dsn) as conn:
        children = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%s) ORDER BY 1",
            (f"pgrag.{parent}",),
        ).fetchall()
        assert [c for (c,) in children] == sorted(
            f"chunk_embeddings_c{ids[n]}_hnsw_{model}" for n in ("one", "two", "three")
        )
        assert conn.execute("SELECT to_regclass(%s)::oid", (f"pgrag.{first}",)).fetchone() == kept


def _collection_with_chunks(conn: psycopg.Connection[Any], model: int, name: str, n: int) -> int:
    (cid,) = conn.execute(
        "INSERT INTO pgrag.collections (name, model_id) VALUES (%s, %s) RETURNING id",
        (name, model),
    ).fetchone()
    (doc,) = conn.execute(
        "INSERT INTO pgrag.documents (collection_id, source, content_hash)"
        " VALUES (%s, %s, 'h') RETURNING id",
        (cid, f"{name}.txt"),
    ).fetchone()
    _add_chunks(conn, model, cid, doc, 1, n, partitioned=True)
    return int(cid)


def _partition_locks(conn: psycopg.Connection[Any]) -> int:
    """How many partitions of the vectors (or their indexes) this transaction has locked."""
    (n,) = conn.execute(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
        " WHERE l.pid = pg_backend_pid() AND c.relname ~ '^chunk_embeddings_c[0-9]+'"
    ).fetchone()
    return int(n)


def test_the_vectors_follow_their_chunks_touching_one_partition(dsn: str) -> None:
    """What the foreign keys did, done by triggers that read the one collection's partition:
    checks on insert, a chunk's delete, move and TRUNCATE, a model's delete."""
    with psycopg.connect(dsn) as conn:
        (model,) = conn.execute("SELECT pgrag.register_model('m8', 'test', %s)", (DIM,)).fetchone()
        ids = [_collection_with_chunks(conn, model, f"t{i:02d}", 5) for i in range(30)]
        conn.commit()
        first, second = ids[0], ids[1]
        (chunk,) = conn.execute(
            "SELECT min(id) FROM pgrag.chunks WHERE collection_id = %s", (first,)
        ).fetchone()
        # Checks: the chunk, its collection, the model.
        for values, words in (
            ((model, 10**9, first), "of chunk 1000000000, which does not exist"),
            ((model, chunk, second), f"filed under collection {second}: its chunk is in"),
            ((10**6, chunk, first), "of embedding model 1000000, which does not exist"),
        ):
            with pytest.raises(psycopg.errors.ForeignKeyViolation, match=words):
                conn.execute(
                    "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding,"
                    " collection_id) VALUES (%s, %s, %s::vector, %s)",
                    (values[0], values[1], _vector(1), values[2]),
                )
            conn.rollback()
        # A chunk deleted takes its vectors, and locks its own partition only (of 30).
        conn.execute("DELETE FROM pgrag.chunks WHERE id = %s", (chunk,))
        assert 1 <= _partition_locks(conn) <= 4
        assert conn.execute(
            "SELECT count(*) FROM pgrag.chunk_embeddings WHERE chunk_id = %s", (chunk,)
        ).fetchone() == (0,)
        conn.commit()
        # A document's access changed: its vectors' acl follows, in its partition alone.
        conn.execute(
            "UPDATE pgrag.documents SET principals = '{group:hr}' WHERE collection_id = %s",
            (first,),
        )
        assert 1 <= _partition_locks(conn) <= 4
        assert conn.execute(
            "SELECT count(DISTINCT e.acl_id) = 1 AND min(e.acl_id) = min(d.acl_id)"
            " FROM pgrag.chunk_embeddings e JOIN pgrag.chunks c ON c.id = e.chunk_id"
            " JOIN pgrag.documents d ON d.id = c.document_id WHERE e.collection_id = %s",
            (first,),
        ).fetchone() == (True,)
        conn.commit()
        # A chunk moved to another collection: its vector to that collection's partition.
        (moved,) = conn.execute(
            "SELECT min(id) FROM pgrag.chunks WHERE collection_id = %s", (first,)
        ).fetchone()
        conn.execute("UPDATE pgrag.chunks SET collection_id = %s WHERE id = %s", (second, moved))
        assert conn.execute(
            "SELECT collection_id FROM pgrag.chunk_embeddings WHERE chunk_id = %s", (moved,)
        ).fetchone() == (second,)
        assert conn.execute(
            f"SELECT count(*) FROM pgrag.chunk_embeddings_c{second} WHERE chunk_id = %s",  # noqa: S608
            (moved,),
        ).fetchone() == (1,)
        conn.commit()
        # A model with vectors cannot be deleted.
        with pytest.raises(psycopg.errors.ForeignKeyViolation, match="still has vectors"):
            conn.execute("DELETE FROM pgrag.embedding_models WHERE id = %s", (model,))
        conn.rollback()
        # A collection id names a partition: it is positive.
        with pytest.raises(psycopg.errors.CheckViolation, match="collections_id_check"):
            conn.execute(
                "INSERT INTO pgrag.collections (id, name, model_id) OVERRIDING SYSTEM VALUE"
                " VALUES (-7, 'neg', %s)",
                (model,),
            )
        conn.rollback()
        # TRUNCATE of the chunks takes the vectors too.
        conn.execute("TRUNCATE pgrag.chunks CASCADE")
        assert conn.execute("SELECT count(*) FROM pgrag.chunk_embeddings").fetchone() == (0,)
        conn.commit()


def test_creating_a_collection_waits_for_no_writer_of_another(dsn: str) -> None:
    """A collection's partition is attached without the lock a foreign key would take on
    chunks: an ingest's open transaction in one collection holds back neither a new collection
    nor, while that is uncommitted, the ingest's next write; and the two do not deadlock."""
    with psycopg.connect(dsn) as conn:
        (model,) = conn.execute("SELECT pgrag.register_model('m8', 'test', %s)", (DIM,)).fetchone()
        a = _collection_with_chunks(conn, model, "a", 3)
        conn.commit()
    with psycopg.connect(dsn) as writer, psycopg.connect(dsn) as creator:
        creator.execute("SET lock_timeout = '2s'")
        writer.execute("SET lock_timeout = '2s'")
        (doc,) = writer.execute(
            "SELECT id FROM pgrag.documents WHERE collection_id = %s", (a,)
        ).fetchone()
        writer.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config) VALUES (%s, %s, 99, 'x', 1, 'h', 'english')",
            (doc, a),
        )
        creator.execute(
            "INSERT INTO pgrag.collections (name, model_id) VALUES ('b', %s)", (model,)
        )  # (no wait for the writer's open transaction)
        writer.execute(
            "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content, token_count,"
            " content_hash, text_config) VALUES (%s, %s, 100, 'y', 1, 'h', 'english')",
            (doc, a),
        )  # (nor the writer for the uncommitted collection)
        # The writer creates a collection too: it waits for the other new one (two ATTACHes
        # take turns), which does not wait for it: no deadlock.
        writer.execute("SET lock_timeout = '20s'")
        failed: list[BaseException] = []

        def create_c() -> None:
            try:
                writer.execute(
                    "INSERT INTO pgrag.collections (name, model_id) VALUES ('c', %s)", (model,)
                )
            except BaseException as err:  # noqa: BLE001 - reported by the test
                failed.append(err)

        thread = threading.Thread(target=create_c)
        thread.start()
        time.sleep(0.5)
        creator.commit()
        thread.join(SAFETY)
        assert not failed, failed
        writer.commit()
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgrag.chunk_embeddings'::regclass"
        ).fetchone() == (3,)


def test_what_the_triggers_cannot_stop_is_found_and_repaired(dsn: str, admin_dsn: str) -> None:
    """Vectors whose chunk is gone, or filed under another collection than their chunk's (a
    delete in REPEATABLE READ racing a vector's write, or writes with triggers off, as here):
    db check counts them, repair deletes or moves them. And a chunk's id cannot change."""
    with psycopg.connect(dsn) as conn:
        (model,) = conn.execute("SELECT pgrag.register_model('m8', 'test', %s)", (DIM,)).fetchone()
        a = _collection_with_chunks(conn, model, "a", 4)
        b = _collection_with_chunks(conn, model, "b", 4)
        conn.commit()
        chunks = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM pgrag.chunks WHERE collection_id = %s ORDER BY id", (a,)
            )
        ]
        with pytest.raises(psycopg.errors.ForeignKeyViolation, match="cannot change while it has"):
            conn.execute("UPDATE pgrag.chunks SET id = id + 1000000 WHERE id = %s", (chunks[0],))
        conn.rollback()
    database = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    superuser = psycopg.conninfo.make_conninfo(admin_dsn, dbname=database)
    with psycopg.connect(superuser) as conn:
        conn.execute("SET session_replication_role = replica")  # (no triggers fire)
        conn.execute("DELETE FROM pgrag.chunks WHERE id = %s", (chunks[0],))  # its vector stays
        conn.execute(
            "UPDATE pgrag.chunk_embeddings SET collection_id = %s WHERE chunk_id = %s",
            (b, chunks[1]),
        )
        conn.commit()
    found = {(d.kind, d.problem.split(" (")[0]) for d in drift.check_database(dsn)}
    assert ("vectors", "1 have no chunk or no model") in found
    assert ("vectors", "1 are filed under another collection than their chunk's") in found
    done, left = repair.repair_database(dsn)
    assert not left, left
    assert "deleted 1 vectors whose chunk or model is gone" in done
    assert "moved 1 vectors to their chunk's collection's partition" in done
    assert drift.check_database(dsn) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT collection_id FROM pgrag.chunk_embeddings WHERE chunk_id = %s", (chunks[1],)
        ).fetchone() == (a,)


def test_a_vector_stored_while_its_chunk_moves_is_not_misfiled(dsn: str) -> None:
    """The chunk's row is locked FOR SHARE by a vector's write: a move of the chunk to another
    collection (uncommitted) holds the write back, which then sees the move and refuses a
    vector filed under the old collection."""
    with psycopg.connect(dsn) as conn:
        (model,) = conn.execute("SELECT pgrag.register_model('m8', 'test', %s)", (DIM,)).fetchone()
        a = _collection_with_chunks(conn, model, "a", 2)
        b = _collection_with_chunks(conn, model, "b", 2)
        (chunk,) = conn.execute(
            "SELECT min(id) FROM pgrag.chunks WHERE collection_id = %s", (a,)
        ).fetchone()
        conn.execute("DELETE FROM pgrag.chunk_embeddings WHERE chunk_id = %s", (chunk,))
        conn.commit()
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as mover, psycopg.connect(dsn) as writer:
        mover.execute("UPDATE pgrag.chunks SET collection_id = %s WHERE id = %s", (b, chunk))

        def store() -> None:
            try:
                writer.execute(
                    "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding,"
                    " collection_id) VALUES (%s, %s, %s::vector, %s)",
                    (model, chunk, _vector(chunk), a),
                )
                writer.commit()
            except BaseException as err:  # noqa: BLE001 - reported by the test
                errors.append(err)
                writer.rollback()

        thread = threading.Thread(target=store)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive(), "the write did not wait for the move"
        mover.commit()
        thread.join(SAFETY)
    assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.ForeignKeyViolation)
    assert f"its chunk is in collection {b}" in str(errors[0])
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pgrag.chunk_embeddings WHERE chunk_id = %s", (chunk,)
        ).fetchone() == (0,)
