"""pgrag's schema: installed, moved and checked from code.

The CLI (``pgrag db ...``), the tests and a user's ops pipeline all call these functions, so
they all do the same thing. Where the SQL lives (sql/README.md says it in full):

- ``sql/schema/`` -- the tables, triggers and policies of this release, run on an empty
  database by the first ``upgrade``;
- ``migrations/versions/`` -- Alembic migrations, DDL only, which move a database installed by
  an earlier release to this one (``migrations/history/`` keeps the function files that the
  migrations before 0010 ran);
- ``sql/functions/`` -- every function body, once, in ``CREATE OR REPLACE`` files by area,
  re-applied at the end of every upgrade (a body changes without a migration) and by
  ``pgrag db repair``.

:func:`require_current` is what every other command relies on to refuse to work on a database
whose schema is not this release's: the revision, and the digest of the functions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.db import queries, roundtrip
from pgrag.db.dsn import open_connection
from pgrag.db.resources import migrations_dir, sql_file
from pgrag.errors import InputError, SchemaError, SchemaNotReady
from pgrag.version import __version__

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

Q = queries.load(__name__)

VERSION_TABLE = "alembic_version_pgrag"
MIGRATION_LOCK = 0x70677261  # "pgra"
# From this revision on, the functions come from sql/functions/ (before it, from the history
# files the migrations ran).
FUNCTIONS_SINCE = "0010"
# The files of sql/functions/, in the order they are applied: the functions the table
# definitions call first; a LANGUAGE sql function after the functions and tables it reads.
FUNCTION_FILES = (
    "schema_functions",
    "access",
    "filter",
    "keyword",
    "models",
    "dedup",
    "sync",
    "sections",
    "cache",
    "status",
    "search",
    "grants",
)
MIN_PGVECTOR = (0, 8)
# How long a migration or a repair keeps trying to lock pgrag's tables while searches, ingests
# or workers hold them, before it gives up having changed nothing.
LOCK_WAIT_S = 30.0


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


def functions_digest() -> str:
    """The sha256 of this release's function files, as applied (first 16 hex digits)."""
    h = hashlib.sha256()
    for name in FUNCTION_FILES:
        h.update(sql_file(f"functions/{name}.sql").encode("utf-8"))
    return h.hexdigest()[:16]


# -- the database's state ------------------------------------------------------------------


def _find_version_table(conn: Any) -> str | None:
    row = conn.execute(Q.version_table, {"table": VERSION_TABLE}).fetchone()
    return None if row is None else str(row[0])


def version_table_schema(conn: Any) -> str:
    """Where the version table is, or where Alembic should create it: the connection's
    current schema (the first existing one on its search_path)."""
    found = _find_version_table(conn)
    if found:
        return found
    row = conn.execute(Q.current_schema).fetchone()
    if row is None or row[0] is None:
        raise SchemaError(
            "no schema on this connection's search_path exists to hold pgrag's version table;"
            " set search_path (e.g. ALTER ROLE ... SET search_path = public) and retry"
        )
    return str(row[0])


def revision_of(conn: Any) -> str | None:
    """The revision recorded in ``conn``'s database; None when pgrag was never installed."""
    from psycopg import sql

    schema = _find_version_table(conn)
    if schema is None:
        return None
    row = conn.execute(
        sql.SQL(Q.revision).format(
            schema=sql.Identifier(schema), table=sql.Identifier(VERSION_TABLE)
        )
    ).fetchone()
    return None if row is None else str(row[0])


def installed_release(conn: Any) -> dict[str, str] | None:
    """What the database's functions say of themselves: {"digest", "version"}, or None."""
    exists = conn.execute(Q.release_exists).fetchone()
    if not (exists and exists[0]):
        return None
    row = conn.execute(Q.installed_release).fetchone()
    return None if row is None or row[0] is None else dict(row[0])


def current(dsn: str) -> str | None:
    """The revision the database is at, or None when pgrag's schema was never installed."""
    with open_connection(dsn) as conn:
        return revision_of(conn)


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    head: str
    release: dict[str, str] | None = None  # the installed functions' digest and version

    @property
    def revision_current(self) -> bool:
        return self.current == self.head

    @property
    def functions_current(self) -> bool:
        return self.release is not None and self.release.get("digest") == functions_digest()

    @property
    def functions_newer(self) -> bool:
        """Whether the database's functions are a newer pgrag's (never to be replaced here)."""
        return self.release is not None and _newer(self.release.get("version", "0"), __version__)

    @property
    def up_to_date(self) -> bool:
        return self.revision_current and self.functions_current

    def describe(self) -> str:
        if self.current is None:
            return "pgrag's schema is not installed in this database; run `pgrag db upgrade`"
        if self.current not in _known_revisions():
            return (
                f"schema is at revision {self.current}, which this pgrag ({self.head}) does"
                " not know; upgrade pgrag itself"
            )
        if not self.revision_current:
            return (
                f"schema is at revision {self.current}, code expects {self.head};"
                " run `pgrag db upgrade`"
            )
        if not self.functions_current:
            theirs = (self.release or {}).get("version", "an unknown version")
            if _newer(theirs, __version__):
                return (
                    f"pgrag's SQL functions in this database are from pgrag {theirs}, newer than"
                    f" this pgrag ({__version__}); upgrade pgrag itself"
                )
            return (
                f"pgrag's SQL functions in this database (from pgrag {theirs}) are not this"
                f" release's ({__version__}); run `pgrag db upgrade`"
            )
        return f"schema is at revision {self.current} (head): up to date"


def _newer(a: str, b: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    try:
        return key(a) > key(b)
    except ValueError:  # pragma: no cover - versions are ours
        return False


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def state_of(conn: Any) -> SchemaState:
    revision = revision_of(conn)
    release = (
        installed_release(conn) if revision is not None and revision >= FUNCTIONS_SINCE else None
    )
    return SchemaState(current=revision, head=head(), release=release)


def state(dsn: str) -> SchemaState:
    with open_connection(dsn) as conn:
        return state_of(conn)


def require_current(conn: Any) -> None:
    """Raise SchemaNotReady unless pgrag's schema in ``conn``'s database is this release's."""
    st = state_of(conn)
    if not st.up_to_date:
        raise SchemaNotReady(st.describe())


# -- moving it -------------------------------------------------------------------------------


@contextmanager
def _sqlalchemy(dsn: str) -> Iterator[Connection]:
    # SQLAlchemy gets its connections from psycopg with exactly the DSN pgrag resolved, so
    # there is one place (pgrag.db.dsn) that understands DSNs and libpq variables.
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: open_connection(dsn), poolclass=NullPool
    )
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@contextmanager
def locked(dsn: str) -> Iterator[None]:
    """Hold the migration lock (on a side connection) while the block runs: the second of two
    concurrent upgrades, repairs or downgrades waits for the first."""
    with open_connection(dsn, autocommit=True) as lock:
        lock.execute(Q.lock, {"key": MIGRATION_LOCK})
        yield


def lock_tables(conn: Any, wait: float = LOCK_WAIT_S) -> None:
    """Lock every table of schema pgrag (ACCESS EXCLUSIVE), in the caller's transaction, before
    any DDL runs. A migration that took its locks one statement at a time could deadlock with
    a search that had read one table and wanted the next; this takes them all first. Each try
    gives up within half of deadlock_timeout, so a search waiting behind it is not the one the
    deadlock detector cancels; it tries again until ``wait`` seconds have passed, then raises
    :class:`SchemaError` (and the caller's transaction has changed nothing)."""
    import time

    import psycopg
    from psycopg import sql

    tables = [row[0] for row in conn.execute(Q.pgrag_tables).fetchall()]
    if not tables:
        return
    statement = sql.SQL(Q.lock_tables).format(
        tables=sql.SQL(", ").join(sql.Identifier("pgrag", name) for name in tables)
    )
    (before,) = conn.execute(Q.lock_timeout_now).fetchone()
    deadline, pause = time.monotonic() + wait, 0.05
    while True:
        conn.execute(Q.savepoint)
        try:
            conn.execute(Q.lock_timeout_short)
            conn.execute(statement)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            conn.execute(Q.rollback_savepoint)
            if time.monotonic() + pause > deadline:
                raise SchemaError(
                    f"pgrag's tables stayed in use for {wait:.0f} s (searches, ingests or a"
                    " worker hold them), so nothing was changed; retry when they are idle, or"
                    " stop pgrag's workers and long transactions first"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            continue
        conn.execute(Q.lock_timeout_restore, {"value": before})
        conn.execute(Q.release_savepoint)
        return


@dataclass
class Moved:
    """What :func:`upgrade` or :func:`downgrade` did: the revision before and after (None: not
    installed), what a downgrade removed, and pgrag's notices from the server (a role it could
    not create, say)."""

    before: str | None
    after: str | None
    removed: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


@contextmanager
def _migrating(dsn: str) -> Iterator[tuple[Config, Connection, Any, list[str]]]:
    """Alembic's config and a connection in one transaction, under the migration lock: the
    second of two concurrent upgrades waits, then finds nothing to do. Commits when the block
    ends without an error. The list collects pgrag's notices (:func:`_keep_notice`)."""
    cfg = alembic_config()
    notices: list[str] = []
    with locked(dsn):
        with _sqlalchemy(dsn) as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            raw.add_notice_handler(lambda d: _keep_notice(notices, d.message_primary))
            cfg.attributes["connection"] = conn
            cfg.attributes["version_table_schema"] = version_table_schema(raw)
            yield cfg, conn, raw, notices
            conn.commit()
            # Alembic commits what it ran; anything run on the psycopg connection after it is
            # committed here.
            raw.commit()


def _keep_notice(notices: list[str], message: str | None) -> None:
    # pgrag's own notices (a role it could not create); not the server's "... skipping".
    if message and message.startswith("pgrag: "):
        notices.append(message)


def _alembic(cfg: Config, command: str, revision: str) -> None:
    from alembic import command as alembic_command
    from alembic.util import CommandError

    try:
        getattr(alembic_command, command)(cfg, revision)
    except CommandError as err:
        raise SchemaError(
            f"cannot {command} to {revision!r}: {err}; `pgrag db current` shows where"
            " the database is, and revisions are 'head', 'base' or an id like 0001"
        ) from err


def _check_revision(revision: str, verb: str) -> None:
    if not revision.strip():
        raise InputError(
            f"the revision to {verb} to is empty; give 'head', an id like 0009"
            + (", -1 or 'base'" if verb == "downgrade" else "")
        )
    if verb == "upgrade" and revision == "base":
        raise InputError(
            "cannot upgrade to 'base' (it is the empty database); `pgrag db downgrade base --yes`"
            " removes pgrag's schema"
        )


def upgrade(dsn: str, revision: str = "head") -> Moved:
    """Move the database to ``revision`` (default: this release's head). An empty database is
    installed from sql/schema/ and sql/functions/; one installed by an earlier release goes
    through the migrations; either way the functions are this release's at the end. Before
    anything changes, pgrag's tables are locked (:func:`lock_tables`)."""
    _check_revision(revision, "upgrade")
    with _migrating(dsn) as (cfg, _, raw, notices):
        before = revision_of(raw)
        to_head = revision in ("head", head())
        if to_head and before is None and not _schema_exists(raw):
            _install(raw)
            _alembic(cfg, "stamp", "head")  # env.py's finish() finds nothing left to do
            raw.execute(Q.grant_roles)  # the version table exists now: every role may read it
        else:
            if before is None and _schema_exists(raw):
                raise SchemaError(
                    "schema pgrag exists but pgrag's version table (alembic_version_pgrag) is"
                    " on no schema of this connection's search_path: if pgrag installed it, set"
                    " the search_path to the schema that holds the table; if not, rename or"
                    " drop schema pgrag"
                )
            release = installed_release(raw) if (before or "") >= FUNCTIONS_SINCE else None
            current_functions = release is not None and release.get("digest") == functions_digest()
            if not (to_head and before == head() and current_functions):
                lock_tables(raw)
            _alembic(cfg, "upgrade", revision)
        return Moved(before, revision_of(raw), notices=notices)


def downgrade(dsn: str, revision: str, *, confirm: bool = False) -> Moved:
    """Move the database back to ``revision`` ('base' removes pgrag's schema). What the
    downgrade would remove is listed first (:func:`pgrag.db.roundtrip.plan`); unless
    ``confirm``, anything it would remove with rows in it is an :class:`InputError` naming it
    all, and nothing changes. What an upgrade can restore is kept aside for it. The result's
    ``removed`` describes what was removed."""
    _check_revision(revision, "downgrade")
    with _migrating(dsn) as (cfg, _, raw, notices):
        start = revision_of(raw)
        if start is None:
            return Moved(None, None, notices=notices)  # nothing installed: nothing to remove
        target = _resolve(revision, start)
        if target is not None and target > start:
            raise SchemaError(
                f"cannot downgrade to {target}: the database is at {start}, before it;"
                " `pgrag db upgrade` moves forward"
            )
        if target == start:
            return Moved(start, start, notices=notices)
        losses = roundtrip.plan(raw, start, target)
        lines = [loss.describe() for loss in losses if loss.rows]
        if lines and not confirm:
            raise InputError(
                f"downgrading from {start} to {target or 'base'} would remove: "
                + "; ".join(lines)
                + ". Nothing was changed; run again with --yes (confirm=True) to downgrade"
            )
        lock_tables(raw)
        roundtrip.save(raw, losses, target)
        _alembic(cfg, "downgrade", revision)
        return Moved(start, revision_of(raw), removed=lines, notices=notices)


def _resolve(revision: str, start: str | None) -> str | None:
    """The revision a downgrade to ``revision`` ends at (None: base)."""
    from alembic.script import ScriptDirectory

    if revision == "base":
        return None
    script = ScriptDirectory.from_config(alembic_config())
    try:
        if revision.startswith("-") and start is not None:
            steps = int(revision[1:])
            rev = script.get_revision(start)
            for _ in range(steps):
                if rev is None or rev.down_revision is None:
                    return None
                rev = script.get_revision(str(rev.down_revision))
            return None if rev is None else rev.revision
        found = script.get_revision(revision)
    except Exception as err:  # noqa: BLE001 - alembic raises several kinds for a bad id
        raise SchemaError(
            f"cannot downgrade to {revision!r}: {err}; revisions are 'base', an id like 0001 or -N"
        ) from err
    return None if found is None else found.revision


def _schema_exists(conn: Any) -> bool:
    row = conn.execute(Q.schema_exists).fetchone()
    return bool(row and row[0])


def require_pgvector(conn: Any) -> None:
    row = conn.execute(Q.pgvector).fetchone()
    if row is None:
        raise SchemaError(
            "this PostgreSQL server does not have the pgvector extension installed;"
            " install pgvector >= 0.8 on the server (or use the pgvector/pgvector Docker image)"
            " and run `pgrag db upgrade` again"
        )
    default_version, installed_version = row
    version = installed_version or default_version
    if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < MIN_PGVECTOR:
        raise SchemaError(
            f"pgvector {version} is too old: pgrag needs pgvector >= 0.8 (iterative index scans);"
            " upgrade pgvector on the server, then run `ALTER EXTENSION vector UPDATE`"
            " and `pgrag db upgrade`"
        )


def _use_vector(conn: Any) -> None:
    conn.execute(Q.vector_on_search_path)
    conn.execute(Q.load_vector)


def _install(conn: Any) -> None:
    """:func:`install`, with what to do when the role may not create what it needs."""
    import psycopg

    user, database = conn.execute(Q.who).fetchone()
    try:
        install(conn)
    except psycopg.errors.InsufficientPrivilege as err:
        reason = err.diag.message_primary or "permission denied"
        if "extension" in reason:
            todo = f"a superuser runs CREATE EXTENSION vector in database {database}, then retry"
        else:
            todo = (
                f"run `pgrag db upgrade` as the database's owner, or have an administrator run"
                f" GRANT CREATE ON DATABASE {database} TO {user}"
            )
        raise SchemaError(
            f"role {user} may not install pgrag in database {database} ({reason}): {todo}"
        ) from err


def install(conn: Any) -> None:
    """Install this release's schema on a database that has none, in the caller's
    transaction: pgvector, schema pgrag, tables, roles, functions, triggers, policies."""
    require_pgvector(conn)
    conn.execute(Q.create_vector)
    _use_vector(conn)
    conn.execute(Q.create_schema)
    conn.execute(Q.comment_schema)
    conn.execute(sql_file("functions/schema_functions.sql"))
    conn.execute(sql_file("schema/tables.sql"))
    conn.execute(Q.create_roles)
    apply_functions(conn)
    conn.execute(sql_file("schema/triggers.sql"))
    conn.execute(sql_file("schema/policies.sql"))


def apply_functions(conn: Any) -> None:
    """Create or replace every function of sql/functions/, record their digest and this
    version in pgrag.release(), and grant pgrag's roles what they need."""
    from psycopg import sql

    _use_vector(conn)
    for name in FUNCTION_FILES:
        conn.execute(sql_file(f"functions/{name}.sql"))
    release = json.dumps({"digest": functions_digest(), "version": __version__})
    body = sql.Literal(f"SELECT {sql_quote(release)}::jsonb")
    conn.execute(sql.SQL(Q.define_release).format(body=body))
    conn.execute(Q.grant_roles)


def sql_quote(text: str) -> str:
    """``text`` as an SQL string literal (for a function body composed as a literal)."""
    return "'" + text.replace("'", "''") + "'"


def finish(conn: Any, before: str | None, after: str | None) -> None:
    """What every Alembic run ends with (migrations/env.py calls it): from revision 0010 on,
    this release's functions, unless they are there already; after an upgrade, what a
    downgrade kept aside is put back, and chunks that lost their queue entries are queued."""
    if after is None or after < FUNCTIONS_SINCE:
        return
    release = installed_release(conn)
    if release is not None and _newer(release.get("version", "0"), __version__):
        raise SchemaError(
            f"pgrag's SQL functions in this database are from pgrag {release['version']},"
            f" newer than this pgrag ({__version__}); upgrade pgrag itself, or downgrade with it"
        )
    if release is None or release.get("digest") != functions_digest():
        apply_functions(conn)
    if before is None or before < after:
        roundtrip.restore(conn)
        if before is None or before < roundtrip.QUEUE_REVISION:
            roundtrip.requeue(conn)
