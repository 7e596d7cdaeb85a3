"""``pgrag keys``: the API keys `pgrag serve` accepts, each bound to principals and scopes."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from pgrag.cli.options import database, emit_json, json_option, plural
from pgrag.cli.output import echo, write
from pgrag.cli.tables import print_table

if TYPE_CHECKING:
    from pgrag.service.keys import KeyInfo


@click.group()
def keys() -> None:
    """API keys for `pgrag serve`: create, list, revoke. Only their sha256 is stored; run these
    as the owner of schema pgrag (the role that ran `pgrag db upgrade`)."""


def _when(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone().strftime("%Y-%m-%d %H:%M")


def _row(info: KeyInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "name": info.name,
        "principals": info.principals,
        "scopes": info.scopes,
        "created": _when(info.created_at),
        "expires": _when(info.expires_at),
        "last_used": _when(info.last_used_at),
        "revoked": _when(info.revoked_at),
    }


COLUMNS = {
    "id": "ID",
    "name": "NAME",
    "principals": "PRINCIPALS",
    "scopes": "SCOPES",
    "created": "CREATED",
    "expires": "EXPIRES",
    "last_used": "LAST USED",
    "revoked": "REVOKED",
}


@keys.command("create")
@click.option(
    "--principal",
    "principals",
    multiple=True,
    required=True,
    metavar="PRINCIPAL",
    help="Who requests with this key read as (repeatable; public is always included), e.g."
    " --principal alice --principal group:hr.",
)
@click.option("--name", help="A label for listings, e.g. the application using the key.")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(["read", "write"]),
    help="read (search, ask, chat, embeddings; the default) and/or write (upload and delete"
    " documents); repeatable.",
)
@click.option(
    "--expires",
    metavar="WHEN",
    help="When the key stops working: a duration (90d, 12h, 2w) or a date (2027-01-01, UTC)."
    " Default: never.",
)
@json_option
@click.pass_context
def keys_create(
    ctx: click.Context,
    principals: tuple[str, ...],
    name: str | None,
    scopes: tuple[str, ...],
    expires: str | None,
    as_json: bool,
) -> None:
    """Create an API key bound to principals; the key is printed once, on stdout.

    \b
    Example:
      pgrag keys create --principal alice --principal group:hr --name hr-portal
    """
    from pgrag.service.keys import create_key, parse_expiry

    when = parse_expiry(expires)  # a bad expiry is refused before anything connects
    info, key = create_key(
        database(ctx), principals=principals, name=name, scopes=scopes or ("read",), expires=when
    )
    if as_json:
        emit_json({**info.to_dict(), "key": key})
    else:
        write(key)
    echo(
        f"created key {info.id} for {', '.join(info.principals)} ({', '.join(info.scopes)}):"
        " store it now, it will not be shown again",
        err=True,
        layout=False,
    )


@keys.command("list")
@json_option
@click.pass_context
def keys_list(ctx: click.Context, as_json: bool) -> None:
    """Every API key: id, name, principals, scopes, when it was created, expires, was last used
    and revoked (never the key itself)."""
    from pgrag.service.keys import list_keys

    found = list_keys(database(ctx))
    if as_json:
        emit_json([k.to_dict() for k in found])
        return
    print_table([_row(k) for k in found], COLUMNS)
    echo(plural(len(found), "key"), err=True)


@keys.command("revoke")
@click.argument("key_id")
@click.pass_context
def keys_revoke(ctx: click.Context, key_id: str) -> None:
    """Revoke the key KEY_ID (as `pgrag keys list` shows it): the service refuses it from the
    next request on."""
    from pgrag.service.keys import revoke_key

    info = revoke_key(database(ctx), key_id)
    echo(f"revoked key {info.id} ({_when(info.revoked_at)})", err=True, layout=False)
