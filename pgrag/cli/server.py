"""``pgrag server``: the embedded PostgreSQL server."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from pgrag.cli.options import emit_json, json_option, state
from pgrag.cli.output import echo
from pgrag.db.server import EmbeddedServer, default_dir, standby_slot


def _server(ctx: click.Context) -> EmbeddedServer:
    """The embedded server in PGRAG_SERVER_DIR (as the invocation read it), else pgrag's own."""
    return EmbeddedServer(default_dir(state(ctx).settings.server_dir))


@click.group()
def server() -> None:
    """Start, stop or inspect the embedded PostgreSQL server."""


@server.command("start")
@click.pass_context
def server_start(ctx: click.Context) -> None:
    """Start the embedded server (initialising it on first use); print its DSN."""
    echo(_server(ctx).ensure_running())


@server.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop the embedded server."""
    stopped = _server(ctx).stop()
    echo("stopped" if stopped else "not running", err=True)


@server.command("status")
@click.option("--dsn", "dsn_only", is_flag=True, help="Print only the connection string.")
@json_option
@click.pass_context
def server_status(ctx: click.Context, dsn_only: bool, as_json: bool) -> None:
    """Show whether the embedded server runs, where its data is, and how to connect.

    A standby (`pgrag server standby`) says whether it streams from its primary, and its
    log's last complaint when it does not; a primary names its standbys' slots. With --json,
    `replication_problem` is true when that needs acting on."""
    st = _server(ctx).status()
    if dsn_only:
        echo(st.dsn)
        if not st.running:
            echo("warning: the embedded server is not running; `pgrag server start`", err=True)
        return
    if as_json:
        emit_json({**vars(st), "directory": str(st.directory)})
        return
    echo(f"running:   {f'yes (pid {st.pid})' if st.running else 'no'}")
    echo(f"directory: {st.directory}")
    echo(f"dsn:       {st.dsn}")
    if st.replication is not None:
        echo(f"replication: {st.replication}")
    echo(f'psql:      psql "{st.dsn}"')
    echo(f"           (no psql installed? the embedded server ships one: {st.psql})")
    if not st.running:
        sys.exit(3)  # pg_ctl's convention for "not running", so scripts can test it


@server.command("standby")
@click.argument("directory")
@click.option(
    "--forget",
    is_flag=True,
    help="Drop the replication slot of the standby in DIRECTORY, stopped for good.",
)
@click.pass_context
def server_standby(ctx: click.Context, directory: str, forget: bool) -> None:
    """Make a hot standby of the embedded server in DIRECTORY and start it; print its DSN.

    The embedded server (PGRAG_SERVER_DIR's, started if needed) is copied by pg_basebackup
    and streams its changes to the standby from then on, through a replication slot that
    keeps up to 1 GB of WAL for it while it is stopped: point PGRAG_READ_DSN at the DSN
    printed to search there. `PGRAG_SERVER_DIR=DIRECTORY pgrag server stop|start|status`
    manages the standby; once it is stopped for good (and its directory removed),
    `pgrag server standby --forget DIRECTORY` drops its slot. For trying read replicas on one
    machine (docs/scale.md)."""
    if not directory.strip():
        raise click.UsageError("DIRECTORY is empty; name a new directory for the standby")
    primary = _server(ctx)
    target = Path(directory).resolve()
    if target == primary.directory.resolve():
        raise click.UsageError(f"{directory} is the primary's own directory; name a new one")
    primary.ensure_running()
    if forget:
        dropped = primary.forget_standby(target)
        echo(
            f"dropped the replication slot of the standby in {target}"
            if dropped
            else f"no replication slot for a standby in {target}: nothing to forget",
            err=True,
        )
        return
    dsn = EmbeddedServer(target).replicate(primary)
    echo(
        f"the standby streams through slot {standby_slot(target)} on the primary;"
        f" `pgrag server standby --forget {shlex.quote(str(target))}` drops it once the"
        " standby is stopped and its directory removed",
        err=True,
    )
    echo(dsn)
