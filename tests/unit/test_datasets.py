from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pgrag.errors import InputError
from pgrag.evaluation.datasets import (
    Doc,
    RetrievalDataset,
    load_beir,
    load_dataset,
    load_squad,
    sample_queries,
)

CORPUS = [
    {"_id": "d1", "title": "Postgres", "text": "PostgreSQL is a database."},
    {"_id": "d2", "text": "pgvector adds vector search."},  # no title
    {"_id": "d3", "title": "", "text": "Full-text search uses tsvector."},
]
QUERIES = [
    {"_id": "q1", "text": "what is postgres"},
    {"_id": "q2", "text": "vector search"},
    {"_id": "q3", "text": "a query nobody judged"},
    {"_id": "q4", "text": "only judged irrelevant"},
]
QRELS = [("q1", "d1", 1), ("q2", "d2", 2), ("q2", "d3", 1), ("q4", "d1", 0)]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def write_qrels(path: Path, rows: list[tuple[str, str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_beir(
    root: Path,
    corpus: list[dict[str, Any]] = CORPUS,
    queries: list[dict[str, Any]] = QUERIES,
    qrels: list[tuple[str, str, int]] = QRELS,
    split: str = "test",
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "queries.jsonl", queries)
    write_qrels(root / "qrels" / f"{split}.tsv", qrels)
    return root


SQUAD = {
    "version": "1.1",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {
                    "context": "Super Bowl 50 was an American football game.",
                    "qas": [
                        {"id": "s1", "question": "What was Super Bowl 50?", "answers": []},
                        {"id": "s2", "question": "Which sport?", "answers": []},
                    ],
                },
                {"context": "The game was played in Santa Clara.", "qas": []},
            ],
        },
        {
            "title": "Warsaw",
            "paragraphs": [
                {
                    "context": "Warsaw is the capital of Poland.",
                    "qas": [{"id": "s3", "question": "Capital of Poland?", "answers": []}],
                }
            ],
        },
    ],
}


def make_squad(path: Path, payload: object = SQUAD) -> Path:
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


# --- BEIR ---------------------------------------------------------------------------------


def test_load_beir(tmp_path: Path) -> None:
    ds = load_beir(make_beir(tmp_path / "scifact"))
    assert ds.name == "scifact"
    assert list(ds.corpus) == ["d1", "d2", "d3"]
    assert ds.corpus["d1"] == Doc(id="d1", title="Postgres", text="PostgreSQL is a database.")
    assert ds.corpus["d2"].title == ""
    assert ds.corpus["d3"].title == ""
    assert ds.queries == {"q1": "what is postgres", "q2": "vector search"}
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 1}}


def test_beir_drops_queries_without_qrels_and_zero_scores(tmp_path: Path) -> None:
    ds = load_beir(make_beir(tmp_path / "ds", qrels=[*QRELS, ("q1", "d2", 0)]))
    assert "q3" not in ds.queries  # no qrels at all
    assert "q4" not in ds.queries  # only a score-0 row
    assert "q4" not in ds.qrels
    assert ds.qrels["q1"] == {"d1": 1}  # the score-0 row for q1 is dropped


def test_beir_other_split_and_numeric_ids(tmp_path: Path) -> None:
    root = make_beir(
        tmp_path / "ds",
        corpus=[{"_id": 7, "title": "t", "text": "x"}],
        queries=[{"_id": 1, "text": "y"}],
        qrels=[("1", "7", 1)],
        split="dev",
    )
    ds = load_beir(root, split="dev")
    assert ds.corpus == {"7": Doc(id="7", title="t", text="x")}
    assert ds.queries == {"1": "y"}
    assert ds.qrels == {"1": {"7": 1}}


def test_beir_skips_blank_lines(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds")
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n" + corpus.read_text(encoding="utf-8") + "\n\n", encoding="utf-8")
    assert list(load_beir(root).corpus) == ["d1", "d2", "d3"]


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_beir_missing_file(tmp_path: Path, missing: str) -> None:
    root = make_beir(tmp_path / "ds")
    (root / missing).unlink()
    with pytest.raises(InputError) as info:
        load_beir(root)
    message = str(info.value)
    assert str(root / missing) in message
    assert "corpus.jsonl, queries.jsonl and qrels/<split>.tsv" in message
    assert "\n" not in message


def test_beir_missing_split_lists_the_available_ones(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds")
    with pytest.raises(InputError, match=r"dev\.tsv: missing \(splits here: test\)"):
        load_beir(root, split="dev")


def test_beir_bad_json_line(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds")
    with (root / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"_id": "d4", "text": \n')
    with pytest.raises(InputError) as info:
        load_beir(root)
    assert f"{root / 'corpus.jsonl'}:4:" in str(info.value)
    assert "invalid JSON" in str(info.value)


def test_beir_non_object_line(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds")
    (root / "queries.jsonl").write_text('["q1", "text"]\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"queries\.jsonl:1: expected a JSON object"):
        load_beir(root)


def test_beir_unknown_doc_id(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", qrels=[*QRELS, ("q1", "nope", 1), ("q2", "gone", 1)])
    with pytest.raises(InputError) as info:
        load_beir(root)
    message = str(info.value)
    assert str(root / "qrels" / "test.tsv") in message
    assert "'nope'" in message
    assert "'gone'" not in message  # only the first bad id


def test_beir_unknown_doc_id_with_score_zero_is_ignored(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", qrels=[*QRELS, ("q1", "nope", 0)])
    assert load_beir(root).qrels["q1"] == {"d1": 1}


def test_beir_unknown_query_id(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", qrels=[*QRELS, ("q9", "d1", 1)])
    with pytest.raises(InputError, match=r"test\.tsv: query id 'q9' is not in queries\.jsonl"):
        load_beir(root)


def test_beir_bad_qrels_rows(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds")
    qrels = root / "qrels" / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\thigh\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"test\.tsv:2: score 'high' is not an integer"):
        load_beir(root)
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"test\.tsv:2: expected 3 tab-separated columns"):
        load_beir(root)


def test_beir_duplicate_doc_id(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", corpus=[*CORPUS, {"_id": "d1", "text": "again"}])
    with pytest.raises(InputError, match=r"corpus\.jsonl:4: duplicate document id 'd1'"):
        load_beir(root)


# --- SQuAD --------------------------------------------------------------------------------


def test_load_squad(tmp_path: Path) -> None:
    ds = load_squad(make_squad(tmp_path / "squad-dev.json"))
    assert ds.name == "squad-dev"
    assert list(ds.corpus) == ["0-0", "0-1", "1-0"]
    assert ds.corpus["0-0"] == Doc(
        id="0-0", title="Super Bowl 50", text="Super Bowl 50 was an American football game."
    )
    assert ds.corpus["0-1"].text == "The game was played in Santa Clara."  # no questions, kept
    assert ds.corpus["1-0"].title == "Warsaw"
    assert ds.queries == {
        "s1": "What was Super Bowl 50?",
        "s2": "Which sport?",
        "s3": "Capital of Poland?",
    }
    assert ds.qrels == {"s1": {"0-0": 1}, "s2": {"0-0": 1}, "s3": {"1-0": 1}}


def test_squad_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "squad.json"
    path.write_text('{"data": [\n  {"title": }\n]}', encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_squad(path)
    assert f"{path}:2:" in str(info.value)


def test_squad_wrong_shape(tmp_path: Path) -> None:
    path = make_squad(tmp_path / "squad.json", {"version": "1.1"})
    with pytest.raises(InputError, match=r'squad\.json: no "data" list'):
        load_squad(path)
    bad = {"data": [{"title": "T", "paragraphs": [{"qas": []}]}]}
    make_squad(path, bad)
    with pytest.raises(InputError, match=r"data\[0\]\.paragraphs\[0\]\.context"):
        load_squad(path)


def test_squad_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nothing.json: no such file"):
        load_squad(tmp_path / "nothing.json")


# --- dispatch and sampling ----------------------------------------------------------------


def test_load_dataset_dispatch(tmp_path: Path) -> None:
    beir = load_dataset(make_beir(tmp_path / "nfcorpus"))
    assert beir.name == "nfcorpus" and set(beir.queries) == {"q1", "q2"}
    squad = load_dataset(make_squad(tmp_path / "dev.json"))
    assert squad.name == "dev" and "0-0" in squad.corpus

    other = tmp_path / "data.csv"
    other.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"data\.csv: not a dataset"):
        load_dataset(other)
    with pytest.raises(InputError, match=r"absent: no such file or directory"):
        load_dataset(tmp_path / "absent")


def test_load_dataset_passes_split(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", split="train")
    assert set(load_dataset(root, split="train").queries) == {"q1", "q2"}


def big_dataset(n: int = 50) -> RetrievalDataset:
    corpus = {f"d{i}": Doc(id=f"d{i}", title="", text=f"text {i}") for i in range(n)}
    queries = {f"q{i}": f"query {i}" for i in range(n)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(n)}
    return RetrievalDataset(name="big", corpus=corpus, queries=queries, qrels=qrels)


def test_sample_queries_is_deterministic_and_keeps_corpus() -> None:
    ds = big_dataset()
    first = sample_queries(ds, 10, seed=3)
    again = sample_queries(big_dataset(), 10, seed=3)
    assert list(first.queries) == list(again.queries)
    assert len(first.queries) == 10
    assert set(first.qrels) == set(first.queries)
    assert all(
        first.qrels[q] == ds.qrels[q] and first.queries[q] == ds.queries[q] for q in first.queries
    )
    assert first.corpus == ds.corpus
    assert first.name == ds.name
    assert len(ds.queries) == 50  # the original is untouched
    assert set(sample_queries(ds, 10, seed=4).queries) != set(first.queries)


def test_sample_queries_ignores_file_order() -> None:
    ds = big_dataset()
    shuffled = RetrievalDataset(
        name="big",
        corpus=ds.corpus,
        queries=dict(reversed(ds.queries.items())),
        qrels=dict(reversed(ds.qrels.items())),
    )
    assert set(sample_queries(ds, 7).queries) == set(sample_queries(shuffled, 7).queries)


def test_sample_queries_unchanged() -> None:
    ds = big_dataset(5)
    assert sample_queries(ds, None) is ds
    assert sample_queries(ds, 5) is ds
    assert sample_queries(ds, 500) is ds
    with pytest.raises(InputError):
        sample_queries(ds, 0)
