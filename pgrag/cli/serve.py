"""``pgrag serve``: the HTTP service (docs/serve.md)."""

from __future__ import annotations

import click

from pgrag.cli.options import state
from pgrag.db.principals import check_principals


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--no-auth",
    is_flag=True,
    help="Serve requests without credentials (loopback addresses only): as --principal, or"
    " as the database role reads when none is given. Requests with a key still use the key's.",
)
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="PRINCIPAL",
    help="With --no-auth: read as this principal (repeatable; public is always included).",
)
@click.option(
    "--pool-size",
    default=10,
    show_default=True,
    type=click.IntRange(min=1, max=1000),
    help="Database connections the service may hold (requests beyond wait, then get 503).",
)
@click.option(
    "--drain",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Seconds SIGTERM waits for in-flight requests before closing them.",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Let browser apps on this origin call the API (repeatable), e.g. https://app.example.com.",
)
@click.option(
    "--max-upload-mb",
    default=100.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="The largest document upload (POST /v1/documents, all its files together) in MB;"
    " a larger one is refused with 413.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    no_auth: bool,
    principals: tuple[str, ...],
    pool_size: int,
    drain: float,
    cors_origins: tuple[str, ...],
    log_level: str,
    max_upload_mb: float = 100.0,
) -> None:
    """Serve search, answers, embeddings, uploads, MCP and a web page over HTTP.

    The model loads once and connections are pooled; each request runs under its caller's
    principals (an API key from `pgrag keys create`, or a JWT), so PostgreSQL decides what
    each caller sees. http://HOST:PORT/ is the web page, /openapi.json the API.
    """
    from pgrag.service.app import serve as run
    from pgrag.service.config import ServiceConfig

    if principals and not no_auth:
        raise click.UsageError("--principal applies to --no-auth requests; add --no-auth")
    st = state(ctx)
    config = ServiceConfig(
        settings=st.settings,
        dsn=st.dsn,
        host=host,
        port=port,
        no_auth=no_auth,
        local_principals=check_principals(principals) if principals else None,
        pool_min=min(2, pool_size),
        pool_max=pool_size,
        drain_seconds=drain,
        cors_origins=cors_origins,
        max_upload_bytes=max(1, int(max_upload_mb * 1024 * 1024)),
    )
    config.check()
    click.echo(f"pgrag serve: http://{host}:{port}/ (Ctrl-C stops)", err=True)
    run(config, log_level=log_level)
