"""`pgrag eval retrieval` end to end: a small BEIR dataset and a SQuAD file, real model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgrag.cli import cli

DOCS = {
    "d1": ("Refunds", "Annual plans can be refunded within 30 days of purchase."),
    "d2": ("Security", "Passwords must be at least 14 characters and rotated yearly."),
    "d3": ("Office", "The Lisbon office opens at eight and closes at six on weekdays."),
    "d4": ("Travel", "International trips pay a daily allowance of 64 euros."),
    "d5": ("Backups", "Backups are kept for 35 days and then overwritten."),
    "d6": ("Parking", "Bicycles are parked in the inner courtyard of the building."),
}
QUERIES = {
    "q1": ("how long do I have to get my money back on a yearly plan", "d1"),
    "q2": ("minimum password length", "d2"),
    "q3": ("when does the office in Lisbon close", "d3"),
    "q4": ("where can I leave my bike", "d6"),
}


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in DOCS.items())
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, (t, _) in QUERIES.items())
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, (_, d) in QUERIES.items())
    )
    return root


def _run(dsn: str, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["--dsn", dsn, "eval", "retrieval", *args])


def test_eval_retrieval_reports_every_arm_and_peer(dsn: str, beir: Path) -> None:
    result = _run(dsn, str(beir), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["documents"] == 6 and report["queries"] == 4
    assert set(report["results"]) == {"keyword", "vector", "hybrid", "bm25s", "exact-cosine"}
    for run in report["results"].values():
        assert 0.0 <= run["ndcg10"] <= 1.0
        assert set(run["recall"]) == {"1", "5", "10", "20", "100"}
        assert run["p50_ms"] > 0 and run["p95_ms"] >= run["p50_ms"]
    # Six documents: every document is a candidate, so Recall@10 is complete for the arms that
    # return everything they match, and the dense arm agrees with exact search exactly.
    assert report["results"]["vector"]["recall"]["10"] == 1.0
    assert report["ratios"]["vector recall@10 vs exact"] == 1.0
    assert report["results"]["vector"]["ndcg10"] == pytest.approx(
        report["results"]["exact-cosine"]["ndcg10"]
    )
    # These queries share words with their documents only partly: the hybrid finds them all.
    assert report["results"]["hybrid"]["recall"]["5"] == 1.0
    assert report["results"]["hybrid"]["zero_results"] == 0
    assert "keyword nDCG@10 / bm25s" in report["ratios"]

    again = _run(dsn, str(beir), "--json", "--no-peers", "--arm", "keyword")
    assert again.exit_code == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["chunks_embedded"] == 0, "the collection is reused, nothing re-embedded"
    assert set(second["results"]) == {"keyword"}


def test_min_ndcg_thresholds_set_the_exit_status(dsn: str, beir: Path) -> None:
    ok = _run(dsn, str(beir), "--no-peers", "--min-ndcg", "0.5", "--min-ndcg", "vector=0.5")
    assert ok.exit_code == 0, ok.stderr
    assert "hybrid" in ok.stdout and "nDCG@10" in ok.stdout  # the table for people
    low = _run(dsn, str(beir), "--no-peers", "--min-ndcg", "keyword=1.01")
    assert low.exit_code == 1
    assert low.stderr.splitlines()[-1].startswith("error: keyword nDCG@10 ")
    bad = _run(dsn, str(beir), "--no-peers", "--min-ndcg", "keyword=high")
    assert bad.exit_code == 1 and "is not [RUN=]NUMBER" in bad.stderr
    absent = _run(dsn, str(beir), "--no-peers", "--arm", "keyword", "--min-ndcg", "vector=0.1")
    assert absent.exit_code == 1 and "did not run: vector" in absent.stderr


def test_eval_retrieval_on_squad_json(dsn: str, tmp_path: Path) -> None:
    squad = {
        "data": [
            {
                "title": "Lisbon_Office",
                "paragraphs": [
                    {"context": DOCS["d3"][1], "qas": [{"id": "a", "question": QUERIES["q3"][0]}]},
                    {"context": DOCS["d6"][1], "qas": [{"id": "b", "question": QUERIES["q4"][0]}]},
                ],
            },
            {
                "title": "Policies",
                "paragraphs": [
                    {"context": DOCS["d2"][1], "qas": [{"id": "c", "question": QUERIES["q2"][0]}]}
                ],
            },
        ]
    }
    path = tmp_path / "mini-squad.json"
    path.write_text(json.dumps(squad))
    result = _run(dsn, str(path), "--json", "--queries", "2")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["documents"] == 3 and report["queries"] == 2
    assert report["collection"] == "eval-mini-squad"
    assert report["results"]["hybrid"]["recall"]["1"] == 1.0


def test_eval_with_a_reranker_and_settings(dsn: str, beir: Path) -> None:
    """A reranker adds a "hybrid+rerank" run; search settings reach search_v2; the k=10 pass
    reports its own nDCG@10 and speed for every run, the peers included."""
    import pgrag
    from pgrag.evaluation.datasets import load_dataset
    from pgrag.evaluation.retrieval import evaluate_retrieval

    class BikeFirst:
        name = "bike-first"

        def score(self, query: str, passages: list[str]) -> list[float]:
            return [1.0 if "Bicycles" in p else 0.0 for p in passages]

    db = pgrag.connect(dsn)
    try:
        report = evaluate_retrieval(
            db,
            load_dataset(beir),
            peers=True,
            reranker=BikeFirst(),
            settings=pgrag.SearchSettings(keyword_weight=0.0),
        )
    finally:
        db.close()
    # The settings reached search_v2: with the keyword arm weighted 0 the hybrid is the vector arm.
    assert report.results["hybrid"].summary == report.results["vector"].summary
    reranked = report.results["hybrid+rerank"]
    # Only q4 is about bicycles: putting d6 first helps it and hurts the three others.
    assert reranked.summary.mrr10 < report.results["hybrid"].summary.mrr10
    assert reranked.summary.recall[100] == report.results["hybrid"].summary.recall[100]
    for name in ("keyword", "vector", "hybrid", "bm25s", "exact-cosine"):
        run = report.results[name]
        assert run.queries_per_s_at_10 > 0 and 0.0 <= run.ndcg10_at_10 <= 1.0
