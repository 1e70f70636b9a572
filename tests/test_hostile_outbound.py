"""Issue 18: one outbound gate for every connection made on a tenant's say-so.

Canaries listen on 127.0.0.2 and 127.0.0.3, which this module's server denies
(SPACEDOCK_CLUSTER_DENY_CIDRS=127.0.0.2/31), and on 127.0.0.1, which the unspecified
addresses (0.0.0.0, `::`) reach on Linux and which are always denied. Each kind of URL
is pointed at them in every spelling and nothing may connect:

- a GCP service-account key's `token_uri` (createCloudAccount and
  rotateCloudAccountCredentials; google-auth makes its token exchange through the gate);
- a GENERIC space's server at an unspecified address, at registration, in the probe
  and in the session every cluster call uses;
- `fetch`, the entry point for any other URL (OIDC discovery, model endpoints): a denied
  address, and redirects, which are answers, never followed.

The OIDC issuer's discovery document and JWKS are tested the same way in
tests/test_oidc_keys.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError
from providers.network import OutboundSession, fetch
from providers.probe import VersionProber
from sim.clouds import GCP_PROJECT, Clouds
from sim.https_standin import HttpsStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.canary import Canary

DENY = (ipaddress.ip_network("127.0.0.2/31"),)


class Canaries:
    def __init__(self) -> None:
        self.local = Canary("127.0.0.1")  # where 0.0.0.0 and :: lead
        self.first = Canary("127.0.0.2")
        self.second = Canary("127.0.0.3")
        self.all = (self.local, self.first, self.second)

    def contacted(self) -> int:
        return sum(canary.connections for canary in self.all)


class Redirector(HttpsStandIn):
    """Answers `GET /to?location=…` with a 302 to that location."""

    name = "redirector"

    def routes(self) -> list[web.RouteDef]:
        async def to(request: web.Request) -> web.Response:
            raise web.HTTPFound(request.query["location"])

        return [web.get("/to", to)]


@pytest.fixture(scope="module")
def canaries() -> Iterator[Canaries]:
    made = Canaries()
    for canary in made.all:
        canary.__enter__()
    yield made
    for canary in made.all:
        canary.__exit__()


@pytest.fixture(scope="module")
def redirector() -> Iterator[Redirector]:
    with Redirector() as running:
        yield running


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600", "SPACEDOCK_CLUSTER_DENY_CIDRS": "127.0.0.2/31"}


def token_uris(canaries: Canaries) -> dict[str, str]:
    """Spellings of a denied or unspecified token endpoint, and what the refusal says."""
    first, second, local = canaries.first.port, canaries.second.port, canaries.local.port
    return {
        f"https://127.0.0.2:{first}/token": "denied: the address 127.0.0.2",
        f"https://2130706435:{second}/token": "denied: the address 127.0.0.3",
        f"https://[::ffff:127.0.0.2]:{first}/token": "denied: the address 127.0.0.2",
        f"https://0x7f.0.0.3:{second}/token": "denied: the address 127.0.0.3",
        f"https://127.3:{second}/token": "denied: the address 127.0.0.3",
        f"https://[64:ff9b::7f00:2]:{first}/token": "denied: the address 64:ff9b::7f00:2",
        f"https://oauth2.googleapis.com@127.0.0.2:{first}/token": "must not carry credentials",
        f"https://0:{local}/token": "denied: the address 0.0.0.0",
        f"https://[::]:{local}/token": "denied: the address ::",
    }


def gcp_key(clouds: Clouds, token_uri: str) -> dict[str, Any]:
    return {
        "serviceAccountJson": {**clouds.gcp.service_account(GCP_PROJECT), "token_uri": token_uri}
    }


def assert_gcp_refused(payload: dict[str, Any], why: str) -> None:
    assert payload["cloudAccount"] is None
    [error] = payload["userErrors"]
    assert (error["field"], error["code"]) == (["input", "credentials"], "PROVIDER_ERROR")
    assert "token_uri cannot be used" in error["message"] and why in error["message"]


async def test_a_gcp_key_cannot_point_its_token_exchange_at_a_denied_address(
    org: Org, clouds: Clouds, canaries: Canaries
) -> None:
    for token_uri, why in token_uris(canaries).items():
        payload = await org.admin.mutate(
            make.CREATE_CLOUD_ACCOUNT,
            {
                "input": {
                    "name": make.unique("gcp"),
                    "provider": "GCP",
                    "credentials": gcp_key(clouds, token_uri),
                }
            },
        )
        assert_gcp_refused(payload, why)
    assert (await org.viewer.data("{ cloudAccounts { totalCount } }"))["cloudAccounts"][
        "totalCount"
    ] == 0
    assert canaries.contacted() == 0


async def test_rotating_to_such_a_key_is_refused_and_keeps_the_old_one(
    org: Org, clouds: Clouds, canaries: Canaries
) -> None:
    account = await make.create_cloud_account(org.admin, "GCP")
    token_uri, why = next(iter(token_uris(canaries).items()))
    payload = await org.admin.mutate(
        make.ROTATE_CLOUD_ACCOUNT_CREDENTIALS,
        {"input": {"id": account["id"], "credentials": gcp_key(clouds, token_uri)}},
    )
    assert_gcp_refused(payload, why)
    clusters = await org.admin.data(
        "query($id: ID!) { cloudAccount(id: $id) { clusters { name } } }",
        {"id": account["id"]},
    )
    assert clusters["cloudAccount"]["clusters"] is not None  # the old key still works
    assert canaries.contacted() == 0


UNSPECIFIED = ["0", "0.0.0.0", "0x0", "0.0", "0.1.2.3", "[::]", "[::0]", "[0:0:0:0:0:0:0:0]"]
UNSPECIFIED += ["[::ffff:0.0.0.0]", "[::ffff:0:0]"]


@pytest.mark.parametrize("host", UNSPECIFIED)
async def test_an_unspecified_server_address_is_refused_at_registration(
    org: Org, canaries: Canaries, host: str
) -> None:
    payload = await org.admin.mutate(
        make.REGISTER_SPACE,
        {
            "input": {
                "name": make.unique("anyhost"),
                "provider": "GENERIC",
                "config": make.generic_config(server=f"https://{host}:{canaries.local.port}"),
            }
        },
    )
    assert payload["space"] is None
    assert make.error_fields(payload) == {(("input", "config", "server"), "INVALID")}
    assert "denied" in payload["userErrors"][0]["message"]
    assert canaries.contacted() == 0


async def test_a_stored_unspecified_server_is_never_probed_nor_called(
    canaries: Canaries,
) -> None:
    """A space registered before the rule came in: the probe and the cluster session
    refuse it before connecting."""
    prober = VersionProber(5.0)
    try:
        for host in ("0.0.0.0", "[::]", "0"):
            outcome = await prober.probe(
                ClusterCredentials(
                    server=f"https://{host}:{canaries.local.port}", ca_pem=make.ca_pem()
                )
            )
            assert not outcome.ok and outcome.error is not None
            assert outcome.error.startswith("denied: the address")
    finally:
        await prober.close()
    session = OutboundSession(())
    try:
        for host in ("0.0.0.0", "[::]", "0"):
            with pytest.raises(PermanentError, match="denied: the address"):
                await session.request("GET", f"http://{host}:{canaries.local.port}/version")
    finally:
        await session.close()
    assert canaries.contacted() == 0


async def test_fetch_refuses_denied_addresses_and_does_not_follow_redirects(
    canaries: Canaries, redirector: Redirector
) -> None:
    context = redirector.client_ssl_context()

    async def get(url: str) -> int:
        answer = await fetch(
            DENY, "GET", url, max_body_bytes=4096, timeout_s=10, ssl_context=context
        )
        return answer.status

    denied = f"https://127.0.0.2:{canaries.first.port}/x"
    assert await get(f"{redirector.url}/to?location={denied}") == 302, "a redirect is an answer"
    with pytest.raises(PermanentError, match=r"denied: the address 127\.0\.0\.2"):
        await get(denied)
    assert canaries.contacted() == 0
