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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import pgrag
from pgrag.cli import cli
from pgrag.db.connect import Database
from pgrag.errors import ConfigError, InputError
from pgrag.evaluation.answers import evaluate_answers, split_paragraphs
from pgrag.evaluation.datasets import load_squad_answers
from pgrag.evaluation.judge import average_precision, make_judge
from pgrag.retrieval.confidence import BUNDLED_DEFAULT
from tests.fakes import OracleLLM
from tests.samples import ANSWERS, squad_file


@pytest.fixture
def oracle() -> Iterator[OracleLLM]:
    server = OracleLLM(ANSWERS)
    yield server
    server.close()


@pytest.fixture
def squad(tmp_path: Path) -> Path:
    return squad_file(tmp_path / "tiny-squad.json")


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
    # Every answer cited only a source that was not there: removed, so every answer abstains
    # -- after the model was asked once more, and cited 42 again.
    assert llm.answered == 0 and llm.false_refusal_rate == 1.0
    answerable = [c for c in llm.cases if c.answerable]
    assert all("cites no source" in (c.reason or "") for c in answerable)
    assert all(c.retried == "uncited" and c.invalid == [42] for c in answerable)
    assert llm.invalid_citation_rate == 0.5  # the answerable half; the rest said "don't know"
    assert llm.retry_rate == 0.5 and llm.refused_after_retry == len(answerable)
    assert len(oracle.requests) == len(llm.cases) + len(answerable)


def test_eval_answers_never_counts_a_bare_citation_as_an_answer(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    """A small model's "[2]" is not an answer: ask asks once more, and what it then says is
    scored -- a short answer on its first line, as the prompt asks for."""
    tries: dict[str, int] = {}

    def bare_then_right(body: dict[str, Any]) -> str:
        first = body["messages"][1]["content"]
        tries[first] = tries.get(first, 0) + 1
        if tries[first] == 1:
            return "[1]"
        said = oracle.oracle(body)
        if said.startswith("I don't know"):
            return said
        claim, _, mark = said.rpartition(" [")
        return f"Answer: {claim}\nExplanation: The source says {claim.lower()} [{mark}"

    oracle.answer = bare_then_right
    report = evaluate_answers(db, load_squad_answers(squad), questions=4, llms=[oracle.config])
    (llm,) = report.results
    assert llm.retry_rate == 1.0 and llm.refused_after_retry == 0
    assert llm.answered == 4 and llm.exact_match == 1.0 and llm.short_answer_rate == 1.0
    assert all(c.raw and c.raw.startswith(("Answer:", "I don't know")) for c in llm.cases)
    assert llm.citation_accuracy == 1.0 and llm.uncited_sentence_rate == 0.0


def test_eval_answers_scores_the_grounded_citation_beside_the_models_own(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    """The right short answer with the number of another source (what the real 1.5B model
    often does): the answer cites the sentence that holds it, and the report says what the
    model's own numbers would have scored."""

    def miscited(body: dict[str, Any]) -> str:
        said = oracle.oracle(body)
        if said.startswith("I don't know"):
            return said
        claim, _, mark = said.rpartition(" [")
        right = int(mark.rstrip("]."))
        numbers = re.findall(r"^\[(\d+)\]", body["messages"][1]["content"], re.M)
        wrong = next(int(n) for n in numbers if int(n) != right)
        return f"Answer: {claim}\nExplanation: [{wrong}]"

    oracle.answer = miscited
    report = evaluate_answers(db, load_squad_answers(squad), questions=4, llms=[oracle.config])
    (llm,) = report.results
    assert llm.answered == 4 and llm.exact_match == 1.0
    assert llm.citation_accuracy == 1.0 and llm.model_citation_accuracy == 0.0
    for case in (c for c in llm.cases if c.answerable):
        assert case.cited == [case.gold] and case.model_cited and case.model_cited != [case.gold]
    assert "the model's own citation first" in report.table()


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


# -- the judge --------------------------------------------------------------------------------


def test_eval_answers_judges_with_a_model_behind_a_real_server(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    """The judge (pgrag.evaluation.judge) asks its Yes/No questions over HTTP and reads the
    one-token reply's log-probabilities; the oracle grades exactly (a claim is supported
    when its words stand in the passages, a passage useful when it holds the answer), so
    every number below follows from what reached the prompts."""
    data = load_squad_answers(squad)
    judge = make_judge(db, oracle.config)
    report = evaluate_answers(
        db, data, questions=4, seed=1, llms=[None, oracle.config], judge=judge, judge_sample=2
    )
    reader, llm = report.results
    # Two of each kind were judged, for each generator; the rest were not.
    assert reader.judged == llm.judged == 4
    assert sum(c.judgement is None for c in llm.cases) == len(llm.cases) - 4
    # The oracle answers with the words of its source: every claim is supported.
    assert llm.judge_faithfulness == 1.0
    # The judge wrote back the very question each answer answers.
    assert llm.judge_answer_relevance is not None and llm.judge_answer_relevance >= 0.99
    # Every answerable question's paragraph reached the prompt, and holds its answer.
    assert llm.judge_context_recall == 1.0 and reader.judge_context_recall == 1.0
    for case in (c for c in llm.cases if c.judgement is not None):
        verdict = case.judgement
        if not case.answerable:  # no reference, and the oracle said it does not know
            assert case.abstained and verdict["faithfulness"] is None
            assert verdict["context_recall"] is None and verdict["context_precision"] is None
            continue
        # Useful passages are exactly those holding the reference answer, in rank order.
        reference = case.references[0].lower()
        passages = [data.retrieval.corpus[g].text.lower() for g in case.ranked]
        assert [p >= 0.5 for p in verdict["useful"]] == [reference in p for p in passages]
        assert verdict["context_precision"] == average_precision([reference in p for p in passages])
        assert verdict["calls"] >= 3 and verdict["claims"]
    # The lexical estimate is reported over the same answers.
    assert llm.lexical_support is not None
    assert "judge: faithfulness" in report.table()


def test_the_judge_decides_by_the_reply_when_the_server_gives_no_logprobs(
    db: Database, squad: Path, oracle: OracleLLM
) -> None:
    oracle.logprobs_mode = "none"
    report = evaluate_answers(
        db,
        load_squad_answers(squad),
        questions=2,
        seed=1,
        llms=[oracle.config],
        judge=make_judge(db, oracle.config),
    )
    (llm,) = report.results
    answered = [c for c in llm.cases if c.judgement is not None and not c.abstained]
    assert answered and llm.judge_faithfulness == 1.0
    # Each Yes/No came from the reply's word alone: probabilities are 0 or 1.
    assert all(c["p_yes"] in (0.0, 1.0) for case in answered for c in case.judgement["claims"])


def test_cli_eval_answers_judge_needs_a_model(db: Database, squad: Path) -> None:
    args = ["--dsn", db.dsn, "eval", "answers", str(squad), "--questions", "2"]
    result = CliRunner().invoke(cli, [*args, "--judge"])
    assert result.exit_code != 0
    assert "--judge needs a configured model" in result.output
    result = CliRunner().invoke(cli, [*args, "--judge-sample", "3"])
    assert result.exit_code != 0 and "--judge-sample needs --judge" in result.output
