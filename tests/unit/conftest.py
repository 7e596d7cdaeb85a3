"""tests/unit: everything that needs no database. The whole directory runs in under a minute.

The database fixtures live in tests/integration/conftest.py, so they are not visible here;
two guards keep it that way if they ever move: a unit test that asks for one fails before any
fixture is set up, and while a unit test is set up or runs, this process may not start
PostgreSQL's programs (initdb, pg_ctl, postgres), which is how pgrag starts its embedded
server (for instance from a ``pgrag.connect()`` without a DSN).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
DATABASE_FIXTURES = frozenset({"admin_dsn", "template_dsn", "dsn", "empty_dsn", "db", "embedder"})
POSTGRES_PROGRAMS = frozenset({"initdb", "pg_ctl", "postgres", "postmaster"})

_running_unit_test: list[str] = []  # the node id of the unit test under way, if any


def _is_unit(item: pytest.Item) -> bool:
    return UNIT in Path(str(item.path)).resolve().parents


def _refuse_postgres(event: str, args: tuple[object, ...]) -> None:
    if event != "subprocess.Popen" or not _running_unit_test:
        return
    executable, argv = args[0], args[1]
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    first = executable if executable is not None else next(iter(argv), "")  # type: ignore[call-overload]
    name = os.path.basename(os.fsdecode(first))  # type: ignore[arg-type]
    if name in POSTGRES_PROGRAMS:
        raise RuntimeError(
            f"{_running_unit_test[0]} starts PostgreSQL ({name}): a test that needs a database"
            " belongs in tests/integration"
        )


sys.addaudithook(_refuse_postgres)  # hooks cannot be removed: it checks the flag above


@contextmanager
def _no_postgres(item: pytest.Item) -> Iterator[None]:
    _running_unit_test.append(item.nodeid)
    try:
        yield
    finally:
        _running_unit_test.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None]:
    if not _is_unit(item):
        return (yield)
    wanted = sorted(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))
    if wanted:
        pytest.fail(
            f"{item.nodeid} asks for {', '.join(wanted)}: tests/unit runs without a database;"
            " move the test to tests/integration",
            pytrace=False,
        )
    with _no_postgres(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    # Not at teardown: the last test of a run also tears down the session's fixtures, which
    # may include the integration tests' server.
    if not _is_unit(item):
        return (yield)
    with _no_postgres(item):
        return (yield)
