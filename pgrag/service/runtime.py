"""The service's long-lived parts: the connection pool, the embedder loaded once, who is
calling, and blocking library calls run off the event loop and stopped when the client goes.

Every request borrows a pooled connection, wraps it as a :class:`pgrag.Database` reading as the
caller's principals (the library sets them per transaction, ``pgrag.db.principals.apply``,
so a connection never carries one caller's principals into the next request) and hands it
back when the request ends.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from pgrag.db import queries
from pgrag.db.connect import Database, prepare_session
from pgrag.db.dsn import resolve_dsn
from pgrag.db.schema import require_current
from pgrag.errors import PgragError
from pgrag.service.auth import Authenticator, Caller
from pgrag.service.errors import Unavailable

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from pgrag.service.config import ServiceConfig
    from pgrag.service.metrics import Metrics

T = TypeVar("T")
log = logging.getLogger("pgrag.service")
Q = queries.load(__name__)


class Cancelled(PgragError):
    """The client went away; the work it asked for was stopped."""


class Work:
    """One request's blocking work: the connection it holds (so a disconnect can cancel the
    statement running on it) and whether it should stop."""

    def __init__(self) -> None:
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self.stopped = threading.Event()

    def hold(self, conn: psycopg.Connection[Any] | None) -> None:
        with self._lock:
            self._conn = conn
        if conn is not None and self.stopped.is_set():
            conn.cancel_safe(timeout=2.0)

    def stop(self) -> None:
        """Stop the work: the statement it runs now is cancelled in PostgreSQL, and
        :meth:`check` raises from here on."""
        self.stopped.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            try:
                conn.cancel_safe(timeout=2.0)
            except Exception:  # noqa: S110 - the connection may be closing; nothing to cancel
                pass

    def check(self) -> None:
        if self.stopped.is_set():
            raise Cancelled("the client disconnected; the request was stopped")


class Service:
    def __init__(self, config: ServiceConfig, metrics: Metrics) -> None:
        self.config = config
        self.settings = config.settings
        self.metrics = metrics
        self.dsn = resolve_dsn(config.dsn, config.settings)
        self.authenticator = Authenticator(
            config.settings, no_auth=config.no_auth, local_principals=config.local_principals
        )
        self.pool: ConnectionPool[Any] | None = None
        self.replica: Any = None  # a PooledReplica (a ReplicaSet of them) with PGRAG_READ_DSN
        self.embedder: Any = None
        self.warnings: list[str] = []  # about the database role, said at start (open)

    # -- life -----------------------------------------------------------------------------

    def open(self) -> None:
        """Check the schema, open the pool and (unless told not to) load the model."""
        from psycopg_pool import ConnectionPool

        from pgrag.db.dsn import open_connection

        with open_connection(self.dsn) as conn:
            require_current(conn)  # a service on a wrong schema refuses to start
        self.pool = ConnectionPool(
            self.dsn,
            min_size=self.config.pool_min,
            max_size=self.config.pool_max,
            timeout=self.config.pool_timeout,
            configure=_configure,
            check=_check,
            reset=_returned,
            name="pgrag",
            open=False,
        )
        self.pool.open(wait=True, timeout=30.0)
        if self.settings.read_dsn:
            # Reads (search, ask's retrieval, listings) from a replica, through a pool of its
            # own that may start empty: a replica down at start is failed over, not fatal.
            from pgrag.db.replica import (
                CONNECT_SECONDS,
                RETRY_SECONDS,
                PooledReplica,
                ReplicaSet,
                balanced,
                check_dsn,
                max_lag_seconds,
                session_roles,
                split_hosts,
                wait_seconds,
            )

            check_dsn(self.settings)
            wait_seconds(self.settings)
            max_lag = max_lag_seconds(self.settings)
            _ = self.settings.reads_your_writes  # (a bad value is said at start)
            with self.pool.connection() as conn:
                user = session_roles(conn)  # (the replica must read as the same role)
            replicas: list[PooledReplica] = []
            for dsn in split_hosts(self.settings.read_dsn):  # (one pool per host)
                reads: ConnectionPool[Any] = ConnectionPool(
                    dsn,
                    min_size=0,
                    max_size=self.config.pool_max,
                    timeout=float(CONNECT_SECONDS),
                    configure=_configure,
                    check=_check,
                    reset=_returned,
                    name="pgrag-read",
                    kwargs={"connect_timeout": CONNECT_SECONDS},
                    reconnect_timeout=RETRY_SECONDS,  # (then PooledReplica tries it itself)
                    open=False,
                )
                reads.open(wait=False)
                replicas.append(PooledReplica(dsn, reads, user, max_lag))
            self.replica = (
                replicas[0]
                if len(replicas) == 1
                else ReplicaSet(list(replicas), balanced(self.settings.read_dsn))
            )
        self.warnings = self._role_warnings() if self.config.shared else []
        for warning in self.warnings:
            log.warning("%s", warning)
        if self.config.warm_model:
            from pgrag.embeddings.local import default_embedder

            self.embedder = default_embedder(self.settings.embedding_model)
            self.embedder.embed(["warm up"])

    def _role_warnings(self) -> list[str]:
        """Why the service's database role is wrong for a shared deployment, if it is."""
        with self.connection() as conn:
            row = conn.execute(Q.role_power).fetchone()
            conn.rollback()
        if row is None:
            return []
        role, superuser, owner = row
        if superuser or owner:
            what = "a superuser" if superuser else "the owner of schema pgrag"
            return [
                f"pgrag serve connects as {role}, {what}: the database still applies each"
                " caller's principals to searches and listings, but not row-level security"
                " to this role's own reads; fine on your own machine, not for a shared"
                " service: run it as a member of pgrag_app (docs/serve.md, the service's"
                " database role)"
            ]
        return []

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close(timeout=5.0)
            self.pool = None
        if self.replica is not None:
            self.replica.close()
            self.replica = None

    # -- per request ----------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (503 when none frees up within the pool timeout)."""
        from psycopg_pool import PoolTimeout

        if self.pool is None:
            raise Unavailable("the service is not running (its pool is closed)")
        try:
            with self.pool.connection() as conn:
                yield conn
        except PoolTimeout as err:
            down = self._unreachable()
            if down is not None:
                raise Unavailable(f"the database does not answer: {down}") from err
            raise Unavailable(
                f"no database connection freed up within {self.config.pool_timeout:g} s:"
                " the service is overloaded; retry, or raise --pool-size"
            ) from err

    def _unreachable(self) -> str | None:
        """Why a fresh connection to the database fails now (None: it does not), to tell a
        database that is down from a pool that is busy."""
        from pgrag.db.dsn import open_connection

        try:
            with open_connection(self.dsn) as conn:
                conn.execute(Q.ping)
        except Exception as err:  # whatever it is, it is the answer
            return " ".join(str(err).split())[:300] or type(err).__name__
        return None

    @contextmanager
    def database(self, caller: Caller, work: Work | None = None) -> Iterator[Database]:
        """A pooled connection as a :class:`pgrag.Database` reading as ``caller``."""
        with self.connection() as conn:
            if work is not None:
                work.hold(conn)
            try:
                yield Database(
                    conn=conn,
                    dsn=self.dsn,
                    given_embedder=None,
                    principals=caller.principals,
                    settings=self.settings,
                    replica=self.replica,
                    read_your_writes=self.settings.reads_your_writes,
                )
            finally:
                if work is not None:
                    work.hold(None)

    def authenticate(self, authorization: str | None) -> Caller:
        return self.authenticator.authenticate(authorization, self._auth_connection)

    def _auth_connection(self) -> AbstractContextManager[Any]:
        return self.connection()

    def ready(self) -> dict[str, str]:
        """What /readyz reports: the database reachable and its schema this release's."""
        from pgrag.db.dsn import open_connection

        checks: dict[str, str] = {}
        try:
            # Its own connection, not the pool's: a busy pool is not an unready replica.
            with open_connection(self.dsn) as conn:
                conn.execute(Q.ping)
                checks["database"] = "ok"
                try:
                    require_current(conn)
                    checks["schema"] = "ok"
                except PgragError as err:
                    checks["schema"] = str(err)
                conn.rollback()
        except Exception as err:  # the point is to say so, whatever it is
            # The probe needs no credentials: the details (user, host, port) go to the log.
            log.warning("readyz: the database is unreachable: %s", " ".join(str(err).split()))
            checks["database"] = "unreachable (the service's log says why)"
        return checks


def _configure(conn: psycopg.Connection[Any]) -> None:
    prepare_session(conn)
    conn.execute(Q.name_session)
    conn.commit()


# A connection handed back to the pool this recently is handed out again without a ping: under
# load that saves a round trip per request. One that idled longer is pinged first.
CHECK_AFTER_IDLE_SECONDS = 2.0
_returned_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
_returned_lock = threading.Lock()


def _returned(conn: psycopg.Connection[Any]) -> None:
    with _returned_lock:
        _returned_at[conn] = time.monotonic()


def _check(conn: psycopg.Connection[Any]) -> None:
    # A connection the server closed while it idled in the pool is replaced, not handed out.
    from psycopg_pool import ConnectionPool

    with _returned_lock:
        returned = _returned_at.get(conn)
    if returned is not None and time.monotonic() - returned < CHECK_AFTER_IDLE_SECONDS:
        return
    ConnectionPool.check_connection(conn)


async def run(request: Any, fn: Callable[[Work], T]) -> T:
    """Run blocking ``fn(work)`` in a worker thread; if the client disconnects first, stop it
    (its statement is cancelled in PostgreSQL) and answer nothing."""
    import anyio
    from starlette.concurrency import run_in_threadpool

    work = Work()
    result: list[T] = []

    async def watch(scope: anyio.CancelScope) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                work.stop()
                scope.cancel()
                return

    failed: list[BaseException] = []
    async with anyio.create_task_group() as group:
        group.start_soon(watch, group.cancel_scope)
        try:
            result.append(await run_in_threadpool(fn, work))
        except Exception as err:  # raised below, not wrapped in the task group's ExceptionGroup
            failed.append(err)
        finally:
            group.cancel_scope.cancel()
    if failed and not work.stopped.is_set():
        raise failed[0]
    if not result:
        raise Cancelled("the client disconnected; the request was stopped")
    return result[0]
