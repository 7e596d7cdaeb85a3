"""Bring your own vectors: documents ingested with embeddings made already, on the real model and
the real database (docs/ingest.md#bring-your-own-vectors).

Every test watches the encoder (the shared model instance's ``embed``, which the CLI and the
Python API both use), so "the encoder was skipped" is checked, not assumed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

import pgrag
from pgrag.cli import cli
from pgrag.collections import get_collection
from pgrag.db.connect import Database
from pgrag.embeddings.local import SentenceTransformerEmbedder
from pgrag.errors import InputError
from pgrag.ingest.loaders import from_text

DIM = 384  # the bundled all-MiniLM-L6-v2
MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # its recorded name

# Long enough that an ingest without a vector cuts it into several chunks (200 tokens each).
LIGHTHOUSE = " ".join(
    f"The keeper of the Skerryvore lighthouse logged the lamp, the weather and passing ship"
    f" number {i} every night, and trimmed the wick at dawn before the relief boat came."
    for i in range(20)
)
APPLE_PIE = "A recipe for apple pie: cinnamon, butter, sliced apples and a lattice crust."
OTHERS = {
    "bread": "Baking sourdough bread at home needs a starter, flour, water and patience.",
    "orchard": "Apple orchards in autumn: picking, pressing cider and storing the fruit.",
    "cycling": "Cycling over mountain passes calls for low gears and a light bicycle.",
}


@pytest.fixture
def embedded(embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text the encoder is asked to embed from now on."""
    texts: list[str] = []
    real = embedder.embed

    def spy(batch: Any) -> Any:
        texts.extend(batch)
        return real(batch)

    monkeypatch.setattr(embedder, "embed", spy)
    return texts


def _random_vector(seed: int) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).normal(size=DIM)]


def _unit(vector: Any) -> Any:
    v = np.asarray(vector, dtype=np.float64)
    return v / np.linalg.norm(v)


def _write(path: Path, records: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def _cli(dsn: str, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--dsn", dsn, *args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _chunks(db: Database, source: str) -> list[tuple[int, str, int, Any]]:
    """(chunk id, text, token count, stored vector) of a document's chunks, in order."""
    rows = db.conn.execute(
        "SELECT c.id, c.content, c.token_count, e.embedding FROM pgrag.chunks c"
        " JOIN pgrag.documents d ON d.id = c.document_id"
        " LEFT JOIN pgrag.chunk_embeddings e ON e.chunk_id = c.id"
        " WHERE d.source = %s ORDER BY c.ordinal",
        (source,),
    ).fetchall()
    db.conn.commit()
    return [(r[0], r[1], r[2], None if r[3] is None else r[3].to_numpy()) for r in rows]


def _by_vector(db: Database, collection: str, vector: Any, k: int = 5) -> list[tuple[str, float]]:
    """(source, vector distance) of a vector-only pgrag.search_v5, best first."""
    rows = db.conn.execute(
        "SELECT source, vector_distance FROM pgrag.search_v5(%s, NULL, %s, %s)",
        (collection, np.asarray(vector, dtype=np.float32), k),
    ).fetchall()
    db.conn.commit()
    return [(r[0], r[1]) for r in rows]


def _count(db: Database, sql: str, *params: Any) -> int:
    row = db.conn.execute(sql, params).fetchone()
    db.conn.commit()
    return int(row[0])


# -- the vector is used, the encoder is not -----------------------------------------------------


def test_a_record_with_its_models_vector_is_one_chunk_found_first_and_not_embedded(
    db: Database,
    embedder: SentenceTransformerEmbedder,
    embedded: list[str],
    tmp_path: Path,
) -> None:
    own = embedder.embed([LIGHTHOUSE])[0].tolist()
    embedded.clear()
    path = _write(
        tmp_path / "kb.jsonl",
        [{"id": "lighthouse", "title": "Skerryvore", "text": LIGHTHOUSE, "embedding": own}]
        + [{"id": key, "text": text} for key, text in OTHERS.items()],
    )
    report = pgrag.ingest(db, [path], collection="kb")
    assert report.count("added") == 4 and not report.failed
    # The records without a vector were embedded; the one with a vector never reached the model.
    assert report.chunks_embedded == 3
    assert sorted(embedded) == sorted(f"kb {k}\n{t}" for k, t in OTHERS.items())
    assert not any("Skerryvore" in t for t in embedded)

    source = f"{path.resolve()}#lighthouse"
    chunks = _chunks(db, source)
    # One chunk, the whole text, although it is several chunks' worth of tokens.
    assert len(chunks) == 1
    _, content, token_count, stored = chunks[0]
    assert content == LIGHTHOUSE and token_count > 400
    assert np.allclose(stored, own, atol=1e-6)
    metadata = db.conn.execute(
        "SELECT metadata FROM pgrag.documents WHERE source = %s", (source,)
    ).fetchone()[0]
    db.conn.commit()
    assert "embedding" not in metadata  # the vector is not kept as metadata too

    hits = _by_vector(db, "kb", own)
    assert hits[0][0] == source and hits[0][1] < 1e-5
    question = pgrag.search(db, "who kept the lighthouse lamp?", collection="kb", mode="vector")
    assert question[0].source == source
    # A plain ingest of the same text (no vector) cuts it: the one chunk above was the vector.
    pgrag.ingest_documents(db, [from_text("plain", LIGHTHOUSE)], collection="kb")
    assert len(_chunks(db, "plain")) > 2


def test_a_parquet_file_brings_its_vectors_like_json_lines(
    db: Database,
    embedder: SentenceTransformerEmbedder,
    embedded: list[str],
    tmp_path: Path,
) -> None:
    # Parquet rows are records: a row with a vector is one chunk stored with it, never embedded;
    # the others are embedded; a bad vector fails its row; an unchanged file is skipped.
    import pyarrow as pa
    import pyarrow.parquet as pq

    own = embedder.embed([LIGHTHOUSE])[0].tolist()
    embedded.clear()
    rows = [("lighthouse", LIGHTHOUSE, own), ("short", "Three numbers.", [0.1, 0.2, 0.3])]
    rows += [(key, text, None) for key, text in OTHERS.items()]
    path = tmp_path / "kb.parquet"
    table = pa.table(
        {
            "id": [r[0] for r in rows],
            "text": [r[1] for r in rows],
            "embedding": pa.array([r[2] for r in rows], type=pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, path)
    result = _cli(db.dsn, "ingest", str(path), "-c", "pq")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {path}:2: has a vector of 3"), errors
    assert sorted(embedded) == sorted(f"kb {k}\n{t}" for k, t in OTHERS.items())
    source = f"{path.resolve()}#lighthouse"
    [(_, content, _, stored)] = _chunks(db, source)
    assert content == LIGHTHOUSE and np.allclose(stored, own, atol=1e-6)
    assert _by_vector(db, "pq", own)[0][0] == source
    embedded.clear()
    again = _cli(db.dsn, "ingest", str(path), "-c", "pq", "--json")
    assert json.loads(again.stdout)["unchanged"] == 4 and embedded == []


def test_a_different_vector_is_what_finds_the_record(
    db: Database, embedder: SentenceTransformerEmbedder, embedded: list[str]
) -> None:
    odd = _random_vector(7)
    docs = [from_text("pie", APPLE_PIE, vector=np.asarray(odd, dtype=np.float32))]
    docs += [from_text(key, text) for key, text in OTHERS.items()]
    report = pgrag.ingest_documents(db, docs, collection="food")
    assert report.count("added") == 4 and report.chunks_embedded == 3
    assert APPLE_PIE not in "\n".join(embedded)

    # Stored as given, scaled to unit length (the model's vectors are): the same direction.
    (_, _, _, stored) = _chunks(db, "pie")[0]
    assert np.allclose(stored, _unit(odd), atol=1e-6)
    assert math.isclose(float(np.linalg.norm(stored)), 1.0, rel_tol=1e-5)
    # The random vector finds it first, at distance 0 ...
    hits = _by_vector(db, "food", odd)
    assert hits[0][0] == "pie" and hits[0][1] < 1e-5
    # ... and the model's embedding of its own text does not: the encoder never made its vector.
    by_text = _by_vector(db, "food", embedder.embed([APPLE_PIE])[0])
    assert by_text[0][0] != "pie"
    assert dict(by_text).get("pie", 2.0) > 0.5


def test_the_vector_is_never_reused_for_the_same_text_without_one(
    db: Database, embedder: SentenceTransformerEmbedder, embedded: list[str]
) -> None:
    # Chunks of identical embedded text share vectors by content hash; a given vector must not
    # be taken for the same text embedded by the model, nor the model's for a given one.
    odd = _random_vector(11)
    pgrag.ingest_documents(db, [from_text("a", APPLE_PIE, title="Pie", vector=odd)], collection="c")
    pgrag.ingest_documents(db, [from_text("b", APPLE_PIE, title="Pie")], collection="c")
    assert embedded == [f"Pie\n{APPLE_PIE}"]
    model = embedder.embed([f"Pie\n{APPLE_PIE}"])[0]
    assert np.allclose(_chunks(db, "a")[0][3], _unit(odd), atol=1e-6)
    assert np.allclose(_chunks(db, "b")[0][3], model, atol=1e-5)
    embedded.clear()
    again = from_text("c", APPLE_PIE, title="Pie", metadata={"copy": 1}, vector=odd)
    pgrag.ingest_documents(db, [again], collection="c")
    assert embedded == []
    assert np.allclose(_chunks(db, "c")[0][3], _unit(odd), atol=1e-6)


# -- bad vectors --------------------------------------------------------------------------------


def test_bad_vectors_fail_their_line_and_the_rest_go_in(
    db: Database, embedded: list[str], tmp_path: Path
) -> None:
    good = _random_vector(1)
    lines: list[Any] = [
        {"id": "good", "text": "A record with a good vector.", "embedding": good},  # 1
        {"id": "short", "text": "Three numbers.", "embedding": [0.1, 0.2, 0.3]},  # 2
        '{"id": "nan", "text": "Not a number.", "embedding": [NaN' + ", 0.5" * (DIM - 1) + "]}",
        {"id": "zero", "text": "All zeros.", "embedding": [0.0] * DIM},  # 4
        {"id": "string", "text": "A string.", "embedding": "0.1, 0.2"},  # 5
        {"id": "word", "text": "A word inside.", "embedding": ["x"] + good[1:]},  # 6
        {"id": "empty", "text": "Empty list.", "embedding": []},  # 7
        '{"id": "inf", "text": "Infinite.", "embedding": [Infinity' + ", 0.5" * (DIM - 1) + "]}",
        {"id": "huge", "text": "Beyond float4.", "embedding": [1e39] + good[1:]},  # 9
        {"id": "flag", "text": "A boolean.", "embedding": [True] + good[1:]},  # 10
        {"id": "object", "text": "An object.", "embedding": {"values": good}},  # 11
        {"id": "null", "text": "A null vector is no vector: embedded.", "embedding": None},  # 12
        {"id": "plain", "text": "A record without a vector, embedded as usual."},  # 13
        {"id": "long", "text": "word " * 30_000, "embedding": good},  # 14
    ]
    path = _write(tmp_path / "bad.jsonl", lines)
    result = _cli(db.dsn, "ingest", str(path), "-c", "v")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    by_line = {int(line.split(": ")[1].rsplit(":", 1)[1]): line for line in errors}
    assert sorted(by_line) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14], result.stderr
    for line in errors:
        assert line.startswith(f"error: {path}:")
    assert (
        "has a vector of 3 numbers, but collection 'v' is embedded with"
        f" {MODEL!r}, whose vectors have 384; give that model's vectors" in by_line[2]
    )
    assert "its 'embedding' field holds nan at position 0" in by_line[3]
    assert "is all zeros" in by_line[4]
    assert "its 'embedding' field is a string, not a list of numbers" in by_line[5]
    assert "holds a string at position 0; every element must be a number" in by_line[6]
    assert "is an empty list" in by_line[7]
    assert "holds inf at position 0" in by_line[8]
    assert "beyond the single-precision range" in by_line[9]
    assert "holds a boolean at position 0" in by_line[10]
    assert "is an object, not a list" in by_line[11]
    assert "split it and give each part its own vector" in by_line[14]
    assert "11 failed" in result.stderr and "3 added" in result.stderr
    # The good record, the null one and the plain one went in; only the last two were embedded.
    assert _count(db, "SELECT count(*) FROM pgrag.documents") == 3
    assert sorted(embedded) == sorted(
        [
            "bad null\nA null vector is no vector: embedded.",
            "bad plain\nA record without a vector, embedded as usual.",
        ]
    )
    assert _by_vector(db, "v", good)[0][0] == f"{path.resolve()}#good"


def test_a_bad_new_vector_leaves_the_stored_document_as_it_was(
    db: Database, tmp_path: Path
) -> None:
    first, second = _random_vector(2), _random_vector(3)
    path = _write(
        tmp_path / "kb.jsonl",
        [
            {"id": "a", "text": "Record a.", "embedding": first},
            {"id": "b", "text": "Record b.", "embedding": second},
        ],
    )
    pgrag.ingest(db, [path], collection="kb")
    a = f"{path.resolve()}#a"
    before = _chunks(db, a)
    errors: list[tuple[str, str]] = []
    _write(
        tmp_path / "kb.jsonl",
        [
            {"id": "a", "text": "Record a, rewritten.", "embedding": first[:100]},
            {"id": "b", "text": "Record b.", "embedding": second},
        ],
    )
    report = pgrag.ingest(db, [path], collection="kb", on_error=lambda p, r: errors.append((p, r)))
    assert report.count("unchanged") == 1 and len(report.failed) == 1
    assert errors and errors[0][0] == f"{path}:1" and "a vector of 100 numbers" in errors[0][1]
    after = _chunks(db, a)
    assert [c[:3] for c in after] == [c[:3] for c in before]  # same row, same text
    assert np.allclose(after[0][3], before[0][3])
    assert _by_vector(db, "kb", first)[0][0] == a


def test_python_documents_with_vectors_check_them_against_the_new_collections_model(
    db: Database, embedded: list[str]
) -> None:
    with pytest.raises(InputError, match="all zeros"):
        from_text("z", "Zero.", vector=[0.0] * DIM)
    with pytest.raises(InputError, match="finite"):
        from_text("n", "NaN.", vector=[math.nan] * DIM)
    with pytest.raises(InputError, match="not a list of numbers"):
        from_text("s", "String.", vector="0.5")
    # The collection does not exist: the configured model (384 dimensions) decides, and a
    # document of another dimension alone creates nothing.
    errors: list[tuple[str, str]] = []
    report = pgrag.ingest_documents(
        db,
        [from_text("wide", "A 768-d vector.", vector=[0.1] * 768)],
        collection="fresh",
        on_error=lambda p, r: errors.append((p, r)),
    )
    assert len(report.failed) == 1 and report.chunks_written == 0
    assert errors == [
        (
            "wide",
            "has a vector of 768 numbers, but collection 'fresh' is embedded with"
            f" {MODEL!r}, whose vectors have 384; give that model's vectors, or leave the"
            " vector out to have the text embedded",
        )
    ]
    assert get_collection(db, "fresh") is None
    report = pgrag.ingest_documents(
        db,
        [
            from_text("wide", "A 768-d vector.", vector=[0.1] * 768),
            from_text("fits", "A 384-d vector.", vector=_random_vector(5)),
        ],
        collection="fresh",
    )
    assert report.count("added") == 1 and len(report.failed) == 1
    coll = get_collection(db, "fresh")
    assert coll is not None
    model = db.conn.execute(
        "SELECT name, dimension FROM pgrag.embedding_models WHERE id = %s", (coll.model_id,)
    ).fetchone()
    db.conn.commit()
    assert tuple(model) == (MODEL, DIM)
    assert embedded == []


# -- re-ingest ----------------------------------------------------------------------------------


def test_reingest_skips_unchanged_records_and_stores_a_changed_vector(
    db: Database, embedded: list[str], tmp_path: Path
) -> None:
    v1, v2, v3 = _random_vector(21), _random_vector(22), _random_vector(23)
    records = [
        {"id": "a", "text": "Record a.", "embedding": v1},
        {"id": "b", "text": "Record b.", "embedding": v2},
    ]
    path = _write(tmp_path / "kb.jsonl", records)
    pgrag.ingest(db, [path], collection="kb")
    a, b = f"{path.resolve()}#a", f"{path.resolve()}#b"
    ids = {s: _chunks(db, s)[0][0] for s in (a, b)}

    again = pgrag.ingest(db, [path], collection="kb")
    assert again.count("unchanged") == 2 and again.chunks_written == 0
    assert {s: _chunks(db, s)[0][0] for s in (a, b)} == ids

    records[0]["embedding"] = v3  # same text, another vector
    _write(path, records)
    changed = pgrag.ingest(db, [path], collection="kb")
    assert changed.count("updated") == 1 and changed.count("unchanged") == 1
    assert changed.chunks_written == 1 and changed.chunks_embedded == 0
    (chunk,) = _chunks(db, a)
    assert np.allclose(chunk[3], _unit(v3), atol=1e-6)
    assert _chunks(db, b)[0][0] == ids[b]
    assert _by_vector(db, "kb", v3)[0] == (a, pytest.approx(0, abs=1e-5))
    assert dict(_by_vector(db, "kb", v1)).get(a, 2.0) > 0.5  # the old vector is gone
    assert _count(db, "SELECT count(*) FROM pgrag.chunk_embeddings") == 2

    del records[0]["embedding"]  # the vector dropped: the model embeds the text now
    _write(path, records)
    dropped = pgrag.ingest(db, [path], collection="kb")
    assert dropped.count("updated") == 1 and dropped.chunks_embedded == 1
    assert embedded == ["kb a\nRecord a."]
    assert embedded and _count(db, "SELECT count(*) FROM pgrag.chunk_embeddings") == 2


# -- the command --------------------------------------------------------------------------------


def test_cli_jsonl_embedding_names_the_field(
    db: Database, embedded: list[str], tmp_path: Path
) -> None:
    vec = _random_vector(31)
    path = _write(
        tmp_path / "kb.jsonl",
        [
            {"id": "a", "text": "Record with its vector in 'vec'.", "vec": vec, "team": "x"},
            {"id": "b", "text": "Record without one."},
        ],
    )
    dry = _cli(db.dsn, "ingest", str(path), "-c", "kb", "--jsonl-embedding", "vec", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"added     {path}:1 (1 chunks, 0 to embed)" in dry.stdout
    assert f"added     {path}:2 (1 chunks, 1 to embed)" in dry.stdout
    assert embedded == []

    result = _cli(db.dsn, "ingest", str(path), "-c", "kb", "--jsonl-embedding", "vec", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["added"] == 2 and report["chunks_written"] == 2
    assert report["chunks_embedded"] == 1
    assert embedded == ["kb b\nRecord without one."]
    source = f"{path.resolve()}#a"
    assert _by_vector(db, "kb", vec)[0][0] == source
    metadata = db.conn.execute(
        "SELECT metadata FROM pgrag.documents WHERE source = %s", (source,)
    ).fetchone()[0]
    db.conn.commit()
    assert metadata["team"] == "x" and "vec" not in metadata

    again = _cli(db.dsn, "ingest", str(path), "-c", "kb", "--jsonl-embedding", "vec")
    assert again.exit_code == 0 and "2 unchanged" in again.stderr

    help_text = _cli(db.dsn, "ingest", "--help").stdout
    assert "--jsonl-embedding FIELD" in help_text
