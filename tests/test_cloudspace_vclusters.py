"""Several vClusters per CloudSpace (issue 22 item 4), end to end on the host stand-in: a
second vCluster comes up as its own Helm release in the CloudSpace's host namespace, both
kubeconfigs work with the real kubectl (merged too), the two share the CloudSpace's quota
at admission, removeVCluster removes one (and frees what its pods used), another org can
neither see nor touch it, and deleting the CloudSpace removes every release.

The host stand-in's Flux is slow under load, so the module makes one CloudSpace and three
vClusters in all, and walks them through one story."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api

from sim.host_standin import HostStandIn
from sim.tenant_objects import pod
from tests.conftest import Org
from tests.support.cloudspaces import (
    DELETE,
    Platform,
    download,
    eventually,
    key,
    ready_cloud_space,
    request,
    serve_platform,
    wait_for_subscribers,
)
from tests.support.kube_clients import kube_from, message, refused
from tests.support.tls_ingress import TlsIngress

FLUX_HELM = "helm.toolkit.fluxcd.io"
FLUX_KUSTOMIZE = "kustomize.toolkit.fluxcd.io"
VCLUSTER = "id name phase message ready createdAt kubeconfigExpiresAt cloudSpace { id }"
ADD = f"""
mutation($input: AddVClusterInput!) {{
  addVCluster(input: $input) {{ vcluster {{ {VCLUSTER} }} userErrors {{ field message code }} }}
}}"""
REMOVE = f"""
mutation($input: RemoveVClusterInput!) {{
  removeVCluster(input: $input) {{ vcluster {{ {VCLUSTER} }} userErrors {{ field message code }} }}
}}"""
VCLUSTERS = f"""
query($id: ID!) {{
  cloudSpace(id: $id) {{ id phase message vclusters {{ {VCLUSTER} }} }}
}}"""
AUDIT = "{ auditEvents(first: 100) { nodes { action outcome targetIds } } }"
NODE = "query($id: ID!) { node(id: $id) { id ... on VCluster { name phase } } }"
EVENTS = """
subscription($id: ID) {
  cloudSpacePhaseChanged(cloudSpaceId: $id, includeVClusters: true) {
    cloudSpaceId vclusterId previous phase message vcluster { id phase }
  }
}"""


@pytest.fixture(scope="module")
def host() -> Iterator[HostStandIn]:
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def ingress() -> Iterator[TlsIngress]:
    running = TlsIngress()
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def platform(
    backend: Any, host: HostStandIn, ingress: TlsIngress, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {
        "SPACEDOCK_ADMISSION_URL": ingress.url,
        "SPACEDOCK_ADMISSION_CA_FILE": str(ingress.ca_file),
    }
    serving = serve_platform(backend, host, log_path, env)
    running = next(serving)
    ingress.route_to(running.server.port)
    yield running
    next(serving, None)


def kubectl(directory: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The machine's kubectl as a person runs it, in a home of its own."""
    return subprocess.run(
        ["kubectl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(directory), **env},
    )


@asynccontextmanager
async def watching(platform: Platform, org: Org, cloud_space_id: str) -> AsyncIterator[list[Any]]:
    """The CloudSpace's events, its vClusters' too, as a subscriber collects them."""
    events: list[dict[str, Any]] = []
    before = platform.server.metric("spacedock_event_subscribers")
    async with org.viewer.websocket() as session:

        async def listen() -> None:
            async for event in session.subscribe(request(EVENTS, {"id": cloud_space_id})):
                events.append(event["cloudSpacePhaseChanged"])

        task = asyncio.create_task(listen())
        try:
            await wait_for_subscribers(platform.server, int(before) + 1)
            yield events
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def seen(events: list[dict[str, Any]], vcluster_id: str, phase: str) -> bool:
    """Whether the subscriber has had the vCluster's event of `phase` (a query can read the
    change before the event reaches the subscriber)."""
    return any(e["vclusterId"] == vcluster_id and e["phase"] == phase for e in events)


async def vclusters_of(org: Org, cloud_space_id: str) -> list[dict[str, Any]]:
    data = await org.viewer.data(VCLUSTERS, {"id": cloud_space_id})
    found: list[dict[str, Any]] = data["cloudSpace"]["vclusters"]
    return found


async def all_ready(org: Org, cloud_space_id: str, count: int) -> list[dict[str, Any]]:
    async def ready() -> list[dict[str, Any]] | None:
        found = await vclusters_of(org, cloud_space_id)
        for vcluster in found:
            assert vcluster["phase"] != "FAILED", vcluster["message"]
        done = len(found) == count and all(v["phase"] == "READY" for v in found)
        return found if done else None

    return await eventually(ready, 90)


async def create_pod(kubeconfig: str, name: str, cpu: str) -> None:
    """A tenant's pod in the default namespace, through kubernetes-asyncio."""
    async with kube_from(kubeconfig) as client:
        core: Any = CoreV1Api(client)  # untyped: bodies are plain dicts, as kubectl sends them
        await core.create_namespaced_pod("default", pod(name, cpu))


async def usage_is(org: Org, cloud_space_id: str, cpu: float) -> bool:
    data = await org.viewer.data(
        "query($id: ID!) { cloudSpace(id: $id) { usage { cpu } } }", {"id": cloud_space_id}
    )
    return bool(data["cloudSpace"]["usage"]["cpu"] == cpu)


def release(host: HostStandIn, namespace: str, name: str) -> Any:
    return host.api.find("helmreleases", name, namespace, group=FLUX_HELM)


async def test_a_second_vcluster_comes_up_shares_the_quota_and_goes_alone(
    platform: Platform, host: HostStandIn, tmp_path: Path
) -> None:
    tenant = await platform.tenant()
    cloud_space = await ready_cloud_space(tenant, "multi", 4, 8192)
    namespace = f"cs-{key(cloud_space['id'])}"
    (first,) = await vclusters_of(tenant, cloud_space["id"])
    assert (first["name"], first["phase"], first["ready"]) == ("multi", "READY", True)
    assert first["id"].startswith("vc_") and first["cloudSpace"] == {"id": cloud_space["id"]}

    # -- addVCluster: a second Helm release in the same host namespace ---------------------
    async with watching(platform, tenant, cloud_space["id"]) as events:
        added = await tenant.editor.mutate(
            ADD, {"input": {"cloudSpaceId": cloud_space["id"], "name": "second"}}
        )
        assert added["userErrors"] == []
        second = added["vcluster"]
        assert (second["name"], second["phase"], second["ready"]) == ("second", "PENDING", False)
        both = await all_ready(tenant, cloud_space["id"], 2)
        await eventually(lambda: seen(events, second["id"], "READY"))
    assert [v["name"] for v in both] == ["multi", "second"]
    assert all(v["ready"] and v["kubeconfigExpiresAt"] for v in both)
    own = [e for e in events if e["vclusterId"] == second["id"]]
    changes = [e["phase"] for e in own if e["phase"] != e["previous"]]
    assert changes == ["PENDING", "PROVISIONING", "INSTALLING_FLUX", "READY"], own
    assert own[-1]["vcluster"] == {"id": second["id"], "phase": "READY"}
    # The CloudSpace stayed READY while its second vCluster came up.
    assert all(e["phase"] == "READY" for e in events if e["vclusterId"] is None)
    found = await tenant.viewer.data(NODE, {"id": second["id"]})
    assert found["node"] == {"id": second["id"], "name": "second", "phase": "READY"}

    for name in ("multi", "second"):
        assert release(host, namespace, name) is not None
        applied = host.api.find("kustomizations", f"{name}-flux", namespace, group=FLUX_KUSTOMIZE)
        assert applied is not None
        assert applied["spec"]["kubeConfig"]["secretRef"]["name"] == f"vc-{name}"
    assert host.api.find(
        "secrets", f"tenant-{key(cloud_space['id'])}-second-kubeconfig", "spacedock-system"
    )

    # Each release's host quota bounds the one namespace: each holds the tenant's 4 CPU and
    # both vClusters' control planes and Flux (2 x (500m + 600m)).
    async def quotas_for_two() -> bool:
        hard = [
            (host.api.find("resourcequotas", f"vc-{name}", namespace) or {}).get("spec", {})
            for name in ("multi", "second")
        ]
        return all(h.get("hard", {}).get("requests.cpu") == "6200m" for h in hard)

    await eventually(quotas_for_two)

    # -- both kubeconfigs, merged, with the real kubectl -------------------------------------
    configs = []
    for name in ("multi", "second"):
        status, _, body = await asyncio.to_thread(
            download, platform.server, cloud_space["id"], name, tenant.tokens["editor"]
        )
        assert status == 200, body
        context = yaml.safe_load(body)["current-context"]
        assert context == f"spacedock-{key(cloud_space['id'])}-{name}"
        path = tmp_path / f"{name}.kubeconfig"
        path.write_text(body)
        configs.append((path, context, body))
    merged = {"KUBECONFIG": ":".join(str(path) for path, _, _ in configs)}
    listed = await asyncio.to_thread(
        kubectl, tmp_path, "config", "get-contexts", "-o", "name", env=merged
    )
    assert sorted(listed.stdout.split()) == sorted(context for _, context, _ in configs)
    for (_, context, _), team in zip(configs, ("team-one", "team-two"), strict=True):
        manifest = tmp_path / f"{team}.yaml"
        manifest.write_text(f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {team}\n")
        made = await asyncio.to_thread(
            kubectl, tmp_path, "--context", context, "apply", "-f", str(manifest), env=merged
        )
        assert made.returncode == 0, made.stderr
    assert host.vcluster(namespace, "multi").find("namespaces", "team-one")
    assert host.vcluster(namespace, "second").find("namespaces", "team-two")
    assert host.vcluster(namespace, "multi").find("namespaces", "team-two") is None

    # -- one quota across both vClusters, at admission ---------------------------------------
    await create_pod(configs[0][2], "big-one", "2500m")
    async with kube_from(configs[1][2]) as client:
        core: Any = CoreV1Api(client)
        denied = await refused(core.create_namespaced_pod("default", pod("big-two", "2500m")))
    assert denied.status == 403
    assert (
        'pod "big-two" would take CloudSpace "multi" over its quota: requested '
        "requests.cpu=2500m, in use requests.cpu=2500m, quota requests.cpu=4"
    ) in message(denied)
    assert host.vcluster(namespace, "second").find("pods", "big-two", "default") is None

    # -- refusals that change nothing ---------------------------------------------------------
    wrong = await tenant.admin.mutate(
        REMOVE, {"input": {"id": second["id"], "confirmName": "multi"}}
    )
    assert wrong["vcluster"] is None
    assert [(e["field"], e["code"]) for e in wrong["userErrors"]] == [
        (["input", "confirmName"], "INVALID")
    ]
    cases = [
        ("9lives", ["input", "name"], "INVALID"),  # a Service name starts with a letter
        ("x" * 53, ["input", "name"], "INVALID"),
        ("second", ["input", "name"], "CONFLICT"),
        ("second-headless", ["input", "name"], "CONFLICT"),  # the chart's Service of `second`
    ]
    for name, field, code in cases:
        payload = await tenant.editor.mutate(
            ADD, {"input": {"cloudSpaceId": cloud_space["id"], "name": name}}
        )
        assert [(e["field"], e["code"]) for e in payload["userErrors"]] == [(field, code)], name
    viewer = await tenant.viewer.mutate(
        ADD, {"input": {"cloudSpaceId": cloud_space["id"], "name": "viewers"}}
    )
    assert [(e["code"], "cloudspace:create" in e["message"]) for e in viewer["userErrors"]] == [
        ("FORBIDDEN", True)
    ]
    viewer = await tenant.viewer.mutate(
        REMOVE, {"input": {"id": second["id"], "confirmName": "second"}}
    )
    assert [(e["code"], "cloudspace:delete" in e["message"]) for e in viewer["userErrors"]] == [
        ("FORBIDDEN", True)
    ]
    stranger = await platform.tenant("stranger")
    assert (await stranger.viewer.data(NODE, {"id": second["id"]}))["node"] is None
    foreign = await stranger.admin.mutate(
        REMOVE, {"input": {"id": second["id"], "confirmName": "second"}}
    )
    assert [(e["field"], e["code"]) for e in foreign["userErrors"]] == [
        (["input", "id"], "NOT_FOUND")
    ]
    foreign = await stranger.admin.mutate(
        ADD, {"input": {"cloudSpaceId": cloud_space["id"], "name": "intruder"}}
    )
    assert [(e["field"], e["code"]) for e in foreign["userErrors"]] == [
        (["input", "cloudSpaceId"], "NOT_FOUND")
    ]
    status, _, _ = await asyncio.to_thread(
        download, platform.server, cloud_space["id"], "second", stranger.tokens["admin"]
    )
    assert status == 404
    assert [v["name"] for v in await all_ready(tenant, cloud_space["id"], 2)] == [
        "multi",
        "second",
    ]
    assert release(host, namespace, "second") is not None

    # -- removeVCluster: its release and objects go, then its row; its pods free the quota --
    await create_pod(configs[1][2], "small-two", "1")
    await eventually(lambda: usage_is(tenant, cloud_space["id"], 3.5))  # both vClusters' pods
    async with watching(platform, tenant, cloud_space["id"]) as events:
        removed = await tenant.admin.mutate(
            REMOVE, {"input": {"id": second["id"], "confirmName": "second"}}
        )
        assert removed["userErrors"] == []
        assert (removed["vcluster"]["phase"], removed["vcluster"]["ready"]) == ("DELETING", False)

        async def gone() -> bool:
            return [v["name"] for v in await vclusters_of(tenant, cloud_space["id"])] == ["multi"]

        await eventually(gone, 60)
        await eventually(lambda: asyncio.sleep(0, any(e["phase"] == "DELETED" for e in events)), 10)
    assert [
        (e["vclusterId"], e["phase"]) for e in events if e["phase"] in ("DELETING", "DELETED")
    ] == [(second["id"], "DELETING"), (second["id"], "DELETED")]
    for kind, name, group in [
        ("helmreleases", "second", FLUX_HELM),
        ("kustomizations", "second-flux", FLUX_KUSTOMIZE),
        ("statefulsets", "second", "apps"),
        ("secrets", "vc-second", ""),
    ]:
        assert host.api.find(kind, name, namespace, group=group) is None, kind
    assert (
        host.api.find(
            "secrets", f"tenant-{key(cloud_space['id'])}-second-kubeconfig", "spacedock-system"
        )
        is None
    )
    assert release(host, namespace, "multi") is not None
    assert (await tenant.viewer.data(NODE, {"id": second["id"]}))["node"] is None

    # The removed vCluster's 1 CPU no longer counts: once the usage shows it (the refresh
    # that saw it also resized the headroom quotas), 1.5 CPU fits beside the first's 2.5.
    await eventually(lambda: usage_is(tenant, cloud_space["id"], 2.5))
    await create_pod(configs[0][2], "fits", "1500m")
    last = await tenant.admin.mutate(REMOVE, {"input": {"id": first["id"], "confirmName": "multi"}})
    assert [(e["field"], e["code"]) for e in last["userErrors"]] == [
        (["input", "id"], "PRECONDITION_FAILED")
    ]
    # Each call is in the org's audit log, allowed or refused, with what it named.
    audited = await tenant.admin.data(AUDIT)
    calls = [
        (e["action"], e["outcome"], e["targetIds"])
        for e in audited["auditEvents"]["nodes"]
        if e["action"] in ("addVCluster", "removeVCluster")
    ]
    assert calls[0] == ("addVCluster", "OK", [cloud_space["id"], second["id"]])
    assert ("removeVCluster", "FORBIDDEN", [second["id"]]) in calls
    assert calls[-2:] == [
        ("removeVCluster", "OK", [second["id"]]),
        ("removeVCluster", "PRECONDITION_FAILED", [first["id"]]),
    ]

    # -- deleting the CloudSpace removes every vCluster's release -----------------------------
    third = await tenant.editor.mutate(
        ADD, {"input": {"cloudSpaceId": cloud_space["id"], "name": "third"}}
    )
    assert third["userErrors"] == []
    await eventually(lambda: asyncio.sleep(0, release(host, namespace, "third") is not None))
    deleted = await tenant.admin.mutate(
        DELETE, {"input": {"id": cloud_space["id"], "confirmName": "multi"}}
    )
    assert deleted["userErrors"] == []
    late = await tenant.editor.mutate(
        ADD, {"input": {"cloudSpaceId": cloud_space["id"], "name": "late"}}
    )
    assert [(e["field"], e["code"]) for e in late["userErrors"]] == [
        (["input", "cloudSpaceId"], "PRECONDITION_FAILED")
    ]

    async def all_gone() -> bool:
        data = await tenant.viewer.data(VCLUSTERS, {"id": cloud_space["id"]})
        return data["cloudSpace"] is None and host.api.find("namespaces", namespace) is None

    await eventually(all_gone, 60)
    assert host.api.find_all("helmreleases", namespace, group=FLUX_HELM) == []
    assert (await tenant.viewer.data(NODE, {"id": first["id"]}))["node"] is None
