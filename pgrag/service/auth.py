"""Who is calling: the :class:`Caller` a request's credentials name.

(The lead's placeholder: no-auth only. The auth family replaces it with API keys and JWTs.)
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pgrag.config import Settings
from pgrag.errors import PgragError


class Unauthorized(PgragError):
    """No credentials, or credentials that name no valid caller (401)."""


class Forbidden(PgragError):
    """A valid caller asking for what its credentials do not allow (403)."""


@dataclass(frozen=True)
class Caller:
    id: str
    principals: list[str] | None
    kind: str
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({"read"}))

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(f"this credential may not {scope}: create a key with --scope {scope}")


class Authenticator:
    def __init__(
        self,
        settings: Settings,
        *,
        no_auth: bool = False,
        local_principals: list[str] | None = None,
    ) -> None:
        self.settings = settings
        self.no_auth = no_auth
        self.local_principals = local_principals

    def authenticate(
        self,
        authorization: str | None,
        connection: Callable[[], AbstractContextManager[Any]],
    ) -> Caller:
        if not authorization and self.no_auth:
            return Caller("local", self.local_principals, "local", frozenset({"read", "write"}))
        raise Unauthorized(
            "missing credentials: send Authorization: Bearer <api key> (pgrag keys create)"
        )
