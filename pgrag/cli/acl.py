"""``pgrag acl``: who may read which documents."""

from __future__ import annotations

from typing import Any

import click

from pgrag.access import change, map_role, show
from pgrag.cli.options import F, collection_option, database, emit_json, json_option, plural
from pgrag.cli.output import echo
from pgrag.cli.tables import print_table


@click.group()
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
        emit_json([r.to_dict() for r in rows])
        return
    # The collection is the one chosen (-c): one column fewer to read.
    print_table(
        [{**r.to_dict(), "principals": r.principals or "(nobody but admins)"} for r in rows],
        {"source": "SOURCE", "principals": "READABLE BY"},
        hide={"collection"},
    )


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
        rows = change(
            database(ctx),
            grant=principals if name == "grant" else (),
            revoke=principals if name == "revoke" else (),
            collection=collection,
            sources=sources or None,
            prefix=prefix,
            all_documents=all_documents,
        )
        _print_access(rows, as_json)
        echo(f"{plural(len(rows), 'document')} changed", err=True)


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
    _print_access(
        show(database(ctx), collection=collection, sources=sources or None, prefix=prefix), as_json
    )


@acl.command("map-role")
@click.argument("role")
@click.argument("principals", nargs=-1, required=True)
@click.option("--remove", is_flag=True, help="Remove these mappings instead.")
@click.pass_context
def acl_map_role(ctx: click.Context, role: str, principals: tuple[str, ...], remove: bool) -> None:
    """Map database ROLE (and its members) to PRINCIPALS, for apps whose users connect as their
    own roles: `pgrag acl map-role billing_team group:billing`."""
    map_role(database(ctx), role, principals, remove=remove)
    echo(
        f"role {role}: {'removed' if remove else 'reads as'} {', '.join(principals)}",
        err=True,
        layout=False,
    )
