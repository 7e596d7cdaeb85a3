"""``pgrag collections`` and ``pgrag status``: what the database holds."""

from __future__ import annotations

import click

from pgrag.cli.options import database, emit_json, json_option, plural
from pgrag.embeddings.worker import status as collection_status
from pgrag.ingest.pipeline import list_collections


@click.command()
@json_option
@click.pass_context
def collections(ctx: click.Context, as_json: bool) -> None:
    """List collections with their model and size."""
    rows = list_collections(database(ctx))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    for r in rows:
        click.echo(
            f"{r['name']}\t{plural(r['documents'], 'document')}\t{plural(r['chunks'], 'chunk')}"
            f"\t{r['model']} ({r['dimension']}d)"
        )


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per collection: documents, chunks, pending and failed embeddings, models."""
    rows = collection_status(database(ctx))
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    for r in rows:
        others = f"\tother models: {', '.join(r['others'])}" if r["others"] else ""
        click.echo(
            f"{r['collection']}\t{plural(r['documents'], 'document')}"
            f"\t{plural(r['chunks'], 'chunk')}\t{r['pending']} pending\t{r['failed']} failed"
            f"\tmodel {r['active_model'] or '-'}{others}"
        )
