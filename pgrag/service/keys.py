"""API keys for `pgrag serve`: created, listed and revoked here; verified by the database.

A key reads ``pgrag_<id>_<secret>``: ``id`` is 8 lowercase letters or digits, the key's name in
listings and in the service's caller id (``key:<id>``); ``secret`` is 43 URL-safe characters
from :mod:`secrets` (256 bits). PostgreSQL keeps only the sha256 of the whole key in
``pgrag.api_keys``, with the principals the key reads as and its scopes (``read``: search,
ask, chat, embeddings; ``write``: uploading and deleting documents). The plaintext is returned
once, by :func:`create_key`, and is never stored or shown again.

No restricted role may read or write ``pgrag.api_keys``: these functions run as the owner of
schema pgrag (the role that ran ``pgrag db upgrade``), and the service, a member of
``pgrag_app``, checks a key through ``pgrag.api_key_v1`` (:func:`verify_key`), which tells it
only what that one key is bound to.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pgrag.db import queries
from pgrag.db.connect import transaction
from pgrag.db.principals import check_principals
from pgrag.errors import InputError

if TYPE_CHECKING:
    from pgrag.db.connect import Database

Q = queries.load(__name__)

SCOPES = ("read", "write")
PREFIX = "pgrag_"
ID_ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH = 8
SECRET_BYTES = 32  # token_urlsafe(32): 43 characters
KEY = re.compile(r"pgrag_([a-z0-9]{8})_([A-Za-z0-9_-]{32,})")
KEY_ID = re.compile(r"[a-z0-9]{8}")
NAME_MAX = 200
_RELATIVE = re.compile(r"(\d{1,6})\s*([hdw])")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}
NOT_THE_OWNER = (
    "permission denied on pgrag.api_keys: manage API keys as the owner of schema pgrag (the"
    " role that ran `pgrag db upgrade`) or a superuser"
)


@dataclass(frozen=True)
class KeyInfo:
    """One API key as listings show it (never its secret nor its hash)."""

    id: str
    name: str | None
    principals: list[str]
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def caller_id(self) -> str:
        """What the service calls a request made with this key (``key:<id>``)."""
        return f"key:{self.id}"

    def status(self, now: datetime | None = None) -> str:
        """``revoked``, ``expired`` or ``valid``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (now or datetime.now(UTC)):
            return "expired"
        return "valid"

    def to_dict(self) -> dict[str, Any]:
        def iso(t: datetime | None) -> str | None:
            return None if t is None else t.isoformat()

        return {
            "id": self.id,
            "name": self.name,
            "principals": list(self.principals),
            "scopes": list(self.scopes),
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "revoked_at": iso(self.revoked_at),
            "last_used_at": iso(self.last_used_at),
            "status": self.status(),
        }


@dataclass(frozen=True)
class KeyCheck:
    """What the database says of a presented key (:func:`verify_key`)."""

    key_id: str
    status: str  # "valid", "revoked" or "expired"
    principals: list[str] | None  # set when valid
    scopes: frozenset[str]  # empty unless valid


def key_hash(key: str) -> bytes:
    """The sha256 of the whole key, as stored."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def parse_key(key: str) -> str | None:
    """The key id of a well-formed key (``pgrag_<id>_<secret>``), else None."""
    m = KEY.fullmatch(key)
    return m.group(1) if m else None


def check_scopes(scopes: Iterable[str]) -> list[str]:
    """The scopes, validated and in a fixed order: a bad one is an InputError naming it."""
    if isinstance(scopes, str):
        scopes = [scopes]
    given = list(scopes)
    for s in given:
        if s not in SCOPES:
            raise InputError(f"unknown scope {s!r}: a key's scopes are read and write")
    if not given:
        raise InputError("a key needs at least one scope: read, write or both")
    return [s for s in SCOPES if s in given]


def parse_expiry(expires: str | date | datetime | timedelta | None) -> datetime | None:
    """When a key expires: a duration (``90d``, ``12h``, ``2w`` or a timedelta) from now, a date
    (``2027-01-01``: its midnight, UTC) or a date and time (ISO 8601; UTC unless it names a
    zone). None: never. A time not in the future is an InputError."""
    if expires is None:
        return None
    now = datetime.now(UTC)
    when: datetime
    if isinstance(expires, timedelta):
        when = now + expires
    elif isinstance(expires, datetime):
        when = expires if expires.tzinfo else expires.replace(tzinfo=UTC)
    elif isinstance(expires, date):
        when = datetime(expires.year, expires.month, expires.day, tzinfo=UTC)
    else:
        text = expires.strip()
        m = _RELATIVE.fullmatch(text.lower())
        if m:
            when = now + timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
        else:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                raise InputError(
                    f"invalid expiry {expires!r}: give a duration such as 90d, 12h or 2w, or a"
                    " date such as 2027-01-01"
                ) from None
            when = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if when <= now:
        raise InputError(
            f"invalid expiry {str(expires)!r}: {when.isoformat()} is not in the future"
        )
    return when


def _info(row: Any) -> KeyInfo:
    return KeyInfo(
        id=row[0],
        name=row[1],
        principals=list(row[2]),
        scopes=list(row[3]),
        created_at=row[4],
        expires_at=row[5],
        revoked_at=row[6],
        last_used_at=row[7],
    )


def _new_key() -> tuple[str, str]:
    key_id = "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))
    return key_id, f"{PREFIX}{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"


def create_key(
    db: Database,
    *,
    principals: Iterable[str],
    name: str | None = None,
    scopes: Iterable[str] = ("read",),
    expires: str | date | datetime | timedelta | None = None,
) -> tuple[KeyInfo, str]:
    """A new API key bound to ``principals`` (validated, at least one) and ``scopes``
    (``read``, ``write``); returns its listing and the key itself, the only time it is shown."""
    names = check_principals(principals)
    if not names:
        raise InputError("a key needs at least one principal, e.g. --principal alice")
    chosen = check_scopes(scopes)
    if name is not None:
        name = name.strip() or None
    if name is not None and len(name) > NAME_MAX:
        raise InputError(f"a key's name is at most {NAME_MAX} characters, not {len(name)}")
    expires_at = parse_expiry(expires)
    import psycopg

    with transaction(db) as conn:
        for _ in range(5):  # an id already taken (1 in 2.8e12 per key): draw another
            key_id, key = _new_key()
            try:
                row = conn.execute(
                    Q.insert_key,
                    {
                        "id": key_id,
                        "name": name,
                        "key_hash": key_hash(key),
                        "principals": names,
                        "scopes": chosen,
                        "expires_at": expires_at,
                    },
                ).fetchone()
            except psycopg.errors.InsufficientPrivilege:
                raise InputError(NOT_THE_OWNER) from None
            if row is not None:
                return _info(row), key
    raise InputError("could not draw an unused key id in 5 tries; try again")


def list_keys(db: Database) -> list[KeyInfo]:
    """Every API key, oldest first (revoked and expired ones too)."""
    import psycopg

    with transaction(db) as conn:
        try:
            return [_info(r) for r in conn.execute(Q.list_keys).fetchall()]
        except psycopg.errors.InsufficientPrivilege:
            raise InputError(NOT_THE_OWNER) from None


def revoke_key(db: Database, key_id: str) -> KeyInfo:
    """Revoke the key ``key_id`` (its 8-character id, or ``key:<id>``): the service refuses it
    from the next request on. Revoking a revoked key changes nothing."""
    given = key_id.strip()
    wanted = given.removeprefix("key:")
    if parse_key(wanted) is not None:
        raise InputError(
            "give the key's id (the 8 characters after pgrag_, as `pgrag keys list` shows it),"
            " not the whole key"
        )
    if not KEY_ID.fullmatch(wanted):
        raise InputError(
            f"invalid key id {given!r}: a key id is 8 lowercase letters or digits;"
            " `pgrag keys list` lists them"
        )
    import psycopg

    with transaction(db) as conn:
        try:
            row = conn.execute(Q.revoke_key, {"id": wanted}).fetchone()
        except psycopg.errors.InsufficientPrivilege:
            raise InputError(NOT_THE_OWNER) from None
    if row is None:
        raise InputError(f"no API key {wanted!r}; `pgrag keys list` lists them")
    return _info(row)


def verify_key(conn: Any, key: str) -> KeyCheck | None:
    """What the database says of ``key`` (through pgrag.api_key_v1, as the connection's role:
    a member of pgrag_app, or the owner): None when no key has its hash, or it is not a
    well-formed key. Runs one statement on ``conn``, in the caller's transaction."""
    if parse_key(key) is None:
        return None
    row = conn.execute(Q.verify_key, {"key_hash": key_hash(key)}).fetchone()
    if row is None:
        return None
    key_id, principals, scopes, status = row
    return KeyCheck(
        key_id=key_id,
        status=status,
        principals=None if principals is None else list(principals),
        scopes=frozenset(scopes or ()),
    )
