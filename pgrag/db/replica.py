"""Reads from a read replica: ``PGRAG_READ_DSN`` names a standby (streaming replication, a
managed service's read replica) that searches, ask's retrieval and listings read from, while
everything that writes (ingest, the query log, the query-vector cache, conversations,
settings) stays on the primary, the database :func:`pgrag.connect` opened.

Several replicas: one connection string with several hosts (libpq's form),
``postgresql://replica1,replica2/pgrag?target_session_attrs=standby&load_balance_hosts=random``.
pgrag splits it into one replica per host (:class:`ReplicaSet`), each failed over and checked
for lag on its own, and reads from the first that can answer: in the order given, or in a
random order for each read with ``load_balance_hosts=random``. (Left to libpq, one connection
string has one state: a host too far behind is caught only while a connection lands on it, and
a good host is passed over with it.)

- **Failing over.** A replica that cannot be reached, or whose connection breaks, is left
  alone for :data:`RETRY_SECONDS`; reads go to the primary meanwhile, with one warning (logger
  ``pgrag``) when it goes down and one when it is back. A read that a replica cancels because
  of a conflict with recovery is read again on the primary.
- **Too far behind.** A replica that has not replayed what the primary had written
  ``PGRAG_READ_MAX_LAG_SECONDS`` (60) ago is failed over as one that is down, with a warning:
  a standby that lost its primary (stopped streaming, or cannot find the WAL it needs) would
  otherwise answer with older data for ever. Every quarter of that time at most, a read takes
  the primary's WAL position and the replica's replay position; a replica that is still short
  of a position the primary held that long ago is too far behind. 0 turns it off.
- **Read-your-writes**, when asked (``pgrag.connect(read_your_writes=True)`` or
  ``PGRAG_READ_YOUR_WRITES=on``): before each read, the primary's current WAL position is
  taken, and the replica is waited for until it has replayed it, at most
  ``PGRAG_READ_WAIT_SECONDS`` (2); a replica still behind then is passed over for that read
  (the primary answers it) with a warning.
- **Access** is the primary's: row-level security, principals and grants are in the
  replicated catalog, and each read sets its principals in its own read-only transaction,
  as on the primary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar

from pgrag.db import queries
from pgrag.errors import CollectionNotFound, ConfigError, DatabaseError, PgragError

if TYPE_CHECKING:
    import psycopg

    from pgrag.config import Settings
    from pgrag.db.connect import Database

Q = queries.load(__name__)
log = logging.getLogger("pgrag")

RETRY_SECONDS = 30.0  # how long a replica that failed is left alone
DEFAULT_MAX_LAG_SECONDS = 60.0
CONNECT_SECONDS = 3  # libpq's connect_timeout for a replica (the primary answers otherwise)
DEFAULT_WAIT_SECONDS = 2.0
# SQLSTATE 40001 with a standby's "conflict with recovery": the replica cancelled the read.
_RECOVERY_CONFLICT = "40001"
# SQLSTATE 42704: a collection (or model) the replica does not know, perhaps not replayed yet.
_UNDEFINED_OBJECT = "42704"

T = TypeVar("T")


class ReplicaDown(PgragError):
    """The replica cannot serve a read now (why is in the message)."""


class Replica:
    """A read replica: one connection, opened when first needed, reopened after a failure
    once :data:`RETRY_SECONDS` have passed. One read at a time (its connection is locked
    for it); a :class:`pgrag.Database` that owns it is one thread's."""

    def __init__(
        self,
        dsn: str,
        user: tuple[str, str] | None = None,
        max_lag: float = DEFAULT_MAX_LAG_SECONDS,
    ) -> None:
        self.dsn = dsn
        # The primary session's (login role, role it acts as): the replica's must be the same.
        self.user = user
        self.max_lag = max_lag  # seconds (0: no bound)
        self._conn: psycopg.Connection[Any] | None = None
        self._down_until = 0.0
        self._down_why: str | None = None
        self._said_not_standby = False
        self._lock = threading.Lock()
        # The lag check's state: when it may look next, and a primary WAL position with the
        # time it was taken, which the replica had not replayed then.
        self._lag_lock = threading.Lock()
        self._lag_next = 0.0
        self._lag_pending: tuple[float, str] | None = None
        self._lag_down = False  # down for being too far behind (until it has caught up)
        self._lag_looked = False  # whether this process has looked yet
        self.fallback = "the primary"  # where reads go while it is down (said in warnings)
        # Reads it answered, and reads meant for it that went elsewhere (down, behind, a
        # cancelled read): what pgrag serve's /metrics reports.
        self.served = 0
        self.passed_over = 0
        self._count_lock = threading.Lock()

    @property
    def label(self) -> str:
        """The replica's host and port, for metrics (never its password)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(self.dsn)
        except Exception:  # (checked at connect; a label must not fail a scrape)
            return "?"
        host = str(params.get("host") or params.get("hostaddr") or "")
        return f"{host}:{params.get('port') or ''}"

    @property
    def up(self) -> bool:
        """Whether reads go to it now: not failed (or answering again since), not behind."""
        return self._down_why is None and not self._lag_down

    def count(self, served: bool) -> None:
        with self._count_lock:
            if served:
                self.served += 1
            else:
                self.passed_over += 1

    def check_lag(
        self, conn: psycopg.Connection[Any], primary_position: Callable[[], str]
    ) -> str | None:
        """Raise :class:`ReplicaDown` (marking the replica down) when it has not replayed a
        WAL position the primary held at least ``max_lag`` seconds ago; look at most every
        ``max_lag / 4`` seconds (a query on each server). The first look of a process, which
        has no earlier mark to go by (a CLI command is one read), returns the primary's
        position when the replica is short of it: the caller waits for the replica to reach
        it, as read-your-writes does, else reads from the primary."""
        if not self.max_lag:
            return None
        now = time.monotonic()
        with self._lag_lock:
            if now < self._lag_next:
                return None
            self._lag_next = now + self.max_lag / 4
            pending, first = self._lag_pending, not self._lag_looked
            self._lag_looked = True
        try:
            position = primary_position()
        except PgragError:
            return None  # (the primary cannot say: the replica is what answers now)
        row = conn.execute(
            Q.replayed_positions, {"a": pending[1] if pending else position, "b": position}
        ).fetchone()
        conn.rollback()
        assert row is not None
        replayed_pending, replayed_now = row
        with self._lag_lock:
            if replayed_now or replayed_pending:
                if self._lag_down:
                    self._lag_down = False
                    self.answering()
            if replayed_now:
                self._lag_pending = None  # (caught up with the primary)
            elif pending is None or replayed_pending:
                self._lag_pending = (now, position)  # behind, but moving: a new mark
                if first:
                    return position
            elif now - pending[0] >= self.max_lag:
                # The mark stays: tried again, the replica is passed over at once until it has
                # replayed it.
                self._lag_next = 0.0
                self._lag_down = True
                raise self.failed(
                    ReplicaDown(
                        "it has not replayed what the primary had written at least"
                        f" {now - pending[0]:.0f} s ago (PGRAG_READ_MAX_LAG_SECONDS="
                        f"{self.max_lag:g}): a standby that stopped streaming from its primary,"
                        " or one far behind"
                    )
                )
        return None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if time.monotonic() < self._down_until:
                raise ReplicaDown(self._down_why or "the replica is down")
            if self._conn is None or self._conn.closed:
                self._conn = self._open()
            yield self._conn

    def _open(self) -> psycopg.Connection[Any]:
        import psycopg

        from pgrag.db.connect import prepare_session

        try:
            conn = psycopg.connect(
                self.dsn, application_name="pgrag", connect_timeout=CONNECT_SECONDS
            )
        except psycopg.Error as err:
            raise self.failed(err) from err
        try:
            self.check(conn)
            prepare_session(conn)
        except Exception as err:
            conn.close()
            raise self.failed(err) from err
        self.answering()
        return conn

    def check(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a replica connection that would read as another role than the primary's
        (it would see what that role may), or whose database has no pgrag schema; say once
        that a server not in recovery is not a standby."""
        row = conn.execute(Q.describe).fetchone()
        conn.rollback()
        assert row is not None
        standby, login, acting, schema = row
        if not schema:
            raise ReplicaDown(
                "its database has no pgrag schema: PGRAG_READ_DSN must name a replica of"
                " PGRAG_DSN's database"
            )
        if self.user is not None and (login, acting) != self.user:
            raise ReplicaDown(
                f"it connects as role {_who(login, acting)} and the primary as"
                f" {_who(*self.user)}: a read there would see what another role may; use the"
                " same role in PGRAG_READ_DSN"
            )
        if not standby and not self._said_not_standby:
            self._said_not_standby = True
            log.warning(
                "PGRAG_READ_DSN (%s) names a server that is not a standby (not in recovery);"
                " reading from it all the same",
                _where(self.dsn),
            )

    def answering(self) -> None:
        # (a replica down for being behind answers again once the lag check says it caught up)
        if self._down_why is not None and not self._lag_down:
            log.warning("the read replica answers again: reading from it (%s)", _where(self.dsn))
            self._down_why = None

    def failed(self, err: BaseException) -> ReplicaDown:
        """Mark the replica down for :data:`RETRY_SECONDS` (warning once), closing its
        connection; the :class:`ReplicaDown` to raise."""
        why = " ".join(str(err).split())[:300] or type(err).__name__
        if self._down_why is None:
            log.warning(
                "the read replica (%s) failed: %s; reading from %s, trying the"
                " replica again in %g s",
                _where(self.dsn),
                why,
                self.fallback,
                RETRY_SECONDS,
            )
        self._down_why = why
        self._down_until = time.monotonic() + RETRY_SECONDS
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        return ReplicaDown(why)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class PooledReplica(Replica):
    """A replica read through a connection pool (``pgrag serve``): one connection per
    request, the pool's; failing over as :class:`Replica` does. Before the pool is used,
    and again after the replica failed, one connection of its own tries it (and checks it as
    :meth:`Replica.check` does): a replica that is down is then passed over at once, without
    the pool waiting for it or retrying it in the background."""

    def __init__(
        self,
        dsn: str,
        pool: Any,
        user: tuple[str, str] | None = None,
        max_lag: float = DEFAULT_MAX_LAG_SECONDS,
    ) -> None:
        super().__init__(dsn, user, max_lag)
        self.pool = pool
        self._tried = False

    def _try(self) -> None:
        import psycopg

        try:
            with psycopg.connect(
                self.dsn, application_name="pgrag", connect_timeout=CONNECT_SECONDS
            ) as conn:
                self.check(conn)
        except (psycopg.Error, ReplicaDown) as err:
            raise self.failed(err) from err
        self._tried = True

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if time.monotonic() < self._down_until:
            raise ReplicaDown(self._down_why or "the replica is down")
        if not self._tried or self._down_why is not None:
            with self._lock:
                if not self._tried or self._down_why is not None:
                    self._try()
        try:
            checkout: AbstractContextManager[Any] = self.pool.connection()
            conn = checkout.__enter__()
        except Exception as err:  # (a pool timeout: the replica does not answer)
            raise self.failed(err) from err
        self.answering()
        try:
            yield conn
        except BaseException as err:
            checkout.__exit__(type(err), err, err.__traceback__)
            raise
        else:
            checkout.__exit__(None, None, None)

    def close(self) -> None:
        self.pool.close(timeout=5.0)


def _who(login: str, acting: str) -> str:
    return repr(login) if acting == login else f"{login!r} (acting as {acting!r})"


def session_roles(conn: psycopg.Connection[Any]) -> tuple[str, str]:
    """(login role, role it acts as) of a primary connection, for :class:`Replica`."""
    row = conn.execute(Q.roles).fetchone()
    conn.rollback()
    assert row is not None
    return str(row[0]), str(row[1])


def _where(dsn: str) -> str:
    from pgrag.db.dsn import describe_dsn

    return describe_dsn(dsn)


def _seconds(raw: object, variable: str, default: float, most: float, hint: str) -> float:
    """A setting in seconds from 0 to ``most`` (unset: ``default``), else a ConfigError."""
    if raw is None or not str(raw).strip():
        return default
    from decimal import Decimal, InvalidOperation

    try:
        value = float(str(raw))
        if value == 0 and Decimal(str(raw).strip()) != 0:
            value = -1.0  # (1e-400: not 0, which would turn the setting off, and not above it)
    except (ValueError, InvalidOperation):
        value = -1.0
    if not 0 <= value <= most:
        raise ConfigError(
            f"{variable}={raw!r} is not a number of seconds from 0 to {most:g}; set it to {hint}"
        )
    return value


def max_lag_seconds(settings: Settings) -> float:
    """PGRAG_READ_MAX_LAG_SECONDS (a :class:`~pgrag.ConfigError` when it is not 0 to 86400)."""
    return _seconds(
        settings.read_max_lag_seconds,
        "PGRAG_READ_MAX_LAG_SECONDS",
        DEFAULT_MAX_LAG_SECONDS,
        86400,
        "e.g. 60 (0: read from the replica however far behind it is)",
    )


def wait_seconds(settings: Settings) -> float:
    return _seconds(
        settings.read_wait_seconds, "PGRAG_READ_WAIT_SECONDS", DEFAULT_WAIT_SECONDS, 600, "e.g. 2"
    )


class ReplicaSet:
    """Several replicas, one per host of a multi-host PGRAG_READ_DSN: a read tries them in
    turn (:meth:`in_order`), each failing over and checked for lag as one :class:`Replica`."""

    def __init__(self, members: list[Replica], shuffle: bool = False) -> None:
        self.members = members
        self.shuffle = shuffle  # (load_balance_hosts=random: a random order for each read)
        for member in members:
            member.fallback = "the other replicas or the primary"

    def in_order(self) -> list[Replica]:
        if not self.shuffle:
            return list(self.members)
        import random

        return random.sample(self.members, len(self.members))

    def close(self) -> None:
        for member in self.members:
            member.close()


def split_hosts(dsn: str) -> list[str]:
    """One connection string per host of ``dsn`` (libpq's multi-host form: comma-separated
    ``host``/``hostaddr``, with one ``port`` for all or one each); ``[dsn]`` for one host.
    ``load_balance_hosts`` goes (each string has one host); the rest, such as
    ``target_session_attrs``, stays with each."""
    import os

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    balance = params.get("load_balance_hosts")
    if balance is not None and balance not in ("disable", "random"):
        raise ConfigError(  # (its value not repeated: a string built wrong may hold a secret)
            "PGRAG_READ_DSN's load_balance_hosts is neither random nor disable; set it to one"
        )
    # (libpq's variables stand in for what the string leaves out: split them too)
    for key, variable in (("host", "PGHOST"), ("hostaddr", "PGHOSTADDR"), ("port", "PGPORT")):
        if not params.get(key) and "," in os.environ.get(variable, ""):
            params[key] = os.environ[variable]
    hosts = str(params.get("host") or "").split(",") if params.get("host") else []
    addresses = str(params.get("hostaddr") or "").split(",") if params.get("hostaddr") else []
    count = len(hosts) or len(addresses)  # (libpq: hostaddr pairs with host when both are)
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports *= max(count, 1)
    for name, values in (("hostaddr", addresses), ("port", ports)):
        if values and len(values) != max(count, 1):
            raise ConfigError(
                f"PGRAG_READ_DSN names {max(count, 1)} host(s) and {len(values)} {name} values;"
                f" give one {name} for each host"
                + (" (or one port for all)" if name == "port" else "")
            )
    if count <= 1:
        return [dsn]
    one_each = []
    for i in range(count):
        each = {k: v for k, v in params.items() if k != "load_balance_hosts"}
        for name, values in (("host", hosts), ("hostaddr", addresses), ("port", ports)):
            each.pop(name, None)
            if values and values[i]:
                each[name] = values[i]
        one_each.append(make_conninfo(**each))  # type: ignore[arg-type]
    return one_each


def balanced(dsn: str) -> bool:
    """Whether ``dsn`` asks for its hosts in a random order (``load_balance_hosts=random``,
    else libpq's ``PGLOADBALANCEHOSTS``)."""
    import os

    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(dsn).get("load_balance_hosts")
    return (given or os.environ.get("PGLOADBALANCEHOSTS", "")) == "random"


def read(db: Database, work: Callable[[psycopg.Connection[Any]], T]) -> T:
    """``work(conn)`` in a read-only transaction on the replica when there is one that can
    answer (see the module docstring), else in a transaction on the primary, as
    :func:`pgrag.db.connect.transaction` runs it: a database error is a one-line
    :class:`~pgrag.DatabaseError`. ``work`` must only read: it may run twice (on the
    replica, then on the primary)."""
    import psycopg

    from pgrag.db.connect import connection_lost, describe_error, transaction

    replicas = db.replica
    members = (
        []
        if replicas is None
        else replicas.in_order()
        if isinstance(replicas, ReplicaSet)
        else [replicas]
    )
    target = _primary_position(db) if members and db.read_your_writes else None
    # One wait per read, however many replicas it tries (each waited in turn, it was one per
    # replica: 2 s each with every replica behind).
    wait = wait_seconds(db.settings) if members else 0.0
    deadline = time.monotonic() + wait
    for replica in members:
        try:
            with replica.connection() as conn:
                try:
                    if target is not None and not _caught_up(
                        conn, target, (deadline, wait), replica
                    ):
                        raise ReplicaDown("behind the primary")
                    if target is None:
                        first = replica.check_lag(
                            conn, lambda: _primary_position(db, Q.primary_flushed)
                        )
                        if first is not None and not _caught_up(
                            conn, first, (deadline, wait), replica
                        ):
                            raise ReplicaDown("behind the primary")
                    with conn.transaction():
                        conn.execute(Q.read_only)
                        result = work(conn)
                    replica.count(served=True)
                    return result
                except psycopg.Error as err:
                    if connection_lost(err):
                        raise replica.failed(err) from err
                    if getattr(err, "sqlstate", None) == _UNDEFINED_OBJECT:
                        raise CollectionNotFound("") from err  # (see below)
                    if getattr(err, "sqlstate", None) != _RECOVERY_CONFLICT:
                        raise DatabaseError(describe_error(err)) from err
                    log.warning(
                        "the read replica cancelled a read (%s); reading from the primary",
                        describe_error(err),
                    )
                    replica.count(served=False)
                    break
        except ReplicaDown:
            replica.count(served=False)
            continue  # (the next replica, else the primary)
        except CollectionNotFound:
            replica.count(served=False)
            break  # (one the replica has not replayed yet? the primary says whether it exists)
    with transaction(db) as conn:
        return work(conn)


def _primary_position(db: Database, query: LiteralString = Q.primary_position) -> str:
    from pgrag.db.connect import transaction

    with transaction(db) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return record_end(str(row[0]), int(row[1]))


XLOG_PAGE = 8192  # PostgreSQL's WAL page size (XLOG_BLCKSZ)
SHORT_PAGE_HEADER, LONG_PAGE_HEADER = 24, 40  # a WAL page's header; the long one opens a segment


def record_end(position: str, segment_size: int) -> str:
    """The end of the primary's last WAL record, from its insert position: when the last record
    ended on a page boundary, the insert position points past the next page's header, where
    no record ends, so a standby that has replayed everything reports the boundary (and
    read-your-writes would wait for a position it never reaches)."""
    high, low = position.split("/")
    lsn = (int(high, 16) << 32) | int(low, 16)
    offset = lsn % XLOG_PAGE
    if offset == SHORT_PAGE_HEADER and lsn % segment_size != SHORT_PAGE_HEADER:
        lsn -= SHORT_PAGE_HEADER
    elif offset == LONG_PAGE_HEADER and lsn % segment_size == LONG_PAGE_HEADER:
        lsn -= LONG_PAGE_HEADER
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _caught_up(
    conn: psycopg.Connection[Any], target: str, until: tuple[float, float], replica: Replica
) -> bool:
    """Whether the replica has replayed the primary's WAL up to ``target``, waiting for it
    until the read's deadline (``until``: it, and the PGRAG_READ_WAIT_SECONDS it is from); a
    replica still behind is passed over, with a warning."""
    deadline, wait = until
    pause = 0.005
    while True:
        row = conn.execute(Q.replayed, {"target": target}).fetchone()
        conn.rollback()
        if row is None or row[0]:
            return True
        if time.monotonic() >= deadline:
            log.warning(
                "the read replica (%s) had not replayed the primary's last writes within the"
                " read's PGRAG_READ_WAIT_SECONDS (%g s); this read goes to %s",
                _where(replica.dsn),
                wait,
                replica.fallback,
            )
            return False
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.1)


def check_dsn(settings: Settings) -> str | None:
    """PGRAG_READ_DSN, refused now (a :class:`~pgrag.ConfigError`) when it is not a
    connection string at all, rather than failed over at every read."""
    dsn = settings.read_dsn
    if dsn is None or not dsn.strip():
        return None
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
        split_hosts(dsn)  # (a ConfigError when its hosts and ports do not pair up)
    except ProgrammingError as err:
        # (libpq goes on to quote what it could not read, which may be the password: only
        # what it says before that is repeated)
        why = " ".join(str(err).split()).split('"')[0].rstrip(" :") or "libpq cannot read it"
        raise ConfigError(
            f"PGRAG_READ_DSN is not a connection string ({why}); set it"
            " to e.g. postgresql://user@replica/pgrag"
        ) from err
    return dsn


def open_replica(
    settings: Settings, primary: psycopg.Connection[Any]
) -> Replica | ReplicaSet | None:
    """The replica PGRAG_READ_DSN names, or one for each host it names (opened when first read
    from; each must read as the ``primary`` connection's roles), None without one."""
    dsn = check_dsn(settings)
    if dsn is None:
        return None
    user, max_lag = session_roles(primary), max_lag_seconds(settings)
    each = split_hosts(dsn)
    if len(each) == 1:
        return Replica(dsn, user, max_lag)
    return ReplicaSet([Replica(one, user, max_lag) for one in each], balanced(dsn))
