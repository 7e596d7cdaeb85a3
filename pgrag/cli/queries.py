"""``pgrag queries``: the question log's retention (``retention``) and pruning (``prune``)."""

from __future__ import annotations

from typing import Any

import click

from pgrag.answer.retention import MAX_ROWS, get_retention, parse_age, prune, set_retention
from pgrag.cli.options import (
    checked_collection,
    collection_option,
    database,
    emit_json,
    json_option,
    plural,
)
from pgrag.cli.output import echo
from pgrag.errors import InputError


@click.group()
def queries() -> None:
    """The question log (pgrag.queries): how much of it each collection keeps."""


def _show(r: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(r)
        return
    age = r["max_age"] if r["max_age"] is not None else "no limit"
    rows = plural(r["max_rows"], "question") if r["max_rows"] is not None else "no limit"
    echo(f"{r['collection']}: keeps questions for {age}, at most {rows}", layout=False)


@queries.command("retention")
@collection_option
@click.option(
    "--max-age", default=None, help="Keep questions this long: 30d, 12h, 2w, ... (at most 36500d)."
)
@click.option(
    "--max-rows", type=click.IntRange(0, MAX_ROWS), default=None, help="Keep the newest N."
)
@click.option("--unlimited", is_flag=True, help="Remove both limits.")
@json_option
@click.pass_context
def retention(
    ctx: click.Context,
    collection: str,
    max_age: str | None,
    max_rows: int | None,
    unlimited: bool,
    as_json: bool,
) -> None:
    """Show, or set, how long and how many of a collection's questions the log keeps. A limit
    not given is left as it is; removing entries is `pgrag queries prune` (and each logged
    question removes a few)."""
    db = database(ctx)
    if unlimited and (max_age is not None or max_rows is not None):
        raise click.UsageError("--unlimited removes both limits: give it alone")
    if unlimited or max_age is not None or max_rows is not None:
        try:
            age = parse_age(max_age) if max_age else None
        except InputError as err:
            raise InputError(f"--max-age: {err}") from err
        now = get_retention(db, collection)
        r = set_retention(
            db,
            collection,
            max_age=None if unlimited else age if max_age else now["max_age"],
            max_rows=None if unlimited else max_rows if max_rows is not None else now["max_rows"],
        )
    else:
        r = get_retention(db, collection)
    _show(r, as_json)


@queries.command("prune")
@click.option(
    "--collection",
    "-c",
    default=None,
    help="Only this collection (default: all).",
    callback=checked_collection,
)
@json_option
@click.pass_context
def prune_command(ctx: click.Context, collection: str | None, as_json: bool) -> None:
    """Remove the logged questions that their collection's retention no longer keeps."""
    removed = prune(database(ctx), collection)
    if as_json:
        emit_json({"removed": removed})
    else:
        echo(f"removed {plural(removed, 'logged question')}")
