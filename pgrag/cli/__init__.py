"""The ``pgrag`` command: a thin skin over the library.

Results go to stdout (``--json`` for machines); progress, warnings and errors to stderr, so
``pgrag search ... --json | jq`` works. Every :class:`PgragError` becomes one line,
``error: ...``, and exit status 1. Heavy modules are imported inside the commands so that
``pgrag --help`` is instant.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pgrag.errors import PgragError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

F = TypeVar("F", bound=Callable[..., Any])


class _Group(click.Group):
    """Translate library errors into one line with the next step, once, here."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgragError as err:
            _fail(str(err))
        except Exception as err:
            # click's own Exit/UsageError (``pgrag search --help``) pass through here too: only
            # look at psycopg when a command already imported it, so help stays light.
            psycopg = sys.modules.get("psycopg")
            if psycopg is not None and isinstance(err, psycopg.Error):
                from pgrag.db.connect import describe_error

                _fail(describe_error(err))
            raise


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def collection_option(f: F) -> F:
    return click.option(
        "--collection",
        "-c",
        default="default",
        show_default=True,
        envvar="PGRAG_COLLECTION",
        help="Collection to use (env: PGRAG_COLLECTION).",
    )(f)


def tuning_options(f: F) -> F:
    """search_v5's knobs; each left unset keeps the function's measured default."""
    options = [
        click.option("--rrf-k", type=click.IntRange(min=1), help="RRF constant (default 5)."),
        click.option(
            "--vector-weight",
            type=click.FloatRange(min=0),
            help="Vector arm's RRF weight (default 0.5).",
        ),
        click.option(
            "--keyword-weight",
            type=click.FloatRange(min=0),
            help="Keyword arm's RRF weight (default 1.0).",
        ),
        click.option(
            "--depth",
            type=click.IntRange(min=1, max=1000),
            help="Candidates per arm before fusion (default max(4k, 40)).",
        ),
        click.option(
            "--postings-per-term",
            type=click.IntRange(min=0),
            help="Keyword arm: above this many postings per query, read a budget of this"
            " many, best first (default 50,000; 0 = read everything).",
        ),
        click.option(
            "--fallback-chunks",
            type=click.IntRange(min=0, max=1_000_000),
            help="When nothing matches (only stop words, or unknown words), match the words"
            " as typed in up to this many chunks (default 5,000; 0 = off).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _settings(params: dict[str, Any]) -> Any:
    from pgrag.retrieval.search import SearchSettings

    depth = params.get("depth")
    return SearchSettings(
        rrf_k=params.get("rrf_k"),
        vector_weight=params.get("vector_weight"),
        keyword_weight=params.get("keyword_weight"),
        vector_depth=depth,
        keyword_depth=depth,
        postings_per_term=params.get("postings_per_term"),
        fallback_chunks=params.get("fallback_chunks"),
    )


def mmr_option(f: F) -> F:
    return click.option(
        "--mmr",
        type=click.FloatRange(0, 1),
        help="Diversify: pick the results by Maximal Marginal Relevance with this lambda"
        " (1 = relevance only; 0.5 is a common choice).",
    )(f)


def reranker_option(f: F) -> F:
    return click.option(
        "--reranker",
        "reranker_spec",
        metavar="PATH|URL|none",
        help="Rerank with a local cross-encoder directory or a /rerank endpoint"
        " (default: $PGRAG_RERANKER, else none). See docs/reranking.md.",
    )(f)


def principal_option(f: F) -> F:
    return click.option(
        "--principal",
        "principals",
        multiple=True,
        metavar="PRINCIPAL",
        help="Read as this principal (repeatable; public is always included), e.g. --principal"
        " alice --principal group:billing. The database enforces it.",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(f)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="PGRAG_DSN",
    help="PostgreSQL connection string (env: PGRAG_DSN). Default: libpq's PG* variables if"
    " set, else the embedded server.",
)
@click.version_option(package_name="pgrag")
@click.pass_context
def cli(ctx: click.Context, dsn: str | None) -> None:
    """pgrag: answers from your documents, with sources, on PostgreSQL.

    \b
    Quick start:
      pgrag db upgrade                 create/upgrade the schema
      pgrag ingest docs/               chunk, embed and index files
      pgrag search "refund window"     hybrid search
      pgrag ask "How long do refunds take?"
    """
    ctx.obj = {"dsn": dsn}


def _dsn(ctx: click.Context) -> str:
    from pgrag.db.connect import resolve_dsn

    return resolve_dsn(ctx.obj["dsn"])


def _db(ctx: click.Context) -> Database:
    from pgrag.db.connect import connect

    db = connect(ctx.obj["dsn"])
    ctx.call_on_close(db.close)
    return db


# -- server ------------------------------------------------------------------------------


@cli.group()
def server() -> None:
    """Start, stop or inspect the embedded PostgreSQL server."""


@server.command("start")
def server_start() -> None:
    """Start the embedded server (initialising it on first use); print its DSN."""
    from pgrag.db.server import EmbeddedServer

    click.echo(EmbeddedServer().ensure_running())


@server.command("stop")
def server_stop() -> None:
    """Stop the embedded server."""
    from pgrag.db.server import EmbeddedServer

    stopped = EmbeddedServer().stop()
    click.echo("stopped" if stopped else "not running", err=True)


@server.command("status")
@click.option("--dsn", "dsn_only", is_flag=True, help="Print only the connection string.")
@json_option
def server_status(dsn_only: bool, as_json: bool) -> None:
    """Show whether the embedded server runs, where its data is, and how to connect."""
    from pgrag.db.server import EmbeddedServer

    st = EmbeddedServer().status()
    if dsn_only:
        click.echo(st.dsn)
        if not st.running:
            click.echo(
                "warning: the embedded server is not running; `pgrag server start`", err=True
            )
        return
    if as_json:
        _emit_json({**vars(st), "directory": str(st.directory)})
        return
    click.echo(f"running:   {f'yes (pid {st.pid})' if st.running else 'no'}")
    click.echo(f"directory: {st.directory}")
    click.echo(f"dsn:       {st.dsn}")
    click.echo(f'psql:      psql "{st.dsn}"')
    click.echo(f"           (no psql installed? the embedded server ships one: {st.psql})")
    if not st.running:
        sys.exit(3)  # pg_ctl's convention for "not running", so scripts can test it


# -- db ----------------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """Upgrade, downgrade or check the schema (Alembic migrations)."""


@db.command("upgrade")
@click.argument("revision", default="head")
@click.pass_context
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head)."""
    from pgrag.db import schema as migrate

    dsn = _dsn(ctx)
    before = migrate.current(dsn)
    migrate.upgrade(dsn, revision)
    after = migrate.current(dsn)
    if before != after:
        click.echo(f"upgraded pgrag's schema: {before or '(none)'} -> {after}", err=True)
    click.echo(migrate.state(dsn).describe())


# ignore_unknown_options: Alembic's relative revisions ("-1") are arguments, not options.
@db.command("downgrade", context_settings={"ignore_unknown_options": True})
@click.argument("revision")
@click.pass_context
def db_downgrade(ctx: click.Context, revision: str) -> None:
    """Downgrade the schema to REVISION: an id, -1 for one step, or 'base' (removes pgrag's
    schema and all its data)."""
    from pgrag.db import schema as migrate

    dsn = _dsn(ctx)
    before = migrate.current(dsn)
    migrate.downgrade(dsn, revision)
    after = migrate.current(dsn)
    if after is None:
        click.echo(f"removed pgrag's schema and its data (was at {before or '(none)'})")
    else:
        click.echo(f"downgraded pgrag's schema: {before or '(none)'} -> {after}")


@db.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Print the schema revision of the database (empty when not installed)."""
    from pgrag.db import schema as migrate

    click.echo(migrate.current(_dsn(ctx)) or "")


@db.command("check")
@click.pass_context
def db_check(ctx: click.Context) -> None:
    """Exit 0 when the database schema matches this pgrag, 1 otherwise."""
    from pgrag.db import schema as migrate

    st = migrate.state(_dsn(ctx))
    if not st.up_to_date:
        _fail(st.describe())
    click.echo(st.describe())


# -- ingest / search / ask ------------------------------------------------------------------


@cli.command()
# readable=False: an unreadable path is reported by the ingest itself, on one line, and
# does not stop the other paths.
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False, path_type=str))
@collection_option
@click.option(
    "--allow",
    multiple=True,
    metavar="PRINCIPAL",
    help="Who may read these documents (repeatable), e.g. --allow alice --allow group:billing;"
    " public is everyone. Default: public for new documents, unchanged for stored ones.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Write nothing; say what would be added, updated, deleted and left alone.",
)
@click.option(
    "--prune",
    is_flag=True,
    help="Also remove the documents of files that are gone from the directories given.",
)
@click.option(
    "--jsonl-text",
    default="text",
    show_default=True,
    metavar="FIELD",
    help="JSON Lines: the field holding a record's text.",
)
@click.option(
    "--jsonl-title",
    default="title",
    show_default=True,
    metavar="FIELD",
    help="JSON Lines: the field holding a record's title.",
)
@click.option(
    "--jsonl-id",
    default=None,
    metavar="FIELD",
    help="JSON Lines: the field identifying a record (default: _id or id, else the line).",
)
@click.option(
    "--jsonl-metadata",
    default=None,
    metavar="FIELD,...",
    help="JSON Lines: the fields kept as metadata (default: all the others).",
)
@json_option
@click.pass_context
def ingest(
    ctx: click.Context,
    paths: tuple[str, ...],
    collection: str,
    allow: tuple[str, ...],
    dry_run: bool,
    prune: bool,
    jsonl_text: str,
    jsonl_title: str,
    jsonl_id: str | None,
    jsonl_metadata: str | None,
    as_json: bool,
) -> None:
    """Chunk, embed and index files and directories: Markdown, text, HTML, PDF, JSON Lines.

    The content decides the format (a directory walk picks .md .markdown .txt .text .html .htm
    .xhtml .pdf .jsonl .ndjson). Unchanged files are skipped (with --allow, their access is
    updated without re-embedding); in a changed one only the chunks whose text changed are
    embedded again. A file that cannot be read is reported on one line and the others are
    still ingested; the exit status is then 1.
    """
    import signal

    from pgrag.ingest.formats import JsonlFields
    from pgrag.ingest.pipeline import ingest as run_ingest

    # `kill`, systemd and Kubernetes stop with SIGTERM: unwind normally, so an interrupted
    # bulk load still rebuilds the index it dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    database = _db(ctx)
    bar: Any = None
    fields = JsonlFields(
        text=jsonl_text,
        title=jsonl_title or None,
        id=jsonl_id,
        metadata=None
        if jsonl_metadata is None
        else tuple(f.strip() for f in jsonl_metadata.split(",") if f.strip()),
    )

    def on_error(path: str, reason: str) -> None:
        click.echo(f"error: {path}: {reason}", err=True)

    def on_plan(total: int) -> None:
        nonlocal bar
        if total:
            bar = click.progressbar(
                length=total, label="embedding", file=sys.stderr, show_pos=True, show_eta=True
            )
            bar.__enter__()

    def on_batch(files_done: int, files_total: int) -> None:
        if bar is not None:
            bar.label = f"{files_done}/{files_total} files, chunks"

    def progress(n: int) -> None:
        if bar is not None:
            bar.update(n)

    try:
        report = run_ingest(
            database,
            list(paths),
            collection=collection,
            on_error=on_error,
            on_plan=on_plan,
            progress=progress,
            on_batch=on_batch,
            allow=list(allow) if allow else None,
            jsonl=fields,
            dry_run=dry_run,
            prune=prune,
        )
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if dry_run and not as_json:
        for f in report.files:
            if f.status in ("added", "updated") and f.reason:
                click.echo(f"{f.status:9} {f.path} ({f.reason})")
            elif f.status in ("added", "updated"):
                click.echo(f"{f.status:9} {f.path} ({f.chunks} chunks, {f.embed} to embed)")
            elif f.status == "deleted":
                click.echo(f"{f.status:9} {f.path} ({f.chunks} chunks)")
            elif f.status == "duplicate":
                click.echo(f"{f.status:9} {f.path} ({f.reason}: stored once)")
            elif f.status != "failed":
                click.echo(f"{f.status:9} {f.path}")
    if as_json:
        _emit_json(report.to_dict())
    click.echo(report.summary(), err=True)
    if report.failed:
        sys.exit(1)


@cli.command("rm")
@click.argument("targets", nargs=-1, required=True)
@collection_option
@click.option("--dry-run", is_flag=True, help="Remove nothing; list what would be removed.")
@json_option
@click.pass_context
def rm(
    ctx: click.Context, targets: tuple[str, ...], collection: str, dry_run: bool, as_json: bool
) -> None:
    """Remove documents: by file path, by directory (every document under it), or by source.

    Chunks, vectors and keyword postings go with them, in one transaction. A target that
    names no document is an error (exit status 1); the others are still removed.
    """
    from pgrag.ingest.removal import remove

    report = remove(_db(ctx), list(targets), collection=collection, dry_run=dry_run)
    if as_json:
        _emit_json(report.to_dict())
    else:
        for source, chunks in report.documents:
            click.echo(f"{'would remove' if dry_run else 'removed'} {source} ({chunks} chunks)")
    for target in report.unmatched:
        click.echo(
            f"error: {target}: no document in collection {collection!r} has this"
            " path or source; `pgrag search` or pgrag.documents_v1 shows sources",
            err=True,
        )
    click.echo(report.summary(), err=True)
    if report.unmatched:
        sys.exit(1)


@cli.command()
@click.argument("query")
@collection_option
@click.option("--k", "-k", default=10, show_default=True, help="Number of results.")
@click.option(
    "--mode",
    type=click.Choice(["hybrid", "keyword", "vector"]),
    default="hybrid",
    show_default=True,
    help="Which arms to use.",
)
@click.option(
    "--filter",
    "filter_json",
    help="Only documents whose metadata matches this JSON filter, e.g."
    ' \'{"team": "billing"}\', \'{"tags": {"$in": ["eu", "us"]}}\','
    ' \'{"date": {"$gte": "2024-01-01"}}\' (docs/search.md#filters).',
)
@principal_option
@click.option(
    "--model",
    "model_name",
    help="Search with this model of the collection (default: the active one); e.g. one that"
    " `pgrag models reembed` is building, to compare before switching.",
)
@click.option(
    "--sql",
    "show_sql",
    is_flag=True,
    help="Print the SQL statement instead of running it ($1 is the query's embedding).",
)
@reranker_option
@mmr_option
@tuning_options
@json_option
@click.pass_context
def search(
    ctx: click.Context,
    /,
    query: str,
    collection: str,
    k: int,
    mode: str,
    filter_json: str | None,
    show_sql: bool,
    reranker_spec: str | None,
    mmr: float | None,
    principals: tuple[str, ...],
    as_json: bool,
    model_name: str | None = None,
    **tuning: Any,
) -> None:
    """Hybrid search: vector + BM25 keyword, fused with RRF (pgrag.search_v5)."""
    from pgrag.retrieval.rerank import reranker_from_config
    from pgrag.retrieval.search import search as run_search
    from pgrag.retrieval.search import search_sql

    filt = _parse_filter(filter_json)
    settings = _settings(tuning)
    if show_sql:
        if principals:
            from psycopg import sql

            from pgrag.db.principals import check_principals

            names = ",".join(check_principals(principals))
            click.echo("BEGIN;")
            click.echo(
                sql.SQL("SELECT set_config('pgrag.principals', {}, true);")
                .format(sql.Literal(names))
                .as_string(None)
            )
        click.echo(
            search_sql(
                query,
                collection=collection,
                k=k,
                mode=mode,
                filter=filt,
                settings=settings,
                model=model_name,
            )
            + ";"
        )
        if principals:
            click.echo("COMMIT;")
        return
    results = run_search(
        _db(ctx),
        query,
        collection=collection,
        k=k,
        mode=mode,
        filter=filt,
        settings=settings,
        reranker=reranker_from_config(reranker_spec),
        mmr=mmr,
        principals=list(principals) if principals else None,
        model=model_name,
    )
    if as_json:
        _emit_json([r.to_dict() for r in results])
        return
    if not results:
        click.echo("no results", err=True)
    for r in results:
        arms = f"vector #{r.vector_rank or '-'}, keyword #{r.keyword_rank or '-'}"
        if r.rerank_score is not None:
            arms += f", reranked {r.rerank_score:.3f}"
        where = _place(r.title, r.section) or r.source
        click.echo(click.style(f"{r.rank}. {where}", bold=True) + f"  ({r.score:.4f}; {arms})")
        click.echo(f"   {r.source}")
        snippet = " ".join(r.text.split())
        click.echo(f"   {snippet[:300]}{'…' if len(snippet) > 300 else ''}\n")


def _place(title: str | None, section: str | None) -> str:
    """'Title > Section', without repeating a title the section path already starts with."""
    if not section:
        return title or ""
    if not title or section == title or section.startswith(f"{title} > "):
        return section
    return f"{title} > {section}"


def _parse_filter(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise PgragError(
            f'--filter is not valid JSON ({err.msg}); e.g. \'{{"team": "billing"}}\''
        ) from err
    if not isinstance(value, dict):
        raise PgragError('--filter must be a JSON object, e.g. \'{"team": "billing"}\'')
    return value


@cli.command()
@click.argument("question")
@collection_option
@click.option("--k", "-k", default=8, show_default=True, help="Passages to retrieve.")
@click.option(
    "--budget",
    default=1500,
    show_default=True,
    type=click.IntRange(min=1),
    help="Token budget for passages in the prompt.",
)
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
) -> None:
    """Answer a question, citing numbered sources.

    Uses the OpenAI-compatible endpoint in PGRAG_LLM_BASE_URL (or OPENAI_BASE_URL) when one
    is set, a local GGUF model in PGRAG_LLM_GGUF (pip install 'pgrag[local]'), else the offline
    extractive reader: nothing leaves the machine without a base URL.
    """
    from pgrag.answer.ask import ask as run_ask

    if agentic:
        from pgrag.answer.agentic import ask_agentic
        from pgrag.llm.chat import LLMConfig

        if os.environ.get("PGRAG_LLM_GGUF", "").strip():
            raise click.UsageError(
                "--agentic does not support a local model (PGRAG_LLM_GGUF) yet; unset it and set"
                " PGRAG_LLM_BASE_URL to a tool-calling endpoint, e.g. llama.cpp's llama-server"
            )
        config = LLMConfig.from_env()
        if config is None:
            raise click.UsageError(
                "--agentic needs a tool-calling model: set PGRAG_LLM_BASE_URL (or"
                " OPENAI_BASE_URL) to an OpenAI-compatible endpoint"
            )
        if reranker_spec or context != "chunk" or min_confidence is not None:
            raise click.UsageError(
                "--agentic does not take --reranker, --context or --min-confidence: the model"
                " may search again, so a weak first search does not stop it"
            )
        result = ask_agentic(
            _db(ctx),
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

    streamed = False

    def on_token(piece: str) -> None:
        nonlocal streamed
        streamed = True
        click.echo(piece, nl=False)

    from pgrag.retrieval.rerank import reranker_from_config

    extra: dict[str, Any] = {}  # without --min-confidence: ask() reads the default
    if min_confidence is not None:
        from pgrag.retrieval.confidence import parse_threshold

        off = min_confidence.strip().lower() in ("off", "none")
        extra["min_confidence"] = (
            None if off else parse_threshold(min_confidence, "--min-confidence")
        )
    answer = run_ask(
        _db(ctx),
        question,
        collection=collection,
        k=k,
        budget_tokens=budget,
        reranker=reranker_from_config(reranker_spec),
        on_token=None if as_json else on_token,
        log=not no_log,
        principals=list(principals) if principals else None,
        context=context,
        **extra,
    )
    _show_answer(answer, as_json=as_json, show_prompt=show_prompt, streamed=streamed)


def _show_answer(answer: Any, *, as_json: bool, show_prompt: bool, streamed: bool) -> None:
    if as_json:
        out = answer.to_dict()
        if show_prompt:
            out["prompt"] = answer.prompt
        _emit_json(out)
        return
    if show_prompt:
        click.echo(answer.prompt, err=True)
        click.echo("", err=True)
    if streamed:
        click.echo("\n")
        if answer.abstained or answer.invalid_citations:
            click.echo(f"checked answer: {answer.answer}")
    else:
        click.echo(answer.answer)
    if answer.abstained:
        click.echo(f"(abstained: {answer.reason})", err=True)
    if answer.invalid_citations:
        bad = ", ".join(f"[{n}]" for n in answer.invalid_citations)
        click.echo(f"warning: removed citations of sources not in the prompt: {bad}", err=True)
    if answer.uncited:
        click.echo(
            f"warning: {len(answer.uncited)} sentence(s) cite no source: {answer.uncited[0]!r}",
            err=True,
        )
    for f in answer.flagged:
        phrases = "; ".join(repr(p) for p in f["phrases"])
        click.echo(f"warning: source [{f['n']}] reads like an instruction: {phrases}", err=True)
    if answer.citations:
        click.echo("\nSources:")
        for c in answer.citations:
            click.echo(f"  [{c.n}] {_place(c.title, c.section)} — {c.source}")


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


@cli.group()
def acl() -> None:
    """Who may read which documents: grant, revoke, show (nothing is re-embedded)."""


def _acl_selection(f: F) -> F:
    for option in reversed(
        [
            collection_option,
            click.option(
                "--source", "sources", multiple=True, help="A document's source (repeatable)."
            ),
            click.option("--prefix", help="Every document whose source starts with this."),
        ]
    ):
        f = option(f)
    return f


def _print_access(rows: list[Any], as_json: bool) -> None:
    if as_json:
        _emit_json([r.to_dict() for r in rows])
        return
    for r in rows:
        click.echo(f"{r.source}\t{','.join(r.principals) or '(nobody but admins)'}")


def _acl_change_command(name: str, doc: str) -> None:
    """`pgrag acl grant` and `pgrag acl revoke`: the same selection, one direction each."""

    @acl.command(name, help=doc)
    @click.argument("principals", nargs=-1, required=True)
    @_acl_selection
    @click.option("--all", "all_documents", is_flag=True, help="Every document in the collection.")
    @json_option
    @click.pass_context
    def command(
        ctx: click.Context,
        principals: tuple[str, ...],
        collection: str,
        sources: tuple[str, ...],
        prefix: str | None,
        all_documents: bool,
        as_json: bool,
    ) -> None:
        from pgrag.access import change

        rows = change(
            _db(ctx),
            grant=principals if name == "grant" else (),
            revoke=principals if name == "revoke" else (),
            collection=collection,
            sources=sources or None,
            prefix=prefix,
            all_documents=all_documents,
        )
        _print_access(rows, as_json)
        click.echo(f"{_plural(len(rows), 'document')} changed", err=True)


_acl_change_command(
    "grant",
    "Let PRINCIPALS read the chosen documents; nothing is re-embedded. Example: pgrag acl"
    " grant group:billing --prefix billing/",
)
_acl_change_command(
    "revoke",
    "Stop PRINCIPALS reading the chosen documents; nothing is re-embedded. A document left"
    " with no principals is readable only by administrators.",
)


@acl.command("show")
@_acl_selection
@json_option
@click.pass_context
def acl_show(
    ctx: click.Context,
    collection: str,
    sources: tuple[str, ...],
    prefix: str | None,
    as_json: bool,
) -> None:
    """Who may read each document (all of the collection's, or those chosen)."""
    from pgrag.access import show

    _print_access(
        show(_db(ctx), collection=collection, sources=sources or None, prefix=prefix), as_json
    )


@acl.command("map-role")
@click.argument("role")
@click.argument("principals", nargs=-1, required=True)
@click.option("--remove", is_flag=True, help="Remove these mappings instead.")
@click.pass_context
def acl_map_role(ctx: click.Context, role: str, principals: tuple[str, ...], remove: bool) -> None:
    """Map database ROLE (and its members) to PRINCIPALS, for apps whose users connect as their
    own roles: `pgrag acl map-role billing_team group:billing`."""
    from pgrag.access import map_role

    map_role(_db(ctx), role, principals, remove=remove)
    click.echo(
        f"role {role}: {'removed' if remove else 'reads as'} {', '.join(principals)}", err=True
    )


@cli.command()
@json_option
@click.pass_context
def collections(ctx: click.Context, as_json: bool) -> None:
    """List collections with their model and size."""
    from pgrag.ingest.pipeline import list_collections

    rows = list_collections(_db(ctx))
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    for r in rows:
        click.echo(
            f"{r['name']}\t{_plural(r['documents'], 'document')}\t{_plural(r['chunks'], 'chunk')}"
            f"\t{r['model']} ({r['dimension']}d)"
        )


@cli.command()
@click.argument("query_id", type=int)
@click.option("--show-prompt", is_flag=True, help="Print the prompt too.")
@json_option
@click.pass_context
def trace(ctx: click.Context, query_id: int, show_prompt: bool, as_json: bool) -> None:
    """Show what `pgrag ask` recorded for one question (its query_id)."""
    from pgrag.answer.traces import get_trace

    t = get_trace(_db(ctx), query_id)
    if as_json:
        _emit_json(t)
        return
    click.echo(
        f"#{t['id']}  {t['created_at']}  as {t['db_user']}"
        f"{' (' + ', '.join(t['principals']) + ')' if t['principals'] else ''}"
    )
    click.echo(f"collection {t['collection']}, model {t['model']}, generator {t['generator']}")
    click.echo(f"Q: {t['question']}")
    click.echo(f"A: {t['answer']}")
    if t["abstained"]:
        click.echo(f"abstained: {t['abstain_reason']}")
    for c in t["citations"]:
        click.echo(f"  [{c.get('n')}] {c.get('source')}")
    checks = t["checks"] or {}  # (None for questions asked before migration 0009)
    if checks:
        click.echo(_checks_line(checks))
    click.echo("retrieved:")
    for r in t["retrieved"]:
        click.echo(
            f"  {r['rank']}. chunk {r['chunk_id']} (vector #{r.get('vector_rank') or '-'},"
            f" keyword #{r.get('keyword_rank') or '-'})  {r.get('source') or '(gone)'}"
        )
    click.echo("timings: " + ", ".join(f"{k} {v}" for k, v in t["timings"].items()))
    if show_prompt:
        click.echo("prompt:")
        click.echo(t["prompt"] or "")


@cli.group()
def models() -> None:
    """Embedding models: list, add, reembed, activate, retire (zero-downtime switching)."""


@models.command("list")
@click.option("--collection", "-c", default=None, help="Only this collection's models.")
@json_option
@click.pass_context
def models_list(ctx: click.Context, collection: str | None, as_json: bool) -> None:
    """Registered models, with the collections that use them and their status there."""
    from dataclasses import asdict

    from pgrag.embeddings.models import collection_models, list_models

    db = _db(ctx)
    if collection is not None:
        rows = [(m, [f"{collection} ({m.status})"]) for m in collection_models(db, collection)]
    else:
        rows = list_models(db)
    if as_json:
        _emit_json([{**asdict(m), "collections": used} for m, used in rows])
        return
    if not rows:
        click.echo("no models yet; `pgrag ingest` or `pgrag models add` registers one", err=True)
    for m, used in rows:
        where = m.settings.get("url") or m.settings.get("path") or m.settings.get("package", "")
        click.echo(
            f"{m.name}\t{m.provider}\t{m.dimension}d {m.distance}"
            f"{' halfvec' if m.index_type == 'halfvec' else ''}\t{where}"
            f"\t{', '.join(used) or '-'}"
        )


@models.command("add")
@click.argument("name")
@click.option(
    "--provider",
    type=click.Choice(["sentence-transformers", "openai"]),
    default="sentence-transformers",
    show_default=True,
    help="A local sentence-transformers directory, or an OpenAI-compatible /v1/embeddings server.",
)
@click.option("--path", type=click.Path(exists=True, file_okay=False), help="Model directory.")
@click.option("--url", help="Server base URL (openai), e.g. http://localhost:8080/v1.")
@click.option("--remote-model", help="The model name the server expects (default: NAME).")
@click.option("--dimension", type=click.IntRange(1, 16000), help="Skip probing the server.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="The model's input limit (openai).")
@click.option("--tokenizer", type=click.Path(exists=True, dir_okay=False), help="tokenizer.json.")
@click.option("--batch-size", type=click.IntRange(1, 2048), help="Texts per request (openai).")
@click.option("--concurrency", type=click.IntRange(1, 64), help="Requests in flight (openai).")
@click.option(
    "--api-key-env",
    default="PGRAG_EMBEDDING_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (the key itself is never stored).",
)
@click.option(
    "--index-type",
    type=click.Choice(["vector", "halfvec"]),
    default="vector",
    show_default=True,
    help="halfvec: the HNSW index holds 2-byte floats (half the memory; up to 4,000 dims).",
)
@click.pass_context
def models_add(ctx: click.Context, /, name: str, **opts: Any) -> None:
    """Register embedding model NAME (then `pgrag models reembed NAME -c COLLECTION`)."""
    from pathlib import Path

    from pgrag.embeddings.models import add_model

    embedder: Any
    if opts["provider"] == "openai":
        if not opts["url"]:
            raise click.UsageError("--provider openai needs --url")
        from pgrag.embeddings.remote import RemoteEmbedder

        extra = {
            k: opts[k]
            for k in ("dimension", "max_tokens", "tokenizer", "batch_size", "concurrency")
            if opts[k] is not None
        }
        embedder = RemoteEmbedder.from_settings(
            {
                "url": opts["url"],
                "model": opts["remote_model"] or name,
                "name": name,
                "api_key_env": opts["api_key_env"],
                **extra,
            }
        )
        embedder.dimension  # noqa: B018  (probes the server now, not at the first query)
    else:
        if not opts["path"]:
            raise click.UsageError("--provider sentence-transformers needs --path DIRECTORY")
        from pgrag.embeddings.local import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder(Path(opts["path"]).resolve(), name=name)
    model = add_model(_db(ctx), embedder, index_type=opts["index_type"])
    click.echo(f"registered {model.name}: {model.dimension} dimensions, {model.distance}")


@models.command("reembed")
@click.argument("name")
@collection_option
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(1, 10000))
@click.pass_context
def models_reembed(ctx: click.Context, name: str, collection: str, batch_size: int) -> None:
    """Backfill model NAME's vectors for a collection while searches use the active model.

    Resumable: interrupted, run it again and it continues where it stopped."""
    from pgrag.embeddings.models import get_model
    from pgrag.embeddings.reembed import reembed

    db = _db(ctx)
    model = get_model(db, name)
    report = reembed(
        db,
        model,
        collection,
        batch_size=batch_size,
        on_batch=lambda r: click.echo(
            f"\r{r.embedded}/{r.missing_before} chunks", nl=False, err=True
        ),
    )
    if report.embedded:
        click.echo("", err=True)
    click.echo(
        f"{name}: {report.embedded} chunks embedded ({report.reused} copied from identical"
        f" text) for {collection}; `pgrag models activate {name} -c {collection}` switches"
    )


@models.command("activate")
@click.argument("name")
@collection_option
@click.pass_context
def models_activate(ctx: click.Context, name: str, collection: str) -> None:
    """Make NAME the collection's active model, atomically (the old one stays on standby)."""
    from pgrag.embeddings.models import get_model
    from pgrag.embeddings.reembed import activate

    db = _db(ctx)
    report = activate(db, get_model(db, name), collection)
    caught = f" (after embedding {report.embedded} new chunks)" if report.embedded else ""
    click.echo(f"{collection} now searches with {name}{caught}")


@models.command("retire")
@click.argument("name")
@collection_option
@click.pass_context
def models_retire(ctx: click.Context, name: str, collection: str) -> None:
    """Retire NAME in a collection and delete its vectors there (in batches; resumable)."""
    from pgrag.embeddings.models import get_model
    from pgrag.embeddings.reembed import retire

    db = _db(ctx)
    deleted = retire(db, get_model(db, name), collection)
    click.echo(f"retired {name} in {collection}: {_plural(deleted, 'vector')} deleted")


@cli.command()
@click.option("--once", is_flag=True, help="Exit when nothing is left to do.")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1, 10000))
@click.option("--poll", default=1.0, show_default=True, type=click.FloatRange(min=0.05))
@click.option(
    "--lease",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds a claimed item is this worker's; a killed worker's items wait this long.",
)
@click.pass_context
def worker(ctx: click.Context, once: bool, batch_size: int, poll: float, lease: float) -> None:
    """Embed what the queue holds (documents written with SQL; new chunks for other models).

    Run as many as you like: they share the queue (FOR UPDATE SKIP LOCKED)."""
    import signal

    from pgrag.embeddings.worker import run

    stop = {"now": False}

    def _stop(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    total = run(
        _db(ctx),
        batch_size=batch_size,
        once=once,
        poll=poll,
        lease=lease,
        should_stop=lambda: stop["now"],
        on_batch=lambda r: click.echo(
            f"embedded {r.embedded}" + (f", failed {r.failed}: {r.errors[-1]}" if r.failed else ""),
            err=True,
        ),
    )
    click.echo(f"worker: {total.embedded} embedded, {total.failed} failed")


@cli.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per collection: documents, chunks, pending and failed embeddings, models."""
    from pgrag.embeddings.worker import status as collection_status

    rows = collection_status(_db(ctx))
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    for r in rows:
        others = f"\tother models: {', '.join(r['others'])}" if r["others"] else ""
        click.echo(
            f"{r['collection']}\t{_plural(r['documents'], 'document')}"
            f"\t{_plural(r['chunks'], 'chunk')}\t{r['pending']} pending\t{r['failed']} failed"
            f"\tmodel {r['active_model'] or '-'}{others}"
        )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@cli.group("eval")
def eval_group() -> None:
    """Measure retrieval and answer quality on a dataset."""


@contextmanager
def _stage_progress() -> Iterator[Callable[[str, int, int], None]]:
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
@click.option("--collection", "-c", help="Collection to use (default: eval-DATASET).")
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
    from pathlib import Path

    from pgrag.evaluation.datasets import load_dataset, sample_queries
    from pgrag.evaluation.retrieval import ARMS, evaluate_retrieval
    from pgrag.retrieval.rerank import reranker_from_config

    limits = _parse_thresholds(thresholds)
    data = sample_queries(load_dataset(Path(dataset), split=split), n_queries)
    with _stage_progress() as progress:
        report = evaluate_retrieval(
            _db(ctx),
            data,
            collection=collection,
            arms=arms or ARMS,
            peers=not no_peers,
            settings=_settings(tuning),
            reranker=reranker_from_config(reranker_spec),
            progress=progress,
        )
    if as_json:
        _emit_json(report.to_dict())
    else:
        click.echo(report.table())
    failed = [
        f"{run} nDCG@10 {report.results[run].summary.ndcg10:.4f} < {value}"
        for run, value in limits.items()
        if run in report.results and report.results[run].summary.ndcg10 < value
    ]
    missing = [run for run in limits if run not in report.results]
    if missing:
        _fail(f"--min-ndcg names runs that did not run: {', '.join(missing)}")
    if failed:
        _fail("; ".join(failed))


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
@click.option(
    "--budget",
    default=1500,
    show_default=True,
    type=click.IntRange(min=1),
    help="Token budget for passages in the prompt.",
)
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
    "--collection", "-c", help="Collection to index into (default: eval-answers-DATASET-…)."
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
    with_cases: bool,
    as_json: bool,
) -> None:
    """Evaluate answers on DATASET, a SQuAD v1.1 JSON file: exact match, F1, citation
    accuracy, and abstention with part of the paragraphs withheld from the index.

    Runs the offline extractive reader, and also the configured generator when
    PGRAG_LLM_BASE_URL (or OPENAI_BASE_URL) or PGRAG_LLM_GGUF is set. The retrieval-confidence
    threshold is calibrated on half of the questions and its effect reported on the other half.
    """
    from pathlib import Path

    from pgrag.evaluation.answers import evaluate_answers
    from pgrag.evaluation.datasets import load_squad_answers
    from pgrag.llm.local import config_from_env

    config = config_from_env()
    with _stage_progress() as progress:
        report = evaluate_answers(
            _db(ctx),
            load_squad_answers(Path(dataset)),
            questions=questions,
            withhold=withhold,
            seed=seed,
            k=k,
            budget_tokens=budget,
            llms=[None] if config is None else [None, config],
            collection=collection,
            max_false_refusal=max_false_refusal,
            save=save,
            progress=progress,
        )
    if as_json:
        out = report.to_dict()
        if not with_cases:
            for r in out["results"]:
                r.pop("cases")
        _emit_json(out)
    else:
        click.echo(report.table())
    if report.errors:
        _fail("; ".join(f"{label} {error}" for label, error in report.errors.items()))


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


@cli.command()
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

    Needs PGRAG_LLM_BASE_URL pointing at a server that returns log-probabilities for
    /v1/completions with echo (vLLM). See docs/generation.md.
    """
    from pgrag.answer.scoring import score_answers

    scores = score_answers(
        _db(ctx),
        question,
        list(candidates),
        collection=collection,
        k=k,
        principals=list(principals) if principals else None,
    )
    if as_json:
        _emit_json(scores.to_dict())
        return
    for c in sorted(scores.candidates, key=lambda c: -c.rag_sequence):
        token = "-" if c.rag_token is None else f"{c.rag_token:.4f}"
        click.echo(
            f"{c.probability:7.2%}  {c.text}  (RAG-Sequence {c.rag_sequence:.4f},"
            f" RAG-Token {token})"
        )
    click.echo(f"best: {scores.best}")
    for p in scores.passages:
        ll = ", ".join(f"{t} {p.loglik(t):.3f}" for t in p.token_logprobs)
        where = _place(p.title, p.section)
        click.echo(f"  {p.rank}. p(z|x) {p.prior:.3f}  {where}  {ll}", err=True)


def main() -> None:
    cli(prog_name="pgrag")


if __name__ == "__main__":  # pragma: no cover
    main()
