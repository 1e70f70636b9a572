"""Issue 18: the OIDC issuer's keys are a cache with a TTL, fetched through the gate.

The verifier runs here in-process against the OIDC stand-in over real HTTPS, on a clock
the test moves (TTLs and refetch intervals are minutes long; nothing here sleeps).
Proven: the JWKS answer's Cache-Control sets the TTL within bounds; a key the issuer
dropped stops being trusted once the TTL passes; a token with a known kid never waits
behind a refetch, and requests that need one share a single fetch; unknown kids refetch
at most once per interval; a JWKS naming a kid twice, an empty or unusable one and one
over the size bound are refused whole, the keys from before staying; discovery and
JWKS meet the deny list and are never redirected (canaries on 127.0.0.2 and 127.0.0.3).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Iterator

import pytest

from providers.oidc import MAX_JWKS_BYTES, KeyCachePolicy, OidcRefused, OidcVerifier
from sim.oidc_standin import AUDIENCE, OidcStandIn, SigningKey
from tests.support.canary import Canary

DENY = (ipaddress.ip_network("127.0.0.2/31"),)
# TTLs of 100 s (refreshed in the background from 75 s), refetches at most every 30 s.
POLICY = KeyCachePolicy(default_ttl_s=100, min_ttl_s=10, refetch_interval_s=30)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def standin() -> Iterator[OidcStandIn]:
    with OidcStandIn() as running:
        yield running


@pytest.fixture
def oidc(standin: OidcStandIn, monkeypatch: pytest.MonkeyPatch) -> Iterator[OidcStandIn]:
    """The stand-in, trusted by verifiers made in this test, its switches reset after."""
    monkeypatch.setenv("SSL_CERT_FILE", str(standin.ca_file))
    yield standin
    standin.release_keys()
    standin.jwks_uri = standin.discovery_redirect = None
    standin.keys_body = None
    standin.cache_control = None
    standin.published = [standin.rsa, standin.ec]
    standin.requests.clear()


@pytest.fixture(scope="module")
def canaries() -> Iterator[tuple[Canary, Canary]]:
    with Canary("127.0.0.2") as first, Canary("127.0.0.3") as second:
        yield first, second


def verifier(oidc: OidcStandIn, clock: Clock, policy: KeyCachePolicy = POLICY) -> OidcVerifier:
    return OidcVerifier(oidc.issuer, AUDIENCE, DENY, policy, clock)


async def refused(check: OidcVerifier, token: str) -> str:
    with pytest.raises(OidcRefused) as refusal:
        await check.verify(token)
    return refusal.value.message


@pytest.mark.parametrize(
    ("header", "ttl"),
    [
        (None, 100),
        ("public, max-age=600, must-revalidate", 600),
        ('max-age="120"', 120),
        ("max-age=1", 10),  # the lower bound
        ("max-age=99999999", 86400),  # the upper bound
        ("no-cache", 10),
        ("no-store, max-age=600", 10),
        ("private", 100),
    ],
)
def test_cache_control_sets_the_ttl_within_bounds(header: str | None, ttl: float) -> None:
    assert POLICY.ttl(header) == ttl


async def test_a_dropped_key_is_trusted_until_the_ttl_passes_and_not_after(
    oidc: OidcStandIn,
) -> None:
    clock = Clock()
    check = verifier(oidc, clock)
    oidc.cache_control = "max-age=600"
    token = oidc.token(org="acme")
    assert (await check.verify(token))["org"] == "acme"
    oidc.published = [oidc.ec]  # the issuer drops the RSA key
    clock.now += 400  # not yet three quarters of 600 s: no refetch
    assert (await check.verify(token))["org"] == "acme"
    assert check.fetches == 1
    clock.now += 60  # past 450 s: the request is answered, and a refresh starts behind it
    assert (await check.verify(token))["org"] == "acme"
    await asyncio.sleep(0)
    while check._fetching is not None:  # the background refresh, to its end
        await asyncio.shield(check._fetching)
    assert check.fetches == 2
    assert "not among the issuer's keys" in await refused(check, token)
    assert (await check.verify(oidc.token(oidc.ec, org="acme")))["org"] == "acme"


async def test_a_known_kid_never_waits_and_waiting_requests_share_one_fetch(
    oidc: OidcStandIn,
) -> None:
    clock = Clock()
    check = verifier(oidc, clock, KeyCachePolicy(default_ttl_s=100, fetch_timeout_s=60))
    good = oidc.token(org="acme")
    await check.verify(good)
    before = oidc.requests["GET /keys"]
    oidc.hold_keys()
    clock.now += 80  # stale: the next request starts a refresh, which hangs
    stranger = SigningKey.rsa()
    waiting = [
        asyncio.ensure_future(check.verify(oidc.token(stranger, org="acme"))) for _ in range(5)
    ]
    for _ in range(500):
        if oidc.keys_waiting:
            break
        await asyncio.sleep(0.01)
    assert oidc.keys_waiting == 1
    for _ in range(20):  # known kids are answered while the issuer hangs
        assert (await check.verify(good))["org"] == "acme"
    assert not any(request.done() for request in waiting)
    oidc.release_keys()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(result, OidcRefused) for result in results)
    assert all("not among the issuer's keys" in str(result) for result in results)
    assert oidc.requests["GET /keys"] == before + 1
    assert check.fetches == 2


async def test_unknown_kids_refetch_at_most_once_per_interval(oidc: OidcStandIn) -> None:
    clock = Clock()
    check = verifier(oidc, clock)
    await check.verify(oidc.token(org="acme"))
    strangers = [oidc.token(SigningKey.ec(), org="acme") for _ in range(20)]
    for token in strangers * 10:
        assert "not among the issuer's keys" in await refused(check, token)
    assert check.fetches == 1 and oidc.requests["GET /keys"] == 1
    clock.now += 31
    fresh = oidc.rotate()  # published now: the one refetch of this interval finds it
    assert (await check.verify(oidc.token(fresh, org="acme")))["org"] == "acme"
    for token in strangers:
        await refused(check, token)
    assert check.fetches == 2 and oidc.requests["GET /keys"] == 2


def duplicated(oidc: OidcStandIn) -> bytes:
    """The published keys and a second key under the RSA key's kid."""
    impostor = SigningKey.rsa()
    impostor.kid = oidc.rsa.kid
    return json.dumps({"keys": [oidc.rsa.jwk(), oidc.ec.jwk(), impostor.jwk()]}).encode()


BAD_SETS = {
    "a kid twice": (duplicated, "names the signing key"),
    "no keys": (lambda _: b'{"keys": []}', "holds no usable signing key"),
    "only a symmetric key": (
        lambda _: b'{"keys": [{"kty": "oct", "kid": "h", "k": "c2VjcmV0"}]}',
        "holds no usable signing key",
    ),
    "not JSON": (lambda _: b"<html>", "is not JSON"),
    "too large": (
        lambda oidc: json.dumps(
            {"keys": [oidc.rsa.jwk()], "padding": "x" * MAX_JWKS_BYTES}
        ).encode(),
        "larger than 262,144 bytes",
    ),
}


@pytest.mark.parametrize("bad", BAD_SETS)
async def test_a_bad_key_set_never_replaces_a_good_one(oidc: OidcStandIn, bad: str) -> None:
    make, why = BAD_SETS[bad]
    clock = Clock()
    check = verifier(oidc, clock)
    good = oidc.token(org="acme")
    await check.verify(good)
    oidc.keys_body = make(oidc)
    clock.now += 31
    unknown = oidc.token(SigningKey.rsa(), org="acme")
    assert "not among the issuer's keys" in await refused(check, unknown)  # refetched
    assert check.fetches == 2
    clock.now += 50  # 81 s: the good keys still hold, though a refresh failed
    assert (await check.verify(good))["org"] == "acme"
    clock.now += 20  # 101 s: past their TTL, with no good set since
    assert why in await refused(check, good)


async def test_a_first_key_set_naming_a_kid_twice_is_refused(oidc: OidcStandIn) -> None:
    oidc.keys_body = duplicated(oidc)
    message = await refused(verifier(oidc, Clock()), oidc.token(org="acme"))
    assert "could not be read" in message and "names the signing key" in message


async def test_discovery_and_keys_meet_the_deny_list_and_are_not_redirected(
    oidc: OidcStandIn, canaries: tuple[Canary, Canary]
) -> None:
    first, second = canaries
    token = oidc.token(org="acme")
    cases = {
        f"https://127.0.0.2:{first.port}/keys": "denied: the address 127.0.0.2",
        f"https://[::ffff:127.0.0.3]:{second.port}/keys": "denied: the address 127.0.0.3",
        f"https://2130706435:{second.port}/keys": "denied",
        f"https://{oidc.issuer[8:]}@127.0.0.2:{first.port}/keys": "must not carry credentials",
    }
    for jwks_uri, why in cases.items():
        oidc.jwks_uri = jwks_uri
        message = await refused(verifier(oidc, Clock()), token)
        assert "could not be read" in message and why in message, message
    oidc.jwks_uri = None
    oidc.discovery_redirect = first.url + "/.well-known/openid-configuration"
    message = await refused(verifier(oidc, Clock()), token)
    assert "HTTP 302 for the discovery document" in message
    denied_issuer = OidcVerifier(f"https://127.0.0.3:{second.port}", AUDIENCE, DENY)
    assert "denied" in await refused(denied_issuer, token)
    assert first.connections == second.connections == 0
