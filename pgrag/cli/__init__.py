"""The ``pgrag`` command: a thin skin over the library.

Results go to stdout (``--json`` for machines); progress, warnings and errors to stderr, so
``pgrag search ... --json | jq`` works. Every :class:`PgragError` becomes one line,
``error: ...``, and exit status 1 (:class:`pgrag.cli.options.Group`). The environment is read
once, here, into the :class:`pgrag.config.Settings` every command is given.

One module per command family: server, db, ingest (ingest, rm), collections (collections,
status), search, ask (ask, trace), acl, keys, models (models, worker), evaluate (eval,
score), serve, mcp, tune; the options they share are in :mod:`pgrag.cli.options`. docs/cli.md is
every command's ``--help`` (``python -m pgrag.cli.reference > docs/cli.md``).
"""

from __future__ import annotations

import click

from pgrag import config
from pgrag.cli import (
    acl,
    ask,
    collections,
    db,
    evaluate,
    ingest,
    keys,
    mcp,
    models,
    queries,
    search,
    serve,
    server,
    tune,
)
from pgrag.cli.options import Group, State, fail, silence_stdout
from pgrag.cli.output import OutputError, output_error

__all__ = ["cli", "main"]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    help="PostgreSQL connection string (env: PGRAG_DSN). Default: libpq's PG* variables if"
    " set, else the embedded server.",
)
@click.version_option(package_name="pgrag")
@click.pass_context
def cli(ctx: click.Context, dsn: str | None) -> None:
    """pgrag: answers from your documents, with sources, on PostgreSQL.

    \b
    Quick start:
      pgrag db upgrade                 create/upgrade the schema
      pgrag ingest docs/               chunk, embed and index files
      pgrag search "refund window"     hybrid search
      pgrag ask "How long do refunds take?"
    """
    # --dsn, else PGRAG_DSN (in the settings), else PG* variables, else the embedded server.
    ctx.obj = State(dsn=dsn, settings=config.from_env())


for _command in (
    acl.acl,
    ask.ask,
    ask.trace,
    collections.collections,
    collections.status,
    db.db,
    evaluate.eval_group,
    evaluate.score,
    ingest.ingest,
    ingest.rm,
    keys.keys,
    mcp.mcp,
    models.models,
    models.worker,
    queries.queries,
    search.search,
    serve.serve,
    server.server,
    tune.tune,
):
    cli.add_command(_command)


def main() -> None:
    try:
        cli(prog_name="pgrag")
    except OSError as err:  # click's own writes (--help, --version); a command's are in Group
        problem = output_error(err)
        if not isinstance(problem, OutputError):  # a broken pipe: click ends quietly itself
            raise
        silence_stdout()
        fail(str(problem))
