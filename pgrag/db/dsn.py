"""Where the database is, and opening a connection to it.

In order: an explicit DSN (``--dsn``) or ``PGRAG_DSN``; else libpq's own ``PG*`` environment
variables; else the embedded server, started on demand. This is the one place that knows;
migrations and SQLAlchemy take the DSN resolved here, and every connection pgrag opens goes
through :func:`open_connection`, so a failure is one line that says what to check.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pgrag import config
from pgrag.config import Settings
from pgrag.db.server import EmbeddedServer, default_dir
from pgrag.errors import PgragError

if TYPE_CHECKING:
    import psycopg

# libpq reads these itself when the connection string leaves them out.
LIBPQ_ENV = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def resolve_dsn(dsn: str | None = None, settings: Settings | None = None) -> str:
    """The connection string to use; starts the embedded server when nothing else is set."""
    if dsn:
        return dsn
    settings = settings or config.from_env()
    if settings.dsn:
        return settings.dsn
    if any(os.environ.get(name) for name in LIBPQ_ENV):
        return ""  # an empty conninfo: libpq takes everything from PG* variables
    return EmbeddedServer(default_dir(settings.server_dir)).ensure_running()


def describe_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    if not dsn:
        return "the server named by the PG* environment variables"
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        for key in params:
            if "password" in key:  # (password, sslpassword)
                params[key] = "***"
        return make_conninfo(**params)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - only used for display
        return "the configured database"


def _source_of(dsn: str) -> str:
    """What the user should change when connecting fails: the DSN or the PG* variables."""
    if dsn:
        return "check --dsn / PGRAG_DSN, or unset it to use the embedded server"
    names = " ".join(name for name in LIBPQ_ENV if os.environ.get(name))
    return f"check {names}, or unset them to use the embedded server"


def open_connection(dsn: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=autocommit, application_name="pgrag")
    except psycopg.ProgrammingError as err:  # the string itself does not parse
        reason = " ".join(str(err).split())
        raise PgragError(
            f"the connection string is not valid ({reason}); {_source_of(dsn)}"
        ) from err
    except psycopg.OperationalError as err:
        reason = " ".join(str(err).split())
        raise PgragError(
            f"cannot connect to PostgreSQL ({describe_dsn(dsn)}): {reason}; {_source_of(dsn)}"
        ) from err
