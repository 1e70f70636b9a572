"""Apps in a CloudSpace's several vClusters, end to end (issue 23 with issue 22 item 4): the
running server's reconciler brings up a second vCluster in the tenant's default CloudSpace
(each one running Flux on the host stand-in), an app named into it becomes READY there
with its objects in that vCluster and not the first, and a name the CloudSpace has no
vCluster of is refused on target.vclusterName. removeVCluster makes the target of the
vCluster's apps GONE: they show UNKNOWN (TargetGone) with the reason, a new revision is
dead-lettered, createApp into it is refused, deleteApp still goes; apps in the first
vCluster stay READY. One CloudSpace with two vClusters in all: the stand-in's Flux
simulation is slow under load."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import apps as support
from tests.support.cloudspaces import Platform, eventually, key, serve_platform
from tests.support.server import Backend

VCLUSTER = "id name phase"
ADD = f"""
mutation($input: AddVClusterInput!) {{
  addVCluster(input: $input) {{ vcluster {{ {VCLUSTER} }} userErrors {{ field message code }} }}
}}"""
REMOVE = f"""
mutation($input: RemoveVClusterInput!) {{
  removeVCluster(input: $input) {{ vcluster {{ {VCLUSTER} }} userErrors {{ field message code }} }}
}}"""
VCLUSTERS = f"query($id: ID!) {{ cloudSpace(id: $id) {{ vclusters {{ {VCLUSTER} }} }} }}"
REMOVED = ("vCluster second being removed", "vCluster second removed")


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    directory = Path(tmp_path_factory.mktemp("server"))
    env = {
        "SPACEDOCK_APP_STATUS_INTERVAL_S": "0.2",
        "SPACEDOCK_APP_RETRY_INTERVAL_S": "0.5",
    }
    yield from serve_platform(backend, host, directory / "server.log", env)


@pytest.fixture(scope="module")
def tenant(platform: Platform) -> Org:
    return asyncio.run(platform.tenant())


async def vclusters_of(org: Org, cloud_space_id: str) -> list[dict[str, Any]]:
    data = await org.viewer.data(VCLUSTERS, {"id": cloud_space_id})
    found: list[dict[str, Any]] = data["cloudSpace"]["vclusters"]
    return found


@pytest.fixture(scope="module")
def cloud_space(platform: Platform, tenant: Org) -> dict[str, Any]:
    """The tenant's default CloudSpace, READY, with a second vCluster `second`, READY."""

    async def made() -> dict[str, Any]:
        async def ready() -> dict[str, Any] | None:
            data = await tenant.viewer.data("{ cloudSpaces(first: 5) { nodes { id name phase } } }")
            found = [cs for cs in data["cloudSpaces"]["nodes"] if cs["phase"] == "READY"]
            return found[0] if found else None

        found = await eventually(ready, 120)
        added = await tenant.editor.mutate(
            ADD, {"input": {"cloudSpaceId": found["id"], "name": "second"}}
        )
        assert added["userErrors"] == []

        async def both_ready() -> bool:
            vclusters = await vclusters_of(tenant, found["id"])
            return [v["phase"] for v in vclusters] == ["READY", "READY"]

        await eventually(both_ready, 120)
        return found

    return asyncio.run(made())


def in_vcluster(cloud_space: dict[str, Any], vcluster: str | None) -> dict[str, Any]:
    target = {"cloudSpaceId": cloud_space["id"], "namespace": "shop"}
    return target if vcluster is None else {**target, "vclusterName": vcluster}


def vcluster_api(host: HostStandIn, cloud_space: dict[str, Any], name: str) -> Any:
    return host.vcluster(f"cs-{key(cloud_space['id'])}", name)


async def deliver(
    host: HostStandIn, tenant: Org, cloud_space: dict[str, Any], name: str, vcluster: str | None
) -> dict[str, Any]:
    """An app of one Deployment `name` in `vcluster` (None: the first), once READY."""
    url = f"https://git.example/{name}.git"
    host.flux.git(url).commit({"deploy/app.yaml": support.manifests(support.deployment(name))})
    created = await support.create(
        tenant.editor, name, in_vcluster(cloud_space, vcluster), support.git_input(url)
    )
    return await support.until_status(tenant.viewer, created["app"]["id"], "READY")


async def test_an_app_in_the_second_vcluster_is_ready_there_not_in_the_first(
    host: HostStandIn, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    first_name = cloud_space["name"]
    back = await deliver(host, tenant, cloud_space, "back", "second")
    front = await deliver(host, tenant, cloud_space, "front", None)
    assert (back["vclusterName"], front["vclusterName"]) == ("second", first_name)
    assert back["gate"] is None
    assert [(w["name"], w["readyReplicas"]) for w in back["workloads"]] == [("back", 1)]
    first, second = (vcluster_api(host, cloud_space, n) for n in (first_name, "second"))
    # Each app's objects are in its own vCluster only.
    assert second.find("deployments", "back", "shop", group="apps") is not None
    assert first.find("deployments", "back", "shop", group="apps") is None
    assert first.find("deployments", "front", "shop", group="apps") is not None
    assert second.find("deployments", "front", "shop", group="apps") is None
    git = "source.toolkit.fluxcd.io"
    assert second.find("gitrepositories", "back", "shop", group=git) is not None
    assert first.find("gitrepositories", "back", "shop", group=git) is None

    # A vCluster the CloudSpace does not have is refused on its field; nothing is made.
    refused = await tenant.editor.mutate(
        support.CREATE,
        {
            "input": {
                "name": "nowhere",
                "target": in_vcluster(cloud_space, "third"),
                "source": support.git_input("https://git.example/back.git"),
            }
        },
    )
    assert refused["app"] is None
    assert refused["userErrors"] == [
        {
            "field": ["input", "target", "vclusterName"],
            "message": f"CloudSpace {first_name} has no vCluster 'third'",
            "code": "NOT_FOUND",
        }
    ]
    names = await tenant.viewer.data("{ apps(first: 20) { nodes { name } } }")
    assert "nowhere" not in [a["name"] for a in names["apps"]["nodes"]]


async def test_removing_a_vcluster_makes_its_apps_target_gone(
    host: HostStandIn, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    leaving = await deliver(host, tenant, cloud_space, "leaving", "second")
    staying = await deliver(host, tenant, cloud_space, "staying", None)
    (_, second) = await vclusters_of(tenant, cloud_space["id"])
    removed = await tenant.admin.mutate(
        REMOVE, {"input": {"id": second["id"], "confirmName": "second"}}
    )
    assert removed["userErrors"] == []

    # Its app is gated with the reason, as if its CloudSpace were deleted.
    gated = await support.until_status(tenant.viewer, leaving["id"], "UNKNOWN")
    assert gated["statusReason"] == "TargetGone"
    assert gated["gate"] in REMOVED

    # createApp into it is refused on the field while it goes and once it is gone.
    refused = await tenant.editor.mutate(
        support.CREATE,
        {
            "input": {
                "name": "late",
                "target": in_vcluster(cloud_space, "second"),
                "source": support.git_input("https://git.example/leaving.git"),
            }
        },
    )
    assert refused["app"] is None
    [error] = refused["userErrors"]
    assert error["field"] == ["input", "target", "vclusterName"]
    assert error["code"] in ("PRECONDITION_FAILED", "NOT_FOUND"), error

    async def gone() -> bool:
        return [v["name"] for v in await vclusters_of(tenant, cloud_space["id"])] == [
            cloud_space["name"]
        ]

    await eventually(gone, 90)
    gated = await support.until_status(tenant.viewer, leaving["id"], "UNKNOWN")
    assert gated["gate"] == "vCluster second removed"

    # A new revision of it is dead-lettered at once, without a try.
    updated = await tenant.editor.mutate(
        support.UPDATE,
        {"input": {"id": leaving["id"], "source": support.git_input("https://git.example/x.git")}},
    )
    assert updated["userErrors"] == []
    revision = await support.until_revision(tenant.viewer, leaving["id"], 2, "DEAD_LETTERED")
    assert (revision["reason"], revision["tries"]) == ("vCluster second removed", 0)

    # The app in the first vCluster is untouched; the gone one can still be deleted.
    assert (await support.app(tenant.viewer, staying["id"]))["status"] == "READY"
    deleted = await tenant.admin.mutate(
        support.DELETE, {"input": {"id": leaving["id"], "confirmName": "leaving"}}
    )
    assert deleted["userErrors"] == []

    async def app_gone() -> bool:
        return (await tenant.viewer.data(support.ONE, {"id": leaving["id"]}))["app"] is None

    await eventually(app_gone, 60)
