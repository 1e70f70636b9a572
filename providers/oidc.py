"""SSO: checking a bearer JWT from the configured OIDC issuer, with PyJWT.

The issuer's discovery document names its JWKS; the keys are cached and fetched
again when a token names a `kid` the cache lacks (at most once per REFETCH_AFTER_S,
so random kids cannot make us hammer the issuer). Only asymmetric algorithms are
accepted, and the key's own type must fit the token's `alg`, so `none` and HS256
signed with a public key both fail. `iss`, `aud`, `exp` and `nbf` are checked by
PyJWT; a refusal's message says what was wrong and never repeats the token.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt

ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
REFETCH_AFTER_S = 1.0
FETCH_TIMEOUT_S = 5.0
LEEWAY_S = 0


class OidcRefused(Exception):
    """The token is not acceptable; the message says why, for the caller."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class OidcVerifier:
    issuer: str
    audience: str
    _keys: dict[str, jwt.PyJWK] = field(default_factory=dict)
    _fetched_at: float | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def verify(self, token: str) -> dict[str, Any]:
        """The token's claims once signature, iss, aud, exp and nbf hold; else OidcRefused."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise OidcRefused("The bearer token is neither an API token nor a JWT.") from None
        algorithm = header.get("alg")
        if algorithm not in ASYMMETRIC:
            raise OidcRefused(
                f"The JWT's algorithm {algorithm!s} is not accepted; only asymmetric ones "
                f"({', '.join(sorted(ASYMMETRIC))})."
            )
        key = await self._key(header.get("kid"))
        if key.algorithm_name != algorithm and not _fits(key, algorithm):
            raise OidcRefused(f"The JWT's algorithm {algorithm} does not fit its key.")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise OidcRefused("The JWT has expired (exp).") from None
        except jwt.ImmatureSignatureError:
            raise OidcRefused("The JWT is not valid yet (nbf or iat in the future).") from None
        except jwt.InvalidAudienceError:
            raise OidcRefused(f"The JWT's audience is not {self.audience}.") from None
        except jwt.InvalidIssuerError:
            raise OidcRefused(f"The JWT's issuer is not {self.issuer}.") from None
        except jwt.MissingRequiredClaimError as missing:
            raise OidcRefused(f"The JWT lacks the {missing.claim} claim.") from None
        except jwt.InvalidSignatureError:
            raise OidcRefused("The JWT's signature does not verify.") from None
        except jwt.PyJWTError as error:
            raise OidcRefused(f"The JWT is invalid ({type(error).__name__}).") from None
        return claims

    async def _key(self, kid: object) -> jwt.PyJWK:
        if not isinstance(kid, str) or not kid:
            raise OidcRefused("The JWT names no signing key (kid).")
        if kid not in self._keys:
            await self._refresh()
        if kid not in self._keys:
            raise OidcRefused(f"The JWT's signing key {kid[:64]} is not among the issuer's keys.")
        return self._keys[kid]

    async def _refresh(self) -> None:
        async with self._lock:
            now = time.monotonic()
            if self._fetched_at is not None and now - self._fetched_at < REFETCH_AFTER_S:
                return
            self._fetched_at = now
            try:
                keys = await self._fetch_keys()
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as error:
                raise OidcRefused(
                    f"The OIDC issuer's keys could not be read ({type(error).__name__}); "
                    "try again shortly."
                ) from None
            self._keys = keys

    async def _fetch_keys(self) -> dict[str, jwt.PyJWK]:
        timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
        discovery_url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(discovery_url) as response:
                response.raise_for_status()
                discovery = await response.json()
            async with session.get(str(discovery["jwks_uri"])) as response:
                response.raise_for_status()
                jwks = await response.json()
        keys: dict[str, jwt.PyJWK] = {}
        for entry in jwks.get("keys", []):
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                continue  # a key type or algorithm we do not use
            if isinstance(entry.get("kid"), str) and key.algorithm_name in ASYMMETRIC:
                keys[entry["kid"]] = key
        return keys


def _fits(key: jwt.PyJWK, algorithm: str) -> bool:
    """Whether an asymmetric key may verify `algorithm` (a JWK without `alg` says only its kty)."""
    families = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}
    return algorithm.startswith(families.get(str(key.key_type), ("-",)))


@dataclass(frozen=True)
class Sso:
    """SSO as configured: the issuer's verifier and the claims that carry org and role."""

    verifier: OidcVerifier
    org_claim: str = "org"
    role_claim: str = "spacedock_role"
