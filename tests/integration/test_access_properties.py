"""Access control under load and at random: k results at 1/10/50% visibility against exact
search, a property test over random documents, access lists and principals, the keyword index
staying exact per access list, the upgrade from 0002, and writers that are not superusers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.db import schema as migrate
from tests.integration.conftest import TEMPLATE, _create_database, _drop_database

DIM = 384
K = 10


def _login_role(admin_dsn: str, group: str) -> str:
    role = f"{group.removeprefix('pgrag_')}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role)))
    return role


def _drop_role(admin_dsn: str, role: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture(scope="module")
def scattered(admin_dsn: str, template_dsn: str) -> Iterator[dict[str, Any]]:
    """6,000 chunks, 10 per document, each document readable by one of 100 tenants (so each
    holds ~1%), clustered 384-d vectors and Zipf-distributed words; the HNSW index built."""
    name = f"pgrag_vis_{uuid.uuid4().hex[:8]}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    rng = np.random.default_rng(3)
    n, per_doc = 6000, 10
    centers = rng.standard_normal((60, DIM)).astype(np.float32)
    vectors = centers[rng.integers(0, 60, n)] + 0.7 * rng.standard_normal((n, DIM)).astype(
        np.float32
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    p = 1 / (np.arange(1, 3001) + 2.7)
    words = rng.choice(3000, size=(n, 30), p=p / p.sum())
    texts = [" ".join(f"w{w}" for w in row) for row in words]
    tenants = rng.integers(0, 100, n // per_doc)
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        cid = conn.execute(
            "INSERT INTO pgrag.collections (name) VALUES ('vis') RETURNING id"
        ).fetchone()[0]
        model = conn.execute(
            "SELECT pgrag.register_model('synthetic', 'test', %s, 'cosine', true)", (DIM,)
        ).fetchone()[0]
        conn.execute("UPDATE pgrag.collections SET model_id = %s WHERE id = %s", (model, cid))
        doc_ids = []
        for d, t in enumerate(tenants):
            doc_ids.append(
                conn.execute(
                    "INSERT INTO pgrag.documents (collection_id, source, content_hash, principals,"
                    " metadata) VALUES (%s, %s, 'h', %s, %s) RETURNING id",
                    (cid, f"d{d:04d}", [f"tenant:{t:02d}"], json.dumps({"tenant": int(t)})),
                ).fetchone()[0]
            )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO pgrag.chunks (id, document_id, collection_id, ordinal, content,"
                " token_count, content_hash, text_config) VALUES (%s, %s, %s, %s, %s, 30, 'h',"
                " 'english')",
                [(i + 1, doc_ids[i // per_doc], cid, i % per_doc, texts[i]) for i in range(n)],
            )
            cur.executemany(
                "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
                " VALUES (%s, %s, %s, %s)",
                [(model, i + 1, vectors[i], cid) for i in range(n)],
            )
        conn.execute("SELECT * FROM pgrag.keyword_maintain_v2('vis')")
        conn.commit()
        conn.execute("ANALYZE")
        conn.commit()
    app = _login_role(admin_dsn, "pgrag_app")
    yield {
        "dsn": dsn,
        "app_dsn": make_conninfo(dsn, user=app),
        "vectors": vectors,
        "texts": texts,
        "tenant": np.repeat(tenants, per_doc),
    }
    _drop_database(admin_dsn, name)
    _drop_role(admin_dsn, app)


@pytest.mark.parametrize("tenants", [1, 10, 50], ids=["1%", "10%", "50%"])
def test_k_results_agree_with_exact_search_at_any_visibility(
    scattered: dict[str, Any], tenants: int
) -> None:
    visible = scattered["tenant"] < tenants
    vis = np.nonzero(visible)[0]
    rng = np.random.default_rng(tenants)
    queries = scattered["vectors"][rng.integers(0, len(visible), 20)] + 0.3 * rng.standard_normal(
        (20, DIM)
    ).astype(np.float32)
    recalls, keyword_recalls = [], []
    with psycopg.connect(scattered["app_dsn"]) as conn:
        register_vector(conn)
        principals = ",".join(f"tenant:{i:02d}" for i in range(tenants))
        for i, q in enumerate(queries):
            with conn.transaction():
                conn.execute("SELECT set_config('pgrag.principals', %s, true)", (principals,))
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT chunk_id FROM pgrag.search_v3('vis', NULL, %s, k => %s)", (q, K)
                    )
                ]
                # Never a row the caller may not see; always k of them.
                assert len(ids) == min(K, len(vis))
                assert all(visible[c - 1] for c in ids)
                exact = vis[np.argsort(-(scattered["vectors"][vis] @ q))[:K]] + 1
                recalls.append(len(set(ids) & set(exact.tolist())) / K)
                # Keyword and hybrid: k rows, all visible; keyword agrees with exact BM25.
                words = " ".join(scattered["texts"][int(vis[i % len(vis)])].split()[:3])
                kw = [
                    r[0]
                    for r in conn.execute(
                        "SELECT chunk_id FROM pgrag.search_v3('vis', %s, k => %s)", (words, K)
                    )
                ]
                full = [
                    r[0]
                    for r in conn.execute(
                        "SELECT chunk_id FROM pgrag.search_v3('vis', %s, k => %s,"
                        " postings_per_term => NULL)",
                        (words, K),
                    )
                ]
                terms = set(words.split())
                matches = sum(bool(terms & set(scattered["texts"][c].split())) for c in vis)
                assert len(kw) == len(full) == min(K, matches)
                assert all(visible[c - 1] for c in kw)
                keyword_recalls.append(len(set(kw) & set(full)) / len(full))
                hybrid = conn.execute(
                    "SELECT chunk_id FROM pgrag.search_v3('vis', %s, %s, k => %s)", (words, q, K)
                ).fetchall()
                assert len(hybrid) == K and all(visible[r[0] - 1] for r in hybrid)
    assert np.mean(recalls) >= 0.95, recalls
    assert np.mean(keyword_recalls) >= 0.95, keyword_recalls


def test_a_metadata_filter_keeps_k_results_at_one_percent(scattered: dict[str, Any]) -> None:
    q = scattered["vectors"][0]
    match = np.nonzero(scattered["tenant"] == 7)[0]
    with psycopg.connect(scattered["dsn"]) as conn:
        register_vector(conn)
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT chunk_id FROM pgrag.search_v3('vis', NULL, %s, k => %s,"
                " filter => '{\"tenant\": 7}')",
                (q, K),
            )
        ]
    exact = match[np.argsort(-(scattered["vectors"][match] @ q))[:K]] + 1
    assert len(ids) == K and set(ids) == set(exact.tolist())


# -- a property over random documents, access lists and principals -------------------------------

PRINCIPALS = ["public", "alice", "bob", "group:a", "group:b", "tenant:x"]


@pytest.fixture(scope="module")
def prop_db(admin_dsn: str, template_dsn: str) -> Iterator[dict[str, str]]:
    name = f"pgrag_prop_{uuid.uuid4().hex[:8]}"
    dsn = _create_database(admin_dsn, name, TEMPLATE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgrag.collections (name) VALUES ('p')")
    app = _login_role(admin_dsn, "pgrag_app")
    reader = _login_role(admin_dsn, "pgrag_reader")
    writer = _login_role(admin_dsn, "pgrag_writer")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgrag.role_principals VALUES (%s, 'group:a'), (%s, 'bob')",
            (reader, reader),
        )
    yield {
        "dsn": dsn,
        "app": make_conninfo(dsn, user=app),
        "reader": make_conninfo(dsn, user=reader),
        "writer": make_conninfo(dsn, user=writer),
    }
    _drop_database(admin_dsn, name)
    for role in (app, reader, writer):
        _drop_role(admin_dsn, role)


def _in_step_per_acl(conn: psycopg.Connection[Any]) -> None:
    """Every posting carries its chunk's acl, and the statistics per acl are exactly what the
    chunks hold (the owner sees every row)."""
    bad = conn.execute(
        "SELECT count(*) FROM pgrag.keyword_postings p JOIN pgrag.chunks c ON c.id = p.chunk_id"
        " WHERE p.acl_id <> c.acl_id"
    ).fetchone()[0]
    assert bad == 0
    truth = dict(
        conn.execute(
            "SELECT c.acl_id || ':' || u.lexeme, count(*) FROM pgrag.chunks c, unnest(c.tsv) u"
            " GROUP BY 1"
        ).fetchall()
    )
    stored = dict(
        conn.execute(
            "SELECT acl_id || ':' || lexeme, sum(df) FROM pgrag.keyword_df GROUP BY 1"
            " HAVING sum(df) <> 0"
        ).fetchall()
    )
    assert stored == truth
    totals = dict(
        conn.execute(
            "SELECT acl_id, sum(chunks) FROM pgrag.keyword_totals"
            " GROUP BY 1 HAVING sum(chunks) <> 0"
        ).fetchall()
    )
    assert totals == dict(
        conn.execute("SELECT acl_id, count(*) FROM pgrag.chunks GROUP BY 1").fetchall()
    )
    # Documents, chunks and vectors agree on access.
    assert (
        conn.execute(
            "SELECT count(*) FROM pgrag.chunks c JOIN pgrag.documents d ON d.id = c.document_id"
            " WHERE c.acl_id <> d.acl_id OR c.principals <> d.principals"
        ).fetchone()[0]
        == 0
    )


access_lists = st.lists(st.sampled_from(PRINCIPALS), min_size=0, max_size=3)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    docs=st.lists(access_lists, min_size=1, max_size=8),
    changes=st.lists(st.tuples(st.integers(0, 7), access_lists), max_size=3),
    session=st.lists(st.sampled_from(PRINCIPALS[1:]), max_size=3),
)
def test_no_result_is_ever_outside_the_callers_visibility(
    prop_db: dict[str, str], docs: list[list[str]], changes: list[Any], session: list[str]
) -> None:
    final = [list(d) for d in docs]
    with psycopg.connect(prop_db["dsn"], autocommit=True) as owner:
        cid = owner.execute("SELECT id FROM pgrag.collections WHERE name = 'p'").fetchone()[0]
        try:
            for i, principals in enumerate(docs):
                doc = owner.execute(
                    "INSERT INTO pgrag.documents (collection_id, source, content_hash, principals)"
                    " VALUES (%s, %s, 'h', %s) RETURNING id",
                    (cid, f"doc{i}", principals),
                ).fetchone()[0]
                owner.execute(
                    "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content,"
                    " token_count, content_hash, text_config) VALUES (%s, %s, 0, %s, 3, 'h',"
                    " 'english'), (%s, %s, 1, 'quarterly figures', 2, 'h', 'english')",
                    (doc, cid, f"quarterly report number {i}", doc, cid),
                )
            for i, principals in changes:  # access changes after the fact (pgrag acl)
                if i < len(docs):
                    owner.execute(
                        "UPDATE pgrag.documents SET principals = %s WHERE source = %s",
                        (principals, f"doc{i}"),
                    )
                    final[i] = list(principals)
            _in_step_per_acl(owner)

            def allowed(who: set[str]) -> set[str]:
                return {f"doc{i}" for i, p in enumerate(final) if set(p) & (who | {"public"})}

            # An application asserting the session's principals.
            with psycopg.connect(prop_db["app"]) as app:
                app.execute("SELECT set_config('pgrag.principals', %s, true)", (",".join(session),))
                want = allowed(set(session))
                rows = app.execute(
                    "SELECT DISTINCT source FROM pgrag.search_v3('p', 'quarterly report', k => 100)"
                ).fetchall()
                assert {r[0] for r in rows} == want
                listed = app.execute("SELECT source FROM pgrag.documents_v1('p')").fetchall()
                assert {r[0] for r in listed} == want
                (n_chunks,) = app.execute(
                    "SELECT chunks FROM pgrag.collections_v1() WHERE name = 'p'"
                ).fetchone()
                assert n_chunks == 2 * len(want)
            # Row-level security on the tables, for a role granted them that names principals.
            with psycopg.connect(prop_db["writer"]) as writer:
                writer.execute(
                    "SELECT set_config('pgrag.principals', %s, true)",
                    (",".join(session) or "public",),
                )
                seen = {r[0] for r in writer.execute("SELECT source FROM pgrag.documents")}
                assert seen == want
                (n_chunks,) = writer.execute("SELECT count(*) FROM pgrag.chunks").fetchone()
                (n_stat,) = writer.execute(
                    "SELECT coalesce(sum(chunks), 0) FROM pgrag.keyword_totals"
                ).fetchone()
                assert n_chunks == n_stat == 2 * len(want)
            # The Python API on the owner's (superuser) connection, reading as the session.
            db = pgrag.connect(prop_db["dsn"], principals=session)
            try:
                hits = pgrag.search(db, "quarterly report", collection="p", k=100, mode="keyword")
                assert {h.source for h in hits} == allowed(set(session))
            finally:
                db.close()
            # A reader role mapped to group:a and bob; what it asserts can only narrow that.
            with psycopg.connect(prop_db["reader"]) as reader:
                if session:
                    reader.execute(
                        "SELECT set_config('pgrag.principals', %s, true)", (",".join(session),)
                    )
                mapped = {"group:a", "bob"}
                who = mapped & set(session) if session else mapped
                rows = reader.execute(
                    "SELECT DISTINCT source FROM pgrag.search_v3('p', 'quarterly', k => 100)"
                ).fetchall()
                assert {r[0] for r in rows} == allowed(who)
        finally:
            owner.execute("DELETE FROM pgrag.documents WHERE collection_id = %s", (cid,))


# -- the upgrade from 0002, writers, the CLI -----------------------------------------------------


def test_upgrade_from_0002_moves_stored_access_lists(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "0002")
    with psycopg.connect(empty_dsn) as conn:
        cid = conn.execute(
            "INSERT INTO pgrag.collections (name) VALUES ('u') RETURNING id"
        ).fetchone()[0]
        for source, principals in (("open.md", ["public"]), ("secret.md", ["bob", "alice", "bob"])):
            doc = conn.execute(
                "INSERT INTO pgrag.documents (collection_id, source, content_hash, principals)"
                " VALUES (%s, %s, 'h', %s) RETURNING id",
                (cid, source, principals),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO pgrag.chunks (document_id, collection_id, ordinal, content,"
                " token_count, content_hash, principals, text_config)"
                " VALUES (%s, %s, 0, 'launch codes and budgets', 4, 'h', %s, 'english')",
                (doc, cid, principals),
            )
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        _in_step_per_acl(conn)
        (principals,) = conn.execute(
            "SELECT a.principals FROM pgrag.documents d JOIN pgrag.acls a ON a.id = d.acl_id"
            " WHERE d.source = 'secret.md'"
        ).fetchone()
        assert principals == ["alice", "bob"]
        with conn.transaction():
            conn.execute("SELECT set_config('pgrag.principals', 'public', true)")
            assert conn.execute(
                "SELECT source FROM pgrag.search_v3('u', 'budgets')"
            ).fetchall() == [("open.md",)]
            conn.execute("SELECT set_config('pgrag.principals', 'alice', true)")
            assert (
                len(conn.execute("SELECT source FROM pgrag.search_v3('u', 'budgets')").fetchall())
                == 2
            )
    migrate.downgrade(empty_dsn, "0002", confirm=True)  # and back: 0002's index still answers
    with psycopg.connect(empty_dsn) as conn:
        rows = conn.execute("SELECT source FROM pgrag.search_v2('u', 'budgets')").fetchall()
        assert sorted(rows) == [("open.md",), ("secret.md",)]


def test_a_writer_role_ingests_and_sets_access(
    admin_dsn: str, dsn: str, corpus: Path, embedder: Any
) -> None:
    # The owner creates the collection and its model index (index DDL needs the owner).
    owner = pgrag.connect(dsn, embedder=embedder)
    try:
        pgrag.ingest(owner, [corpus / "policies"], collection="w")
    finally:
        owner.close()
    writer = _login_role(admin_dsn, "pgrag_writer")
    try:
        db = pgrag.connect(make_conninfo(dsn, user=writer), embedder=embedder)
        try:
            report = pgrag.ingest(db, [corpus], collection="w", allow=["group:it"])
            assert report.count("added") > 0 and not report.failed
            # Unchanged files given a new access list: updated without embedding anything.
            again = pgrag.ingest(db, [corpus], collection="w", allow=["group:it", "alice"])
            assert again.chunks_embedded == 0 and again.count("access") == len(again.files)
            it = pgrag.search(db, "passwords", collection="w", principals=["alice"])
            assert it and it[0].source.endswith("security.md")
            outsider = pgrag.search(db, "passwords", collection="w", principals=["mallory"])
            assert outsider == []
        finally:
            db.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(writer)))
        _drop_role(admin_dsn, writer)


def test_cli_ingest_allow_and_search_as(dsn: str, corpus: Path, embedder: Any) -> None:
    runner = CliRunner()
    added = runner.invoke(
        cli, ["--dsn", dsn, "ingest", str(corpus), "-c", "c", "--allow", "group:hr", "--json"]
    )
    assert added.exit_code == 0, added.output
    as_hr = runner.invoke(
        cli, ["--dsn", dsn, "search", "passwords", "-c", "c", "--principal", "group:hr", "--json"]
    )
    assert as_hr.exit_code == 0 and json.loads(as_hr.stdout)
    as_other = runner.invoke(
        cli, ["--dsn", dsn, "search", "passwords", "-c", "c", "--principal", "bob", "--json"]
    )
    assert as_other.exit_code == 0 and json.loads(as_other.stdout) == []
    asked = runner.invoke(
        cli, ["--dsn", dsn, "ask", "How long must passwords be?", "-c", "c", "--principal", "bob"]
    )
    assert asked.exit_code == 0 and "14 characters" not in asked.stdout
    bad = runner.invoke(cli, ["--dsn", dsn, "ingest", str(corpus), "-c", "c", "--allow", "a b"])
    assert bad.exit_code != 0 and bad.stderr.count("\n") == 1
    assert "invalid --allow principal 'a b'" in bad.stderr
