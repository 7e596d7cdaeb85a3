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
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag.db import queries, roundtrip
from pgrag.db.dsn import open_connection
from pgrag.db.resources import migrations_dir, sql_file
from pgrag.errors import InputError, SchemaError, SchemaNotReady, command_line
from pgrag.version import __version__

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

Q = queries.load(__name__)
log = logging.getLogger("pgrag")

VERSION_TABLE = "alembic_version_pgrag"
NO_VERSION_TABLE = (
    "schema pgrag exists, but no version table of its owner (alembic_version_pgrag) says which"
    " revision it is at: if pgrag installed it, that table was dropped or given to another"
    " role (the owner of schema pgrag should own it, in a schema no other role owns); if pgrag"
    " did not, rename or drop schema pgrag"
)
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
    "partitions",
    "dedup",
    "sync",
    "sections",
    "cache",
    "status",
    "query_log",
    "keys",
    "conversations",
    "search",
    "grants",
)
MIN_PGVECTOR = (0, 8)
# The oldest PostgreSQL pgrag runs on, as server_version_num counts (docs/postgres-versions.md
# lists what each version gave the schema and which versions scripts/test-matrix runs).
MIN_SERVER = 130000
RELEASE_KEYS = ("digest", "version")
# What a pgrag.release() that does not return {"digest", "version"} counts as.
UNREADABLE_RELEASE = {"digest": "unreadable", "version": "0"}
# How long a migration or a repair keeps trying to lock pgrag's tables while searches, ingests
# or workers hold them, before it gives up having changed nothing.
LOCK_WAIT_S = 30.0
# How long one waits for another's migration lock (a concurrent upgrade may take minutes).
MIGRATION_LOCK_WAIT_S = 300.0


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
    name, owner, safe = row
    if not safe:
        raise SchemaError(
            f"the first schema on this connection's search_path, {name}, belongs to role"
            f" {owner}, who could drop pgrag's version table there; set the search_path to a"
            " schema this role owns, or public (ALTER ROLE ... SET search_path = public), and"
            " retry"
        )
    return str(name)


def revision_of(conn: Any) -> str | None:
    """The revision recorded in ``conn``'s database; None when pgrag was never installed."""
    import psycopg
    from psycopg import sql

    schema = None
    try:
        schema = _find_version_table(conn)
        if schema is None:
            return None
        row = conn.execute(
            sql.SQL(Q.revision).format(
                schema=sql.Identifier(schema), table=sql.Identifier(VERSION_TABLE)
            )
        ).fetchone()
    except psycopg.errors.InsufficientPrivilege as err:
        user = conn.info.user
        where = f"{schema}.{VERSION_TABLE}" if schema else VERSION_TABLE
        raise SchemaError(
            f"role {user} may not read pgrag's version table {where} ({err.diag.message_primary}),"
            " which every pgrag command checks: grant it pgrag_reader, pgrag_app or"
            " pgrag_writer (or USAGE on schema pgrag and on the table's schema, and SELECT on"
            " the table)"
        ) from err
    return None if row is None else str(row[0])


def installed_release(conn: Any) -> dict[str, str] | None:
    """What the database's functions say of themselves: {"digest", "version"}, or None."""
    exists = conn.execute(Q.release_exists).fetchone()
    if not (exists and exists[0]):
        return None
    import psycopg

    try:
        with conn.transaction():  # (a savepoint: a release() that fails must not end the caller's)
            row = conn.execute(Q.installed_release).fetchone()
    except psycopg.Error:
        return dict(UNREADABLE_RELEASE)
    value = None if row is None else row[0]
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(value.get(k), str) for k in RELEASE_KEYS):
        return dict(UNREADABLE_RELEASE)  # replaced by hand: no release's functions
    return {k: value[k] for k in RELEASE_KEYS}


def current(dsn: str) -> str | None:
    """The revision the database is at, or None when pgrag's schema was never installed."""
    with open_connection(dsn) as conn:
        return revision_of(conn)


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    head: str
    release: dict[str, str] | None = None  # the installed functions' digest and version
    orphan_schema: bool = False  # schema pgrag exists without a version table to trust
    version_tables: tuple[str, ...] = ()  # then, the tables of that name there are

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
        if self.current is None and self.orphan_schema:
            found = ", ".join(self.version_tables)
            return NO_VERSION_TABLE + (f" (tables of that name here: {found})" if found else "")
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
    orphan = revision is None and _schema_exists(conn)
    tables: tuple[str, ...] = ()
    if orphan:
        rows = conn.execute(Q.version_tables_anywhere, {"table": VERSION_TABLE}).fetchall()
        tables = tuple(str(r[0]) for r in rows)
    return SchemaState(
        current=revision, head=head(), release=release, orphan_schema=orphan, version_tables=tables
    )


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
def locked(dsn: str, wait: float = MIGRATION_LOCK_WAIT_S) -> Iterator[None]:
    """Hold the migration lock (on a side connection) while the block runs: the second of two
    concurrent upgrades, repairs or downgrades waits for the first, saying (as a warning on
    the "pgrag" logger) who holds it; after ``wait`` seconds it gives up with a SchemaError
    that names the holder."""
    with open_connection(dsn, autocommit=True) as lock:
        started = time.monotonic()
        tell = started + 5.0
        while True:
            row = lock.execute(Q.try_lock, {"key": MIGRATION_LOCK}).fetchone()
            if row is not None and row[0]:
                break
            now = time.monotonic()
            holder = lock.execute(Q.lock_holder, {"key": MIGRATION_LOCK}).fetchone()
            who = (
                f"session {holder[0]} (role {holder[1]}, application {holder[2]}, {holder[3]})"
                if holder
                else "another session"
            )
            if now - started > wait:
                raise SchemaError(
                    f"pgrag's migration lock stayed held by {who} for {wait:.0f} s: an upgrade,"
                    " downgrade or repair runs there. Nothing was changed; retry when it ends, or"
                    " if that session is not pgrag's, end it (SELECT pg_terminate_backend("
                    + (f"{holder[0]}))" if holder else "pid))")
                )
            if now > tell:
                log.warning("waiting for pgrag's migration lock, held by %s", who)
                tell = now + 30.0
            time.sleep(0.25)
        yield


def _version_table_name(conn: Any) -> str | None:
    found = _find_version_table(conn)
    return None if found is None else '"' + found.replace('"', '""') + f'".{VERSION_TABLE}'


def _session(pid: int, role: str, application: str, state: str, kind: str | None) -> str:
    """A session as a person can find it (kind is NULL for other roles' client sessions)."""
    what = f"role {role}" if kind in (None, "client backend") else kind
    return f"session {pid} ({what}, application {application}, {state})"


def lock_tables(conn: Any, wait: float = LOCK_WAIT_S) -> None:
    """Lock every table of schema pgrag, and pgrag's version table (ACCESS EXCLUSIVE), in the
    caller's transaction, before any DDL runs. A migration that took its locks one statement at
    a time could deadlock with a search that had read one table and wanted the next; this takes
    them all first. Each try gives up on a table within half of deadlock_timeout while it holds
    others, so a search waiting behind it is not the one the deadlock detector cancels; the
    next try starts with the table that stopped it, waiting longer there while it holds nothing
    (so its own deadlock check cancels an autovacuum in the way). After ``wait`` seconds it
    raises :class:`SchemaError` naming who holds the tables (and the caller's transaction has
    changed nothing). Later lock waits in the transaction end after ``wait`` seconds too."""
    import psycopg
    from psycopg import sql

    tables = [sql.Identifier(*row) for row in conn.execute(Q.pgrag_tables).fetchall()]
    version_schema = _find_version_table(conn)
    if version_schema is not None:
        tables.append(sql.Identifier(version_schema, VERSION_TABLE))
    if not tables:
        return
    (before_ms,) = conn.execute(Q.lock_timeout_ms).fetchone()
    wait_ms = int(wait * 1000)
    # For the rest of the migration, a lock it still needs (one no search takes, such as a
    # row another session holds) is waited for ``wait`` at most, not forever.
    rest_ms = wait_ms if before_ms == 0 or before_ms > wait_ms else before_ms
    deadline, pause, first = time.monotonic() + wait, 0.05, 0
    while True:
        order = list(range(first, len(tables))) + list(range(first))
        conn.execute(Q.savepoint)
        at = 0
        try:
            for at, table in enumerate(tables[i] for i in order):
                if at == 0 and first:
                    # The table that stopped the last try, holding no other: no deadlock can
                    # involve this wait, and the deadlock check this session runs after
                    # deadlock_timeout cancels an autovacuum in the way.
                    left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                    conn.execute(Q.lock_timeout_set, {"ms": max(10, min(left_ms, 5000))})
                elif at <= 1:
                    conn.execute(Q.lock_timeout_short)
                conn.execute(sql.SQL(Q.lock_table).format(table=table))
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            conn.execute(Q.rollback_savepoint)
            first = order[at]
            if time.monotonic() + pause > deadline:
                rows = conn.execute(
                    Q.table_lock_holders, {"version_table": _version_table_name(conn)}
                ).fetchall()
                holders = [_session(*row) for row in rows]
                raise SchemaError(
                    f"pgrag's tables stayed in use for {wait:.0f} s"
                    f" ({'; '.join(holders) or 'by sessions that have gone since'}),"
                    " so nothing was changed; retry when they are idle, or stop pgrag's workers"
                    " and long transactions first"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            continue
        conn.execute(Q.release_savepoint)
        conn.execute(Q.lock_timeout_set, {"ms": rest_ms})
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
def _migrating(dsn: str, command: str) -> Iterator[tuple[Config, Connection, Any, list[str]]]:
    """Alembic's config and a connection in one transaction, under the migration lock: the
    second of two concurrent upgrades waits, then finds nothing to do. Commits when the block
    ends without an error; the server's errors that a person can act on become SchemaErrors
    saying what to do. The list collects pgrag's notices (:func:`_keep_notice`)."""
    cfg = alembic_config()
    notices: list[str] = []
    with locked(dsn):
        with _sqlalchemy(dsn) as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            raw.add_notice_handler(lambda d: _keep_notice(notices, d.message_primary))
            who = running(raw)
            try:
                cfg.attributes["connection"] = conn
                cfg.attributes["version_table_schema"] = version_table_schema(raw)
                yield cfg, conn, raw, notices
                conn.commit()
                # Alembic commits what it ran; anything run on the psycopg connection after it
                # is committed here.
                raw.commit()
            except Exception as err:
                explained = explain(err, command, who)
                if explained is None:
                    raise
                raise explained from err


def running(conn: Any) -> tuple[str, str, str | None]:
    """The running role, the database and the owner of schema pgrag (None: not installed)."""
    user, database, owner = conn.execute(Q.who_runs).fetchone()
    return str(user), str(database), owner


def explain(
    err: BaseException, command: str, who: tuple[str, str, str | None]
) -> SchemaError | None:
    """What the person running ``pgrag db COMMAND`` does about a server error, as a SchemaError
    (None: nothing better to say than the error itself). ``who``: the running role, the
    database and the owner of schema pgrag."""
    import psycopg

    orig = getattr(err, "orig", None) or err  # SQLAlchemy wraps psycopg's errors
    if not isinstance(orig, psycopg.Error) or orig.diag.message_primary is None:
        return None
    user, database, owner = who
    reason = orig.diag.message_primary
    if isinstance(orig, psycopg.errors.LockNotAvailable):
        return SchemaError(
            f"`pgrag db {command}` waited {LOCK_WAIT_S:.0f} s for a lock another session holds"
            f" ({reason}); nothing was changed: retry when that session ends"
        )
    if isinstance(orig, psycopg.errors.InsufficientPrivilege):
        as_whom = f"the owner of schema pgrag ({owner})" if owner else "the database's owner"
        return SchemaError(
            f"role {user} may not do what `pgrag db {command}` needs in database {database}"
            f" ({reason}); nothing was changed: run it as {as_whom}"
        )
    if isinstance(orig, psycopg.errors.ObjectNotInPrerequisiteState) and orig.diag.message_hint:
        # A migration that stops for something to be done first (0015: `pgrag db partition`).
        return SchemaError(
            f"`pgrag db {command}` stopped: {reason}; nothing was changed. {orig.diag.message_hint}"
        )
    if isinstance(orig, psycopg.errors.DependentObjectsStillExist):
        detail = orig.diag.message_detail or ""
        return SchemaError(
            f"`pgrag db {command}` would remove what objects of yours use ({reason}:"
            f" {' '.join(detail.split())}); nothing was changed: drop or change them first"
        )
    return None


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
    """Refuse, in one line, a revision that names nothing an upgrade (or downgrade) can reach."""
    known = sorted(_known_revisions())
    forms = f"'head' or an id from {known[0]} to {known[-1]}"
    if verb == "downgrade":
        forms = f"an id from {known[0]} to {known[-1]}, -N (N steps back) or 'base'"
    if not revision.strip():
        raise InputError(f"the revision to {verb} to is empty; give {forms}")
    if verb == "upgrade" and revision == "base":
        raise InputError(
            "cannot upgrade to 'base' (it is the empty database); `pgrag db downgrade base --yes`"
            " removes pgrag's schema"
        )
    relative = verb == "downgrade" and revision.startswith("-") and revision[1:].isdigit()
    if revision in known or relative or revision == ("head" if verb == "upgrade" else "base"):
        return
    raise InputError(f"cannot {verb} to {revision!r}: not a revision pgrag knows; give {forms}")


def upgrade(dsn: str, revision: str = "head") -> Moved:
    """Move the database to ``revision`` (default: this release's head). An empty database is
    installed from sql/schema/ and sql/functions/; one installed by an earlier release goes
    through the migrations; either way the functions are this release's at the end. Before
    anything changes, pgrag's tables are locked (:func:`lock_tables`)."""
    _check_revision(revision, "upgrade")
    with _migrating(dsn, "upgrade") as (cfg, _, raw, notices):
        require_server(raw)  # before anything changes
        before = revision_of(raw)
        to_head = revision in ("head", head())
        if to_head and before is None and not _schema_exists(raw):
            _install(raw)
            _alembic(cfg, "stamp", "head")  # env.py's finish() finds nothing left to do
            raw.execute(Q.grant_roles)  # the version table exists now: every role may read it
        else:
            if before is None and _schema_exists(raw):
                raise SchemaError(state_of(raw).describe())
            if before is not None and not to_head and revision < before:
                raise SchemaError(
                    f"cannot upgrade to {revision}: the database is at {before}, after it;"
                    f" {command_line('pgrag', 'db', 'downgrade', revision)} moves back"
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
    with _migrating(dsn, "downgrade") as (cfg, _, raw, notices):
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
            for taken in range(steps):
                if rev is None or rev.down_revision is None:
                    if taken + 1 == steps:
                        return None  # exactly back to base
                    raise InputError(
                        f"cannot downgrade {steps} steps: the database is at {start}, {taken + 1}"
                        f" after base; give -{taken + 1} or 'base' to remove pgrag's schema"
                    )
                rev = script.get_revision(str(rev.down_revision))
            return None if rev is None else rev.revision
        found = script.get_revision(revision)
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - alembic raises several kinds for a bad id
        raise SchemaError(
            f"cannot downgrade to {revision!r}: {err}; revisions are 'base', an id like 0001 or -N"
        ) from err
    return None if found is None else found.revision


def _schema_exists(conn: Any) -> bool:
    row = conn.execute(Q.schema_exists).fetchone()
    return bool(row and row[0])


def require_server(conn: Any) -> None:
    """A SchemaError naming the version found and the one needed, for a server pgrag does not
    run on (PostgreSQL older than 13, or pgvector older than 0.8)."""
    number, name = conn.execute(Q.server).fetchone()
    if number < MIN_SERVER:
        raise SchemaError(
            f"PostgreSQL {name} is too old: pgrag needs PostgreSQL {MIN_SERVER // 10000}"
            " or later (with pgvector >= 0.8). Nothing was changed; upgrade the server"
            " (docs/postgres-versions.md), then run `pgrag db upgrade` again"
        )
    require_pgvector(conn)


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
            f"pgvector {version} is too old: pgrag needs pgvector >= 0.8 (its iterative index"
            " scans keep a filtered search's k results). Nothing was changed; install pgvector"
            " 0.8 or later on the server, run `ALTER EXTENSION vector UPDATE` where it is"
            " installed already, then `pgrag db upgrade` again"
        )


def use_vector(conn: Any) -> None:
    """pgvector's types on the search_path, and its library loaded, for this transaction."""
    conn.execute(Q.vector_on_search_path)
    conn.execute(Q.load_vector)


def _install(conn: Any) -> None:
    """:func:`install`, with what to do when the role may not create what it needs."""
    import psycopg

    user, database, _ = running(conn)
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
    use_vector(conn)
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
    use_vector(conn)
    for name in FUNCTION_FILES:
        apply_function_file(conn, name)
    record_release(conn)


def apply_function_file(conn: Any, name: str) -> None:
    """Create or replace the functions of sql/functions/NAME.sql (after :func:`use_vector`)."""
    conn.execute(sql_file(f"functions/{name}.sql"))


def record_release(conn: Any) -> None:
    """pgrag.release() saying this release's digest and version; pgrag's roles granted."""
    from psycopg import sql

    release = json.dumps({"digest": functions_digest(), "version": __version__})
    body = sql.Literal(f"SELECT {sql_quote(release)}::jsonb")
    conn.execute(sql.SQL(Q.define_release).format(body=body))
    conn.execute(Q.grant_roles)


def hand_back(conn: Any) -> None:
    """Give what the running role owns in schema pgrag to the schema's owner, when the running
    role is not that owner but may act as it (a superuser's upgrade or downgrade creates its
    objects as itself): pgrag's objects have one owner, whoever ran the migration."""
    from psycopg import sql

    for kind, name, owner in conn.execute(Q.runner_owns).fetchall():
        # kind is one of runner_owns's keywords; name is the catalog's own quoted rendering
        # (regprocedure, regclass), so it goes in as it is.
        conn.execute(
            sql.SQL(Q.set_owner).format(
                kind=sql.SQL(kind), object=sql.SQL(name), owner=sql.Identifier(owner)
            )
        )


def sql_quote(text: str) -> str:
    """``text`` as an SQL string literal (for a function body composed as a literal)."""
    return "'" + text.replace("'", "''") + "'"


def finish(conn: Any, before: str | None, after: str | None) -> None:
    """What every Alembic run ends with (migrations/env.py calls it): from revision 0010 on,
    this release's functions (after any migration ran, or unless they are there already);
    after an upgrade, what a downgrade kept aside is put back, and chunks that lost their
    queue entries are queued. Whatever a superuser's run created in schema pgrag is given to
    the schema's owner first."""
    if after is not None:
        hand_back(conn)
    if after is None or after < FUNCTIONS_SINCE or after != head():
        return
    release = installed_release(conn)
    if release is not None and _newer(release.get("version", "0"), __version__):
        raise SchemaError(
            f"pgrag's SQL functions in this database are from pgrag {release['version']},"
            f" newer than this pgrag ({__version__}); upgrade pgrag itself, or downgrade with it"
        )
    # An upgrade that ran migrations applies them too: a downgrade may have dropped functions
    # (0013's drops pgrag.api_key_v1) while pgrag.release() still names this release.
    moved = before is None or before < after
    if moved or release is None or release.get("digest") != functions_digest():
        apply_functions(conn)
    if moved:
        roundtrip.restore(conn)
        if before is None or before < roundtrip.QUEUE_REVISION:
            roundtrip.requeue(conn)
