"""``pgrag collections`` and ``pgrag status``: what the database holds."""

from __future__ import annotations

import sys
from typing import Any

import click

from pgrag.cli.options import database, emit_json, json_option
from pgrag.cli.output import echo
from pgrag.cli.tables import Approx, print_table
from pgrag.collections import list_collections
from pgrag.embeddings.worker import index_status
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
    "index": "INDEX",
}
# What happens next to an index that is not in use (pgrag.embeddings.index.health).
_INDEX_HINT = {
    "missing": ": searches read every vector; the next ingest that writes, `pgrag worker` or"
    " `pgrag db repair` builds it",
    "invalid": " (an interrupted build): the next ingest that writes, `pgrag worker` or"
    " `pgrag db repair` builds it again",
    "wrong": " (not built as pgrag builds it, so searches cannot use it; `pgrag db check` says"
    " how): the next ingest that writes, `pgrag worker` or `pgrag db repair` builds it again",
    "building": ": another session is building it; searches use it once it is done",
}


def _marked(rows: list[dict[str, Any]], counts: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows for a table: counts that are estimates (``estimated``) read ``~N``."""
    return [
        {k: Approx(v) if k in counts and r.get("estimated") else v for k, v in r.items()}
        for r in rows
    ]


def _print(
    rows: list[dict[str, Any]], columns: dict[str, str], counts: tuple[str, ...], as_json: bool
) -> None:
    """A table of the collections (or the rows as JSON); a hint on stderr when there are none.
    Estimated counts are marked ``~`` (``"estimated": true`` in JSON)."""
    if as_json:
        emit_json(rows)
        return
    if not rows:
        echo("no collections yet; `pgrag ingest PATH` creates one", err=True)
    print_table(_marked(rows, counts), columns, hide=("estimated",))


@click.group(invoke_without_command=True)
@json_option
@click.pass_context
def collections(ctx: click.Context, as_json: bool) -> None:
    """List collections with their model and size; delete one (`pgrag collections delete`)."""
    if ctx.invoked_subcommand is None:
        _print(list_collections(database(ctx)), COLLECTIONS, ("documents",), as_json)


@collections.command("delete")
@click.argument("name")
@click.option(
    "--yes",
    is_flag=True,
    help="Delete it (without this flag, what would go is shown, and nothing changes).",
)
@click.option("--dry-run", is_flag=True, help="Delete nothing; show what would go.")
@json_option
@click.pass_context
def collections_delete(
    ctx: click.Context, name: str, yes: bool, dry_run: bool, as_json: bool
) -> None:
    """Delete collection NAME with its documents, chunks, vectors, keyword index and logged
    questions, in one transaction. Needs --yes."""
    from pgrag.collection_removal import delete_collection

    report = delete_collection(database(ctx), name, dry_run=dry_run or not yes)
    if as_json or (ctx.parent is not None and ctx.parent.params.get("as_json")):
        emit_json(report.to_dict())
    echo(report.summary(), err=True)
    if not yes and not dry_run:
        echo(f"nothing was deleted: `pgrag collections delete {name} --yes` deletes it", err=True)
        sys.exit(1)


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Per collection: documents, chunks, pending and failed embeddings, models."""
    db = database(ctx)
    _print(collection_status(db), STATUS, ("documents", "chunks"), as_json)
    if as_json:
        return
    for m in index_status(db):
        if m["state"] not in ("ok", "none"):
            echo(
                f"warning: index {m['index']} of model {m['model']} is {m['state']}"
                f"{_INDEX_HINT.get(m['state'], '')}",
                err=True,
            )
