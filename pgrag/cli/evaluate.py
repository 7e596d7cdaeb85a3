"""``pgrag eval``: retrieval and answer quality on a dataset; ``pgrag score``: candidate
answers weighed by the RAG marginal."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from pgrag.answer.scoring import score_answers
from pgrag.cli.options import (
    budget_option,
    checked_collection,
    collection_option,
    database,
    emit_json,
    fail,
    json_option,
    place,
    principal_option,
    reranker_option,
    search_settings,
    state,
    tuning_options,
)
from pgrag.cli.output import echo
from pgrag.errors import PgragError
from pgrag.evaluation.answers import evaluate_answers
from pgrag.evaluation.datasets import load_dataset, load_squad_answers, sample_queries
from pgrag.evaluation.judge import make_judge
from pgrag.evaluation.retrieval import ARMS, evaluate_retrieval
from pgrag.llm.local import config_from_settings
from pgrag.retrieval.rerank import reranker_from_settings


@click.group("eval")
def eval_group() -> None:
    """Measure retrieval and answer quality on a dataset."""


@contextmanager
def stage_progress() -> Iterator[Callable[[str, int, int], None]]:
    """``progress(stage, done, total)`` drawing one bar per stage on stderr, each finished
    when the next stage starts; all are finished on the way out."""
    bars: dict[str, Any] = {}

    def progress(stage: str, done: int, total: int) -> None:
        bar = bars.get(stage)
        if bar is None:
            for other in bars.values():
                other.render_finish()
            bar = click.progressbar(length=max(total, 1), label=f"{stage:<12}", file=sys.stderr)
            bars[stage] = bar
        bar.update(max(done - bar.pos, 0))

    try:
        yield progress
    finally:
        for bar in bars.values():
            bar.render_finish()


@eval_group.command("retrieval")
@click.argument("dataset", type=click.Path(exists=True, path_type=str))
@click.option("--split", default="test", show_default=True, help="BEIR qrels split.")
@click.option(
    "--collection",
    "-c",
    help="Collection to use (default: eval-DATASET).",
    callback=checked_collection,
)
@click.option("--queries", "n_queries", type=click.IntRange(min=1), help="Sample N queries.")
@click.option(
    "--arm",
    "arms",
    multiple=True,
    type=click.Choice(["keyword", "vector", "hybrid"]),
    help="Arms to run (default: all three).",
)
@click.option("--no-peers", is_flag=True, help="Skip bm25s and the exact-search peer.")
@reranker_option
@tuning_options
@click.option(
    "--min-ndcg",
    "thresholds",
    multiple=True,
    metavar="[RUN=]VALUE",
    help="Exit 1 unless nDCG@10 reaches VALUE (for the hybrid, or RUN such as keyword=0.85).",
)
@json_option
@click.pass_context
def eval_retrieval(
    ctx: click.Context,
    /,
    dataset: str,
    split: str,
    collection: str | None,
    n_queries: int | None,
    arms: tuple[str, ...],
    no_peers: bool,
    reranker_spec: str | None,
    thresholds: tuple[str, ...],
    as_json: bool,
    **tuning: Any,
) -> None:
    """Evaluate retrieval on DATASET: a BEIR directory (corpus.jsonl, queries.jsonl,
    qrels/SPLIT.tsv) or a SQuAD JSON file (each paragraph a document).

    Reports nDCG@10, Recall@1/5/10/20/100, MRR@10, queries with no result and latency per
    arm, with bm25s and exact cosine search measured in the same run.
    """
    limits = _parse_thresholds(thresholds)
    data = sample_queries(load_dataset(Path(dataset), split=split), n_queries)
    with stage_progress() as progress:
        report = evaluate_retrieval(
            database(ctx),
            data,
            collection=collection,
            arms=arms or ARMS,
            peers=not no_peers,
            settings=search_settings(tuning),
            reranker=reranker_from_settings(state(ctx).settings, reranker_spec),
            progress=progress,
        )
    if as_json:
        emit_json(report.to_dict())
    else:
        echo(report.table())
    failed = [
        f"{run} nDCG@10 {report.results[run].summary.ndcg10:.4f} < {value}"
        for run, value in limits.items()
        if run in report.results and report.results[run].summary.ndcg10 < value
    ]
    missing = [run for run in limits if run not in report.results]
    if missing:
        fail(f"--min-ndcg names runs that did not run: {', '.join(missing)}")
    if failed:
        fail("; ".join(failed))


@eval_group.command("answers")
@click.argument("dataset", type=click.Path(exists=True, dir_okay=False, path_type=str))
@click.option(
    "--questions",
    default=200,
    show_default=True,
    type=click.IntRange(min=2),
    help="Answerable questions to ask, and as many unanswerable ones.",
)
@click.option(
    "--withhold",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Share of paragraphs left out of the index (their questions are unanswerable).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the split and the sample.")
@click.option(
    "--k",
    "-k",
    default=8,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Passages to retrieve.",
)
@budget_option
@click.option(
    "--max-false-refusal",
    default=0.1,
    show_default=True,
    type=click.FloatRange(0, 1, max_open=True),
    help="Calibrate the threshold so at most this share of answerable questions is refused.",
)
@click.option(
    "--save",
    is_flag=True,
    help="Record the calibrated threshold on the collection's model, where `ask` reads it.",
)
@click.option(
    "--collection",
    "-c",
    help="Collection to index into (default: eval-answers-DATASET-…).",
    callback=checked_collection,
)
@click.option(
    "--style",
    type=click.Choice(["short", "prose"]),
    default="short",
    show_default=True,
    help="How the model is asked to answer: a short answer and its cited sentence, or prose.",
)
@click.option(
    "--no-reader",
    is_flag=True,
    help="Measure only the configured model, not the offline extractive reader beside it.",
)
@click.option(
    "--judge",
    "use_judge",
    is_flag=True,
    help="Also judge the answers with the configured model: faithfulness, answer relevance,"
    " context precision and recall (RAGAS-style; docs/metrics.md).",
)
@click.option(
    "--judge-sample",
    type=click.IntRange(min=1),
    help="With --judge: judge only the first N questions of each kind (default: all).",
)
@click.option("--cases", "with_cases", is_flag=True, help="With --json: every question too.")
@json_option
@click.pass_context
def eval_answers(
    ctx: click.Context,
    /,
    dataset: str,
    questions: int,
    withhold: float,
    seed: int,
    k: int,
    budget: int,
    max_false_refusal: float,
    save: bool,
    collection: str | None,
    style: str,
    no_reader: bool,
    use_judge: bool,
    judge_sample: int | None,
    with_cases: bool,
    as_json: bool,
) -> None:
    """Evaluate answers on DATASET, a SQuAD v1.1 JSON file: exact match, F1, citation
    accuracy, and abstention with part of the paragraphs withheld from the index.

    Runs the offline extractive reader, and also the configured generator when
    PGRAG_LLM_BASE_URL (or OPENAI_BASE_URL) or PGRAG_LLM_GGUF is set. The retrieval-confidence
    threshold is calibrated on half of the questions and its effect reported on the other half.
    """
    config = config_from_settings(state(ctx).settings)
    if no_reader and config is None:
        fail("--no-reader needs a configured model (PGRAG_LLM_GGUF or PGRAG_LLM_BASE_URL)")
    llms: list[Any] = [None] if config is None else [config] if no_reader else [None, config]
    if judge_sample is not None and not use_judge:
        fail("--judge-sample needs --judge")
    db = database(ctx)
    judge = None
    if use_judge:
        if config is None:
            fail(
                "--judge needs a configured model to judge with (PGRAG_LLM_GGUF or"
                " PGRAG_LLM_BASE_URL)"
            )
        judge = make_judge(db, config)
    with stage_progress() as progress:
        report = evaluate_answers(
            db,
            load_squad_answers(Path(dataset)),
            questions=questions,
            withhold=withhold,
            seed=seed,
            k=k,
            budget_tokens=budget,
            llms=llms,
            collection=collection,
            max_false_refusal=max_false_refusal,
            save=save,
            progress=progress,
            style=style,
            judge=judge,
            judge_sample=judge_sample,
        )
    if as_json:
        out = report.to_dict()
        if not with_cases:
            for r in out["results"]:
                r.pop("cases")
        emit_json(out)
    else:
        echo(report.table())
    if report.errors:
        fail("; ".join(f"{label} {error}" for label, error in report.errors.items()))


def _parse_thresholds(values: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for value in values:
        run, _, number = value.rpartition("=")
        try:
            out[run or "hybrid"] = float(number)
        except ValueError:
            raise PgragError(
                f"--min-ndcg {value!r} is not [RUN=]NUMBER, e.g. 0.8 or keyword=0.85"
            ) from None
    return out


@click.command()
@click.argument("question")
@click.option(
    "--candidate",
    "candidates",
    multiple=True,
    metavar="ANSWER",
    help="A candidate answer (at least two), e.g. --candidate Yes --candidate No.",
)
@collection_option
@click.option("--k", "-k", default=5, show_default=True, help="Passages to score against.")
@principal_option
@json_option
@click.pass_context
def score(
    ctx: click.Context,
    /,
    question: str,
    candidates: tuple[str, ...],
    collection: str,
    k: int,
    principals: tuple[str, ...],
    as_json: bool,
) -> None:
    """Score candidate answers with the RAG marginal: the generator's token log-probabilities
    per retrieved passage, weighed by the retriever's probabilities.

    Needs PGRAG_LLM_GGUF (a local GGUF model; the log-probabilities are computed in-process)
    or PGRAG_LLM_BASE_URL pointing at a server that returns them for /v1/completions with echo
    (vLLM). See docs/generation.md and docs/local.md.
    """
    scores = score_answers(
        database(ctx),
        question,
        list(candidates),
        collection=collection,
        k=k,
        principals=list(principals) if principals else None,
    )
    if as_json:
        emit_json(scores.to_dict())
        return
    for c in sorted(scores.candidates, key=lambda c: -c.rag_sequence):
        token = "-" if c.rag_token is None else f"{c.rag_token:.4f}"
        echo(
            f"{c.probability:7.2%}  {c.text}  (RAG-Sequence {c.rag_sequence:.4f},"
            f" RAG-Token {token})"
        )
    echo(f"best: {scores.best}")
    for p in scores.passages:
        ll = ", ".join(f"{t} {p.loglik(t):.3f}" for t in p.token_logprobs)
        where = place(p.title, p.section)
        echo(f"  {p.rank}. p(z|x) {p.prior:.3f}  {where}  {ll}", err=True)
