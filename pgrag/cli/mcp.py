"""``pgrag mcp``: pgrag's tools for an agent over MCP's stdio transport (docs/serve.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from pgrag.cli.options import state
from pgrag.db.principals import check_principals

if TYPE_CHECKING:
    from pgrag.service.runtime import Service

API_KEY = "PGRAG_API_KEY"


@click.command("mcp")
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="PRINCIPAL",
    help="Read as this principal (repeatable; public is always included). Without it: as the"
    f" API key in ${API_KEY}, else as the database role reads.",
)
@click.option(
    "--pool-size",
    default=4,
    show_default=True,
    type=click.IntRange(min=1, max=100),
    help="Database connections the server may hold (tool calls beyond wait).",
)
@click.pass_context
def mcp(ctx: click.Context, principals: tuple[str, ...], pool_size: int) -> None:
    """Serve search, answers and whole documents to an agent over MCP (stdio).

    An MCP client (Claude Desktop, an IDE, an agent framework) starts this command and speaks
    MCP over its stdin and stdout; logs and errors go to stderr. The tools are search, ask,
    fetch_document and list_collections. Every call reads as one caller: the --principal
    names, else the API key in $PGRAG_API_KEY (verified as `pgrag serve` does: its
    principals and scopes), else whatever the database role may read. The same tools are
    served over HTTP at /mcp by `pgrag serve`.
    """
    from pgrag.service.auth import Caller

    st = state(ctx)
    key = st.settings.secret(API_KEY)
    if principals and key:
        raise click.UsageError(
            f"--principal and ${API_KEY} both say who reads: give one (unset {API_KEY}, or"
            " drop --principal)"
        )
    names = check_principals(principals) if principals else None
    with _stdout_to_stderr():  # nothing the set-up prints may reach the protocol's stdout
        svc = _service(ctx, pool_size)
        if key:
            caller = svc.authenticate(f"Bearer {key}")
            caller.require("read")
        else:
            caller = Caller("local", names, "local", frozenset({"read"}))
    import anyio

    from pgrag.service.mcp import run_stdio

    anyio.run(lambda: run_stdio(svc, caller, key=key or None))


def _service(ctx: click.Context, pool_size: int) -> Service:
    from pgrag.service.config import ServiceConfig
    from pgrag.service.metrics import Metrics
    from pgrag.service.runtime import Service

    st = state(ctx)
    config = ServiceConfig(
        settings=st.settings,
        dsn=st.dsn,
        pool_min=1,
        pool_max=pool_size,
        warm_model=False,  # loads in the background once the client is connected
        shared=False,  # one user's tool on their own role: no warning about a superuser role
    )
    svc = Service(config, Metrics())
    svc.open()
    ctx.call_on_close(svc.close)
    return svc


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr for the block (a library that prints, the embedded
    server starting), so that stdout carries only the MCP messages that follow."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
    except (AttributeError, OSError, ValueError):  # no real stdout (tests): nothing to guard
        yield
        return
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
