"""``pgrag db``: upgrade, downgrade, inspect and check the schema."""

from __future__ import annotations

import click

from pgrag.cli.options import dsn as _dsn
from pgrag.cli.options import fail as _fail


@click.group()
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
