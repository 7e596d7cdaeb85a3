"""How the service answers the library's errors: the HTTP status of each kind."""

from __future__ import annotations


def test_a_lost_database_connection_is_503_not_500() -> None:
    import psycopg

    from pgrag.errors import DatabaseError
    from pgrag.service.errors import status_of

    lost = DatabaseError("the server ended the connection")
    lost.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    other = DatabaseError("a bug of ours")
    other.__cause__ = psycopg.errors.UndefinedTable("relation does not exist")
    assert status_of(lost) == (503, "service_unavailable")
    assert status_of(other) == (500, "database_error")
