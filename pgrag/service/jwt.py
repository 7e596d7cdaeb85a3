"""JWT bearer tokens from an OIDC issuer, for `pgrag serve` (optional; PyJWT).

Configured by the settings (:mod:`pgrag.config`), never in code:

- ``PGRAG_JWT_ISSUER``: the issuer; a token's ``iss`` must be exactly this.
- ``PGRAG_JWT_AUDIENCE``: the ``aud`` a token must carry (required: without it a token the
  issuer minted for any other application would do).
- ``PGRAG_JWT_JWKS_URL``: the issuer's signing keys; default: the ``jwks_uri`` of
  ``<issuer>/.well-known/openid-configuration`` (whose ``issuer`` must be the same).
- ``PGRAG_JWT_PRINCIPALS_CLAIM``: the claim that names the caller's principals (default
  ``pgrag_principals``): a JSON list of strings, or one string of principals separated by
  spaces or commas. A claim name that is not a top-level claim but contains dots is a path
  (``realm_access.roles`` reads ``roles`` inside ``realm_access``).

A token must be signed with an asymmetric algorithm (RS*, PS*, ES*: never ``none`` nor an
HMAC, which would make the issuer's public key a shared secret), carry ``exp``, ``iss``,
``aud`` and ``sub``, and name at least one valid principal. Its caller is
``jwt:<iss>#<sub>``; it may read (scope ``read``), and write too when its ``scope`` (or
``scp``) claim includes ``pgrag:write``.

The keys are fetched on the first token, cached (5 minutes), and fetched again when a token
names a key id the cache does not have (at most every ``cooldown`` seconds, so tokens with
made-up key ids cannot make the service hammer the issuer).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgrag.db.principals import check_principals
from pgrag.errors import ConfigError, InputError, PgragError
from pgrag.service.auth import Caller, Unauthorized

if TYPE_CHECKING:
    from jwt import PyJWKClient

    from pgrag.config import Settings

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
DEFAULT_PRINCIPALS_CLAIM = "pgrag_principals"
WRITE_SCOPE = "pgrag:write"
REQUIRED_CLAIMS = ("exp", "iss", "aud", "sub")
LEEWAY_S = 30  # clock skew allowed on exp, nbf and iat
KEYS_LIFESPAN_S = 300
COOLDOWN_S = 30.0
FETCH_TIMEOUT_S = 10.0


class IssuerUnavailable(PgragError):
    """The issuer's discovery document or signing keys could not be fetched: the token can
    be neither accepted nor refused (the service answers 503)."""


@dataclass(frozen=True)
class JwtConfig:
    issuer: str
    audience: str
    jwks_url: str | None = None
    principals_claim: str = DEFAULT_PRINCIPALS_CLAIM

    @classmethod
    def from_settings(cls, settings: Settings) -> JwtConfig | None:
        """The settings' JWT configuration; None when no issuer is set."""
        if not settings.jwt_issuer:
            return None
        if not settings.jwt_audience:
            raise ConfigError(
                "PGRAG_JWT_ISSUER is set but PGRAG_JWT_AUDIENCE is not: set the audience the"
                " issuer puts in tokens for pgrag (their aud claim)"
            )
        return cls(
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            jwks_url=settings.jwt_jwks_url,
            principals_claim=settings.jwt_principals_claim or DEFAULT_PRINCIPALS_CLAIM,
        )


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has a JWT's shape: three dot-separated parts, the first two set."""
    parts = token.split(".")
    return len(parts) == 3 and all(parts[:2])


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def principals_of(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The principals a token's ``claim`` names (a list of strings, or a string separated by
    spaces or commas); Unauthorized when it is missing, empty or names an invalid one."""
    value = _claim(claims, claim)
    if value is None:
        raise Unauthorized(
            f"the token has no {claim} claim naming its principals; have the issuer add it,"
            " or set PGRAG_JWT_PRINCIPALS_CLAIM to the claim that does"
        )
    if isinstance(value, str):
        names: list[Any] = value.replace(",", " ").split()
    elif isinstance(value, list):
        names = value
    else:
        raise Unauthorized(
            f"the token's {claim} claim is a {type(value).__name__}: it must be a list of"
            " principals or a string of them separated by spaces or commas"
        )
    try:
        found = check_principals(names, what=f"principal in the token's {claim} claim")
    except InputError as err:
        raise Unauthorized(str(err)) from None
    if not found:
        raise Unauthorized(f"the token's {claim} claim names no principal")
    return found


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """``read``, plus ``write`` when the token's scope (or scp) claim grants pgrag:write."""
    granted: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            granted.update(value.split())
        elif isinstance(value, list):
            granted.update(v for v in value if isinstance(v, str))
    return frozenset({"read", "write"} if WRITE_SCOPE in granted else {"read"})


class JwtVerifier:
    """Verifies bearer JWTs against one issuer; safe to share between threads."""

    def __init__(
        self,
        config: JwtConfig,
        *,
        cooldown: float = COOLDOWN_S,
        timeout: float = FETCH_TIMEOUT_S,
    ) -> None:
        self.config = config
        self._cooldown = cooldown
        self._timeout = timeout
        self._lock = threading.Lock()
        self._client: PyJWKClient | None = None

    # -- the issuer's keys ------------------------------------------------------------------

    def _discover(self) -> str:
        issuer = self.config.issuer
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            with urllib.request.urlopen(url, timeout=self._timeout) as response:  # noqa: S310
                document = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", None) or err
            raise IssuerUnavailable(
                f"cannot read the issuer's discovery document {url}: {reason}; check"
                " PGRAG_JWT_ISSUER, or set PGRAG_JWT_JWKS_URL"
            ) from None
        if not isinstance(document, dict) or not isinstance(document.get("jwks_uri"), str):
            raise IssuerUnavailable(f"the discovery document {url} has no jwks_uri")
        if document.get("issuer") != issuer:
            raise ConfigError(
                f"the discovery document {url} names issuer {document.get('issuer')!r}, not"
                f" {issuer!r}: set PGRAG_JWT_ISSUER to exactly the issuer's iss"
            )
        return str(document["jwks_uri"])

    def _keys(self) -> PyJWKClient:
        with self._lock:
            if self._client is None:
                from jwt import PyJWKClient

                url = self.config.jwks_url or self._discover()
                self._client = PyJWKClient(
                    url,
                    cache_jwk_set=True,
                    lifespan=KEYS_LIFESPAN_S,
                    timeout=self._timeout,
                    cooldown_duration=self._cooldown,
                )
            return self._client

    # -- tokens -----------------------------------------------------------------------------

    def verify(self, token: str) -> Caller:
        """The caller a token names; Unauthorized (naming what is wrong, never echoing the
        token) when it is not valid, IssuerUnavailable when its keys cannot be fetched."""
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as err:
            raise Unauthorized(f"malformed JWT: {err}") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Unauthorized(
                f"JWT algorithm {alg!r} is not accepted: the issuer must sign with one of"
                f" {', '.join(ALGORITHMS)}"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("the JWT names no signing key (no kid in its header)")
        client = self._keys()
        try:
            signing = client.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError as err:
            raise IssuerUnavailable(
                f"cannot fetch the issuer's signing keys: {err}; check PGRAG_JWT_JWKS_URL"
            ) from None
        except (jwt.PyJWKClientError, jwt.PyJWKSetError):
            raise Unauthorized(
                f"the JWT's signing key {kid!r} is not one of the issuer's keys"
            ) from None
        if signing.algorithm_name and signing.algorithm_name != alg:
            raise Unauthorized(
                f"the JWT says algorithm {alg}, but the issuer's key {kid!r} is for"
                f" {signing.algorithm_name}"
            )
        cfg = self.config
        try:
            claims = jwt.decode(
                token,
                signing.key,
                algorithms=[alg],
                audience=cfg.audience,
                issuer=cfg.issuer,
                leeway=LEEWAY_S,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the JWT has expired: get a new token from the issuer") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(
                f"the JWT is not meant for this service (aud {cfg.audience!r})"
            ) from None
        except jwt.InvalidIssuerError:
            raise Unauthorized(f"the JWT was not issued by {cfg.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized(
                "the JWT's signature does not verify with the issuer's key"
            ) from None
        except jwt.MissingRequiredClaimError as err:
            raise Unauthorized(f"the JWT has no {err.claim} claim") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("the JWT is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidTokenError as err:
            raise Unauthorized(f"invalid JWT: {err}") from None
        principals = principals_of(claims, cfg.principals_claim)
        return Caller(
            id=f"jwt:{claims['iss']}#{claims['sub']}",
            principals=principals,
            kind="jwt",
            scopes=scopes_of(claims),
        )
