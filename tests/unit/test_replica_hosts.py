"""A multi-host PGRAG_READ_DSN becomes one replica per host (pgrag.db.replica.split_hosts),
so that each host is failed over and checked for lag on its own."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgrag.config import Settings
from pgrag.db.replica import balanced, check_dsn, split_hosts
from pgrag.errors import ConfigError


def _params(dsns: list[str]) -> list[dict[str, object]]:
    return [conninfo_to_dict(dsn) for dsn in dsns]


def test_one_host_is_left_as_it_is() -> None:
    dsn = "postgresql://alice@replica/pgrag?target_session_attrs=standby"
    assert split_hosts(dsn) == [dsn]
    assert split_hosts("dbname=pgrag") == ["dbname=pgrag"]


def test_each_host_gets_its_port_and_keeps_the_rest() -> None:
    each = _params(
        split_hosts(
            "postgresql://alice:s3cret@r1:5433,r2:5434/pgrag"
            "?target_session_attrs=standby&load_balance_hosts=random&sslmode=require"
        )
    )
    assert [(p["host"], p["port"]) for p in each] == [("r1", "5433"), ("r2", "5434")]
    for p in each:
        assert p["user"] == "alice" and p["password"] == "s3cret" and p["dbname"] == "pgrag"
        assert p["target_session_attrs"] == "standby" and p["sslmode"] == "require"
        assert "load_balance_hosts" not in p  # (one host each: nothing to balance)


def test_one_port_serves_every_host_and_an_empty_one_is_libpqs_default() -> None:
    each = _params(split_hosts("host=/run/a,/run/b port=6000 dbname=pgrag"))
    assert [(p["host"], p["port"]) for p in each] == [("/run/a", "6000"), ("/run/b", "6000")]
    each = _params(split_hosts("host=a,b port=,5433"))
    assert [(p["host"], p.get("port")) for p in each] == [("a", None), ("b", "5433")]


def test_host_addresses_pair_with_host_names() -> None:
    each = _params(split_hosts("host=r1,r2 hostaddr=10.0.0.1,10.0.0.2 dbname=pgrag"))
    assert [(p["host"], p["hostaddr"]) for p in each] == [
        ("r1", "10.0.0.1"),
        ("r2", "10.0.0.2"),
    ]
    assert [p["hostaddr"] for p in _params(split_hosts("hostaddr=10.0.0.1,10.0.0.2"))] == [
        "10.0.0.1",
        "10.0.0.2",
    ]


def test_hosts_and_ports_that_do_not_pair_up_are_said_at_connect() -> None:
    with pytest.raises(ConfigError, match="names 3 host\\(s\\) and 2 port values"):
        split_hosts("host=a,b,c port=1,2")
    with pytest.raises(
        ConfigError, match="PGRAG_READ_DSN names 2 host\\(s\\) and 3 hostaddr values"
    ):
        check_dsn(Settings(read_dsn="host=a,b hostaddr=10.0.0.1,10.0.0.2,10.0.0.3"))
    with pytest.raises(ConfigError, match="names 1 host\\(s\\) and 2 port values"):
        check_dsn(Settings(read_dsn="host=a port=1,2"))


def test_a_random_order_is_asked_for_by_load_balance_hosts() -> None:
    assert balanced("postgresql://r1,r2/pgrag?load_balance_hosts=random")
    assert not balanced("postgresql://r1,r2/pgrag?load_balance_hosts=disable")
    assert not balanced("postgresql://r1,r2/pgrag")


def test_libpqs_variables_with_several_hosts_are_split_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGPORT", "5433,5434")
    each = _params(split_hosts("host=r1,r2 dbname=pgrag"))
    assert [(p["host"], p["port"]) for p in each] == [("r1", "5433"), ("r2", "5434")]
    monkeypatch.setenv("PGHOST", "a,b")
    monkeypatch.delenv("PGPORT")
    assert [p["host"] for p in _params(split_hosts("dbname=pgrag"))] == ["a", "b"]
    # (a string that names its own host is not touched by PGHOST)
    assert split_hosts("host=c dbname=pgrag") == ["host=c dbname=pgrag"]


def test_a_load_balancing_libpq_would_refuse_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="load_balance_hosts is neither random nor disable"):
        check_dsn(Settings(read_dsn="host=a,b load_balance_hosts=Random"))
    # (what it was set to is not repeated: a string built wrong may put a secret there)
    with pytest.raises(ConfigError) as refused:
        check_dsn(Settings(read_dsn="host=a,b load_balance_hosts='password=hunter2'"))
    assert "hunter2" not in str(refused.value)
    monkeypatch.setenv("PGLOADBALANCEHOSTS", "random")
    assert balanced("host=a,b") and not balanced("host=a,b load_balance_hosts=disable")


def test_messages_never_repeat_a_password() -> None:
    from pgrag.db.dsn import describe_dsn

    for dsn in ("postgresql://u:p%zzss@h1,h2/pgrag", 'postgresql://u:pa"ss word@h/db'):
        with pytest.raises(ConfigError) as refused:
            check_dsn(Settings(read_dsn=dsn))
        assert "zzss" not in str(refused.value) and "ss word" not in str(refused.value)
        assert str(refused.value).startswith("PGRAG_READ_DSN is not a connection string (")
    described = describe_dsn("host=h password=one sslpassword=two dbname=pgrag")
    assert "one" not in described and "two" not in described and "host=h" in described
