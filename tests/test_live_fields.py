"""Live fields in lists: a table that asks for `namespaces` on many spaces gets each
cluster's answer within SPACEDOCK_LIVE_FIELD_TIMEOUT_S, and one slow cluster nulls
only its own field, with a PROVIDER_ERROR "timeout", instead of holding up the page.
Namespaces carry a stable id, so client caches can normalise them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import factories as make

SPACES_WITH_NAMESPACES = """
{
  spaces(first: 100) {
    nodes { id namespaces { id name space { id } } }
  }
}"""
# Six times the live-field timeout; short enough that the stand-in stops cleanly after.
SLOW_S = 6.0


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "3600", "SPACEDOCK_LIVE_FIELD_TIMEOUT_S": "1"}


@pytest.fixture
def fast() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


@pytest.fixture
def slow() -> Iterator[KubeStandIn]:
    with KubeStandIn() as k:
        yield k


async def register(org: Org, cluster: KubeStandIn) -> dict[str, Any]:
    config = {
        "clusterName": make.unique("standin"),
        "server": f"{cluster.url}/{make.unique('c')}",
        "caCert": cluster.ca_pem,
        "serviceAccountToken": cluster.token,
    }
    payload = await org.admin.mutate(
        make.REGISTER_SPACE,
        {"input": {"name": make.unique("space"), "provider": "GENERIC", "config": config}},
    )
    space: dict[str, Any] = make.succeeded(payload)["space"]
    return space


async def test_a_slow_cluster_times_out_alone_and_the_page_answers(
    org: Org, fast: KubeStandIn, slow: KubeStandIn
) -> None:
    quick = [await register(org, fast) for _ in range(3)]
    stuck = [await register(org, slow) for _ in range(2)]
    slow.delay_s = SLOW_S

    response = await org.viewer.call(SPACES_WITH_NAMESPACES)

    nodes = response["data"]["spaces"]["nodes"]
    by_id = {node["id"]: node for node in nodes}
    for space in quick:
        names = [namespace["name"] for namespace in by_id[space["id"]]["namespaces"]]
        assert "default" in names, "the fast cluster's namespaces are there"
    for space in stuck:
        assert by_id[space["id"]]["namespaces"] is None
    errors = response["errors"]
    assert {tuple(error["path"]) for error in errors} == {
        ("spaces", "nodes", nodes.index(by_id[space["id"]]), "namespaces") for space in stuck
    }
    for error in errors:
        assert error["extensions"]["code"] == "PROVIDER_ERROR"
        assert error["message"].startswith("timeout")


async def test_namespace_ids_are_stable_and_distinct(org: Org, fast: KubeStandIn) -> None:
    first, second = await register(org, fast), await register(org, fast)
    reads = [(await org.viewer.data(SPACES_WITH_NAMESPACES))["spaces"]["nodes"] for _ in range(2)]
    ids = [
        {(node["id"], ns["name"]): ns["id"] for node in nodes for ns in node["namespaces"]}
        for nodes in reads
    ]
    assert ids[0] == ids[1], "the same namespace keeps its id across reads"
    assert len(set(ids[0].values())) == len(ids[0]), "one id per space and name"
    assert (first["id"], "default") in ids[0] and (second["id"], "default") in ids[0]
    assert ids[0][(first["id"], "default")] != ids[0][(second["id"], "default")]
