"""Who is calling `pgrag serve`: an API key, a JWT, or (``--no-auth``) the local user.

Every request names its credential in ``Authorization: Bearer <credential>`` (what the openai
client sends). :class:`Authenticator` turns it into a :class:`Caller`:

- ``pgrag_<id>_<secret>``: an API key (:mod:`pgrag.service.keys`), checked by the database
  through ``pgrag.api_key_v1`` on one of the service's pooled connections;
- three dot-separated parts: a JWT from the configured OIDC issuer (:mod:`pgrag.service.jwt`);
- nothing: the local caller when the service runs with ``--no-auth``, else 401.

A credential that is given but not valid (unknown, revoked, expired, badly signed) is refused
even with ``--no-auth``. No message repeats a secret. The caller's principals are what the
service then sets per transaction (:func:`pgrag.db.principals.apply`); the database decides
what they may see.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.db.principals import check_principals
from pgrag.errors import ConfigError, PgragError

if TYPE_CHECKING:
    from pgrag.config import Settings
    from pgrag.service.jwt import JwtConfig, JwtVerifier

MISSING = "missing credentials: send Authorization: Bearer <api key> (pgrag keys create)"
KEY_SHAPE = "API keys read pgrag_<key id>_<secret>, as `pgrag keys create` printed them"


class Unauthorized(PgragError):
    """No credentials, or credentials that are not valid (HTTP 401)."""


class Forbidden(PgragError):
    """Valid credentials without the scope a request needs (HTTP 403)."""


@dataclass(frozen=True)
class Caller:
    """Who a request is from. ``id`` is stable per credential (``key:<key id>``,
    ``jwt:<issuer>#<sub>``, ``local``): conversations are owned by it. ``principals`` is
    what the request reads as (plus public); None only for ``--no-auth`` without
    ``--principal``, which reads as the service's database role, like the CLI."""

    id: str
    principals: list[str] | None
    kind: str  # "key", "jwt" or "local"
    scopes: frozenset[str]

    def may(self, scope: str) -> bool:
        return scope in self.scopes

    def require(self, scope: str) -> None:
        """Forbidden unless this caller has ``scope`` (:func:`require_scope`)."""
        require_scope(self, scope)


def require_scope(caller: Caller, scope: str) -> None:
    """Forbidden unless the caller has ``scope`` (``read`` or ``write``)."""
    if caller.may(scope):
        return
    has = ", ".join(sorted(caller.scopes)) or "none"
    if caller.kind == "key":
        hint = "create a key with --scope " + scope + " (pgrag keys create)"
    elif caller.kind == "jwt":
        hint = "the token's scope claim must include pgrag:" + scope
    else:
        hint = "restart the service with the scope"
    raise Forbidden(f"{caller.id} may not {scope} (its scopes: {has}); {hint}")


Connection = Callable[[], AbstractContextManager[Any]]


class Authenticator:
    """Turns an Authorization header into a :class:`Caller` (one per service; thread-safe)."""

    def __init__(
        self,
        settings: Settings,
        *,
        no_auth: bool = False,
        local_principals: Sequence[str] | None = None,
    ) -> None:
        from pgrag.service.jwt import JwtConfig

        self.no_auth = no_auth
        self.local_principals = (
            None if local_principals is None else check_principals(local_principals)
        )
        # A half-configured issuer is refused when the service starts, not on a request.
        self.jwt_config: JwtConfig | None = JwtConfig.from_settings(settings)
        self._jwt: JwtVerifier | None = None
        self._lock = threading.Lock()

    def local_caller(self) -> Caller:
        return Caller("local", self.local_principals, "local", frozenset({"read", "write"}))

    def authenticate(self, authorization: str | None, connection: Connection) -> Caller:
        """The caller an ``Authorization`` header value names. ``connection`` is a
        zero-argument callable whose context manager yields a psycopg connection (the
        service's ``pool.connection``); it is used only for API keys."""
        if authorization is None or not authorization.strip():
            if self.no_auth:
                return self.local_caller()
            raise Unauthorized(MISSING)
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer":
            # The scheme is not repeated: a key sent without "Bearer " would be echoed.
            raise Unauthorized(
                "the Authorization header is not a bearer credential: send Authorization:"
                " Bearer <api key or JWT>"
            )
        if not token:
            raise Unauthorized(MISSING)
        if token.startswith("pgrag_"):
            return self._key(token, connection)
        from pgrag.service.jwt import looks_like_jwt

        if looks_like_jwt(token):
            return self._verifier().verify(token)
        raise Unauthorized(f"the bearer credential is neither an API key nor a JWT; {KEY_SHAPE}")

    def _verifier(self) -> JwtVerifier:
        if self.jwt_config is None:
            raise Unauthorized(
                "JWTs are not configured on this service (PGRAG_JWT_ISSUER is not set): use an"
                " API key"
            )
        with self._lock:
            if self._jwt is None:
                from pgrag.service.jwt import JwtVerifier

                self._jwt = JwtVerifier(self.jwt_config)
            return self._jwt

    def _key(self, key: str, connection: Connection) -> Caller:
        import psycopg

        from pgrag.service.keys import parse_key, verify_key

        key_id = parse_key(key)
        if key_id is None:
            raise Unauthorized(f"malformed API key: {KEY_SHAPE}")
        try:
            with connection() as conn, conn.transaction():
                check = verify_key(conn, key)
        except psycopg.errors.InsufficientPrivilege:
            raise ConfigError(
                "the service's database role may not check API keys (pgrag.api_key_v1): make"
                " it a member of pgrag_app (GRANT pgrag_app TO <role>)"
            ) from None
        if check is None:
            raise Unauthorized(
                f"API key {key_id} is not valid: no such key, or not its secret;"
                " `pgrag keys list` shows the keys"
            )
        if check.status == "revoked":
            raise Unauthorized(f"API key {key_id} was revoked; create another (pgrag keys create)")
        if check.status != "valid" or check.principals is None:
            raise Unauthorized(f"API key {key_id} has expired; create another (pgrag keys create)")
        return Caller(f"key:{check.key_id}", check.principals, "key", check.scopes)
