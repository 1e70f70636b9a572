"""An OIDC identity provider stand-in: discovery document, JWKS with an RS256 and an
ES256 key, key rotation, and tokens minted with any claims (or faults) a test wants.

It serves over HTTPS from a test CA (see https_standin); a spacedock server trusts it
through `trust_env`. Tokens are signed by PyJWT with real keys from `cryptography`.

Switches for hostile issuers: `jwks_uri` (what discovery names; default its own
`/keys`), `discovery_redirect` (discovery answers 302 to it), `keys_body` (bytes served
as the JWKS instead of the published keys), `cache_control` (the JWKS answer's header)
and `hold_keys()` / `release_keys()` (JWKS requests hang until released;
`keys_waiting` counts those hanging).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from sim.https_standin import HttpsStandIn

AUDIENCE = "spacedock"


@dataclass
class SigningKey:
    kid: str
    algorithm: str
    private: Any

    @classmethod
    def rsa(cls) -> SigningKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return cls(f"rsa-{secrets.token_hex(4)}", "RS256", key)

    @classmethod
    def ec(cls) -> SigningKey:
        return cls(f"ec-{secrets.token_hex(4)}", "ES256", ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.algorithm == "RS256" else ECAlgorithm
        entry: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**entry, "kid": self.kid, "alg": self.algorithm, "use": "sig"}

    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


class OidcStandIn(HttpsStandIn):
    name = "oidc-standin"

    def __init__(self) -> None:
        super().__init__()
        self.rsa = SigningKey.rsa()
        self.ec = SigningKey.ec()
        self.published = [self.rsa, self.ec]
        self.jwks_uri: str | None = None
        self.discovery_redirect: str | None = None
        self.keys_body: bytes | None = None
        self.cache_control: str | None = None
        self.keys_waiting = 0
        self._keys_released = threading.Event()
        self._keys_released.set()

    def hold_keys(self) -> None:
        """JWKS requests from now on hang until `release_keys()`."""
        self._keys_released.clear()

    def release_keys(self) -> None:
        self._keys_released.set()

    def stop(self) -> None:
        self.release_keys()
        super().stop()

    @property
    def issuer(self) -> str:
        return self.url

    def server_env(self, audience: str = AUDIENCE) -> dict[str, str]:
        """What a spacedock server needs to accept this issuer's tokens."""
        return {
            **self.trust_env,
            "SPACEDOCK_OIDC_ISSUER": self.issuer,
            "SPACEDOCK_OIDC_AUDIENCE": audience,
        }

    def rotate(self) -> SigningKey:
        """A new RSA key replaces the old one in the JWKS; the old one's tokens stop working."""
        self.rsa = SigningKey.rsa()
        self.published = [self.rsa, self.ec]
        return self.rsa

    def token(
        self,
        key: SigningKey | None = None,
        lifetime_s: float = 300,
        not_before_s: float | None = None,
        **claims: Any,
    ) -> str:
        """A JWT signed by `key` (default the RSA key); `claims` override the defaults
        (None removes one)."""
        signing = key or self.rsa
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "alice@example.test",
            "iat": now,
            "exp": now + lifetime_s,
            **({} if not_before_s is None else {"nbf": now + not_before_s}),
            **claims,
        }
        body = {name: value for name, value in body.items() if value is not None}
        return jwt.encode(body, signing.private, signing.algorithm, headers={"kid": signing.kid})

    def routes(self) -> list[web.RouteDef]:
        async def discovery(request: web.Request) -> web.Response:
            if self.discovery_redirect is not None:
                raise web.HTTPFound(self.discovery_redirect)
            return web.json_response(
                {
                    "issuer": self.issuer,
                    "jwks_uri": self.jwks_uri or f"{self.issuer}/keys",
                    "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                }
            )

        async def keys(request: web.Request) -> web.Response:
            if not self._keys_released.is_set():
                self.keys_waiting += 1
                try:
                    await asyncio.get_running_loop().run_in_executor(None, self._keys_released.wait)
                finally:
                    self.keys_waiting -= 1
            headers = {} if self.cache_control is None else {"Cache-Control": self.cache_control}
            if self.keys_body is not None:
                return web.Response(
                    body=self.keys_body, content_type="application/json", headers=headers
                )
            return web.json_response(
                {"keys": [key.jwk() for key in self.published]}, headers=headers
            )

        return [
            web.get("/.well-known/openid-configuration", discovery),
            web.get("/keys", keys),
        ]
