"""SSO: checking a bearer JWT from the configured OIDC issuer, with PyJWT.

The issuer's discovery document names its JWKS; both are fetched through the outbound
gate (deny list, no redirects, no proxy, bounded size and time). The keys are a cache
with a TTL, the JWKS answer's `Cache-Control: max-age` within [min_ttl_s, max_ttl_s]
(default_ttl_s without one):

- a token whose `kid` is in the fresh cache never waits: once three quarters of the TTL
  have passed, the request that notices starts a refresh in the background;
- a key the issuer dropped stops being trusted when the TTL passes, whether or not a
  refresh has succeeded since (an issuer that cannot be reached for longer than the TTL
  means JWTs are refused until it can; API tokens keep working);
- an unknown `kid` may trigger a refetch, at most once per `refetch_interval_s` for the
  issuer, so a flood of random kids from unauthenticated clients costs the issuer one
  fetch per interval; requests that arrive while a fetch runs await that one fetch
  (bounded by fetch_timeout_s), they do not queue behind each other;
- a JWKS that names one kid twice, or holds no usable key, is refused whole: the keys
  from before stay (until their TTL passes). The JWKS is read to at most
  MAX_JWKS_BYTES and parsed off the event loop.

Only asymmetric algorithms are accepted, and the key's own type must fit the token's
`alg`, so `none` and HS256 signed with a public key both fail. `iss`, `aud`, `exp` and
`nbf` are checked by PyJWT, and the times must be numbers before the year 10000; a
refusal's message says what was wrong and never repeats the token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt

from providers.errors import ProviderError
from providers.network import IPNetwork, fetch

log = logging.getLogger("spacedock.oidc")

ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
LEEWAY_S = 0
# Discovery documents are a few KiB, JWKS a few keys of about 1 KiB each.
MAX_DISCOVERY_BYTES = 64 * 1024
MAX_JWKS_BYTES = 256 * 1024
MAX_KEYS = 100
# 9999-12-31T23:59:59Z: a later NumericDate cannot be a datetime, and no token lives so long.
LATEST_TIME = 253402300799
TIME_CLAIMS = ("exp", "nbf", "iat")
MAX_AGE = re.compile(r"max-age\s*=\s*\"?(\d{1,12})\"?")


@dataclass(frozen=True)
class KeyCachePolicy:
    """How long keys are trusted and how often the issuer may be asked."""

    default_ttl_s: float = 300.0
    min_ttl_s: float = 60.0
    max_ttl_s: float = 86400.0
    # The soonest an unknown kid (or a fetch that failed) may cause another fetch.
    refetch_interval_s: float = 10.0
    # Discovery and JWKS together.
    fetch_timeout_s: float = 5.0
    # The share of the TTL after which a request starts a refresh in the background.
    refresh_ahead: float = 0.75

    def ttl(self, cache_control: str | None) -> float:
        """The keys' lifetime for the JWKS answer's Cache-Control, within the bounds."""
        if cache_control is None:
            return self.default_ttl_s
        directives = cache_control.lower()
        if "no-store" in directives or "no-cache" in directives:
            return self.min_ttl_s
        found = MAX_AGE.search(directives)
        if found is None:
            return self.default_ttl_s
        return min(max(float(found.group(1)), self.min_ttl_s), self.max_ttl_s)


class OidcRefused(Exception):
    """The token is not acceptable; the message says why, for the caller."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class KeysUnavailable(Exception):
    """A fetch of the issuer's keys failed; the message says why (no secrets in it)."""


@dataclass
class OidcVerifier:
    issuer: str
    audience: str
    deny: tuple[IPNetwork, ...] = ()
    policy: KeyCachePolicy = field(default_factory=KeyCachePolicy)
    clock: Callable[[], float] = time.monotonic  # what TTLs and intervals are measured on
    fetches: int = field(default=0, init=False)  # fetches started
    _keys: dict[str, jwt.PyJWK] = field(default_factory=dict, init=False)
    _expires_at: float = field(default=0.0, init=False)  # monotonic: trusted until then
    _refresh_at: float = field(default=0.0, init=False)  # monotonic: refresh from then on
    _last_fetch: float | None = field(default=None, init=False)
    _last_failure: str | None = field(default=None, init=False)
    _fetching: asyncio.Task[None] | None = field(default=None, init=False)
    # The system's trust store as it is when the verifier is made (SSL_CERT_FILE counts).
    _tls: ssl.SSLContext = field(default_factory=ssl.create_default_context, init=False)

    async def verify(self, token: str) -> dict[str, Any]:
        """The token's claims once signature, iss, aud, exp and nbf hold; else OidcRefused."""
        _check_shape(token)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise OidcRefused("The JWT's header is not a JSON object.") from None
        algorithm = header.get("alg")
        if algorithm not in ASYMMETRIC:
            raise OidcRefused(
                f"The JWT's algorithm {_shown(algorithm)} is not accepted; only asymmetric "
                f"ones ({', '.join(sorted(ASYMMETRIC))})."
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
        _check_times(claims)
        return claims

    async def _key(self, kid: object) -> jwt.PyJWK:
        if not isinstance(kid, str) or not kid:
            raise OidcRefused("The JWT names no signing key (kid).")
        now = self.clock()
        if now >= self._refresh_at:
            self._start_fetch(now)  # in the background: a known kid does not wait for it
        key = self._keys.get(kid)
        if key is not None and now < self._expires_at:
            return key
        fetching = self._fetching or self._start_fetch(now)
        if fetching is not None:
            # Every request that needs the answer awaits this one fetch, which is bounded by
            # fetch_timeout_s; shielded, so a client that gives up does not cancel it.
            await asyncio.shield(fetching)
            key = self._keys.get(kid)
            if key is not None and self.clock() < self._expires_at:
                return key
        if self.clock() >= self._expires_at:
            why = self._last_failure or "their time to live has passed"
            raise OidcRefused(
                f"The OIDC issuer's keys could not be read ({why}); try again shortly."
            )
        raise OidcRefused(f"The JWT's signing key {_shown(kid)} is not among the issuer's keys.")

    def _start_fetch(self, now: float) -> asyncio.Task[None] | None:
        """The fetch in flight, or a new one unless the last began too recently."""
        if self._fetching is not None:
            return self._fetching
        if self._last_fetch is not None and now - self._last_fetch < self.policy.refetch_interval_s:
            return None
        self._last_fetch = now
        self.fetches += 1
        fetching = asyncio.get_running_loop().create_task(self._refresh())
        self._fetching = fetching
        fetching.add_done_callback(self._fetched)
        return fetching

    def _fetched(self, done: asyncio.Task[None]) -> None:
        if self._fetching is done:
            self._fetching = None
        if not done.cancelled() and (error := done.exception()) is not None:
            log.error("refreshing the OIDC issuer's keys failed", exc_info=error)

    async def _refresh(self) -> None:
        """Replaces the keys with the issuer's current set, if it is a good one."""
        started = self.clock()
        try:
            async with asyncio.timeout(self.policy.fetch_timeout_s):
                keys, ttl = await self._fetch_keys()
        except KeysUnavailable as failed:
            self._failed(str(failed))
            return
        except TimeoutError:
            self._failed(f"no answer within {self.policy.fetch_timeout_s:g}s")
            return
        except (aiohttp.ClientError, OSError) as error:
            self._failed(f"connection failed: {type(error).__name__}")
            return
        self._keys = keys
        self._expires_at = started + ttl
        self._refresh_at = started + ttl * self.policy.refresh_ahead
        self._last_failure = None

    def _failed(self, why: str) -> None:
        """The keys from before stay, until their TTL passes."""
        self._last_failure = why
        log.warning("the OIDC issuer's keys could not be refreshed: %s", why)

    async def _fetch_keys(self) -> tuple[dict[str, jwt.PyJWK], float]:
        discovery_url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        discovery = await self._get(discovery_url, MAX_DISCOVERY_BYTES, "discovery document")
        document = _json_object(discovery.body, "discovery document")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise KeysUnavailable("the discovery document names no jwks_uri")
        answer = await self._get(jwks_uri, MAX_JWKS_BYTES, "JWKS")
        keys = await asyncio.to_thread(_keys_of, answer.body)
        return keys, self.policy.ttl(answer.headers.get("Cache-Control"))

    async def _get(self, url: str, limit: int, what: str) -> Any:
        try:
            answer = await fetch(
                self.deny,
                "GET",
                url,
                max_body_bytes=limit,
                timeout_s=self.policy.fetch_timeout_s,
                ssl_context=self._tls,
            )
        except ProviderError as refused:
            raise KeysUnavailable(f"the {what}: {refused.reason}") from refused
        if answer.status != 200:
            raise KeysUnavailable(f"HTTP {answer.status} for the {what}")
        return answer


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    try:
        loaded = json.loads(body)
    except (ValueError, RecursionError):
        raise KeysUnavailable(f"the {what} is not JSON") from None
    if not isinstance(loaded, dict):
        raise KeysUnavailable(f"the {what} is not a JSON object")
    return loaded


def _keys_of(body: bytes) -> dict[str, jwt.PyJWK]:
    """The usable signing keys of a JWKS by kid (off the event loop); KeysUnavailable for a
    set that must not replace the keys we have."""
    entries = _json_object(body, "JWKS").get("keys")
    if not isinstance(entries, list):
        raise KeysUnavailable("the JWKS has no keys list")
    if len(entries) > MAX_KEYS:
        raise KeysUnavailable(f"the JWKS has more than {MAX_KEYS} keys")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError):
            continue  # a key type or algorithm we do not use, or a malformed key
        if not isinstance(kid, str) or key.algorithm_name not in ASYMMETRIC:
            continue
        if kid in keys:  # which one a token means cannot be known: neither is trusted
            raise KeysUnavailable(f"the JWKS names the signing key {_shown(kid)} twice")
        keys[kid] = key
    if not keys:
        raise KeysUnavailable("the JWKS holds no usable signing key")
    return keys


# One part of a compact JWS: base64url without padding (a length of 4n+1 is none).
BASE64URL = re.compile(r"(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?")
PARTS = ("header", "payload", "signature")


def _check_shape(token: str) -> None:
    """A JWT is three base64url parts joined by dots; each refusal names the part at
    fault, so a token cut or changed in transit reads as such, not as no JWT at all."""
    parts = token.split(".")
    if len(parts) != len(PARTS):
        raise OidcRefused(
            "The bearer token is neither an API token (sdk_…) nor a JWT (three base64url "
            f"parts joined by dots; this one has {len(parts)})."
        )
    for name, part in zip(PARTS, parts, strict=True):
        if not BASE64URL.fullmatch(part) or (not part and name != "signature"):
            raise OidcRefused(
                f"The JWT's {name} is not base64url: the token was cut or changed on its way."
            )


def _check_times(claims: Mapping[str, Any]) -> None:
    """exp, nbf and iat, where present, are NumericDates a datetime can hold."""
    for name in TIME_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise OidcRefused(f"The JWT's {name} must be a number (seconds since 1970).")
        if not math.isfinite(value) or not 0 <= value <= LATEST_TIME:
            raise OidcRefused(f"The JWT's {name} is out of range (before 1970 or after 9999).")


def _shown(value: object) -> str:
    """A header value fit for a message: short, printable, or not shown at all."""
    text = str(value)
    return text[:64] if text.isprintable() and text.isascii() else "(unprintable)"


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
