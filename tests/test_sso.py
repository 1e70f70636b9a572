"""SSO with bearer JWTs from an OIDC issuer (the stand-in), beside API tokens.

A good RS256 or ES256 token works over HTTP and WebSocket, with org and role from its
claims. Every bad one is a 401 whose message says what was wrong and never repeats the
token: expired, not yet valid, wrong issuer, wrong audience, alg none, HS256 signed
with the public key, a key rotated away, an unknown org, times past the year 9999,
control characters or over-long values in sub, org and role claims. A missing role
claim is VIEWER. A flood of random kids, or an issuer that hangs, costs at most one
JWKS fetch (tests/test_oidc_keys.py holds the key cache's own tests).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from sim.oidc_standin import OidcStandIn, SigningKey
from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import GraphQL, RawSocket
from tests.support.server import Server

WHO = "{ viewer { org { name } role subject credentialKind customRole { name } permissions } }"


@pytest.fixture(scope="module")
def oidc() -> Iterator[OidcStandIn]:
    with OidcStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def server_env(oidc: OidcStandIn) -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600", **oidc.server_env()}


def as_jwt(server: Server, token: str) -> GraphQL:
    return GraphQL(server.url, server.ws_url, token)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None) -> str:
    """A token signed by hand: HMAC with `secret`, or no signature at all."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = (
        b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    )
    return f"{signing_input}.{b64(signature)}"


def claims_of(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    loaded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return loaded


async def refused(server: Server, token: str) -> str:
    status, body = await as_jwt(server, token).post(WHO)
    assert status == 401, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    for part in token.split("."):
        assert not part or part not in error["message"], "the token is never echoed"
    message: str = error["message"]
    return message


async def test_good_rs256_and_es256_tokens_work_with_org_and_role_from_claims(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    for key in (oidc.rsa, oidc.ec):
        token = oidc.token(key, org=org.name, spacedock_role="EDITOR", sub=f"bob-{key.kid}")
        who = (await as_jwt(server, token).data(WHO))["viewer"]
        assert who["org"]["name"] == org.name
        assert (who["role"], who["subject"], who["credentialKind"]) == (
            "EDITOR",
            f"bob-{key.kid}",
            "OIDC",
        )
    # API tokens keep working beside SSO.
    assert (await org.admin.data(WHO))["viewer"]["credentialKind"] == "API_TOKEN"


async def test_the_role_claim_picks_the_first_role_the_org_has(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    role = make.succeeded(
        await org.admin.mutate(
            "mutation($input: CreateRoleInput!) { createRole(input: $input) "
            "{ role { name } userErrors { field message code } } }",
            {
                "input": {
                    "name": make.unique("deployers"),
                    "policies": ["space:view", "space:create"],
                }
            },
        )
    )["role"]
    listed = oidc.token(org=org.name, spacedock_role=["nope", role["name"], "ADMIN"])
    who = (await as_jwt(server, listed).data(WHO))["viewer"]
    assert who["role"] == "CUSTOM" and who["customRole"] == {"name": role["name"]}
    assert set(who["permissions"]) == {"space:view", "space:create"}

    for claim in (None, "OWNER", ["nope"]):
        token = oidc.token(org=org.name, spacedock_role=claim)
        assert (await as_jwt(server, token).data(WHO))["viewer"]["role"] == "VIEWER"


async def test_refusals_say_what_was_wrong(server: Server, oidc: OidcStandIn, org: Org) -> None:
    cases = {
        "has expired": oidc.token(org=org.name, lifetime_s=-30),
        "not valid yet": oidc.token(org=org.name, not_before_s=300),
        "issuer is not": oidc.token(org=org.name, iss="https://evil.example.test"),
        "audience is not spacedock": oidc.token(org=org.name, aud="another-app"),
        "org nowhere-org is unknown": oidc.token(org="nowhere-org"),
        "lacks the org claim": oidc.token(),
        "lacks the exp claim": oidc.token(org=org.name, exp=None),
    }
    for words, token in cases.items():
        assert words in await refused(server, token), words


async def test_unsigned_and_symmetric_tokens_are_refused(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    claims = claims_of(oidc.token(org=org.name, spacedock_role="ADMIN"))
    none = forged({"alg": "none", "typ": "JWT", "kid": oidc.rsa.kid}, claims, None)
    assert "algorithm none is not accepted" in await refused(server, none)
    # The classic confusion: HMAC keyed with the issuer's public key, which anyone has.
    confused = forged(
        {"alg": "HS256", "typ": "JWT", "kid": oidc.rsa.kid}, claims, oidc.rsa.public_pem()
    )
    assert "algorithm HS256 is not accepted" in await refused(server, confused)
    tampered = oidc.token(org=org.name)
    head, _, signature = tampered.rpartition(".")
    body = b64(json.dumps({**claims_of(tampered), "spacedock_role": "ADMIN"}).encode())
    assert "signature" in await refused(server, f"{head.split('.')[0]}.{body}.{signature}")


async def test_a_token_cut_or_changed_on_its_way_says_which_part(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    """A JWT whose signature (or header, or payload) is no longer base64url was reported as
    "neither an API token nor a JWT"; now the refusal names the part, in the body and in
    WWW-Authenticate (RFC 6750), beside the 401."""
    header, payload, signature = oidc.token(org=org.name).split(".")
    cut = signature[: len(signature) - (len(signature) - 1) % 4]  # 4n+1 characters: no base64
    cases = {
        "The JWT's signature is not base64url": f"{header}.{payload}.{cut}",
        "The JWT's signature is not base64url ": f"{header}.{payload}.{signature}%3D",
        "The JWT's payload is not base64url": f"{header}.{payload[:-1]}*.{signature}",
        "The JWT's header is not base64url": f"{header}A.{payload}.{signature}",
        "The bearer token is neither an API token (sdk_": f"{header}.{payload}",
        "The JWT's signature does not verify": f"{header}.{payload}.{signature[:-4]}AAAA",
    }
    for case, token in cases.items():
        words = case.strip()
        assert words in await refused(server, token), case
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                server.url, json={"query": WHO}, headers={"Authorization": f"Bearer {token}"}
            ) as response,
        ):
            challenge = response.headers["WWW-Authenticate"]
        assert challenge.startswith('Bearer realm="spacedock", error="invalid_token"')
        assert f'error_description="{words}' in challenge
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url, json={"query": WHO}) as bare,
    ):
        assert bare.status == 401
        assert bare.headers["WWW-Authenticate"] == 'Bearer realm="spacedock"', "RFC 6750: no error"


async def test_a_rotated_key_is_picked_up_and_the_old_one_dropped(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    """The issuer rotates its RSA key: old tokens keep working while the cached keys
    live; the first refetch an unknown kid may cause (at most one per 10 s) brings the
    new key and drops the old one at once."""
    old = oidc.token(org=org.name)
    assert (await as_jwt(server, old).post(WHO))[0] == 200
    new_key = oidc.rotate()
    assert (await as_jwt(server, old).post(WHO))[0] == 200, "cached keys hold"
    new = oidc.token(new_key, org=org.name)
    for _ in range(60):  # up to 15 s: the refetch interval, on a busy machine
        status, _ = await as_jwt(server, new).post(WHO)
        if status == 200:
            break
        await asyncio.sleep(0.25)
    assert status == 200, "a token of the new key works once the JWKS is refetched"
    assert "signing key" in await refused(server, old)


async def test_a_flood_of_random_kids_does_not_refetch_the_keys(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    """Unauthenticated clients sending tokens with random kids cause at most one JWKS
    fetch per 10 s for the issuer (before: one a second)."""
    assert (await as_jwt(server, oidc.token(org=org.name)).post(WHO))[0] == 200
    before = oidc.requests["GET /keys"]
    for _ in range(3):
        strangers = [oidc.token(SigningKey.ec(), org=org.name) for _ in range(20)]
        answers = await asyncio.gather(*(refused(server, token) for token in strangers))
        assert all("not among the issuer's keys" in answer for answer in answers)
        await asyncio.sleep(1.1)  # what the one-a-second limit let through before
    assert oidc.requests["GET /keys"] - before <= 1


async def test_while_the_issuer_hangs_requests_do_not_queue(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    """Unknown-kid requests during a hanging JWKS fetch share that one fetch (before,
    each waited for the one lock and then fetched again, 5 s apiece); a known kid is
    answered meanwhile."""
    good = oidc.token(org=org.name)
    assert (await as_jwt(server, good).post(WHO))[0] == 200
    before = oidc.requests["GET /keys"]
    oidc.hold_keys()
    try:
        strangers = [oidc.token(SigningKey.ec(), org=org.name) for _ in range(4)]
        answers = await asyncio.gather(
            *(as_jwt(server, token).post(WHO) for token in strangers),
            as_jwt(server, good).post(WHO),
        )
    finally:
        oidc.release_keys()
    assert [status for status, _ in answers] == [401] * 4 + [200]
    assert oidc.requests["GET /keys"] - before <= 1


@pytest.mark.parametrize(
    ("claims", "words"),
    [
        ({"exp": 253402300800}, "exp is out of range"),
        ({"exp": 1e20}, "exp is out of range"),
        ({"exp": "4102444800"}, "exp must be a number"),
        ({"nbf": -1}, "nbf is out of range"),
        ({"iat": -5}, "iat is out of range"),
        ({"sub": "bo\u0000b"}, "sub claim contains control"),
        ({"sub": "alice\n2026-01-01 admin logged in"}, "sub claim contains control"),
        ({"sub": "\x1b[31malice"}, "sub claim contains control"),
        ({"sub": "\u202ealice"}, "sub claim contains control"),
        ({"sub": "a" * 3000}, "sub claim is longer than 255 characters"),
        ({"sub": ""}, "sub claim must be a non-empty string"),
        ({"org": "ORG\u0000"}, "org claim contains control"),
        ({"org": "o" * 300}, "org claim is longer than 255 characters"),
        ({"spacedock_role": "ADMIN\u0000"}, "spacedock_role claim contains control"),
        ({"spacedock_role": ["VIEWER", "x\u0007"]}, "spacedock_role claim contains control"),
        ({"spacedock_role": ["nope"] * 101}, "spacedock_role claim has more than 100 values"),
    ],
)
async def test_claims_out_of_bounds_are_401_saying_which(
    server: Server, oidc: OidcStandIn, org: Org, claims: dict[str, Any], words: str
) -> None:
    """Before: exp past 9999 was HTTP 500, a NUL in org was 500 on Postgres, and a NUL
    in sub made any audited mutation fail internally."""
    given = {"org": org.name, **claims}
    if isinstance(given["org"], str):
        given["org"] = given["org"].replace("ORG", org.name)
    token = oidc.token(**given)
    assert words in await refused(server, token)
    status, body = await as_jwt(server, token).post(
        'mutation { createRole(input: {name: "r1", policies: ["space:view"]}) { role { name } } }'
    )
    assert status == 401, body


async def test_a_good_token_works_over_websocket_and_a_bad_one_is_closed_4403(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    from gql import gql

    good = as_jwt(server, oidc.token(org=org.name, spacedock_role="VIEWER", sub="carol"))
    async with good.websocket() as session:
        result = await session.execute(gql("{ viewer { subject credentialKind } }"))
    assert result["viewer"] == {"subject": "carol", "credentialKind": "OIDC"}

    async with RawSocket(server.ws_url, oidc.token(org=org.name, aud="another-app")) as bad:
        assert await bad.init() is None
        assert bad.close_code == 4403
