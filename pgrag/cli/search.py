"""``pgrag search``: hybrid search (or ``--sql``, the statement it would run)."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from pgrag.cli import remote
from pgrag.cli.options import (
    collection_option,
    database,
    emit_json,
    json_option,
    mmr_option,
    place,
    principal_option,
    query_rewrite,
    reranker_option,
    rewrite_options,
    search_settings,
    state,
    tuning_options,
)
from pgrag.cli.output import echo, escape, write
from pgrag.retrieval.filter_values import parse_filter_json
from pgrag.retrieval.grouping import DEFAULT_CHUNKS_PER_DOCUMENT, MAX_CHUNKS_PER_DOCUMENT
from pgrag.retrieval.rerank import reranker_from_settings
from pgrag.retrieval.search import search as run_search
from pgrag.retrieval.search import search_sql


@click.command()
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
@click.option(
    "--documents",
    "documents",
    is_flag=True,
    help="One entry per document: up to k distinct documents, ranked by their best chunk,"
    " each with its best chunks (docs/search.md#document-level-results).",
)
@click.option(
    "--chunks-per-document",
    type=click.IntRange(1, MAX_CHUNKS_PER_DOCUMENT),
    default=DEFAULT_CHUNKS_PER_DOCUMENT,
    show_default=True,
    help="With --documents: the most chunks listed per document.",
)
@reranker_option
@mmr_option
@rewrite_options
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
    rewrite: str | None = None,
    paraphrases: int = 3,
    documents: bool = False,
    chunks_per_document: int = DEFAULT_CHUNKS_PER_DOCUMENT,
    **tuning: Any,
) -> None:
    """Hybrid search: vector + BM25 keyword, fused by their normalised scores (pgrag.search_v5).

    With PGRAG_URL set (and no --dsn), a running `pgrag serve` searches, with its model and
    as PGRAG_API_KEY's principals: nothing is loaded here (docs/serve.md).
    """
    filt = _parse_filter(filter_json)
    settings = search_settings(tuning)
    rewriting = query_rewrite(ctx, rewrite, paraphrases)
    if rewriting is not None and show_sql:
        raise click.UsageError(
            "--sql prints one statement, and --rewrite has the model write the queries first;"
            " drop one of them"
        )
    given = ctx.get_parameter_source("chunks_per_document") is not ParameterSource.DEFAULT
    if given and not documents:
        raise click.UsageError("--chunks-per-document lists chunks per document: add --documents")
    if documents and show_sql:
        raise click.UsageError(
            "--sql prints search_v5's statement, and --documents groups its chunks into"
            " documents afterwards (in Python); drop one of them"
        )
    service = None if show_sql else remote.client(ctx)  # (--sql prints, it needs no model)
    if service is not None and rewriting is not None:
        remote.refuse("--rewrite", "the service does not rewrite queries")
    if service is not None:
        results = _remote(
            ctx,
            service,
            query,
            collection,
            k,
            mode,
            filt,
            settings,
            model_name,
            mmr,
            reranker_spec,
            principals,
            chunks_per_document if documents else None,
        )
    elif show_sql:
        echo(
            search_sql(
                query,
                collection=collection,
                k=k,
                mode=mode,
                filter=filt,
                settings=settings,
                model=model_name,
                principals=list(principals) if principals else None,
            )
        )
        return
    else:
        # One set of arguments for both local paths, so a new option cannot reach only one.
        options: dict[str, Any] = {
            "collection": collection,
            "k": k,
            "mode": mode,
            "filter": filt,
            "settings": settings,
            "reranker": reranker_from_settings(state(ctx).settings, reranker_spec),
            "mmr": mmr,
            "principals": list(principals) if principals else None,
            "model": model_name,
        }
        if rewriting is not None and documents:
            from pgrag.retrieval.grouping import grouped

            def fetch(depth: int) -> list[Any]:
                deeper = {**options, "k": depth}
                return _rewritten(ctx, query, rewriting, quiet=as_json, **deeper)

            results = grouped(fetch, k, chunks_per_document)
        elif rewriting is not None:
            results = _rewritten(ctx, query, rewriting, quiet=as_json, **options)
        elif documents:
            results = run_search(
                database(ctx),
                query,
                group="document",
                chunks_per_document=chunks_per_document,
                **options,
            )
        else:
            results = run_search(database(ctx), query, **options)
    if as_json:
        emit_json([r.to_dict() for r in results])
        return
    if not results:
        echo("no results", err=True)
    if documents:
        _print_documents(results)
        return
    for r in results:
        arms = f"vector #{r.vector_rank or '-'}, keyword #{r.keyword_rank or '-'}"
        if r.rerank_score is not None:
            arms += f", reranked {r.rerank_score:.3f}"
        where = place(r.title, r.section) or r.source
        # Styled, so written as it is: the document's part of it went through escape().
        write(click.style(f"{r.rank}. {escape(where)}", bold=True) + f"  ({r.score:.4f}; {arms})")
        echo(f"   {r.source}", layout=False)
        snippet = " ".join(r.text.split())
        echo(f"   {snippet[:300]}{'…' if len(snippet) > 300 else ''}\n")


def _print_documents(hits: list[Any]) -> None:
    """One entry per document: its title (or source), then its best chunks, each on a line."""
    for hit in hits:
        more = f"{hit.matched} chunks matched" if hit.matched != 1 else "1 chunk matched"
        write(
            click.style(f"{hit.rank}. {escape(hit.title or hit.source, layout=False)}", bold=True)
            + f"  ({hit.score:.4f}; {more})"
        )
        echo(f"   {hit.source}", layout=False)
        for c in hit.chunks:
            snippet = " ".join(c.text.split())
            section = c.section or ""
            if hit.title and section.startswith(f"{hit.title} > "):
                section = section[len(hit.title) + 3 :]  # the entry's line names the title
            label = f"{section}: " if section and section != hit.title else ""
            echo(
                f"   #{c.rank} {label}{snippet[:200]}{'…' if len(snippet) > 200 else ''}",
                layout=False,
            )
        echo()


def _rewritten(
    ctx: click.Context, query: str, rewriting: Any, *, quiet: bool, **options: Any
) -> list[Any]:
    """The rewritten search's results; what the model wrote, and any fallback, on stderr."""
    from pgrag.retrieval.expansion import expanded_search

    expanded = expanded_search(database(ctx), query, rewriting, **options)
    for warning in expanded.warnings:
        echo(f"warning: {warning}", err=True, layout=False)
    if not quiet:
        for text in expanded.generated:
            echo(f"{expanded.method}: {text}", err=True)
    return expanded.results


def _remote(
    ctx: click.Context,
    service: Any,
    query: str,
    collection: str,
    k: int,
    mode: str,
    filt: dict[str, Any] | None,
    settings: Any,
    model_name: str | None,
    mmr: float | None,
    reranker_spec: str | None,
    principals: tuple[str, ...],
    chunks_per_document: int | None = None,
) -> list[Any]:
    """The service's results: chunks, or documents with ``chunks_per_document``."""
    if principals:
        remote.refuse("--principal", "the service reads as its API key's principals")
    spec = (reranker_spec or "").strip().lower()
    if spec not in ("", "none"):
        remote.refuse("--reranker", "the service reranks with its own PGRAG_RERANKER")
    # PGRAG_RERANKER set here asks for reranking: the service does it with its own reranker.
    rerank = reranker_spec is None and bool(state(ctx).settings.reranker)
    options: dict[str, Any] = {
        "collection": collection,
        "k": k,
        "mode": mode,
        "filter": filt,
        "settings": settings,
        "model": model_name,
        "mmr": mmr,
        "rerank": rerank,
    }
    if chunks_per_document is not None:
        return remote.search_documents(
            service, query, chunks_per_document=chunks_per_document, **options
        )
    return remote.search(service, query, **options)


def _parse_filter(raw: str | None) -> dict[str, Any] | None:
    return None if raw is None else parse_filter_json(raw, "--filter")
