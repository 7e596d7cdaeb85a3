"""What every command family shares: the options they have in common, the one place that
turns a library error into ``error: ...`` and exit status 1, the configuration the root group
read, JSON on stdout and a few formatting helpers."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import click
from click.core import ParameterSource

from pgrag import config
from pgrag.cli.output import OutputError, echo, escape, json_text, write
from pgrag.config import Settings
from pgrag.db.connect import Database, connect, describe_error
from pgrag.db.dsn import resolve_dsn
from pgrag.errors import PgragError
from pgrag.retrieval.search import SearchSettings

F = TypeVar("F", bound=Callable[..., Any])


# -- configuration and the database ---------------------------------------------------------


@dataclass
class State:
    """What the root group hands every command (``ctx.obj``): the ``--dsn`` it was given and
    the one snapshot of the environment (:func:`pgrag.config.from_env`) this invocation uses."""

    dsn: str | None = None
    settings: Settings = field(default_factory=config.from_env)


def state(ctx: click.Context) -> State:
    """The invocation's :class:`State` (made here when a command runs without the root group)."""
    return ctx.ensure_object(State)


def database(ctx: click.Context) -> Database:
    """Open the database for this command; it is closed when the command ends."""
    st = state(ctx)
    db = connect(st.dsn, settings=st.settings)
    ctx.call_on_close(db.close)
    return db


def dsn(ctx: click.Context) -> str:
    """The connection string this command uses (starts the embedded server when that is it)."""
    st = state(ctx)
    return resolve_dsn(st.dsn, st.settings)


# -- errors and output ----------------------------------------------------------------------


class Group(click.Group):
    """Translate library errors into one line with the next step, once, here."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OutputError as err:
            silence_stdout()  # what is left in its buffer cannot be written either
            fail(str(err))
        except PgragError as err:
            fail(str(err))
        except click.ClickException as err:
            # click's usage errors quote what was typed (`--mode $'\e]0;x\a'`): same rule.
            raise _escaped(err) from None
        except Exception as err:
            # click's own Exit/UsageError (``pgrag search --help``) pass through here too: only
            # look at psycopg when a command already imported it, so help stays light.
            psycopg = sys.modules.get("psycopg")
            if psycopg is not None and isinstance(err, psycopg.Error):
                fail(describe_error(err))
            raise


def _escaped(err: click.ClickException) -> click.ClickException:
    """``err`` with its message through :func:`pgrag.cli.output.escape` (itself if clean)."""
    message = err.format_message()
    safe = escape(message, layout=False)
    if safe == message:
        return err
    if isinstance(err, click.UsageError):  # (exit status 2, as before)
        return click.UsageError(safe, err.ctx)
    return click.ClickException(safe)


def fail(message: str) -> NoReturn:
    """``error: MESSAGE`` on stderr (through :func:`pgrag.cli.output.escape`), exit status 1."""
    try:
        echo(f"error: {message}", err=True, layout=False)
    except OSError:  # stderr is gone too (a broken pipe stays quiet): the status still says it
        pass
    sys.exit(1)


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that the exit's flush of what a failed write left in its
    buffer does not print a second error (``Exception ignored ... OSError``)."""
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (AttributeError, OSError, ValueError):  # not a real file (tests), or closed
        pass


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (a person reading), not a pipe or a file."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced by something without it, or closed
        return False


def emit_json(value: Any) -> None:
    """``value`` as JSON on stdout, exact: json.dumps escapes control characters itself."""
    write(json_text(value))


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def place(title: str | None, section: str | None) -> str:
    """'Title > Section', without repeating a title the section path already starts with."""
    if not section:
        return title or ""
    if not title or section == title or section.startswith(f"{title} > "):
        return section
    return f"{title} > {section}"


# -- shared options -------------------------------------------------------------------------


def _default_collection(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # Unset on the command line: PGRAG_COLLECTION, as the invocation's Settings read it.
    if ctx.get_parameter_source("collection") is ParameterSource.DEFAULT:
        value = state(ctx).settings.collection
    return str(checked_collection(ctx, param, value))


def checked_collection(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A ``--collection`` callback: a name no collection can have (one that is not UTF-8, as a
    shell passes ``$'\\xff'``, say) is a usage error naming the option, before anything
    connects. None (the option not given) passes."""
    if value is None:
        return None
    from pgrag.collections import check_name  # (it reaches psycopg: not for --help)
    from pgrag.errors import InputError

    try:
        check_name(value)
    except InputError as err:
        raise click.BadParameter(str(err), ctx, param) from None
    return value


def collection_option(f: F) -> F:
    return click.option(
        "--collection",
        "-c",
        default="default",
        show_default=True,
        callback=_default_collection,
        help="Collection to use (env: PGRAG_COLLECTION).",
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


def budget_option(f: F) -> F:
    return click.option(
        "--budget",
        default=1500,
        show_default=True,
        type=click.IntRange(min=1),
        help="Token budget for passages in the prompt.",
    )(f)


def reranker_option(f: F) -> F:
    return click.option(
        "--reranker",
        "reranker_spec",
        metavar="PATH|URL|none",
        help="Rerank with a local cross-encoder directory or a /rerank endpoint"
        " (default: $PGRAG_RERANKER, else none). See docs/reranking.md.",
    )(f)


def mmr_option(f: F) -> F:
    return click.option(
        "--mmr",
        type=click.FloatRange(0, 1),
        help="Diversify: pick the results by Maximal Marginal Relevance with this lambda"
        " (1 = relevance only; 0.5 is a common choice).",
    )(f)


def rewrite_options(f: F) -> F:
    """``--rewrite hyde|multi`` and ``--paraphrases N``; the command passes them to
    :func:`query_rewrite`."""
    f = click.option(
        "--paraphrases",
        type=click.IntRange(1, 10),
        default=3,
        show_default=True,
        help="With --rewrite multi: how many paraphrases the model writes.",
    )(f)
    return click.option(
        "--rewrite",
        type=click.Choice(["hyde", "multi"]),
        help="Have the language model (PGRAG_LLM_BASE_URL or PGRAG_LLM_GGUF) rewrite the query"
        " first: hyde writes a passage that would answer it, and the vector arm searches with"
        " that; multi writes paraphrases, and their searches are fused. One model call per"
        " query; off by default (docs/search.md).",
    )(f)


def query_rewrite(ctx: click.Context, rewrite: str | None, paraphrases: int) -> Any:
    """The :class:`pgrag.retrieval.expansion.QueryRewrite` the options ask for, or None."""
    given = ctx.get_parameter_source("paraphrases") is ParameterSource.COMMANDLINE
    if given and rewrite != "multi":
        raise click.UsageError("--paraphrases is for --rewrite multi")
    if rewrite is None:
        return None
    from pgrag.retrieval.expansion import QueryRewrite

    return QueryRewrite(rewrite, paraphrases=paraphrases)


def tuning_options(f: F) -> F:
    """search_v5's knobs; each left unset keeps the function's measured default (documented
    once, in docs/search.md, so that a default changes in sql/functions/search.sql and there).
    The command takes them as ``**tuning`` and passes them to :func:`search_settings`."""
    options = [
        click.option(
            "--rrf-k",
            type=click.IntRange(min=1),
            help="Fuse with Reciprocal Rank Fusion, with this constant (unset: the"
            " collection's fusion, `pgrag tune`, else convex). Unset, each of these keeps"
            " search_v5's default (docs/search.md#fusion).",
        ),
        click.option(
            "--vector-weight",
            type=click.FloatRange(min=0),
            help="Vector arm's weight (convex or RRF).",
        ),
        click.option(
            "--keyword-weight",
            type=click.FloatRange(min=0),
            help="Keyword arm's weight (convex or RRF).",
        ),
        click.option(
            "--depth",
            type=click.IntRange(min=1, max=1000),
            help="Candidates per arm before fusion.",
        ),
        click.option(
            "--postings-per-term",
            type=click.IntRange(min=0),
            help="Keyword arm: above this many postings per query, read a budget of this"
            " many, best first (0 = read everything).",
        ),
        click.option(
            "--fallback-chunks",
            type=click.IntRange(min=0, max=1_000_000),
            help="When nothing matches (only stop words, or unknown words), match the words"
            " as typed in up to this many chunks (0 = off).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def search_settings(tuning: dict[str, Any]) -> SearchSettings:
    """The :class:`SearchSettings` that :func:`tuning_options` asked for."""
    depth = tuning.get("depth")
    return SearchSettings(
        rrf_k=tuning.get("rrf_k"),
        vector_weight=tuning.get("vector_weight"),
        keyword_weight=tuning.get("keyword_weight"),
        vector_depth=depth,
        keyword_depth=depth,
        postings_per_term=tuning.get("postings_per_term"),
        fallback_chunks=tuning.get("fallback_chunks"),
    )
