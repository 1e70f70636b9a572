"""The CloudSpace API through the running server: a new org's default CloudSpace on the
platform's host space (which the tenant never sees), every refusal of the three
mutations with its field and code, the host-capacity check, and the refusal to
deregister a space that hosts CloudSpaces.

The host here is a cluster stand-in with no schedulable capacity, so every quota is
more than it can give; what happens on a host with room is in test_cloudspaces.py.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gql.transport.exceptions import TransportQueryError

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.cloudspaces import (
    CREATE,
    DELETE,
    EVENTS,
    LIST,
    ONE,
    UPDATE,
    Platform,
    default_of,
    request,
    start_platform,
    wait_for_subscribers,
)
from tests.support.server import Backend


@pytest.fixture(scope="module")
def host_cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host_cluster: KubeStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    running = start_platform(
        backend, log_path, host_cluster.url, host_cluster.ca_pem, host_cluster.token, {}
    )
    yield running
    running.server.stop()


@pytest.fixture
async def tenant(platform: Platform) -> Org:
    return await platform.tenant()


async def test_a_new_org_gets_its_default_cloudspace_and_never_sees_the_host(
    platform: Platform, tenant: Org
) -> None:
    data = await tenant.viewer.data(LIST)
    assert data["cloudSpaces"]["totalCount"] == 1
    default = default_of(data)
    assert default["isDefault"] is True
    assert default["quota"] == {"cpu": 2.0, "memoryMiB": 4096}
    assert default["hostSpace"] is None  # the platform's space is not the tenant's to see
    assert default["vclusters"] == [{"name": "default", "ready": False}]
    assert default["usage"] is None
    # The host space itself is unknown to the tenant, by id and in its list.
    assert (await tenant.admin.data(ONE, {"id": platform.host_id}))["cloudSpace"] is None
    spaces = await tenant.admin.data("{ spaces(first: 10) { totalCount } }")
    assert spaces["spaces"]["totalCount"] == 0
    # node(id) resolves the CloudSpace for its org, and for no other.
    mine = await tenant.viewer.data(ONE, {"id": default["id"]})
    assert mine["node"] == {"id": default["id"], "name": "default"}
    other = await platform.tenant("other")
    foreign = await other.admin.data(ONE, {"id": default["id"]})
    assert foreign == {"cloudSpace": None, "node": None}


async def test_every_fault_of_a_creation_is_reported_together(tenant: Org) -> None:
    payload = await tenant.admin.mutate(
        CREATE, {"input": {"name": "Not_A_Label", "cpu": 0, "memoryMiB": 10}}
    )
    assert payload["cloudSpace"] is None
    faults = {tuple(e["field"]): e["code"] for e in payload["userErrors"]}
    assert faults == {
        ("input", "name"): "INVALID",
        ("input", "cpu"): "INVALID",
        ("input", "memoryMiB"): "INVALID",
    }
    payload = await tenant.admin.mutate(
        CREATE, {"input": {"name": "default", "cpu": 0.0005, "memoryMiB": 512}}
    )
    faults = {tuple(e["field"]): e["code"] for e in payload["userErrors"]}
    assert faults == {("input", "name"): "CONFLICT", ("input", "cpu"): "INVALID"}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        # A Service named so is refused by the API server (DNS-1035: a letter first).
        ("1web", "must be a DNS-1035 label"),
        # Helm's release names stop at 53; the StatefulSet's pod label at 52 + 11.
        ("a" * 53, "must be at most 52 characters"),
        ("web-", "must be a DNS-1035 label"),
    ],
)
async def test_a_name_no_derived_object_could_take_is_refused_on_its_field(
    tenant: Org, name: str, why: str
) -> None:
    payload = await tenant.editor.mutate(
        CREATE, {"input": {"name": name, "cpu": 0.5, "memoryMiB": 256}}
    )
    assert payload["cloudSpace"] is None
    (error,) = payload["userErrors"]
    assert (error["field"], error["code"]) == (["input", "name"], "INVALID")
    assert error["message"].startswith(f"name {why}")


async def test_the_longest_name_every_derived_object_takes_is_accepted(tenant: Org) -> None:
    # (This module's host is full: the quota is refused, the name is not. A 52-character
    # CloudSpace reaching READY on the chart is in test_cloudspaces.)
    payload = await tenant.editor.mutate(
        CREATE, {"input": {"name": "w" * 52, "cpu": 0.5, "memoryMiB": 256}}
    )
    assert [e["field"] for e in payload["userErrors"]] == [["input", "cpu"], ["input", "memoryMiB"]]


async def test_the_audit_log_of_a_creation_never_names_the_platforms_host(
    platform: Platform, tenant: Org
) -> None:
    # Refused (the module's host is full) after its host was found: the call's targets are
    # what it named or made, never the platform's space it was checked against.
    payload = await tenant.editor.mutate(
        CREATE, {"input": {"name": "audited", "cpu": 0.5, "memoryMiB": 256}}
    )
    assert [e["code"] for e in payload["userErrors"]] == ["QUOTA_EXCEEDED", "QUOTA_EXCEEDED"]
    audited = await tenant.admin.data(
        "{ auditEvents(first: 20) { nodes { action outcome targetIds } } }"
    )
    [event] = [e for e in audited["auditEvents"]["nodes"] if e["action"] == "createCloudSpace"]
    assert event == {"action": "createCloudSpace", "outcome": "QUOTA_EXCEEDED", "targetIds": []}
    assert platform.host_id not in str(audited)


async def test_a_host_of_another_org_is_not_found_and_viewers_cannot_create(
    platform: Platform, tenant: Org
) -> None:
    payload = await tenant.admin.mutate(
        CREATE,
        {"input": {"name": "mine", "hostSpaceId": platform.host_id, "cpu": 1, "memoryMiB": 512}},
    )
    assert [(e["field"], e["code"]) for e in payload["userErrors"]] == [
        (["input", "hostSpaceId"], "NOT_FOUND")
    ]
    payload = await tenant.viewer.mutate(
        CREATE, {"input": {"name": "mine", "cpu": 1, "memoryMiB": 512}}
    )
    assert [e["code"] for e in payload["userErrors"]] == ["FORBIDDEN"]
    assert (await tenant.viewer.data(LIST))["cloudSpaces"]["totalCount"] == 1


async def test_a_quota_beyond_the_hosts_capacity_is_refused_with_the_orgs_own_numbers(
    platform: Platform, tenant: Org
) -> None:
    # The stand-in host has no schedulable node: nothing is free, whatever others hold.
    payload = await tenant.editor.mutate(
        CREATE, {"input": {"name": "big", "cpu": 4, "memoryMiB": 8192}}
    )
    assert payload["cloudSpace"] is None
    by_field = {tuple(e["field"]): e for e in payload["userErrors"]}
    assert {e["code"] for e in by_field.values()} == {"QUOTA_EXCEEDED"}
    cpu = by_field[("input", "cpu")]["message"]
    memory = by_field[("input", "memoryMiB")]["message"]
    # The ask, and what this org's own default CloudSpace holds there.
    assert cpu.startswith(
        "cpu 4 (+1.1 for the vCluster's control plane and Flux) is more than this host can give now "
        "(your org's other CloudSpaces there (1) hold 2 cores)"
    )
    assert memory.startswith(
        "memoryMiB 8192 (+960 for the vCluster's control plane and Flux) is more than this host can give now "
        "(your org's other CloudSpaces there (1) hold 4096 MiB)"
    )
    for message in (cpu, memory):
        assert platform.host_name not in message  # nor any org's CloudSpace or org name
        assert "default" not in message and "tenant-" not in message
        assert "free" not in message.split(";")[0] and "allocatable" not in message

    # What other orgs hold moves nothing in it: another org's default CloudSpace lands on
    # the same host, and the same ask is refused in the same words.
    await platform.tenant("neighbour")
    again = await tenant.editor.mutate(
        CREATE, {"input": {"name": "big", "cpu": 4, "memoryMiB": 8192}}
    )
    assert again["userErrors"] == payload["userErrors"]

    default = default_of(await tenant.viewer.data(LIST))
    payload = await tenant.editor.mutate(
        UPDATE, {"input": {"id": default["id"], "cpu": 3, "memoryMiB": 4096}}
    )
    assert [(e["field"], e["code"]) for e in payload["userErrors"]] == [
        (["input", "cpu"], "QUOTA_EXCEEDED"),
        (["input", "memoryMiB"], "QUOTA_EXCEEDED"),
    ]
    assert "(your org has no other CloudSpace there)" in payload["userErrors"][0]["message"]
    assert default_of(await tenant.viewer.data(LIST))["quota"] == {"cpu": 2.0, "memoryMiB": 4096}


async def test_the_host_cannot_be_deregistered_while_it_hosts_cloudspaces(
    platform: Platform, tenant: Org
) -> None:
    payload = await platform.admin.mutate(
        make.DEREGISTER_SPACE, {"input": {"id": platform.host_id}}
    )
    assert payload["space"] is None
    (error,) = payload["userErrors"]
    assert error["code"] == "PRECONDITION_FAILED"
    assert "CloudSpace" in error["message"] and "delete them" in error["message"]


async def test_deleting_asks_for_the_name_and_the_policy_then_starts_at_once(
    platform: Platform, tenant: Org
) -> None:
    default = default_of(await tenant.viewer.data(LIST))
    wrong = await tenant.admin.mutate(
        DELETE, {"input": {"id": default["id"], "confirmName": "defaul"}}
    )
    assert [(e["field"], e["code"]) for e in wrong["userErrors"]] == [
        (["input", "confirmName"], "INVALID")
    ]
    editor = await tenant.editor.mutate(
        DELETE, {"input": {"id": default["id"], "confirmName": "default"}}
    )
    assert [e["code"] for e in editor["userErrors"]] == ["FORBIDDEN"]
    other = await platform.tenant("other")
    foreign = await other.admin.mutate(
        DELETE, {"input": {"id": default["id"], "confirmName": "default"}}
    )
    assert [(e["field"], e["code"]) for e in foreign["userErrors"]] == [
        (["input", "id"], "NOT_FOUND")
    ]

    seen: list[dict[str, Any]] = []
    async with tenant.viewer.websocket() as session:

        async def listen() -> None:
            async for event in session.subscribe(request(EVENTS, {"id": default["id"]})):
                seen.append(event["cloudSpacePhaseChanged"])
                if event["cloudSpacePhaseChanged"]["phase"] == "DELETING":
                    return

        listening = asyncio.create_task(listen())
        await wait_for_subscribers(platform.server, 1)
        done = await tenant.admin.mutate(
            DELETE, {"input": {"id": default["id"], "confirmName": "default"}}
        )
        assert done["userErrors"] == []
        assert done["cloudSpace"]["phase"] == "DELETING"
        await asyncio.wait_for(listening, 20)
    deleting = seen[-1]
    assert deleting["cloudSpaceId"] == default["id"]
    assert deleting["phase"] == "DELETING"
    assert deleting["previous"] in ("PENDING", "PROVISIONING", "FAILED")


async def test_no_kubeconfig_before_the_vcluster_is_up(platform: Platform, tenant: Org) -> None:
    # The stand-in host has no room, so the default CloudSpace never gets a vCluster.
    default = default_of(await tenant.viewer.data(LIST))
    data = await tenant.editor.data(
        "query($id: ID!) { cloudSpace(id: $id) { vclusters { ready kubeconfig kubeconfigExpiresAt } } }",
        {"id": default["id"]},
    )
    assert data["cloudSpace"]["vclusters"] == [
        {"ready": False, "kubeconfig": None, "kubeconfigExpiresAt": None}
    ]
    url = f"{platform.server.base}/api/v1/cloudspaces/{default['id']}/vclusters/default/kubeconfig"
    status, body = await download(url, tenant.tokens["editor"])
    assert status == 409
    assert json.loads(body)["errors"][0]["extensions"]["code"] == "PRECONDITION_FAILED"
    assert (await download(url.replace(default["id"], "cs_nope"), tenant.tokens["editor"]))[
        0
    ] == 404
    # The exec plugin form and its credential route wait for the vCluster alike.
    assert (await download(f"{url}?credential=exec", tenant.tokens["editor"]))[0] == 409
    credential = url.replace("/kubeconfig", "/credential")
    assert (await download(credential, tenant.tokens["editor"]))[0] == 409
    assert (await download(credential, tenant.tokens["viewer"]))[0] == 403
    # Who asks is known before what is asked: no token is 401 whatever the query.
    assert (await download(f"{url}?credential=cert", ""))[0] == 401
    assert (await download(f"{url}?credential=cert", tenant.tokens["editor"]))[0] == 400


async def test_a_viewers_card_query_succeeds_without_the_kubeconfig(tenant: Org) -> None:
    default = default_of(await tenant.viewer.data(LIST))
    answer = await tenant.viewer.call(
        """query($id: ID!) { cloudSpace(id: $id) {
             name phase quota { cpu memoryMiB } usage { cpu memoryMiB }
             vclusters { name ready kubeconfigExpiresAt } } }""",
        {"id": default["id"]},
    )
    assert not answer.get("errors"), answer
    card = answer["data"]["cloudSpace"]
    assert (card["name"], card["quota"], card["usage"]) == (
        "default",
        {"cpu": 2.0, "memoryMiB": 4096},
        None,
    )
    assert card["vclusters"] == [{"name": "default", "ready": False, "kubeconfigExpiresAt": None}]


async def download(url: str, token: str) -> tuple[int, str]:
    def get() -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        sent = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(sent, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    return await asyncio.to_thread(get)


async def test_watching_an_unknown_or_foreign_cloudspace_is_not_found(
    platform: Platform, tenant: Org
) -> None:
    other = await platform.tenant("other")
    foreign = default_of(await other.viewer.data(LIST))["id"]
    for cloud_space_id in (foreign, "cs_unknown"):
        async with tenant.viewer.websocket() as session:
            with pytest.raises(TransportQueryError) as refused:
                async for _ in session.subscribe(request(EVENTS, {"id": cloud_space_id})):
                    pass
        assert refused.value.errors is not None
        assert refused.value.errors[0]["extensions"]["code"] == "NOT_FOUND"
