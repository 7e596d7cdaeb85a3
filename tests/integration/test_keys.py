"""API keys of `pgrag serve`: pgrag.service.keys, `pgrag keys`, and what the service's
Authenticator makes of a key, against a real PostgreSQL.

The table holds only each key's sha256; a restricted role (a member of pgrag_app, as the service
runs) cannot read or write it, and checks a key only through pgrag.api_key_v1.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgrag
from pgrag.cli import cli
from pgrag.config import Settings
from pgrag.db import schema as migrate
from pgrag.errors import ConfigError, InputError
from pgrag.service.auth import (
    MISSING,
    Authenticator,
    Caller,
    Forbidden,
    Unauthorized,
    require_scope,
)
from pgrag.service.keys import KeyInfo, create_key, list_keys, revoke_key

KEY = re.compile(r"pgrag_([a-z0-9]{8})_[A-Za-z0-9_-]{43}")


def _cli(dsn: str, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--dsn", dsn, *args], catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _connection(dsn: str) -> Any:
    """What the service passes the Authenticator: a callable giving a connection's context."""
    return lambda: psycopg.connect(dsn)


def _table_text(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT k::text, encode(k.key_hash, 'hex') FROM pgrag.api_keys k")
        return "\n".join(" ".join(r) for r in rows.fetchall())


@pytest.fixture
def roles(admin_dsn: str, dsn: str) -> Iterator[dict[str, str]]:
    """Login roles that are members of pgrag_app and of pgrag_reader, on ``dsn``'s database."""
    suffix = uuid.uuid4().hex[:8]
    made = {"app": f"keyapp_{suffix}", "reader": f"keyreader_{suffix}"}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for kind, role in made.items():
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            group = "pgrag_app" if kind == "app" else "pgrag_reader"
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(group), sql.Identifier(role))
            )
    yield {kind: make_conninfo(dsn, user=role) for kind, role in made.items()}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for role in made.values():
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# -- the library ------------------------------------------------------------------------------


def test_create_list_revoke(db: Any, dsn: str) -> None:
    info, key = create_key(
        db, principals=["alice", "group:hr", "alice"], name="hr portal", scopes=["write", "read"],
        expires="90d",
    )  # fmt: skip
    m = KEY.fullmatch(key)
    assert m and m.group(1) == info.id
    assert info.principals == ["alice", "group:hr"] and info.scopes == ["read", "write"]
    assert info.name == "hr portal" and info.revoked_at is None and info.last_used_at is None
    assert info.expires_at is not None
    assert timedelta(days=89) < info.expires_at - info.created_at < timedelta(days=91)
    other, other_key = create_key(db, principals=["bob"])
    assert other.scopes == ["read"] and other.expires_at is None and other.name is None
    assert other_key != key and other.id != info.id

    # Stored only as its sha256: neither key, nor its secret, is anywhere in the table.
    stored = _table_text(dsn)
    for k in (key, other_key):
        assert k not in stored and k.split("_", 2)[2] not in stored
    assert hashlib.sha256(key.encode()).hexdigest() in stored

    listed = list_keys(db)
    assert [k.id for k in listed] == [info.id, other.id]
    assert listed[0] == info
    assert key not in json.dumps([k.to_dict() for k in listed])
    assert listed[0].to_dict()["status"] == "valid"

    revoked = revoke_key(db, info.id)
    assert revoked.revoked_at is not None and revoked.status() == "revoked"
    assert revoke_key(db, f"key:{info.id}").revoked_at == revoked.revoked_at  # unchanged
    assert [k.status() for k in list_keys(db)] == ["revoked", "valid"]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"principals": ["alice"], "scopes": ["admin"]}, "unknown scope 'admin'"),
        ({"principals": ["alice"], "scopes": []}, "at least one scope"),
        ({"principals": ["bob smith"]}, "invalid principal 'bob smith'"),
        ({"principals": []}, "at least one principal"),
        ({"principals": ["alice"], "expires": "tomorrow"}, "invalid expiry 'tomorrow'"),
        ({"principals": ["alice"], "expires": "2001-01-01"}, "is not in the future"),
        ({"principals": ["alice"], "name": "x" * 201}, "at most 200 characters"),
    ],
)
def test_create_refuses_bad_input(db: Any, dsn: str, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError) as err:
        create_key(db, **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert list_keys(db) == []


def test_revoke_names_what_is_wrong(db: Any) -> None:
    _, key = create_key(db, principals=["alice"])
    with pytest.raises(InputError, match="no API key 'zzzzzzzz'; `pgrag keys list`"):
        revoke_key(db, "zzzzzzzz")
    with pytest.raises(InputError, match="invalid key id 'nope'"):
        revoke_key(db, "nope")
    with pytest.raises(InputError, match="not the whole key") as err:
        revoke_key(db, key)
    assert key not in str(err.value)


# -- the CLI ----------------------------------------------------------------------------------


def test_cli_create_list_revoke(dsn: str) -> None:
    made = _cli(
        dsn, "keys", "create", "--principal", "alice", "--principal", "group:hr", "--name",
        "portal", "--scope", "read", "--scope", "write", "--expires", "2w",
    )  # fmt: skip
    assert made.exit_code == 0, made.stderr
    key = made.stdout.strip()
    m = KEY.fullmatch(key)
    assert m, made.stdout
    key_id = m.group(1)
    assert "will not be shown again" in made.stderr and key not in made.stderr

    as_json = _cli(dsn, "keys", "create", "--principal", "bob", "--json")
    assert as_json.exit_code == 0, as_json.stderr
    second = json.loads(as_json.stdout)
    assert KEY.fullmatch(second["key"]) and second["principals"] == ["bob"]
    assert second["scopes"] == ["read"] and second["expires_at"] is None

    table = _cli(dsn, "keys", "list")
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "PRINCIPALS", "SCOPES"]
    assert "LAST USED" in lines[0] and "REVOKED" in lines[0]
    assert lines[1].startswith(key_id) and "alice, group:hr" in lines[1]
    assert "read, write" in lines[1]
    assert lines[2].startswith(second["id"])
    assert key not in table.stdout and second["key"] not in table.stdout
    assert "2 keys" in table.stderr

    gone = _cli(dsn, "keys", "revoke", key_id)
    assert gone.exit_code == 0, gone.stderr
    assert f"revoked key {key_id}" in gone.stderr
    listed = json.loads(_cli(dsn, "keys", "list", "--json").stdout)
    assert [(k["id"], k["status"]) for k in listed] == [
        (key_id, "revoked"),
        (second["id"], "valid"),
    ]
    assert listed[0]["revoked_at"] is not None and "key" not in listed[0]


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (("keys", "create"), 2, "Missing option '--principal'"),
        (("keys", "create", "--principal", "a", "--scope", "admin"), 2, "'admin' is not one of"),
        (("keys", "create", "--principal", "a", "--expires", "soon"), 1, "invalid expiry 'soon'"),
        (("keys", "create", "--principal", "a b"), 1, "invalid principal 'a b'"),
        (("keys", "revoke", "abcdefgh"), 1, "no API key 'abcdefgh'"),
    ],
)
def test_cli_errors_are_one_line(dsn: str, args: tuple[str, ...], status: int, words: str) -> None:
    result = _cli(dsn, *args)
    assert result.exit_code == status, result.output
    assert words in result.stderr and result.stdout == ""
    if status == 1:
        assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


# -- who may see the keys ---------------------------------------------------------------------


def test_restricted_roles_cannot_touch_the_table_but_the_app_verifies_through_the_function(
    db: Any, roles: dict[str, str]
) -> None:
    info, key = create_key(db, principals=["alice", "group:hr"], scopes=["read"])
    for role_dsn in roles.values():
        with psycopg.connect(role_dsn) as conn:
            for statement in (
                "SELECT count(*) FROM pgrag.api_keys",
                "SELECT id FROM pgrag.api_keys WHERE key_hash IS NOT NULL",
                "INSERT INTO pgrag.api_keys (id, key_hash, principals)"
                " VALUES ('aaaaaaaa', sha256('x'), '{admin}')",
                "UPDATE pgrag.api_keys SET principals = '{admin}'",
                "DELETE FROM pgrag.api_keys",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)  # type: ignore[arg-type]
                conn.rollback()
    # The app's role checks the key through pgrag.api_key_v1, as the service does.
    auth = Authenticator(Settings())
    caller = auth.authenticate(f"Bearer {key}", _connection(roles["app"]))
    assert caller == Caller(f"key:{info.id}", ["alice", "group:hr"], "key", frozenset({"read"}))
    with pytest.raises(Forbidden, match=f"key:{info.id} may not write .*--scope write"):
        require_scope(caller, "write")
    # pgrag_reader may not even do that.
    with psycopg.connect(roles["reader"]) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pgrag.api_key_v1(sha256('x'))")
    with pytest.raises(ConfigError, match="make it a member of pgrag_app"):
        auth.authenticate(f"Bearer {key}", _connection(roles["reader"]))
    # `pgrag keys` run as the app's role says whose job it is.
    result = _cli(roles["app"], "keys", "list")
    assert result.exit_code == 1
    assert "manage API keys as the owner of schema pgrag" in result.stderr
    # Revoked through the library: the app's next check refuses it.
    revoke_key(db, info.id)
    with pytest.raises(Unauthorized, match=f"API key {info.id} was revoked"):
        auth.authenticate(f"Bearer {key}", _connection(roles["app"]))


# -- the Authenticator ------------------------------------------------------------------------


def _refused(auth: Authenticator, header: str | None, dsn: str, words: str) -> None:
    with pytest.raises(Unauthorized) as err:
        auth.authenticate(header, _connection(dsn))
    message = str(err.value)
    assert words in message and "\n" not in message, message
    token = (header or "").split(" ", 1)[-1]
    if token.startswith("pgrag_") and token.count("_") >= 2:
        # pgrag_<id>_<secret>: the secret may hold "_" itself, so split from the left.
        secret = token.split("_", 2)[2]
        assert secret not in message, "the message repeats the secret"


def _last_used(dsn: str, key_id: str) -> datetime | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT last_used_at FROM pgrag.api_keys WHERE id = %s", (key_id,))
        return row.fetchone()[0]  # type: ignore[index]


def test_authenticate_a_key_and_refuse_what_is_not_one(db: Any, dsn: str) -> None:
    auth = Authenticator(Settings())
    info, key = create_key(db, principals=["alice"], scopes=["read", "write"])
    caller = auth.authenticate(f"Bearer {key}", _connection(dsn))
    assert caller == Caller(f"key:{info.id}", ["alice"], "key", frozenset({"read", "write"}))
    assert auth.authenticate(f"bearer  {key} ", _connection(dsn)) == caller

    # Its last use is recorded at most once a minute.
    first = _last_used(dsn, info.id)
    assert first is not None
    auth.authenticate(f"Bearer {key}", _connection(dsn))
    assert _last_used(dsn, info.id) == first
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgrag.api_keys SET last_used_at = now() - interval '2 minutes' WHERE id = %s",
            (info.id,),
        )
    auth.authenticate(f"Bearer {key}", _connection(dsn))
    assert _last_used(dsn, info.id) > first  # type: ignore[operator]
    # A read-only session (a standby) checks keys without writing.
    read_only = make_conninfo(dsn, options="-c default_transaction_read_only=on")
    before = _last_used(dsn, info.id)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "UPDATE pgrag.api_keys SET last_used_at = now() - interval '2 minutes' WHERE id = %s",
            (info.id,),
        )
    assert auth.authenticate(f"Bearer {key}", _connection(read_only)) == caller
    assert _last_used(dsn, info.id) < before  # type: ignore[operator]

    wrong_secret = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    _refused(auth, f"Bearer {wrong_secret}", dsn, f"API key {info.id} is not valid")
    _refused(auth, "Bearer pgrag_short", dsn, "malformed API key")
    _refused(auth, None, dsn, MISSING)
    _refused(auth, "", dsn, MISSING)
    _refused(auth, "Bearer ", dsn, MISSING)
    _refused(auth, f"Basic {key}", dsn, "is not a bearer credential")
    _refused(auth, "Bearer sk-123", dsn, "neither an API key nor a JWT")
    _refused(auth, "Bearer a.b.c", dsn, "JWTs are not configured on this service")


def test_expired_and_revoked_keys_are_refused(db: Any, dsn: str) -> None:
    auth = Authenticator(Settings())
    soon, soon_key = create_key(db, principals=["alice"], expires=timedelta(hours=1))
    assert auth.authenticate(f"Bearer {soon_key}", _connection(dsn)).principals == ["alice"]
    with psycopg.connect(dsn) as conn:  # an hour later
        conn.execute(
            "UPDATE pgrag.api_keys SET expires_at = now() - interval '1 second' WHERE id = %s",
            (soon.id,),
        )
    _refused(auth, f"Bearer {soon_key}", dsn, f"API key {soon.id} has expired")
    gone, gone_key = create_key(db, principals=["bob"])
    revoke_key(db, gone.id)
    _refused(auth, f"Bearer {gone_key}", dsn, f"API key {gone.id} was revoked")
    assert [k.status() for k in list_keys(db)] == ["expired", "revoked"]


def test_no_auth_is_the_local_caller_but_a_bad_key_is_still_refused(db: Any, dsn: str) -> None:
    local = Authenticator(Settings(), no_auth=True, local_principals=["carol", "group:ops"])
    assert local.authenticate(None, _connection(dsn)) == Caller(
        "local", ["carol", "group:ops"], "local", frozenset({"read", "write"})
    )
    assert Authenticator(Settings(), no_auth=True).authenticate(None, _connection(dsn)) == Caller(
        "local", None, "local", frozenset({"read", "write"})
    )
    info, key = create_key(db, principals=["alice"])
    # A key given is a key checked: its own principals, not the local ones.
    assert local.authenticate(f"Bearer {key}", _connection(dsn)).principals == ["alice"]
    revoke_key(db, info.id)
    _refused(local, f"Bearer {key}", dsn, "was revoked")
    _refused(local, "Bearer pgrag_nope", dsn, "malformed API key")
    with pytest.raises(InputError, match="invalid principal 'x y'"):
        Authenticator(Settings(), no_auth=True, local_principals=["x y"])


# -- across a downgrade -----------------------------------------------------------------------


def test_keys_survive_a_downgrade_and_upgrade(db: Any, dsn: str) -> None:
    kept, kept_key = create_key(db, principals=["alice"], name="kept")
    gone, gone_key = create_key(db, principals=["bob"])
    revoke_key(db, gone.id)
    db.close()
    with pytest.raises(InputError, match=r"API keys of pgrag serve: 2 \(kept for the next upgrade"):
        migrate.downgrade(dsn, "0012")
    moved = migrate.downgrade(dsn, "0012", confirm=True)
    assert "API keys of pgrag serve: 2 (kept for the next upgrade)" in moved.removed
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('pgrag.api_keys')").fetchone() == (None,)
    migrate.upgrade(dsn)
    with pgrag.connect(dsn) as again:
        listed = list_keys(again)
    assert [(k.id, k.name, k.status()) for k in listed] == [
        (kept.id, "kept", "valid"),
        (gone.id, None, "revoked"),
    ]
    assert isinstance(listed[0], KeyInfo) and listed[0].created_at == kept.created_at
    auth = Authenticator(Settings())
    assert auth.authenticate(f"Bearer {kept_key}", _connection(dsn)).id == f"key:{kept.id}"
    _refused(auth, f"Bearer {gone_key}", dsn, "was revoked")
    assert datetime.now(UTC) > listed[0].created_at
