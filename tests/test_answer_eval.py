"""`pgrag eval answers` and abstention on retrieval confidence, on the real model and database.

The LLM is an oracle at the edge of the system: a real local HTTP server that reads the
prompt pgrag sent, finds the question's known answer in one of the numbered sources and
answers it with that source's number, or says it does not know. Whatever pgrag gets wrong
between the index and the report (which paragraphs were indexed, what reached the prompt,
how citations map back to paragraphs, how answers are normalised) shows in the numbers.
"""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.errors import ConfigError, InputError
from pgrag.evaluation.answer_metrics import auroc
from pgrag.evaluation.answers import calibrate, evaluate_answers, split_paragraphs
from pgrag.evaluation.datasets import load_squad_answers
from pgrag.llm.chat import LLMConfig
from pgrag.retrieval.confidence import BUNDLED_DEFAULT, retrieval_confidence
from pgrag.retrieval.search import SearchResult

# Ten paragraphs on unrelated subjects, two questions each; answers are unique strings.
PARAGRAPHS = [
    (
        "Volcanoes",
        "Mount Tambora erupted in 1815 and caused the year without a summer in Europe. Its"
        " plume reached the stratosphere.",
        [
            ("When did Mount Tambora erupt?", "1815"),
            ("What did the eruption of Tambora cause in Europe?", "the year without a summer"),
        ],
    ),
    (
        "Bees",
        "Honey bees communicate the direction of flowers with a waggle dance. A colony may"
        " hold about 60,000 workers in summer.",
        [
            ("How do honey bees tell others where flowers are?", "a waggle dance"),
            ("How many workers may a bee colony hold in summer?", "about 60,000"),
        ],
    ),
    (
        "Chess",
        "The Sicilian Defence begins with the moves 1.e4 c5. Bobby Fischer played it as"
        " Black in most of his games against 1.e4.",
        [
            ("Which moves begin the Sicilian Defence?", "1.e4 c5"),
            ("Which player used the Sicilian as Black against 1.e4?", "Bobby Fischer"),
        ],
    ),
    (
        "Bread",
        "Sourdough bread rises because of wild yeast and lactic acid bacteria in the starter."
        " A starter is fed with flour and water every day.",
        [
            ("What makes sourdough bread rise?", "wild yeast and lactic acid bacteria"),
            ("What is a sourdough starter fed with?", "flour and water"),
        ],
    ),
    (
        "Rivers",
        "The Danube flows through ten countries and empties into the Black Sea. Vienna and"
        " Budapest lie on its banks.",
        [
            ("Into which sea does the Danube empty?", "the Black Sea"),
            ("Through how many countries does the Danube flow?", "ten"),
        ],
    ),
    (
        "Telescopes",
        "The Hubble Space Telescope was launched in 1990 aboard the shuttle Discovery. Its"
        " mirror is 2.4 metres across.",
        [
            ("When was the Hubble Space Telescope launched?", "1990"),
            ("How wide is Hubble's mirror?", "2.4 metres"),
        ],
    ),
    (
        "Cycling",
        "The Tour de France was first held in 1903. The leader of the general classification"
        " wears the yellow jersey.",
        [
            ("When was the first Tour de France held?", "1903"),
            ("What does the leader of the Tour de France wear?", "the yellow jersey"),
        ],
    ),
    (
        "Coffee",
        "Espresso is made by forcing hot water through finely ground coffee at about nine"
        " bars of pressure. A ristretto uses less water.",
        [
            ("At what pressure is espresso brewed?", "about nine bars"),
            ("Which espresso drink uses less water?", "a ristretto"),
        ],
    ),
    (
        "Glaciers",
        "The Aletsch Glacier in the Swiss Alps is the largest glacier in the Alps. It has"
        " retreated by more than three kilometres since 1870.",
        [
            ("Which is the largest glacier in the Alps?", "the Aletsch Glacier"),
            ("How far has the Aletsch Glacier retreated since 1870?", "more than three kilometres"),
        ],
    ),
    (
        "Typography",
        "Garamond is an old-style serif typeface named after Claude Garamond, a Parisian"
        " punch-cutter of the sixteenth century.",
        [
            ("After whom is the Garamond typeface named?", "Claude Garamond"),
            ("What kind of typeface is Garamond?", "an old-style serif typeface"),
        ],
    ),
]
ANSWERS = {q: a for _, _, qas in PARAGRAPHS for q, a in qas}


def squad_file(path: Path) -> Path:
    data = {
        "version": "1.1",
        "data": [
            {
                "title": title,
                "paragraphs": [
                    {
                        "context": context,
                        "qas": [
                            {
                                "id": f"{title}-{i}",
                                "question": q,
                                "answers": [{"text": a, "answer_start": context.find(a)}],
                            }
                            for i, (q, a) in enumerate(qas)
                        ],
                    }
                ],
            }
            for title, context, qas in PARAGRAPHS
        ],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


class OracleLLM:
    """Answers from the numbered sources in the prompt: the known answer with the number of
    the source holding it, else "I don't know". ``cite`` overrides the number cited."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.cite: int | None = None
        self.fail_after: int | None = None  # answer 500 from this request on
        oracle = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                oracle.requests.append(body)
                if oracle.fail_after is not None and len(oracle.requests) > oracle.fail_after:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                reply = json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": oracle.reply(body)}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        question = prompt.rsplit("Question:", 1)[1].strip()
        wanted = ANSWERS.get(question)
        for n, text in re.findall(r"^\[(\d+)\][^\n]*\n<<<\n(.*?)\n>>>", prompt, re.M | re.S):
            if wanted and wanted in text:
                return f"{wanted[0].upper() + wanted[1:]} [{self.cite or n}]."
        return "I don't know based on the sources."

    @property
    def config(self) -> LLMConfig:
        host, port = self.server.server_address[:2]
        return LLMConfig(base_url=f"http://{host}:{port}/v1", model="oracle", max_retries=0)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def oracle() -> Iterator[OracleLLM]:
    server = OracleLLM()
    yield server
    server.close()


@pytest.fixture
def squad(tmp_path: Path) -> Path:
    return squad_file(tmp_path / "tiny-squad.json")


# -- pure parts ------------------------------------------------------------------------------


def test_auroc_matches_pairwise_counting() -> None:
    assert auroc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]) == 0.0
    # ties count one half: pairs (0.5 vs 0.5) = 0.5, (0.5 vs 0.1) = 1, (0.7 vs both) = 2
    assert auroc([0.7, 0.5, 0.5, 0.1], [True, True, False, False]) == pytest.approx(3.5 / 4)
    assert auroc([0.3, 0.4], [True, True]) is None
    with pytest.raises(InputError, match="2 scores but 1 labels"):
        auroc([0.1, 0.2], [True])


def test_calibrate_refuses_at_most_the_allowed_share() -> None:
    confidences = [0.1 * i for i in range(1, 11)]  # 0.1 .. 1.0
    t = calibrate(confidences, 0.2)
    assert t is not None
    assert sum(c < t for c in confidences) <= 2
    assert sum(c < calibrate(confidences, 0.0) for c in confidences) == 0  # type: ignore[operator]
    assert calibrate([], 0.1) is None
    hundred = [i / 100 for i in range(100)]
    assert calibrate(hundred, 0.29) == 0.29  # exactly 29 of 100 below it, not 28


def _hit(rank: int, text: str, distance: float | None) -> SearchResult:
    return SearchResult(
        rank, 0.1, rank, rank, f"s{rank}", "Volcanoes", None, text, rank, None, distance, None, {}
    )


def test_retrieval_confidence_is_the_mean_of_similarity_and_coverage() -> None:
    question = "When did Mount Tambora erupt?"  # content words: mount, tambora, erupt
    top = _hit(1, "Mount Tambora erupted in 1815.", 0.30)
    other = _hit(2, "Bees dance.", 0.20)  # nearer, but not the top-ranked passage
    got = retrieval_confidence(question, [other, top], "cosine")
    assert got is not None
    assert got.similarity == pytest.approx(0.80)  # the nearest chunk, whatever its rank
    assert got.coverage == pytest.approx(1.0)  # all three words (stemmed) are in the top one
    assert got.value == pytest.approx(0.90)
    partial = retrieval_confidence(question, [_hit(1, "Mount Fuji.", 0.5)], "cosine")
    assert partial is not None and partial.coverage == pytest.approx(1 / 3, abs=1e-4)
    # Inner product (pgvector's <#> is its negative) and L2 over unit vectors.
    ip = retrieval_confidence(question, [_hit(1, "x", -0.6)], "inner_product")
    assert ip is not None and ip.similarity == pytest.approx(0.6)
    l2 = retrieval_confidence(question, [_hit(1, "x", 1.0)], "l2")
    assert l2 is not None and l2.similarity == pytest.approx(0.5)
    assert retrieval_confidence(question, [_hit(1, "Mount Tambora", None)], "cosine") is None
    # A question of stop words names nothing: coverage 0. Words in any script count.
    stop_words = retrieval_confidence("Who is he?", [top], "cosine")
    assert stop_words is not None and stop_words.coverage == 0.0
    russian = retrieval_confidence(
        "Какая столица Перу?", [_hit(1, "Столица Перу Лима.", 0.9)], "cosine"
    )
    assert russian is not None and russian.coverage == pytest.approx(2 / 3, abs=1e-4)


def test_split_is_seeded_and_ignores_order() -> None:
    ids = [f"p{i}" for i in range(10)]
    withheld = split_paragraphs(ids, 0.5, seed=3)
    assert len(withheld) == 5
    assert split_paragraphs(list(reversed(ids)), 0.5, seed=3) == withheld
    assert split_paragraphs(ids, 0.5, seed=4) != withheld


def test_load_squad_answers_keeps_answers(squad: Path) -> None:
    data = load_squad_answers(squad)
    assert data.answers["Volcanoes-0"] == ["1815"]
    assert data.retrieval.qrels["Volcanoes-0"] == {"0-0": 1}


# -- the evaluation ---------------------------------------------------------------------------


def test_eval_answers_with_the_reader_and_an_llm(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    data = load_squad_answers(squad)
    report = evaluate_answers(db, data, questions=10, seed=1, llms=[None, oracle.config])
    withheld = split_paragraphs(list(data.retrieval.corpus), 0.5, seed=1)

    # Exactly the other half was indexed.
    sources = {
        row[0]
        for row in db.conn.execute(
            "SELECT d.source FROM pgrag.documents d JOIN pgrag.collections c"
            " ON c.id = d.collection_id WHERE c.name = %s",
            (report.collection,),
        )
    }
    assert sources == {f"tiny-squad:{d}" for d in data.retrieval.corpus if d not in withheld}
    assert (report.indexed, report.withheld) == (5, 5)
    assert (report.answerable, report.unanswerable) == (10, 10)

    reader, llm = report.results
    assert reader.generator == "extractive" and llm.generator == "openai-compatible:oracle"
    # Five small paragraphs: every answerable question's paragraph reaches the prompt.
    assert reader.gold_in_prompt == 1.0
    # The oracle answers exactly when the answer is in the prompt, citing the right source.
    assert llm.exact_match == 1.0 and llm.f1 == 1.0 and llm.answered == 10
    assert llm.citation_accuracy == 1.0
    assert llm.abstain_when_unanswerable == 1.0 and llm.false_refusal_rate == 0.0
    assert len(oracle.requests) == 20
    # The reader answers with whole sentences: they hold the answer, and cite its paragraph.
    assert reader.answer_in_text is not None and reader.answer_in_text >= 0.8
    assert reader.citation_includes_gold is not None and reader.citation_includes_gold >= 0.8
    # Unrelated subjects: the confidence tells answerable from unanswerable questions.
    assert reader.confidence_auroc is not None and reader.confidence_auroc >= 0.9
    for case in reader.cases:
        assert case.confidence is not None and -1 <= case.confidence <= 1
        assert case.answerable == (case.gold not in withheld)
    # The threshold is calibrated on one half, and refuses at most 10% of its answerable ones.
    assert reader.threshold is not None
    calib = [c for c in reader.cases if c.calibration and c.answerable]
    assert sum(c.confidence < reader.threshold for c in calib) <= 0.1 * len(calib)  # type: ignore[operator]
    assert reader.threshold_abstain_when_unanswerable is not None
    assert reader.heldout_abstain_when_unanswerable is not None
    assert reader.threshold_abstain_when_unanswerable >= reader.heldout_abstain_when_unanswerable
    assert "confidence AUROC" in report.table()


def test_eval_answers_reports_invalid_citations_as_inaccurate(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    oracle.cite = 42  # a source that is never in the prompt
    report = evaluate_answers(db, load_squad_answers(squad), questions=4, llms=[oracle.config])
    (llm,) = report.results
    # Every answer cited only a source that was not there: removed, so every answer abstains.
    assert llm.answered == 0 and llm.false_refusal_rate == 1.0
    assert all("cites no source" in (c.reason or "") for c in llm.cases if c.answerable)


def test_eval_answers_refuses_a_collection_with_other_documents(
    db: Database, squad: Path, corpus: Path
) -> None:
    pgrag.ingest(db, [corpus], collection="mixed")

    def held() -> int:
        row = db.conn.execute(
            "SELECT count(*) FROM pgrag.documents d JOIN pgrag.collections c"
            " ON c.id = d.collection_id WHERE c.name = 'mixed'"
        ).fetchone()
        return int(row[0]) if row else -1

    before = held()
    with pytest.raises(InputError, match="are not this split.s paragraphs"):
        evaluate_answers(db, load_squad_answers(squad), questions=2, collection="mixed")
    assert held() == before == 3  # refused before anything was written into it


def test_saved_threshold_makes_ask_abstain_without_asking_the_generator(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    report = evaluate_answers(db, load_squad_answers(squad), questions=4, save=True)
    assert report.saved_threshold is not None
    (model,) = db.conn.execute(
        "SELECT m.min_confidence FROM pgrag.embedding_models m"
        " JOIN pgrag.collections c ON c.model_id = m.id WHERE c.name = %s",
        (report.collection,),
    ).fetchone()
    assert model == pytest.approx(report.saved_threshold)

    far = "Who painted the ceiling of the Sistine Chapel?"
    answer = pgrag.ask(db, far, collection=report.collection, llm=oracle.config)
    assert answer.confidence is not None and answer.confidence < report.saved_threshold
    assert answer.abstained and answer.threshold == pytest.approx(report.saved_threshold)
    assert answer.reason and "below the threshold" in answer.reason
    assert "calibrated for model" in answer.reason
    assert oracle.requests == []  # the generator was never asked
    row = db.conn.execute(
        "SELECT checks FROM pgrag.queries WHERE id = %s", (answer.query_id,)
    ).fetchone()
    assert row is not None and row[0]["threshold"] == pytest.approx(report.saved_threshold)
    assert row[0]["confidence"] == answer.confidence

    # With the threshold off, the generator is asked.
    unchecked = pgrag.ask(
        db, far, collection=report.collection, llm=oracle.config, min_confidence=None
    )
    assert unchecked.threshold is None and len(oracle.requests) == 1

    # PGRAG_MIN_CONFIDENCE (the connection's setting) wins over the saved value; "off" turns
    # it off; junk is an error.
    db.settings = dataclasses.replace(db.settings, min_confidence="0")
    low = pgrag.ask(db, far, collection=report.collection, llm=oracle.config)
    assert low.threshold == 0 and low.reason != answer.reason
    db.settings = dataclasses.replace(db.settings, min_confidence="off")
    assert pgrag.ask(db, far, collection=report.collection, llm=oracle.config).threshold is None
    for junk in ("high", "36", "nan"):  # 36: a percentage, not a confidence
        db.settings = dataclasses.replace(db.settings, min_confidence=junk)
        with pytest.raises(ConfigError, match="PGRAG_MIN_CONFIDENCE must be a number between"):
            pgrag.ask(db, far, collection=report.collection, llm=oracle.config)


def test_cli_eval_answers_json_and_ask_min_confidence(db: Database, squad: Path) -> None:
    dsn = db.dsn
    result = CliRunner().invoke(
        cli, ["--dsn", dsn, "eval", "answers", str(squad), "--questions", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["answerable"] == 2 and out["unanswerable"] == 2
    assert [r["generator"] for r in out["results"]] == ["extractive"]
    assert "cases" not in out["results"][0]

    ask = CliRunner().invoke(
        cli,
        [
            "--dsn",
            dsn,
            "ask",
            "When did Mount Tambora erupt?",
            "--collection",
            out["collection"],
            "--min-confidence",
            "0.99",
            "--json",
        ],
    )
    assert ask.exit_code == 0, ask.output
    answer = json.loads(ask.stdout)
    assert answer["abstained"] and "below the threshold 0.99" in answer["reason"]
    trace = CliRunner().invoke(cli, ["--dsn", dsn, "trace", str(answer["query_id"])])
    assert trace.exit_code == 0, trace.output
    assert "checks: confidence" in trace.stdout and "threshold 0.990" in trace.stdout
    assert "similarity" in trace.stdout and "coverage" in trace.stdout

    bad = CliRunner().invoke(cli, ["--dsn", dsn, "ask", "When?", "--min-confidence", "lots"])
    assert bad.exit_code != 0
    assert "--min-confidence must be a number" in bad.output


def test_an_unreachable_endpoint_keeps_the_readers_results(db: Database, squad: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(
        cli,
        ["--dsn", db.dsn, "eval", "answers", str(squad), "--questions", "2", "--save"],
        env={"PGRAG_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1"},
    )
    assert result.exit_code == 1
    assert "confidence AUROC" in result.stdout  # the reader's table is printed
    assert "saved threshold" in result.stdout
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "openai-compatible:default stopped after 0 of 4 questions" in error


def test_the_bundled_model_has_a_default_threshold(
    db: Database, corpus: Path, oracle: OracleLLM
) -> None:
    pgrag.ingest(db, [corpus], collection="docs")
    off_topic = pgrag.ask(db, "Who wrote Hamlet?", collection="docs", llm=oracle.config)
    assert off_topic.abstained and off_topic.threshold == BUNDLED_DEFAULT
    assert off_topic.reason and "the bundled model's default" in off_topic.reason
    assert oracle.requests == []
    on_topic = pgrag.ask(db, "How long must passwords be?", collection="docs", llm=oracle.config)
    assert on_topic.confidence is not None and on_topic.confidence > BUNDLED_DEFAULT
    assert len(oracle.requests) == 1
    # A calibrated value (here 0: never abstain on confidence) replaces the default.
    db.conn.execute("UPDATE pgrag.embedding_models SET min_confidence = 0")
    db.conn.commit()
    again = pgrag.ask(db, "Who wrote Hamlet?", collection="docs", llm=oracle.config)
    assert again.threshold == 0 and len(oracle.requests) == 2
    # A row registered before migration 0008 records no package; it is the bundled model still.
    db.conn.execute("UPDATE pgrag.embedding_models SET min_confidence = NULL, settings = '{}'")
    db.conn.commit()
    legacy = pgrag.ask(db, "Who wrote Hamlet?", collection="docs", llm=oracle.config)
    assert legacy.threshold == BUNDLED_DEFAULT and legacy.abstained


def test_an_endpoint_failing_half_way_keeps_what_it_answered(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    oracle.fail_after = 3
    report = evaluate_answers(
        db, load_squad_answers(squad), questions=4, llms=[None, oracle.config]
    )
    reader, llm = report.results
    assert len(reader.cases) == 8 and len(llm.cases) == 3
    assert "stopped after 3 of 8 questions" in report.errors["openai-compatible:oracle"]
    assert "stopped after 3 of 8" in report.table()
