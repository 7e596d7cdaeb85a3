"""The open database: :func:`connect`, the :class:`Database` it returns, and transactions.

Where the database is comes from :mod:`pgrag.db.dsn`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgrag import config
from pgrag.config import Settings
from pgrag.db import queries
from pgrag.db.dsn import open_connection, resolve_dsn
from pgrag.db.principals import check_principals
from pgrag.db.schema import require_current
from pgrag.errors import DatabaseError, PgragError

if TYPE_CHECKING:
    import psycopg

    from pgrag.db.replica import Replica, ReplicaSet
    from pgrag.embeddings.embedder import Embedder

Q = queries.load(__name__)


@dataclass
class Database:
    """An open pgrag database: a psycopg connection whose schema matches this code, with
    what :func:`pgrag.connect` was given.

    Create it with :func:`pgrag.connect`. Which embedder a query or a write uses is the
    embeddings family's to say (:func:`pgrag.embeddings.local.configured_embedder`,
    :mod:`pgrag.embeddings.models`), from ``given_embedder`` and ``settings``.

    One thread at a time: its transactions run on one connection, so threads that share it
    interleave them. Give each thread its own (``pgrag serve`` keeps a pool).
    """

    conn: psycopg.Connection[Any]
    dsn: str
    # The embedder given to pgrag.connect, if any (else the settings name one).
    given_embedder: Embedder | None = field(default=None, repr=False)
    # Who searches and asks read as (plus public); None: whatever the session's role may see.
    principals: list[str] | None = None

    # Look a repeated question's vector up in pgrag.query_embedding_cache before embedding it.
    query_cache: bool = True
    # The configuration this connection was opened with (pgrag.config: read once, here).
    settings: Settings = field(default_factory=Settings)
    # The read replica searches and listings read from (PGRAG_READ_DSN), if any; and whether
    # each read waits for it to have replayed the primary's writes (pgrag.db.replica).
    replica: Replica | ReplicaSet | None = field(default=None, repr=False)
    read_your_writes: bool = False

    def close(self) -> None:
        self.conn.close()
        if self.replica is not None:
            self.replica.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# SQLSTATEs of a server ending the session: an administrator's pg_terminate_backend, a
# shutdown, a crash of another backend (class 08: the connection itself).
_ENDED = ("57P01", "57P02", "57P03")


def connection_lost(err: Any) -> bool:
    """Whether a psycopg error is the server (or the network) ending the connection."""
    import psycopg

    if not isinstance(err, psycopg.OperationalError):
        return False
    state = getattr(err, "sqlstate", None)
    return state is None or state.startswith("08") or state in _ENDED


def describe_error(err: Any, *, unfinished: bool = False) -> str:
    """One line from a psycopg error: the server's message and its hint. A connection the
    server ended is said so (with ``unfinished``: nothing of the transaction it was in was
    written)."""
    if connection_lost(err):
        diag = getattr(err, "diag", None)
        why = getattr(diag, "message_primary", None) or "it closed the connection unexpectedly"
        done = " in the middle of a transaction: nothing of it was written" if unfinished else ""
        return (
            f"the server ended the connection ({why}){done}; run the command again once the"
            " server accepts connections"
        )
    diag = getattr(err, "diag", None)
    primary = getattr(diag, "message_primary", None) or " ".join(str(err).split())
    hint = getattr(diag, "message_hint", None)
    return f"{primary} ({hint})" if hint else primary


@contextmanager
def transaction(db: Database) -> Iterator[Any]:
    """Run statements in a transaction; a database error rolls it back (so the connection
    stays usable) and comes out as a one-line :class:`pgrag.DatabaseError`."""
    import psycopg

    committing = False
    try:
        with db.conn.transaction():
            yield db.conn
            committing = True  # (an error from here on is the COMMIT's)
    except psycopg.Error as err:
        # A session the server ends in a transaction is rolled back, COMMIT or not, when the
        # server says why (a COMMIT it was processing would have been answered); a connection
        # that broke without a word during COMMIT leaves its outcome unknown.
        said = getattr(err, "sqlstate", None) in _ENDED
        raise DatabaseError(describe_error(err, unfinished=said or not committing)) from err


def _register_vector(conn: psycopg.Connection[Any]) -> None:
    # pgvector may live in any schema (managed services often use "extensions"), which need
    # not be on this session's search_path: look its type up by the extension's schema.
    from pgvector.psycopg.vector import register_vector_info
    from psycopg.types import TypeInfo

    row = conn.execute(Q.vector_type).fetchone()
    if row is None:
        raise PgragError(
            "the vector extension is missing from this database; run `pgrag db upgrade`"
        )
    register_vector_info(conn, TypeInfo.fetch(conn, row[0]))


def prepare_session(conn: psycopg.Connection[Any]) -> None:
    """Ready a new connection for pgrag (pgrag.connect's, or a pool's): pgvector's type
    registered, and the server watching for a client that went away (``watch_client``)."""
    _register_vector(conn)
    conn.execute(Q.watch_client)
    conn.commit()


def connect(
    dsn: str | None = None,
    *,
    embedder: Embedder | None = None,
    principals: Sequence[str] | None = None,
    settings: Settings | None = None,
    read_your_writes: bool | None = None,
) -> Database:
    """Open pgrag's database (see the module docstring for where it is found).

    ``principals`` (such as ``["alice", "group:billing"]``) makes every search and answer on
    this connection read only what they (and public) may read, enforced by row-level security
    in the database; each call may override it. None reads as the connecting role.

    ``settings`` is pgrag's configuration (:mod:`pgrag.config`); by default the environment
    is read, once, now.

    With ``PGRAG_READ_DSN`` set, searches and listings read from that replica, falling back
    to this database when it fails; ``read_your_writes`` (default ``PGRAG_READ_YOUR_WRITES``)
    makes each read wait for the replica to have this database's writes so far
    (:mod:`pgrag.db.replica`).

    Raises :class:`pgrag.SchemaError` when the schema is missing or out of date: schema changes
    happen only through ``pgrag db upgrade``, never as a side effect of connecting.
    """
    names = None if principals is None else check_principals(principals)
    settings = settings or config.from_env()
    from pgrag.db.replica import check_dsn, max_lag_seconds, open_replica, wait_seconds

    # (bad replica settings are said now, not at a search)
    wait_seconds(settings)
    max_lag_seconds(settings)
    check_dsn(settings)
    reads_your_writes = settings.reads_your_writes if read_your_writes is None else read_your_writes
    resolved = resolve_dsn(dsn, settings)
    conn = open_connection(resolved)
    try:
        require_current(conn)
        prepare_session(conn)
        replica = open_replica(settings, conn)
    except BaseException:
        conn.close()
        raise
    return Database(
        conn=conn,
        dsn=resolved,
        given_embedder=embedder,
        principals=names,
        settings=settings,
        replica=replica,
        read_your_writes=reads_your_writes,
    )
