"""Issue 7, defect 2: a cluster that answers with a redirect cannot steer spacedock.

A hostile API server answers `/api/v1/namespaces` (and `/version`) with a 3xx whose
Location is a canary on 127.0.0.2, which this server denies. Neither the namespace
listing, createNamespace nor the probe follows it: the canary never gets a connection,
and the caller sees PROVIDER_ERROR naming the redirect, never the canary's body. A
redirect to a perfectly allowed place is not followed either. Proxy settings in the
server's environment are ignored, so they cannot route a call around the deny list.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.canary import BODY, Canary

NAMESPACES = "query($id: ID!) { space(id: $id) { name namespaces { name } } }"
CREATE_NAMESPACE = f"""
mutation($input: CreateNamespaceInput!) {{
  createNamespace(input: $input) {{ namespace {{ name }} {make.USER_ERRORS} }}
}}"""
LAST_PROBE = "query($id: ID!) { space(id: $id) { lastProbe { ok error } } }"


@pytest.fixture(scope="module")
def canary() -> Iterator[Canary]:
    with Canary("127.0.0.2") as listening:
        yield listening


@pytest.fixture(scope="module")
def proxy_canary() -> Iterator[Canary]:
    with Canary("127.0.0.3") as listening:
        yield listening


@pytest.fixture(scope="module")
def server_env(proxy_canary: Canary) -> dict[str, str]:
    return {
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_CLUSTER_DENY_CIDRS": "127.0.0.2/32",
        # Were these honoured, every call would go to the proxy canary instead.
        **{name: proxy_canary.url for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")},
        **{name: proxy_canary.url for name in ("HTTP_PROXY", "http_proxy")},
    }


@pytest.fixture(scope="module")
def standin() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def cluster(standin: KubeStandIn) -> Iterator[KubeStandIn]:
    yield standin
    standin.heal()


def assert_nothing_leaked(text: str, canary: Canary) -> None:
    assert BODY.decode() not in text
    assert str(canary.port) not in text, "the denied address is not echoed back either"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_listing_does_not_follow_a_redirect_to_a_denied_address(
    org: Org, cluster: KubeStandIn, canary: Canary, status: int
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.redirect_status = status
    cluster.redirect_to = f"{canary.url}/api/v1/namespaces"

    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})

    assert response["data"]["space"] == {"name": space["name"], "namespaces": None}
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith(f"HTTP {status} from the API server"), error["message"]
    assert "redirects are not followed" in error["message"]
    assert_nothing_leaked(str(response), canary)
    assert canary.connections == 0


async def test_create_does_not_follow_a_redirect(
    org: Org, cluster: KubeStandIn, canary: Canary
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    cluster.redirect_status = 307  # keeps the method and body: a POST would be replayed
    cluster.redirect_to = f"{canary.url}/api/v1/namespaces"
    name = make.unique("steered")

    payload = await org.editor.mutate(
        CREATE_NAMESPACE, {"input": {"spaceId": space["id"], "name": name}}
    )

    assert payload["namespace"] is None
    [error] = payload["userErrors"]
    assert (error["field"], error["code"]) == (None, "PROVIDER_ERROR")
    assert error["message"].startswith("HTTP 307 from the API server"), error["message"]
    assert_nothing_leaked(str(payload), canary)
    assert canary.connections == 0
    assert name not in cluster.namespaces


async def test_a_redirect_to_an_allowed_cluster_is_not_followed_either(
    org: Org, cluster: KubeStandIn
) -> None:
    """Not following is the rule, not a deny-list verdict: here the Location is a real,
    allowed, healthy API server path, and the call still stops at the redirect."""
    space = await make.register_on_standin(org.admin, cluster)
    before = cluster.requests["GET /api/v1/namespaces"]
    cluster.redirect_to = f"{cluster.url}/elsewhere/api/v1/namespaces"

    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})

    assert make.top_level_codes(response) == ["PROVIDER_ERROR"]
    assert response["errors"][0]["message"].startswith("HTTP 302")
    assert cluster.requests["GET /api/v1/namespaces"] == before + 1, "one call, no second hop"


async def test_the_probe_does_not_follow_a_redirect(
    org: Org, cluster: KubeStandIn, canary: Canary
) -> None:
    cluster.redirect_to = f"{canary.url}/version"
    space = await make.register_on_standin(org.admin, cluster)
    deadline = time.monotonic() + 15
    while (
        probe := (await org.viewer.data(LAST_PROBE, {"id": space["id"]}))["space"]["lastProbe"]
    ) is None:
        assert time.monotonic() < deadline, "the first probe never ran"
        await asyncio.sleep(0.05)

    assert probe["ok"] is False
    assert probe["error"].startswith("HTTP 302 from the API server"), probe["error"]
    assert canary.connections == 0


async def test_proxy_settings_are_not_used_for_cluster_calls(
    org: Org, cluster: KubeStandIn, proxy_canary: Canary
) -> None:
    space = await make.register_on_standin(org.admin, cluster)
    data: dict[str, Any] = await org.viewer.data(NAMESPACES, {"id": space["id"]})
    assert "kube-system" in {n["name"] for n in data["space"]["namespaces"]}
    name = make.unique("direct")
    payload = await org.editor.mutate(
        CREATE_NAMESPACE, {"input": {"spaceId": space["id"], "name": name}}
    )
    assert payload == {"namespace": {"name": name}, "userErrors": []}
    assert proxy_canary.connections == 0
