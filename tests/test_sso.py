"""SSO with bearer JWTs from an OIDC issuer (the stand-in), beside API tokens.

A good RS256 or ES256 token works over HTTP and WebSocket, with org and role from its
claims. Every bad one is a 401 whose message says what was wrong and never repeats the
token: expired, not yet valid, wrong issuer, wrong audience, alg none, HS256 signed
with the public key, a key rotated away, an unknown org. A missing role claim is VIEWER.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Org
from tests.support import factories as make
from tests.support.graphql import GraphQL, RawSocket
from tests.support.oidc_standin import OidcStandIn
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


async def test_key_rotation_refuses_the_old_key_and_accepts_the_new(
    server: Server, oidc: OidcStandIn, org: Org
) -> None:
    old = oidc.token(org=org.name)
    assert (await as_jwt(server, old).post(WHO))[0] == 200
    new_key = oidc.rotate()
    new = oidc.token(new_key, org=org.name)
    for _ in range(100):  # the keys are refetched on an unknown kid, at most once a second
        status, _ = await as_jwt(server, new).post(WHO)
        if status == 200:
            break
        await asyncio.sleep(0.1)
    assert status == 200, "a token of the new key works once the JWKS is refetched"
    assert "signing key" in await refused(server, old)
    unknown = oidc.token(org=org.name)
    assert (await as_jwt(server, unknown).post(WHO))[0] == 200


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
