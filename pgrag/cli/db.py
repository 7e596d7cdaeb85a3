"""``pgrag db``: upgrade, downgrade, inspect, check and repair the schema."""

from __future__ import annotations

import click

from pgrag.cli.options import dsn as _dsn
from pgrag.cli.options import emit_json, fail, json_option
from pgrag.cli.output import echo
from pgrag.db import drift, repair
from pgrag.db import schema as migrate


@click.group()
def db() -> None:
    """Upgrade, downgrade, check or repair the schema (sql/README.md says what lives where)."""


# ignore_unknown_options: a mistaken "-1" is an argument to refuse in words, not an option.
@db.command("upgrade", context_settings={"ignore_unknown_options": True})
@click.argument("revision", default="head")
@click.pass_context
def db_upgrade(ctx: click.Context, revision: str) -> None:
    """Upgrade the schema to REVISION (default: head). An empty database is installed fresh;
    the functions are re-applied whenever they are not this release's."""
    dsn = _dsn(ctx)
    moved = migrate.upgrade(dsn, revision)
    _notices(moved.notices)
    if moved.before != moved.after:
        echo(f"upgraded pgrag's schema: {moved.before or '(none)'} -> {moved.after}", err=True)
    echo(migrate.state(dsn).describe())


def _notices(notices: list[str]) -> None:
    for notice in notices:
        echo(f"notice: {notice}", err=True)


# ignore_unknown_options: Alembic's relative revisions ("-1") are arguments, not options.
@db.command("downgrade", context_settings={"ignore_unknown_options": True})
@click.argument("revision")
@click.option(
    "--yes",
    is_flag=True,
    help="Downgrade although it removes rows (listed without this flag, and nothing changes).",
)
@click.pass_context
def db_downgrade(ctx: click.Context, revision: str, yes: bool) -> None:
    """Downgrade the schema to REVISION: an id, -1 for one step, or 'base' (removes pgrag's
    schema and all its data). What it would remove is listed first and needs --yes; what the
    next upgrade can restore (role mappings, model links, thresholds...) is kept for it."""
    moved = migrate.downgrade(_dsn(ctx), revision, confirm=yes)
    _notices(moved.notices)
    for line in moved.removed:
        echo(f"removed {line}", err=True)
    if moved.before is None:
        echo("pgrag's schema is not installed here: nothing to downgrade")
    elif moved.before == moved.after:
        echo(f"pgrag's schema is at {moved.after} already: nothing to downgrade")
    elif moved.after is None:
        echo(f"removed pgrag's schema and its data (was at {moved.before})")
    else:
        echo(f"downgraded pgrag's schema: {moved.before} -> {moved.after}")


@db.command("partition")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Vectors copied per transaction.",
)
@click.pass_context
def db_partition(ctx: click.Context, batch: int) -> None:
    """Copy the vectors into the partitioned table of this release ahead of `pgrag db
    upgrade`, online: in batches while searches and writes go on, resuming where it stopped;
    then build each model's index on every partition without blocking writes. The upgrade
    then switches over in a moment (docs/scale.md#partitions). Run it as the schema's owner."""
    from pgrag.db import partition

    done = partition.run(
        _dsn(ctx), batch=batch, on_progress=lambda line: echo(line, err=True, layout=False)
    )
    if done.already:
        echo("pgrag.chunk_embeddings is partitioned already: nothing to do")
    else:
        echo(
            f"copied {done.copied:,} vectors in batches and built {len(done.indexes)} model"
            f" index{'es' * (len(done.indexes) != 1)}: run `pgrag db upgrade` to switch over"
        )


@db.command("current")
@click.pass_context
def db_current(ctx: click.Context) -> None:
    """Print the schema revision of the database (empty when not installed)."""
    echo(migrate.current(_dsn(ctx)) or "")


@db.command("check")
@json_option
@click.pass_context
def db_check(ctx: click.Context, as_json: bool) -> None:
    """Exit 0 when the database is what this release installs, 1 naming each difference:
    revision, functions, tables, columns, constraints, indexes, triggers, row-level security
    and policies, privileges, model indexes, ownership, chunks nothing would embed."""
    dsn = _dsn(ctx)
    found = drift.check_database(dsn)
    if as_json:
        emit_json([vars(d) for d in found])
    else:
        for d in found:
            echo(d.describe())
    if found:
        repairable = sum(d.repairable for d in found)
        fail(
            f"{len(found)} difference{'s' * (len(found) != 1)} from this release"
            + (f"; `pgrag db repair` restores {repairable}" if repairable else "")
        )
    if not as_json:
        echo(migrate.state(dsn).describe() + "; nothing differs from this release")


@db.command("repair")
@click.option(
    "--force",
    is_flag=True,
    help="Repair although pgrag.release() says a newer release's functions are installed"
    " (when you know no newer release ran here).",
)
@click.pass_context
def db_repair(ctx: click.Context, force: bool) -> None:
    """Restore what `pgrag db check` finds, in one transaction: functions, policies and
    row-level security, triggers, indexes, constraints and privileges as this release installs
    them; drop what pgrag did not create in its schema; queue chunks without vectors."""
    done, left = repair.repair_database(
        _dsn(ctx), force=force, on_wait=lambda line: echo(line, err=True, layout=False)
    )
    if not done and not left:
        echo("nothing differs from this release: nothing to repair")
        return
    for line in done:
        echo(line)
    for d in left:
        echo(d.describe())
    if left:
        fail(f"{len(left)} difference{'s' * (len(left) != 1)} could not be repaired (listed)")
    echo("repaired: nothing differs from this release")
