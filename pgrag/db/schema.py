"""pgrag's schema, moved only by Alembic migrations driven from code.

The CLI (`pgrag db ...`), the tests and a user's ops pipeline all call these functions, so they
all run the same migrations. ``check`` is what every other command relies on to refuse to work
on a database whose schema does not match the code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.db.resources import migrations_dir
from pgrag.errors import SchemaError

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

VERSION_TABLE = "alembic_version_pgrag"
# Serialises concurrent `pgrag db upgrade` runs (say, several app replicas migrating at start):
# the second waits, then finds the schema at head and does nothing.
MIGRATION_LOCK = 0x70677261  # "pgra"


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head() -> str:
    from alembic.script import ScriptDirectory

    rev = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert rev is not None
    return rev


@contextmanager
def _sqlalchemy(dsn: str) -> Iterator[Connection]:
    # SQLAlchemy gets its connections from psycopg with exactly the DSN pgrag resolved, so
    # there is one place (pgrag.db) that understands DSNs and libpq environment variables.
    import psycopg
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool
    )
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _run(dsn: str, command: str, revision: str) -> None:
    import psycopg
    from alembic import command as alembic_command
    from alembic.util import CommandError

    cfg = alembic_config()
    # A session-level advisory lock on a side connection, held while Alembic works.
    with psycopg.connect(dsn, autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(%(key)s)", {"key": MIGRATION_LOCK})
        with _sqlalchemy(dsn) as conn:
            cfg.attributes["connection"] = conn
            cfg.attributes["version_table_schema"] = version_table_schema(
                conn.connection.driver_connection
            )
            try:
                getattr(alembic_command, command)(cfg, revision)
            except CommandError as err:
                raise SchemaError(
                    f"cannot {command} to {revision!r}: {err}; `pgrag db current` shows where"
                    " the database is, and revisions are 'head', 'base' or an id like 0001"
                ) from err
            conn.commit()


def upgrade(dsn: str, revision: str = "head") -> None:
    _run(dsn, "upgrade", revision)


def downgrade(dsn: str, revision: str) -> None:
    _run(dsn, "downgrade", revision)


def _find_version_table(conn: Any) -> str | None:
    """The schema holding pgrag's version table, wherever a previous upgrade created it."""
    row = conn.execute(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relname = %(t)s AND c.relkind IN ('r', 'p')"
        " ORDER BY n.nspname = current_schema() DESC, n.nspname LIMIT 1",
        {"t": VERSION_TABLE},
    ).fetchone()
    return None if row is None else str(row[0])


def version_table_schema(conn: Any) -> str:
    """Where the version table is, or where Alembic should create it: the connection's
    current schema (the first existing one on its search_path)."""
    found = _find_version_table(conn)
    if found:
        return found
    row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise SchemaError(
            "no schema on this connection's search_path exists to hold pgrag's version table;"
            " set search_path (e.g. ALTER ROLE ... SET search_path = public) and retry"
        )
    return str(row[0])


def _revision(conn: Any) -> str | None:
    from psycopg import sql

    schema = _find_version_table(conn)
    if schema is None:
        return None
    row = conn.execute(
        sql.SQL("SELECT version_num FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(VERSION_TABLE)
        )
    ).fetchone()
    return None if row is None else str(row[0])


def current(dsn: str) -> str | None:
    """The revision the database is at, or None when pgrag's schema was never installed."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        return _revision(conn)


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head

    def describe(self) -> str:
        if self.current is None:
            return "pgrag's schema is not installed in this database; run `pgrag db upgrade`"
        if self.up_to_date:
            return f"schema is at revision {self.current} (head): up to date"
        known = _known_revisions()
        if self.current not in known:
            return (
                f"schema is at revision {self.current}, which this pgrag ({self.head}) does"
                " not know; upgrade pgrag itself"
            )
        return (
            f"schema is at revision {self.current}, code expects {self.head};"
            " run `pgrag db upgrade`"
        )


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def state(dsn: str) -> SchemaState:
    return SchemaState(current=current(dsn), head=head())


def require_current(conn: Any) -> None:
    """Raise SchemaError unless pgrag's schema in ``conn``'s database is at head."""
    st = SchemaState(current=_revision(conn), head=head())
    if not st.up_to_date:
        raise SchemaError(st.describe())
