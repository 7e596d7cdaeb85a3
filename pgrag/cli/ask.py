"""``pgrag ask``: a cited answer; ``pgrag trace``: what an answer was made of."""

from __future__ import annotations

from typing import Any

import click

from pgrag.answer.agentic import ask_agentic
from pgrag.answer.ask import ask as run_ask
from pgrag.answer.traces import get_trace
from pgrag.cli import remote
from pgrag.cli.options import (
    budget_option,
    collection_option,
    database,
    emit_json,
    json_option,
    place,
    principal_option,
    query_rewrite,
    reranker_option,
    rewrite_options,
    state,
    stdout_is_terminal,
)
from pgrag.cli.output import echo
from pgrag.llm.local import config_from_settings
from pgrag.retrieval.confidence import parse_setting
from pgrag.retrieval.rerank import reranker_from_settings


@click.command()
@click.argument("question")
@collection_option
@click.option("--k", "-k", default=8, show_default=True, help="Passages to retrieve.")
@budget_option
@click.option(
    "--context",
    type=click.Choice(["chunk", "section"]),
    default="chunk",
    show_default=True,
    help="What a retrieved chunk puts in the prompt: itself, or its whole section (small-to-big).",
)
@click.option("--show-prompt", is_flag=True, help="Print the prompt given to the generator.")
@click.option("--no-log", is_flag=True, help="Do not record this question in pgrag.queries.")
@click.option(
    "--agentic",
    is_flag=True,
    help="Let a tool-calling model search again (pgrag_search) before it answers.",
)
@click.option(
    "--max-steps",
    default=3,
    show_default=True,
    type=click.IntRange(0, 10),
    help="With --agentic: how many searches the model may make.",
)
@click.option(
    "--min-confidence",
    metavar="SIMILARITY|off",
    help="Abstain when the nearest passage is less similar than this (default:"
    " PGRAG_MIN_CONFIDENCE, else the threshold `pgrag eval answers --save` calibrated).",
)
@principal_option
@json_option
@reranker_option
@rewrite_options
@click.pass_context
def ask(
    ctx: click.Context,
    /,
    question: str,
    collection: str,
    k: int,
    budget: int,
    context: str,
    show_prompt: bool,
    no_log: bool,
    principals: tuple[str, ...],
    reranker_spec: str | None,
    as_json: bool,
    agentic: bool = False,
    max_steps: int = 3,
    min_confidence: str | None = None,
    rewrite: str | None = None,
    paraphrases: int = 3,
) -> None:
    """Answer a question, citing numbered sources.

    Uses the OpenAI-compatible endpoint in PGRAG_LLM_BASE_URL (or OPENAI_BASE_URL) when one
    is set, a local GGUF model in PGRAG_LLM_GGUF (pip install 'pgrag[local]'), else the offline
    extractive reader: nothing leaves the machine without a base URL.

    With PGRAG_URL set (and no --dsn), a running `pgrag serve` answers, with its generator and
    as PGRAG_API_KEY's principals: nothing is loaded here (docs/serve.md).
    """
    rewriting = query_rewrite(ctx, rewrite, paraphrases)
    service = remote.client(ctx)
    if service is not None:
        for given, option, why in (
            (rewriting is not None, "--rewrite", "the service does not rewrite queries"),
            (agentic, "--agentic", "the service's /v1/ask does not search again"),
            (show_prompt, "--show-prompt", "the prompt stays on the service"),
            (bool(principals), "--principal", "the service reads as its API key's principals"),
            (
                (reranker_spec or "").strip().lower() not in ("", "none"),
                "--reranker",
                "the service's /v1/ask does not rerank",
            ),
        ):
            if given:
                remote.refuse(option, why)
    if agentic:
        config = config_from_settings(state(ctx).settings)
        if config is None:
            raise click.UsageError(
                "--agentic needs a tool-calling model: set PGRAG_LLM_BASE_URL (or"
                " OPENAI_BASE_URL) to an OpenAI-compatible endpoint, or PGRAG_LLM_GGUF to a"
                " local GGUF model"
            )
        if reranker_spec or context != "chunk" or min_confidence is not None:
            raise click.UsageError(
                "--agentic does not take --reranker, --context or --min-confidence: the model"
                " may search again, so a weak first search does not stop it"
            )
        if rewriting is not None:
            raise click.UsageError(
                "--agentic does not take --rewrite: the model writes its own searches"
            )
        result = ask_agentic(
            database(ctx),
            question,
            config=config,
            collection=collection,
            k=k,
            budget_tokens=budget,
            max_steps=max_steps,
            log=not no_log,
            principals=list(principals) if principals else None,
        )
        _show_answer(result, as_json=as_json, show_prompt=show_prompt, streamed=False)
        return

    # The draft streams only to a person at a terminal: a pipe or a file gets the checked answer
    # alone (what the checks removed, an invalid [9] say, must not end up in `> out.txt`).
    streamed = False

    def on_token(piece: str) -> None:
        nonlocal streamed
        streamed = True
        echo(piece, nl=False)

    stream = not as_json and stdout_is_terminal()

    extra: dict[str, Any] = {}  # without --min-confidence: ask() reads the default
    if min_confidence is not None:
        extra["min_confidence"] = parse_setting(min_confidence, "--min-confidence")
    if service is not None:
        answer: Any = remote.ask(
            service,
            question,
            collection=collection,
            k=k,
            budget=budget,
            context=context,
            log=not no_log,
            min_confidence=extra.get("min_confidence", "configured"),
            on_token=on_token if stream else None,
        )
        _show_answer(answer, as_json=as_json, show_prompt=False, streamed=streamed)
        return
    answer = run_ask(
        database(ctx),
        question,
        collection=collection,
        k=k,
        budget_tokens=budget,
        reranker=reranker_from_settings(state(ctx).settings, reranker_spec),
        on_token=on_token if stream else None,
        log=not no_log,
        principals=list(principals) if principals else None,
        context=context,
        rewrite=rewriting,
        **extra,
    )
    _show_answer(answer, as_json=as_json, show_prompt=show_prompt, streamed=streamed)


def _show_answer(answer: Any, *, as_json: bool, show_prompt: bool, streamed: bool) -> None:
    if as_json:
        out = answer.to_dict()
        if show_prompt:
            out["prompt"] = answer.prompt
        emit_json(out)
        return
    if show_prompt:
        echo(answer.prompt, err=True)
        echo("", err=True)
    if streamed:  # the draft is on the terminal already; say what the checks made of it
        echo("\n")
        if answer.abstained or answer.invalid_citations:
            echo(f"checked answer: {answer.answer}")
    else:
        echo(answer.answer)
    if answer.abstained:
        echo(f"(abstained: {answer.reason})", err=True, layout=False)
    if answer.invalid_citations:
        bad = ", ".join(f"[{n}]" for n in answer.invalid_citations)
        echo(
            f"warning: removed citations of sources not in the prompt: {bad}",
            err=True,
            layout=False,
        )
    if answer.uncited:
        echo(
            f"warning: {len(answer.uncited)} sentence(s) cite no source: {answer.uncited[0]!r}",
            err=True,
        )
    for warning in answer.warnings:
        echo(f"warning: {warning}", err=True, layout=False)
    for f in answer.flagged:
        phrases = "; ".join(repr(p) for p in f["phrases"])
        echo(
            f"warning: source [{f['n']}] reads like an instruction: {phrases}",
            err=True,
            layout=False,
        )
    if answer.citations:
        echo("\nSources:")
        for c in answer.citations:
            echo(f"  [{c.n}] {place(c.title, c.section)} — {c.source}", layout=False)


def _checks_line(checks: dict[str, Any]) -> str:
    def num(value: Any) -> str:
        return "-" if value is None else f"{value:.3f}"

    parts = [f"confidence {num(checks.get('confidence'))}"]
    detail = checks.get("confidence_detail") or {}
    if detail:
        parts[0] += (
            f" [similarity {num(detail.get('similarity'))}, coverage {num(detail.get('coverage'))}]"
        )
    if checks.get("threshold") is not None:
        parts[0] += f" (threshold {num(checks['threshold'])}, {checks.get('threshold_from')})"
    parts.append(f"faithfulness {num(checks.get('faithfulness'))}")
    uncited = [s for s in checks.get("sentences") or [] if not s.get("citations")]
    if uncited:
        parts.append(f"{len(uncited)} uncited sentence(s)")
    if checks.get("invalid_citations"):
        removed = ", ".join(f"[{n}]" for n in checks["invalid_citations"])
        parts.append(f"removed citations {removed}")
    return "checks: " + "; ".join(parts)


@click.command()
@click.argument("query_id", type=int)
@click.option("--show-prompt", is_flag=True, help="Print the prompt too.")
@json_option
@click.pass_context
def trace(ctx: click.Context, query_id: int, show_prompt: bool, as_json: bool) -> None:
    """Show what `pgrag ask` recorded for one question (its query_id)."""
    t = get_trace(database(ctx), query_id)
    if as_json:
        emit_json(t)
        return
    echo(
        f"#{t['id']}  {t['created_at']}  as {t['db_user']}"
        f"{' (' + ', '.join(t['principals']) + ')' if t['principals'] else ''}"
    )
    echo(
        f"collection {t['collection']}, model {t['model']}, generator {t['generator']}",
        layout=False,
    )
    echo(f"Q: {t['question']}")
    echo(f"A: {t['answer']}")
    if t["abstained"]:
        echo(f"abstained: {t['abstain_reason']}", layout=False)
    for c in t["citations"]:
        echo(f"  [{c.get('n')}] {c.get('source')}", layout=False)
    checks = t["checks"] or {}  # (None for questions asked before migration 0009)
    if checks:
        echo(_checks_line(checks))
    echo("retrieved:")
    for r in t["retrieved"]:
        echo(
            f"  {r['rank']}. chunk {r['chunk_id']} (vector #{r.get('vector_rank') or '-'},"
            f" keyword #{r.get('keyword_rank') or '-'})  {r.get('source') or '(gone)'}"
        )
    echo("timings: " + ", ".join(f"{k} {v}" for k, v in t["timings"].items()))
    if show_prompt:
        echo("prompt:")
        echo(t["prompt"] or "")
