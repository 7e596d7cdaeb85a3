"""``pgrag collections`` and ``pgrag status``: what the database holds."""

from __future__ import annotations

from typing import Any

import click

from pgrag.cli.options import database, emit_json, json_option
from pgrag.cli.tables import print_table
from pgrag.collections import list_collections
from pgrag.embeddings.worker import status as collection_status

# The headers of the columns a person reads first; any other field the library returns
# follows under its own name (pgrag.cli.tables).
COLLECTIONS = {
    "name": "COLLECTION",
    "documents": "DOCUMENTS",
    "chunks": "CHUNKS",
    "model": "MODEL",
    "dimension": "DIMENSION",
}
STATUS = {
    "collection": "COLLECTION",
    "documents": "DOCUMENTS",
    "chunks": "CHUNKS",
    "pending": "PENDING",
    "failed": "FAILED",
    "active_model": "MODEL",
    "others": "OTHER MODELS",
}


def _print(rows: list[dict[str, Any]], columns: dict[str, str], as_json: bool) -> None:
    """A table of the collections (or the rows as JSON); a hint on stderr when there are none."""
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    print_table(rows, columns)


@click.command()
@json_option
@click.pass_context
def collections(ctx: click.Context, as_json: bool) -> None:
    """List collections with their model and size."""
    _print(list_collections(database(ctx)), COLLECTIONS, as_json)


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per collection: documents, chunks, pending and failed embeddings, models."""
    _print(collection_status(database(ctx)), STATUS, as_json)
