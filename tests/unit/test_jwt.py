"""JWT bearer tokens (pgrag/service/jwt.py) against a real local issuer.

The issuer is a real HTTP server on 127.0.0.1 (tests/fakes.py) serving an OpenID discovery
document and a JWKS; tokens are signed by keys generated here. What is checked is what the
service would answer: a Caller, or Unauthorized with a message that says what is wrong and
never repeats the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from pgrag.config import Settings
from pgrag.errors import ConfigError
from pgrag.service.auth import Authenticator, Caller, Forbidden, Unauthorized, require_scope
from pgrag.service.jwt import IssuerUnavailable, JwtConfig, JwtVerifier
from tests.fakes import FakeServer

AUDIENCE = "pgrag-test"


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Issuer:
    """A real OIDC issuer on 127.0.0.1: discovery, a JWKS, and keys that sign tokens."""

    server: FakeServer
    keys: dict[str, Any] = field(default_factory=dict)  # kid -> private key
    published: list[str] = field(default_factory=list)  # kids in the JWKS

    @property
    def url(self) -> str:
        return self.server.base_url + "/realms/main"

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in self.published:
            key = self.keys[kid]
            if isinstance(key, rsa.RSAPrivateKey):
                jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
                jwk["alg"] = "RS256"
            else:
                jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
                jwk["alg"] = "ES256"
            out.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": out}

    def token(
        self, claims: dict[str, Any] | None = None, *, kid: str = "k1", drop: tuple[str, ...] = ()
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": "user-42",
            "iat": now,
            "exp": now + 600,
            "pgrag_principals": ["alice", "group:hr"],
            **(claims or {}),
        }
        for name in drop:
            payload.pop(name, None)
        key = self.keys[kid]
        alg = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})

    def settings(self, **extra: str) -> Settings:
        return Settings(jwt_issuer=self.url, jwt_audience=AUDIENCE, **extra)  # type: ignore[arg-type]

    def jwks_requests(self) -> int:
        return sum(1 for p in self.server.paths if p.endswith("/jwks"))


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with FakeServer() as server:
        iss = Issuer(server, keys={"k1": _rsa(), "e1": ec.generate_private_key(ec.SECP256R1())})
        iss.published = ["k1", "e1"]
        server.route(
            "/realms/main/.well-known/openid-configuration",
            lambda _r: {"issuer": iss.url, "jwks_uri": iss.url + "/protocol/jwks"},
            method="GET",
        )
        server.route("/realms/main/protocol/jwks", lambda _r: iss.jwks(), method="GET")
        yield iss


def _auth(issuer: Issuer, **extra: str) -> Authenticator:
    return Authenticator(issuer.settings(**extra))


def _no_database() -> Any:
    raise AssertionError("a JWT needs no database")


def _verify(auth: Authenticator, token: str) -> Caller:
    return auth.authenticate(f"Bearer {token}", _no_database)


def _refused(auth: Authenticator, token: str, words: str) -> str:
    with pytest.raises(Unauthorized) as err:
        _verify(auth, token)
    message = str(err.value)
    assert words in message, message
    assert "\n" not in message
    for part in token.split("."):
        if len(part) > 8:
            assert part not in message, "the message repeats the token"
    return message


def test_a_valid_token_is_its_issuer_and_subject_reading_as_its_principals(
    issuer: Issuer,
) -> None:
    auth = _auth(issuer)
    assert issuer.server.paths == [], "nothing is fetched before the first token"
    caller = _verify(auth, issuer.token())
    assert caller == Caller(
        id=f"jwt:{issuer.url}#user-42",
        principals=["alice", "group:hr"],
        kind="jwt",
        scopes=frozenset({"read"}),
    )
    with pytest.raises(Forbidden, match="may not write.*pgrag:write"):
        require_scope(caller, "write")
    # ES256 too; the keys are cached: no second fetch.
    assert _verify(auth, issuer.token(kid="e1")).principals == ["alice", "group:hr"]
    assert issuer.jwks_requests() == 1
    assert sum(1 for p in issuer.server.paths if "openid-configuration" in p) == 1


def test_scope_claim_grants_write(issuer: Issuer) -> None:
    auth = _auth(issuer)
    assert _verify(auth, issuer.token({"scope": "openid pgrag:write"})).scopes == {
        "read",
        "write",
    }
    assert _verify(auth, issuer.token({"scp": ["pgrag:write"]})).scopes == {"read", "write"}
    assert _verify(auth, issuer.token({"scope": "openid write"})).scopes == {"read"}


def test_the_principals_claim_may_be_a_string_or_a_nested_claim(issuer: Issuer) -> None:
    auth = _auth(issuer)
    token = issuer.token({"pgrag_principals": "alice, group:hr  bob"})
    assert _verify(auth, token).principals == ["alice", "group:hr", "bob"]
    nested = _auth(issuer, jwt_principals_claim="realm_access.roles")
    token = issuer.token({"realm_access": {"roles": ["group:ops"]}})
    assert _verify(nested, token).principals == ["group:ops"]
    # A top-level claim whose name has dots (Auth0's namespaced claims) is read as it is.
    dotted = _auth(issuer, jwt_principals_claim="https://example.com/principals")
    token = issuer.token({"https://example.com/principals": ["carol"]})
    assert _verify(dotted, token).principals == ["carol"]


def test_an_expired_token_is_refused(issuer: Issuer) -> None:
    now = int(time.time())
    token = issuer.token({"iat": now - 7200, "exp": now - 3600})
    _refused(_auth(issuer), token, "the JWT has expired")


def test_a_token_for_another_audience_is_refused(issuer: Issuer) -> None:
    _refused(_auth(issuer), issuer.token({"aud": "another-app"}), "not meant for this service")


def test_a_token_from_another_issuer_is_refused(issuer: Issuer) -> None:
    token = issuer.token({"iss": "https://evil.example.com"})
    _refused(_auth(issuer), token, f"not issued by {issuer.url!r}")


def test_unsigned_and_symmetric_tokens_are_refused(issuer: Issuer) -> None:
    auth = _auth(issuer)
    payload = jwt.decode(issuer.token(), options={"verify_signature": False})
    none = jwt.encode(payload, None, algorithm="none", headers={"kid": "k1"})
    _refused(auth, none, "JWT algorithm 'none' is not accepted")
    # HS256 with the issuer's public key as the secret: the classic key-confusion attack.
    public = (
        issuer.keys["k1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = _b64(json.dumps(payload).encode())
    mac = hmac.new(public, f"{head}.{body}".encode(), hashlib.sha256).digest()
    _refused(auth, f"{head}.{body}.{_b64(mac)}", "JWT algorithm 'HS256' is not accepted")
    assert issuer.jwks_requests() == 0, "a refused algorithm fetches nothing"


def test_a_token_signed_by_another_key_is_refused(issuer: Issuer) -> None:
    auth = _auth(issuer)
    issuer.keys["k1-forged"] = _rsa()
    forged = issuer.token(kid="k1-forged")
    # Under the issuer's key id: the signature fails.
    relabelled = jwt.encode(
        jwt.decode(forged, options={"verify_signature": False}),
        issuer.keys["k1-forged"],
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    _refused(auth, relabelled, "signature does not verify")
    # Under a key id the issuer does not publish: refused after one refresh of the keys.
    _refused(auth, forged, "signing key 'k1-forged' is not one of the issuer's keys")


def test_a_rotated_key_is_fetched_when_a_token_names_it(issuer: Issuer) -> None:
    verifier = JwtVerifier(JwtConfig(issuer=issuer.url, audience=AUDIENCE), cooldown=0)
    assert verifier.verify(issuer.token()).principals == ["alice", "group:hr"]
    issuer.keys["k2"] = _rsa()
    issuer.published.append("k2")
    assert verifier.verify(issuer.token(kid="k2")).kind == "jwt"
    assert issuer.jwks_requests() == 2
    assert verifier.verify(issuer.token(kid="k2")).kind == "jwt"
    assert issuer.jwks_requests() == 2, "a known key id is served from the cache"


def test_unknown_key_ids_cannot_make_the_service_hammer_the_issuer(issuer: Issuer) -> None:
    auth = _auth(issuer)  # the default cooldown
    assert _verify(auth, issuer.token()).kind == "jwt"
    issuer.keys["zz"] = _rsa()
    for _ in range(3):
        _refused(auth, issuer.token(kid="zz"), "not one of the issuer's keys")
    assert issuer.jwks_requests() == 1


@pytest.mark.parametrize(
    ("drop", "words"),
    [
        ("pgrag_principals", "the token has no pgrag_principals claim"),
        ("sub", "the JWT has no sub claim"),
        ("exp", "the JWT has no exp claim"),
    ],
)
def test_a_token_missing_a_claim_is_refused(issuer: Issuer, drop: str, words: str) -> None:
    _refused(_auth(issuer), issuer.token(drop=(drop,)), words)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (["alice", "bob smith"], "invalid principal in the token's pgrag_principals claim"),
        ("alice,bad'quote", "invalid principal in the token's pgrag_principals claim"),
        ([], "names no principal"),
        ({"a": 1}, "is a dict"),
    ],
)
def test_a_bad_principal_in_the_claim_is_refused(issuer: Issuer, value: Any, words: str) -> None:
    _refused(_auth(issuer), issuer.token({"pgrag_principals": value}), words)


def test_jwts_are_refused_unless_an_issuer_is_configured(issuer: Issuer) -> None:
    auth = Authenticator(Settings())
    _refused(auth, issuer.token(), "JWTs are not configured on this service")
    with pytest.raises(ConfigError, match="PGRAG_JWT_AUDIENCE is not"):
        Authenticator(Settings(jwt_issuer=issuer.url))


def test_a_discovery_document_for_another_issuer_is_a_configuration_error(
    issuer: Issuer,
) -> None:
    issuer.server.route(
        "/realms/main/.well-known/openid-configuration",
        lambda _r: {"issuer": "https://elsewhere.example.com", "jwks_uri": issuer.url + "/x"},
        method="GET",
    )
    with pytest.raises(ConfigError, match="names issuer 'https://elsewhere.example.com'"):
        _verify(_auth(issuer), issuer.token())


def test_an_explicit_jwks_url_skips_discovery(issuer: Issuer) -> None:
    auth = _auth(issuer, jwt_jwks_url=issuer.url + "/protocol/jwks")
    assert _verify(auth, issuer.token()).kind == "jwt"
    assert not any("openid-configuration" in p for p in issuer.server.paths)


def test_an_unreachable_issuer_is_unavailable_not_unauthorized(issuer: Issuer) -> None:
    auth = _auth(issuer)
    token = issuer.token()
    issuer.server.close()
    with pytest.raises(IssuerUnavailable, match="cannot read the issuer's discovery document"):
        _verify(auth, token)
