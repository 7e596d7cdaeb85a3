"""``pgrag collections`` and ``pgrag status``: what the database holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from pgrag.cli.options import database, emit_json, json_option, plural
from pgrag.collections import list_collections
from pgrag.embeddings.worker import index_status
from pgrag.embeddings.worker import status as collection_status


def _print(
    rows: list[dict[str, Any]], line: Callable[[dict[str, Any]], str], as_json: bool
) -> None:
    """One line per collection (or the rows as JSON); a hint on stderr when there are none."""
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    for r in rows:
        click.echo(line(r))


@click.command()
@json_option
@click.pass_context
def collections(ctx: click.Context, as_json: bool) -> None:
    """List collections with their model and size."""

    def line(r: dict[str, Any]) -> str:
        return (
            f"{r['name']}\t{plural(r['documents'], 'document')}\t{plural(r['chunks'], 'chunk')}"
            f"\t{r['model']} ({r['dimension']}d)"
        )

    _print(list_collections(database(ctx)), line, as_json)


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per collection: documents, chunks, pending and failed embeddings, models."""

    def line(r: dict[str, Any]) -> str:
        others = f"\tother models: {', '.join(r['others'])}" if r["others"] else ""
        return (
            f"{r['collection']}\t{plural(r['documents'], 'document')}"
            f"\t{plural(r['chunks'], 'chunk')}\t{r['pending']} pending\t{r['failed']} failed"
            f"\tmodel {r['active_model'] or '-'}{others}"
        )

    db = database(ctx)
    _print(collection_status(db), line, as_json)
    if not as_json:
        for m in index_status(db):
            click.echo(f"index {m['index']}\tmodel {m['model']}\t{m['state']}")
