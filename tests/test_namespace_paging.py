"""A space's live namespace list as an API server serves a big or busy cluster (issue 22, 8):
read in chunks (`limit` and `continue`), and a 429 with `Retry-After` asked again after
the wait while the field's time allows, else a provider error that names the wait."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from sim.kube_standin import HostileAnswer, KubeStandIn
from tests.conftest import Org
from tests.support import factories as make

LIST_CALL = "GET /api/v1/namespaces"
NAMESPACES = """
query($id: ID!) {
  space(id: $id) { id name namespaces { name managed } }
}"""
STATUS = "query($id: ID!) { space(id: $id) { status } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # The probe loop stays out of the way once it has probed each space; a live field
    # may wait long enough for one Retry-After of a second.
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600", "SPACEDOCK_LIVE_FIELD_TIMEOUT_S": "5"}


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


async def registered(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    """A GENERIC space on the stand-in, once its first probe is in (so a probe takes none
    of the 429s a test sets up)."""
    space = await make.register_generic_space(
        org.editor, server=cluster.url, ca=cluster.ca_pem, token=cluster.token
    )
    deadline = asyncio.get_running_loop().time() + 30
    while (await org.viewer.data(STATUS, {"id": space["id"]}))["space"]["status"] != "ACTIVE":
        assert asyncio.get_running_loop().time() < deadline, "the first probe never came"
        await asyncio.sleep(0.05)
    return space


async def test_a_cluster_with_more_namespaces_than_a_chunk_lists_them_all(
    org: Org, cluster: KubeStandIn
) -> None:
    bulk = [f"team-{n:04d}" for n in range(1100)]
    cluster.add_namespaces(bulk)
    space = await registered(org, cluster)
    before = cluster.requests[LIST_CALL]

    data = await org.viewer.data(NAMESPACES, {"id": space["id"]})

    names = [namespace["name"] for namespace in data["space"]["namespaces"]]
    assert names == sorted(["default", "kube-system", *bulk])
    # 1,102 namespaces in chunks of 500, as kubectl reads them: three calls.
    assert cluster.requests[LIST_CALL] - before == 3


async def test_a_throttled_cluster_is_asked_again_after_the_wait_it_names(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await registered(org, cluster)
    cluster.throttle(1, retry_after_s=1)

    data = await org.viewer.data(NAMESPACES, {"id": space["id"]})

    assert {n["name"] for n in data["space"]["namespaces"]} == {"default", "kube-system"}
    assert cluster.throttled == 1


async def test_a_cluster_that_asks_for_a_longer_wait_is_a_temporary_error_naming_it(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await registered(org, cluster)
    cluster.throttle(5, retry_after_s=6)  # more than the field's 5 s

    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})

    assert response["data"]["space"]["namespaces"] is None
    [error] = response["errors"]
    assert error["extensions"]["code"] == "PROVIDER_ERROR"
    assert error["message"].startswith(
        "HTTP 429 from the API server (too many requests, retry after 6s)"
    ), error["message"]
    assert cluster.throttled == 1, "a wait past the field's time is not waited out"


async def test_a_continue_token_no_api_server_sends_is_an_unexpected_answer(
    org: Org, cluster: KubeStandIn
) -> None:
    space = await registered(org, cluster)
    chunk = {"kind": "NamespaceList", "apiVersion": "v1", "items": []}
    cluster.answers[LIST_CALL] = HostileAnswer(
        json.dumps({**chunk, "metadata": {"continue": "x" * 5000}}).encode()
    )

    response = await org.viewer.call(NAMESPACES, {"id": space["id"]})

    [error] = response["errors"]
    assert error["message"] == (
        "unexpected answer from the API server: a continue token that is not a short text"
    )
    assert cluster.requests[LIST_CALL] == 1, "the token was not sent back"
