"""Apps in CloudSpaces, end to end: the running server's reconciler makes a CloudSpace whose
vCluster runs Flux v2.9.4 (its controllers on the vCluster stand-in), and a gql subscriber
watches its apps. A Git app and a Helm app reach READY with their workloads; a bad ref and
a chart version that does not exist are FAILED in Flux's words; a rollback makes a new
revision of the old source; suspend, resume and sync reach Flux's objects; deleteApp prunes
what the app deployed; deleting the CloudSpace dead-letters what still waits; a custom role
without app:deploy is FORBIDDEN and another org's ids are NOT_FOUND everywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import apps as support
from tests.support import factories as make
from tests.support.cloudspaces import CREATE as CREATE_CLOUD_SPACE
from tests.support.cloudspaces import DELETE as DELETE_CLOUD_SPACE
from tests.support.cloudspaces import Platform, eventually, key, request, serve_platform
from tests.support.graphql import GraphQL
from tests.support.server import Backend

CHARTS = "https://charts.example"
OCI = "oci://registry.example/charts"


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        charts = standin.flux.helm(CHARTS)
        for version in ("1.0.0", "2.0.0"):
            charts.add_chart("web", version, render=support.chart_render("web"))
        standin.flux.helm(OCI).add_chart("api", "0.3.1", render=support.chart_render("api"))
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


@pytest.fixture(scope="module")
def cloud_space(platform: Platform, tenant: Org) -> dict[str, Any]:
    """The tenant's default CloudSpace, READY."""

    async def ready() -> dict[str, Any] | None:
        data = await tenant.viewer.data("{ cloudSpaces(first: 5) { nodes { id name phase } } }")
        found = [cs for cs in data["cloudSpaces"]["nodes"] if cs["phase"] == "READY"]
        return found[0] if found else None

    return asyncio.run(eventually(ready, 120))


def vcluster_of(host: HostStandIn, cloud_space: dict[str, Any]) -> Any:
    return host.vcluster(f"cs-{key(cloud_space['id'])}", cloud_space["name"])


def in_cloud_space(cloud_space: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"cloudSpaceId": cloud_space["id"], "namespace": namespace}


async def test_a_git_app_and_a_helm_app_reach_ready_with_their_workloads(
    platform: Platform, host: HostStandIn, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    url = "https://git.example/storefront.git"
    sha = host.flux.git(url).commit(
        {
            "deploy/app.yaml": support.manifests(
                support.deployment("storefront", 3), support.service("storefront")
            )
        }
    )
    async with support.watching(
        platform.server, tenant.viewer, cloudSpaceId=cloud_space["id"]
    ) as watcher:
        git = await support.create(
            tenant.editor, "storefront", in_cloud_space(cloud_space, "shop"), support.git_input(url)
        )
        helm = await support.create(
            tenant.editor,
            "web",
            in_cloud_space(cloud_space, "shop"),
            support.helm_input(CHARTS, "web", version="1.0.x", values="replicaCount: 2\n"),
        )
        oci = await support.create(
            tenant.editor,
            "api",
            in_cloud_space(cloud_space, "shop"),
            support.helm_input(OCI, "api"),
        )
        for created in (git, helm, oci):
            assert created["app"]["vclusterName"] == cloud_space["name"]
            await watcher.until(
                created["app"]["id"], kind="REVISION", revisionNumber=1, revisionState="READY"
            )
    git_app = await support.until_status(tenant.viewer, git["app"]["id"], "READY")
    assert git_app["lastAppliedRevision"] == f"main@sha1:{sha}"
    assert git_app["workloads"] == [
        {
            "kind": "Deployment",
            "namespace": "shop",
            "name": "storefront",
            "readyReplicas": 3,
            "desiredReplicas": 3,
        }
    ]
    helm_app = await support.until_status(tenant.viewer, helm["app"]["id"], "READY")
    assert helm_app["statusReason"] == "InstallSucceeded"
    assert helm_app["lastAppliedRevision"] == "1.0.0"
    assert helm_app["workloads"] == [
        {
            "kind": "Deployment",
            "namespace": "shop",
            "name": "web-web",
            "readyReplicas": 2,
            "desiredReplicas": 2,
        }
    ]
    oci_app = await support.until_status(tenant.viewer, oci["app"]["id"], "READY")
    assert [w["name"] for w in oci_app["workloads"]] == ["api-api"]
    # Every event went to the subscriber: the app's statuses end READY.
    assert watcher.statuses(helm["app"]["id"])[-1] == "READY"
    # Each revision's time from creation to READY is in /metrics (one server here).
    ready = platform.server.metric("spacedock_app_revision_duration_seconds_count", outcome="READY")
    assert ready >= 3
    assert watcher.revision_states(helm["app"]["id"], 1) == [
        "QUEUED",
        "APPLYING",
        "APPLIED",
        "READY",
    ]
    # The objects are in the vCluster, not on the host.
    vcluster = vcluster_of(host, cloud_space)
    release = vcluster.find("helmreleases", "web", "shop", group="helm.toolkit.fluxcd.io")
    assert release is not None and release["spec"]["values"] == {"replicaCount": 2}
    assert host.api.find("helmreleases", "web", "shop", group="helm.toolkit.fluxcd.io") is None
    repository = vcluster.find("helmrepositories", "api", "shop", group="source.toolkit.fluxcd.io")
    assert repository is not None and repository["spec"]["type"] == "oci"


async def test_a_bad_ref_and_a_missing_chart_version_fail_with_fluxs_reason(
    platform: Platform, host: HostStandIn, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    url = "https://git.example/badref.git"
    host.flux.git(url).commit({"deploy/app.yaml": support.manifests(support.deployment("badref"))})
    bad_ref = await support.create(
        tenant.editor,
        "badref",
        in_cloud_space(cloud_space),
        support.git_input(url, branch="no-such-branch"),
    )
    missing = await support.create(
        tenant.editor,
        "missing",
        in_cloud_space(cloud_space),
        support.helm_input(CHARTS, "web", version="9.9.9"),
    )
    failed = await support.until_status(tenant.viewer, bad_ref["app"]["id"], "FAILED")
    assert failed["statusReason"] == "GitOperationFailed"
    assert failed["statusMessage"] == (
        f"failed to checkout and determine revision: unable to clone '{url}': "
        'couldn\'t find remote ref "refs/heads/no-such-branch"'
    )
    revision = await support.until_revision(tenant.viewer, bad_ref["app"]["id"], 1, "FAILED")
    assert revision["reason"].startswith("GitOperationFailed: failed to checkout")
    chart = await support.until_status(tenant.viewer, missing["app"]["id"], "FAILED")
    assert chart["statusReason"] == "InvalidChartReference"
    assert "no 'web' chart with version matching '9.9.9' found" in chart["statusMessage"]
    await support.until_revision(tenant.viewer, missing["app"]["id"], 1, "FAILED")
    # Fixing the ref is a new revision that reaches READY.
    fixed = await tenant.editor.mutate(
        support.UPDATE, {"input": {"id": bad_ref["app"]["id"], "source": support.git_input(url)}}
    )
    assert fixed["userErrors"] == [] and fixed["revision"]["number"] == 2
    await support.until_revision(tenant.viewer, bad_ref["app"]["id"], 2, "READY")


async def test_a_rollback_makes_a_new_revision_with_the_old_source(
    platform: Platform, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    created = await support.create(
        tenant.editor,
        "rolling",
        in_cloud_space(cloud_space),
        support.helm_input(CHARTS, "web", version="1.0.0"),
    )
    app_id = created["app"]["id"]
    first = await support.until_revision(tenant.viewer, app_id, 1, "READY")
    upgraded = await tenant.editor.mutate(
        support.UPDATE,
        {"input": {"id": app_id, "source": support.helm_input(CHARTS, "web", version="2.0.0")}},
    )
    assert upgraded["revision"]["number"] == 2
    await support.until_revision(tenant.viewer, app_id, 2, "READY")
    assert (await support.app(tenant.viewer, app_id))["lastAppliedRevision"] == "2.0.0"
    rolled = await tenant.editor.mutate(support.ROLLBACK, {"input": {"revisionId": first["id"]}})
    assert rolled["userErrors"] == []
    assert rolled["revision"]["number"] == 3 and rolled["revision"]["rollbackOf"] == 1
    assert rolled["revision"]["source"] == first["source"]
    third = await support.until_revision(tenant.viewer, app_id, 3, "READY")
    assert third["fluxRevision"] == "1.0.0"
    found = await support.app(tenant.viewer, app_id)
    assert found["lastAppliedRevision"] == "1.0.0"
    assert [r["number"] for r in found["revisions"]["nodes"]] == [3, 2, 1]  # newest first
    assert found["revisions"]["totalCount"] == 3


async def test_suspend_resume_and_sync_reach_fluxs_objects(
    platform: Platform, host: HostStandIn, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    url = "https://git.example/pausable.git"
    repo = host.flux.git(url)
    repo.commit({"deploy/app.yaml": support.manifests(support.deployment("pausable"))})
    created = await support.create(
        tenant.editor, "pausable", in_cloud_space(cloud_space), support.git_input(url)
    )
    app_id = created["app"]["id"]
    await support.until_status(tenant.viewer, app_id, "READY")
    vcluster = vcluster_of(host, cloud_space)

    def kustomization() -> dict[str, Any]:
        found: dict[str, Any] = vcluster.find(
            "kustomizations", "pausable", "default", group="kustomize.toolkit.fluxcd.io"
        )
        return found

    suspended = await tenant.editor.mutate(support.SUSPEND, {"input": {"id": app_id}})
    assert suspended["userErrors"] == [] and suspended["app"]["suspended"] is True
    paused = await support.until_status(tenant.viewer, app_id, "SUSPENDED")
    assert kustomization()["spec"]["suspend"] is True
    assert paused["statusReason"] == "Suspended"
    refused = await tenant.editor.mutate(support.SYNC, {"input": {"id": app_id}})
    assert [e["code"] for e in refused["userErrors"]] == ["PRECONDITION_FAILED"]
    await tenant.editor.mutate(support.RESUME, {"input": {"id": app_id}})
    await support.until_status(tenant.viewer, app_id, "READY")
    assert kustomization()["spec"]["suspend"] is False
    synced = await tenant.editor.mutate(support.SYNC, {"input": {"id": app_id}})
    assert synced["userErrors"] == []

    async def handled() -> dict[str, Any] | None:
        found = await support.app(tenant.viewer, app_id)
        return found if found["lastSyncHandledAt"] is not None else None

    seen = await eventually(handled)
    requested = kustomization()["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
    assert seen["lastSyncHandledAt"] == requested
    # None of it made a revision.
    assert (await support.app(tenant.viewer, app_id))["revisions"]["totalCount"] == 1


async def test_delete_app_prunes_what_it_deployed_then_its_flux_objects(
    platform: Platform, host: HostStandIn, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    url = "https://git.example/doomed.git"
    host.flux.git(url).commit({"deploy/app.yaml": support.manifests(support.deployment("doomed"))})
    created = await support.create(
        tenant.editor, "doomed", in_cloud_space(cloud_space, "doomed"), support.git_input(url)
    )
    app_id = created["app"]["id"]
    await support.until_status(tenant.viewer, app_id, "READY")
    vcluster = vcluster_of(host, cloud_space)
    assert vcluster.find("deployments", "doomed", "doomed", group="apps") is not None
    refused = await tenant.editor.mutate(
        support.DELETE, {"input": {"id": app_id, "confirmName": "doomed"}}
    )
    assert [e["code"] for e in refused["userErrors"]] == ["FORBIDDEN"]  # app:delete is ADMIN's
    async with support.watching(platform.server, tenant.viewer, appId=app_id) as watcher:
        wrong = await tenant.admin.mutate(
            support.DELETE, {"input": {"id": app_id, "confirmName": "nope"}}
        )
        assert [e["field"] for e in wrong["userErrors"]] == [["input", "confirmName"]]
        deleting = await tenant.admin.mutate(
            support.DELETE, {"input": {"id": app_id, "confirmName": "doomed"}}
        )
        assert deleting["app"]["status"] == "DELETING"
        await watcher.until(app_id, kind="DELETED")
    assert watcher.statuses(app_id)[0] == "DELETING"
    assert vcluster.find("deployments", "doomed", "doomed", group="apps") is None
    assert (
        vcluster.find("kustomizations", "doomed", "doomed", group="kustomize.toolkit.fluxcd.io")
        is None
    )
    assert (
        vcluster.find("gitrepositories", "doomed", "doomed", group="source.toolkit.fluxcd.io")
        is None
    )
    assert (await tenant.viewer.data(support.ONE, {"id": app_id}))["app"] is None


async def test_deleting_a_cloudspace_dead_letters_what_waits_for_it(
    platform: Platform, tenant: Org
) -> None:
    made = await tenant.editor.mutate(
        CREATE_CLOUD_SPACE, {"input": {"name": "shortlived", "cpu": 1, "memoryMiB": 1024}}
    )
    cloud_space = made["cloudSpace"]
    url = "https://git.example/never.git"
    created = await support.create(
        tenant.editor, "never", in_cloud_space(cloud_space), support.git_input(url)
    )
    app_id = created["app"]["id"]
    waiting = await support.until_status(tenant.viewer, app_id, "PROGRESSING")
    assert waiting["statusReason"] in ("Queued", "WaitingForTarget")
    await tenant.admin.mutate(
        DELETE_CLOUD_SPACE, {"input": {"id": cloud_space["id"], "confirmName": "shortlived"}}
    )
    revision = await support.until_revision(tenant.viewer, app_id, 1, "DEAD_LETTERED")
    assert revision["reason"] in ("CloudSpace being deleted", "CloudSpace deleted")
    assert revision["tries"] == 0
    gated = await support.until_status(tenant.viewer, app_id, "UNKNOWN")
    assert gated["gate"] in ("CloudSpace being deleted", "CloudSpace deleted")


ROLE = f"""
mutation($input: CreateRoleInput!) {{ createRole(input: $input) {{ role {{ id }} {make.USER_ERRORS} }} }}"""
TOKEN = f"""
mutation($input: CreateApiTokenInput!) {{ createApiToken(input: $input) {{ token {make.USER_ERRORS} }} }}"""


async def test_a_role_without_app_deploy_is_forbidden_and_foreign_ids_are_not_found(
    platform: Platform, tenant: Org, cloud_space: dict[str, Any]
) -> None:
    created = await support.create(
        tenant.editor,
        "guarded",
        in_cloud_space(cloud_space),
        support.helm_input(CHARTS, "web", version="1.0.0"),
    )
    app_id, revision_id = created["app"]["id"], created["revision"]["id"]
    role = await tenant.admin.mutate(
        ROLE,
        {"input": {"name": make.unique("watchers"), "policies": ["app:view", "cloudspace:view"]}},
    )
    token = await tenant.admin.mutate(
        TOKEN, {"input": {"name": "watcher", "role": role["role"]["id"]}}
    )
    watcher = GraphQL(platform.server.url, platform.server.ws_url, token["token"])
    viewer = (await watcher.data("{ viewer { permissions } }"))["viewer"]["permissions"]
    assert "app:view" in viewer and "app:deploy" not in viewer
    assert (await support.app(watcher, app_id))["name"] == "guarded"
    for document, variables in (
        (
            support.CREATE,
            {
                "name": "nope",
                "target": in_cloud_space(cloud_space),
                "source": support.helm_input(CHARTS, "web"),
            },
        ),
        (
            support.UPDATE,
            {"id": app_id, "source": support.helm_input(CHARTS, "web", version="2.0.0")},
        ),
        (support.SUSPEND, {"id": app_id}),
        (support.SYNC, {"id": app_id}),
        (support.ROLLBACK, {"revisionId": revision_id}),
        (support.REQUEUE, {"id": revision_id}),
    ):
        payload = await watcher.mutate(document, {"input": variables})
        assert [e["code"] for e in payload["userErrors"]] == ["FORBIDDEN"], document
        assert "app:deploy" in payload["userErrors"][0]["message"]
    assert (await support.app(tenant.viewer, app_id))["revisions"]["totalCount"] == 1

    other = await platform.tenant("rival")
    assert (await other.admin.data(support.ONE, {"id": app_id}))["app"] is None
    node = await other.admin.data("query($id: ID!) { node(id: $id) { id } }", {"id": revision_id})
    assert node["node"] is None
    for document, variables, field in (
        (support.UPDATE, {"id": app_id, "source": support.helm_input(CHARTS, "web")}, "id"),
        (support.SUSPEND, {"id": app_id}, "id"),
        (support.RESUME, {"id": app_id}, "id"),
        (support.SYNC, {"id": app_id}, "id"),
        (support.DELETE, {"id": app_id, "confirmName": "guarded"}, "id"),
        (support.REQUEUE, {"id": revision_id}, "id"),
        (support.ROLLBACK, {"revisionId": revision_id}, "revisionId"),
        (
            support.CREATE,
            {
                "name": "x",
                "target": in_cloud_space(cloud_space),
                "source": support.helm_input(CHARTS, "web"),
            },
            "cloudSpaceId",
        ),
    ):
        payload = await other.admin.mutate(document, {"input": variables})
        assert [(e["field"][-1], e["code"]) for e in payload["userErrors"]] == [
            (field, "NOT_FOUND")
        ], document
    response = await other.admin.call(
        "query($id: ID!) { apps(first: 5, cloudSpaceId: $id) { totalCount } }",
        {"id": cloud_space["id"]},
    )
    assert response["data"]["apps"]["totalCount"] == 0
    async with other.admin.websocket() as session:
        with pytest.raises(Exception, match=r"No app with id"):
            async for _ in session.subscribe(request(support.EVENTS, {"appId": app_id})):
                break
