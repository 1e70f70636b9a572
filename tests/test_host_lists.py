"""Lists a CloudSpace's host and vCluster are read with (pods for admission, nodes for
capacity, namespaces and quotas inside a vCluster) come in chunks of 500 as kubectl reads
them, so a large cluster neither answers one huge list nor is counted short."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from providers import host
from providers.cluster_credentials import ClusterCredentials
from sim.kube_standin import KubeStandIn

LIST_CALL = "GET /api/v1/namespaces"


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


def credentials_of(cluster: KubeStandIn) -> ClusterCredentials:
    return ClusterCredentials(server=cluster.url, ca_pem=cluster.ca_pem, token=cluster.token)


async def test_a_list_longer_than_a_chunk_is_read_whole_in_chunks(cluster: KubeStandIn) -> None:
    bulk = [f"team-{n:04d}" for n in range(1100)]
    cluster.add_namespaces(bulk)

    async with host.connect(credentials_of(cluster)) as kube:
        listed = await kube.items("/api/v1/namespaces")

    names = sorted(item["metadata"]["name"] for item in listed)
    assert names == sorted(["default", "kube-system", *bulk])
    # 1,102 namespaces in chunks of 500: three calls, none of them unlimited.
    assert cluster.requests[LIST_CALL] == 3


async def test_a_short_list_is_one_call(cluster: KubeStandIn) -> None:
    async with host.connect(credentials_of(cluster)) as kube:
        listed = await kube.items("/api/v1/namespaces")

    assert {item["metadata"]["name"] for item in listed} == {"default", "kube-system"}
    assert cluster.requests[LIST_CALL] == 1
