"""CloudSpaces end to end: the running server's reconciler drives vClusters on the host
stand-in while a gql subscriber watches every phase; quotas are strict inside the
vCluster; kubeconfigs come through both routes with a short-lived token and never the
admin certificate; a failure is retried from its step; a lingering deletion shows its
blocker, then DELETED once."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient, CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict

from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import factories as make
from tests.support.cloudspaces import (
    CHART_URL,
    CREATE,
    DELETE,
    EVENTS,
    FLUX_MANIFESTS_TAG,
    FLUX_MANIFESTS_URL,
    IMAGE_REGISTRY,
    LIST,
    ONE,
    UPDATE,
    Platform,
    default_of,
    eventually,
    key,
    request,
    serve_platform,
    wait_for_subscribers,
)
from tests.support.server import Backend

T = TypeVar("T")
TTL_S = 600
KUBECONFIG = """
query($id: ID!) {
  cloudSpace(id: $id) { id vclusters { name ready kubeconfig kubeconfigExpiresAt } }
}"""


@pytest.fixture(scope="module")
def host(backend: Backend) -> Iterator[HostStandIn]:
    # Room for every test's CloudSpaces and every tenant's default one; a host per backend,
    # so the second run's Flux does not also carry the first run's vClusters.
    del backend
    with HostStandIn(nodes=[("32", "128Gi"), ("32", "128Gi")]) as standin:
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    # One live cluster call per request: minting a kubeconfig is one.
    env = {"SPACEDOCK_KUBECONFIG_TTL_S": str(TTL_S), "SPACEDOCK_LIVE_CALLS_PER_REQUEST": "1"}
    yield from serve_platform(backend, host, log_path, env)


@pytest.fixture
def healthy(host: HostStandIn) -> Iterator[HostStandIn]:
    yield host
    host.heal()


class Watcher:
    """A gql subscriber of one org's cloudSpacePhaseChanged, collecting events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def of(self, cloud_space_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["cloudSpaceId"] == cloud_space_id]

    def phases(self, cloud_space_id: str) -> list[str]:
        """The phases it went through (an event within a phase is its message changing)."""
        return [e["phase"] for e in self.of(cloud_space_id) if e["phase"] != e["previous"]]

    async def until(
        self, cloud_space_id: str, phase: str, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            found = [e for e in self.of(cloud_space_id) if e["phase"] == phase]
            return found[-1] if found else None

        return await eventually(reached, timeout_s)


@asynccontextmanager
async def watching(platform: Platform, org: Org) -> AsyncIterator[Watcher]:
    watcher = Watcher()
    before = platform.server.metric("spacedock_event_subscribers")
    async with org.viewer.websocket() as session:

        async def listen() -> None:
            async for event in session.subscribe(request(EVENTS, {"id": None})):
                watcher.events.append(event["cloudSpacePhaseChanged"])

        task = asyncio.create_task(listen())
        try:
            await wait_for_subscribers(platform.server, int(before) + 1)
            yield watcher
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def create(org: Org, name: str, cpu: float = 2, memory_mib: int = 2048) -> dict[str, Any]:
    payload = await org.editor.mutate(
        CREATE, {"input": {"name": name, "cpu": cpu, "memoryMiB": memory_mib}}
    )
    assert payload["userErrors"] == [], payload["userErrors"]
    created: dict[str, Any] = payload["cloudSpace"]
    return created


def b64decode(text: str) -> str:
    return base64.b64decode(text).decode()


async def ready_cloudspace(
    platform: Platform, org: Org, name: str, cpu: float, memory_mib: int
) -> dict[str, Any]:
    """A CloudSpace created and watched until READY."""
    async with watching(platform, org) as watcher:
        created = await create(org, name, cpu=cpu, memory_mib=memory_mib)
        await watcher.until(created["id"], "READY")
    return created


@pytest.fixture
async def tenant(platform: Platform) -> Org:
    return await platform.tenant()


async def test_a_cloudspace_goes_through_every_phase_and_is_built_as_designed(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    async with watching(platform, tenant) as watcher:
        created = await create(tenant, "prod-eu", cpu=2, memory_mib=2048)
        assert created["phase"] == "PENDING"
        ready = await watcher.until(created["id"], "READY")
    events = watcher.of(created["id"])
    # Phase changes; the events between them within a phase are its message changing
    # (what Flux says while the release installs, what the step waits for).
    changes = [e for e in events if e["phase"] != e["previous"]]
    assert [e["phase"] for e in changes] == ["PENDING", "PROVISIONING", "INSTALLING_FLUX", "READY"]
    assert events[0]["previous"] is None and events[0]["message"] is None
    assert [e["previous"] for e in changes[1:]] == ["PENDING", "PROVISIONING", "INSTALLING_FLUX"]
    assert "FAILED" not in [e["phase"] for e in events]
    said = [e["message"] for e in events if e["message"]]
    assert all(m.startswith(("the vCluster's HelmRelease", "Flux into")) for m in said), said
    assert ready["cloudSpace"]["phase"] == "READY"

    namespace = f"cs-{key(created['id'])}"
    ns = host.api.find("namespaces", namespace)
    assert ns is not None
    labels = ns["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "spacedock"
    assert labels["spacedock.dev/cloudspace"] == created["id"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert not namespace.startswith("cs-cs-")

    # The vCluster is the official chart's, installed by the host's Flux: spacedock wrote
    # only Flux objects (and the namespace); every workload there is Helm's.
    repository = host.api.find(
        "helmrepositories", "vcluster-charts", namespace, group="source.toolkit.fluxcd.io"
    )
    assert repository is not None and repository["spec"]["url"] == CHART_URL
    release = host.api.find("helmreleases", "prod-eu", namespace, group="helm.toolkit.fluxcd.io")
    assert release is not None
    assert release["metadata"]["labels"]["spacedock.dev/cloudspace"] == created["id"]
    assert "spacedock" in {m["manager"] for m in release["metadata"]["managedFields"]}
    ready_condition = {c["type"]: c for c in release["status"]["conditions"]}["Ready"]
    assert ready_condition["status"] == "True"
    assert ready_condition["message"] == (
        f"Helm install succeeded for release {namespace}/prod-eu.v1 with chart vcluster@0.36.1"
    )
    statefulsets = host.api.find_all("statefulsets", namespace, group="apps")
    assert [s["metadata"]["name"] for s in statefulsets] == ["prod-eu"]
    for statefulset in statefulsets:
        managers = {m["manager"] for m in statefulset["metadata"]["managedFields"]}
        assert managers == {"helm-controller"}, managers
        assert statefulset["metadata"]["labels"]["chart"] == "vcluster-0.36.1"
        # Every image from the site's mirror (the chart's defaultImageRegistry).
        pod = statefulset["spec"]["template"]["spec"]
        images = [c["image"] for c in pod["containers"] + pod.get("initContainers", [])]
        assert images and all(i.startswith(f"{IMAGE_REGISTRY}/") for i in images), images
    # The chart's policies with spacedock's numbers: the quota, Flux's seven controllers
    # (600m, 448Mi; limits 7 x 1 cpu / 1Gi) and the control plane (500m, 512Mi).
    quota = host.api.find("resourcequotas", "vc-prod-eu", namespace)
    assert quota is not None
    hard = quota["spec"]["hard"]
    assert (hard["requests.cpu"], hard["requests.memory"]) == ("3100m", "3008Mi")
    assert (hard["limits.cpu"], hard["limits.memory"]) == ("17500m", "17920Mi")
    assert hard["services.nodeports"] == "0"  # the chart's other limits are kept
    limits = host.api.find("limitranges", "vc-prod-eu", namespace)
    assert limits is not None
    assert limits["spec"]["limits"][0]["default"]["cpu"] == "500m"
    assert limits["spec"]["limits"][0]["defaultRequest"]["cpu"] == "100m"
    policies = {
        p["metadata"]["name"]
        for p in host.api.find_all("networkpolicies", namespace, "networking.k8s.io")
    }
    assert {"vc-work-prod-eu", "vc-cp-prod-eu"} <= policies
    exported = host.api.find("secrets", "vc-prod-eu", namespace)
    assert exported is not None
    server = yaml.safe_load(b64decode(exported["data"]["config"]))["clusters"][0]["cluster"]
    assert server["server"] == host.vcluster_url(namespace, "prod-eu")

    # Flux inside, through the host's Flux: an OCIRepository of Flux's manifests (from the
    # mirror the settings name) and a Kustomization applying them through vc-prod-eu.
    source = host.api.find(
        "ocirepositories", "flux-manifests", namespace, group="source.toolkit.fluxcd.io"
    )
    assert source is not None
    assert source["spec"]["url"] == FLUX_MANIFESTS_URL
    assert source["spec"]["ref"] == {"tag": FLUX_MANIFESTS_TAG}
    applied = host.api.find(
        "kustomizations", "prod-eu-flux", namespace, group="kustomize.toolkit.fluxcd.io"
    )
    assert applied is not None
    assert applied["spec"]["kubeConfig"]["secretRef"] == {"name": "vc-prod-eu", "key": "config"}
    assert {c["type"]: c["status"] for c in applied["status"]["conditions"]}["Ready"] == "True"
    copy = host.api.find("secrets", f"tenant-{key(created['id'])}-kubeconfig", "spacedock-system")
    assert copy is not None
    assert copy["metadata"]["labels"]["spacedock.dev/cloudspace"] == created["id"]
    copied = yaml.safe_load(b64decode(copy["data"]["kubeconfig"]))
    assert copied["clusters"][0]["cluster"]["server"] == host.vcluster_url(namespace, "prod-eu")

    vcluster = host.vcluster(namespace, "prod-eu")
    account = vcluster.find("serviceaccounts", "spacedock-tenant", "kube-system")
    assert account is not None
    binding = vcluster.find(
        "clusterrolebindings", "spacedock-tenant", group="rbac.authorization.k8s.io"
    )
    assert binding is not None and binding["roleRef"]["name"] == "cluster-admin"
    for ns_name in ("default", "kube-system", "flux-system"):
        assert vcluster.find("resourcequotas", "spacedock-quota", ns_name) is not None
        assert vcluster.find("limitranges", "spacedock-defaults", ns_name) is not None
    deployments = vcluster.find_all("deployments", "flux-system", group="apps")
    assert sorted(d["metadata"]["name"] for d in deployments) == [
        "helm-controller",
        "image-automation-controller",
        "image-reflector-controller",
        "kustomize-controller",
        "notification-controller",
        "source-controller",
        "source-watcher",
    ]
    for deployment in deployments:  # applied by the host's kustomize-controller
        managers = {m["manager"] for m in deployment["metadata"]["managedFields"]}
        assert managers == {"kustomize-controller"}, managers
    assert host.api.created_twice() == [] and vcluster.created_twice() == []

    data = await tenant.viewer.data(ONE, {"id": created["id"]})
    assert data["cloudSpace"]["vclusters"] == [{"name": "prod-eu", "ready": True}]
    assert data["cloudSpace"]["usage"] == {"cpu": 0.0, "memoryMiB": 0}
    assert data["cloudSpace"]["hostSpace"] is None  # the platform's space
    mine = await tenant.viewer.data(
        "query($id: ID!) { node(id: $id) { ... on CloudSpace { phase } } }", {"id": created["id"]}
    )
    assert mine["node"] == {"phase": "READY"}

    # Every step up to READY was timed (/metrics, read with prometheus-client's parser).
    for step in PROVISIONING_STEPS:
        done = platform.server.metric(
            "spacedock_reconcile_step_duration_seconds_count", step=step, outcome="done"
        )
        assert done >= 1, step


# The steps a CloudSpace takes to READY, by their stored (and /metrics) names.
PROVISIONING_STEPS = (
    "begin",
    "capacity",
    "host-namespace",
    "vcluster-release",
    "vcluster-ready",
    "kubeconfig-copy",
    "tenant-account",
    "headroom",
    "flux",
    "flux-ready",
    "refresh",
)


async def test_a_new_orgs_default_cloudspace_gets_ready_too(
    platform: Platform, healthy: HostStandIn
) -> None:
    tenant = await platform.tenant()
    default = default_of(await tenant.viewer.data(LIST))

    async def ready() -> bool:
        data = await tenant.viewer.data(ONE, {"id": default["id"]})
        return bool(data["cloudSpace"]["phase"] == "READY")

    await eventually(ready, 60)
    assert default["isDefault"] is True


@asynccontextmanager
async def tenant_client(kubeconfig: str) -> AsyncIterator[ApiClient]:
    client = await new_client_from_config_dict(yaml.safe_load(kubeconfig))
    try:
        yield client
    finally:
        await client.close()


def pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
            ]
        },
    }


async def kubeconfig_of(org: Org, cloud_space_id: str) -> dict[str, Any]:
    data = await org.editor.data(KUBECONFIG, {"id": cloud_space_id})
    (vcluster,) = data["cloudSpace"]["vclusters"]
    found: dict[str, Any] = vcluster
    return found


async def test_quotas_are_strict_inside_the_vcluster_across_namespaces(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    created = await ready_cloudspace(platform, tenant, "quota", 2, 2048)
    namespace = f"cs-{key(created['id'])}"
    vcluster = host.vcluster(namespace, "quota")
    kubeconfig = (await kubeconfig_of(tenant, created["id"]))["kubeconfig"]
    async with tenant_client(kubeconfig) as client:
        core: Any = CoreV1Api(client)  # untyped: bodies are plain dicts, as kubectl sends them
        for team in ("team-a", "team-b"):
            await core.create_namespace({"metadata": {"name": team}})

        async def placed() -> bool:  # the reconciler puts quotas into new namespaces
            return all(
                vcluster.find("resourcequotas", "spacedock-quota", t) for t in ("team-a", "team-b")
            )

        await eventually(placed)
        await core.create_namespaced_pod("team-a", pod("big", "1500m"))

        async def headroom_shrank() -> bool:
            quota = vcluster.find("resourcequotas", "spacedock-quota", "team-b")
            return bool(quota and quota["spec"]["hard"]["requests.cpu"] == "500m")

        await eventually(headroom_shrank)
        with pytest.raises(ApiException) as over:
            await core.create_namespaced_pod("team-b", pod("too-much", "1"))
        assert over.value.status == 403
        said = json.loads(over.value.body or b"{}")["message"]
        assert "exceeded quota: spacedock-quota" in said and "requests.cpu" in said
        assert vcluster.find("pods", "too-much", "team-b") is None  # refused, not Pending

        async def usage_seen() -> dict[str, Any] | None:
            data = await tenant.viewer.data(ONE, {"id": created["id"]})
            usage: dict[str, Any] | None = data["cloudSpace"]["usage"]
            return usage if usage and usage["cpu"] == 1.5 else None

        assert (await eventually(usage_seen))["cpu"] == 1.5

        below = await tenant.editor.mutate(
            UPDATE, {"input": {"id": created["id"], "cpu": 1, "memoryMiB": 2048}}
        )
        assert [(e["field"], e["code"]) for e in below["userErrors"]] == [
            (["input", "cpu"], "QUOTA_EXCEEDED")
        ]
        assert "below the current usage 1.5 (by 0.5)" in below["userErrors"][0]["message"]

        grown = await tenant.editor.mutate(
            UPDATE, {"input": {"id": created["id"], "cpu": 3, "memoryMiB": 2048}}
        )
        assert grown["userErrors"] == [] and grown["cloudSpace"]["quota"]["cpu"] == 3.0

        async def host_quota_grew() -> bool:  # the release upgraded with the new numbers
            quota = host.api.find("resourcequotas", "vc-quota", namespace)
            return bool(quota and quota["spec"]["hard"]["requests.cpu"] == "4100m")

        await eventually(host_quota_grew)

        async def admitted() -> bool:
            try:
                await core.create_namespaced_pod("team-b", pod("fits-now", "1"))
            except ApiException as refused:
                assert refused.status == 403
                return False
            return True

        await eventually(admitted)


async def test_the_host_cannot_give_more_than_it_has_beside_other_cloudspaces(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    # 64 cores and 256 GiB in all; other tests' CloudSpaces (of other orgs) hold some.
    payload = await tenant.editor.mutate(
        CREATE, {"input": {"name": "huge", "cpu": 63.5, "memoryMiB": 1024}}
    )
    assert [(e["field"], e["code"]) for e in payload["userErrors"]] == [
        (["input", "cpu"], "QUOTA_EXCEEDED")
    ]
    message = payload["userErrors"][0]["message"]
    assert message.startswith(
        "cpu 63.5 (+1.1 for the vCluster's control plane and Flux) is more than this host"
    )
    assert "64" not in message, "the host's size is not told"
    assert "prod-eu" not in message and "default" not in message and "tenant-" not in message


async def test_kubeconfigs_through_both_routes_expire_and_never_carry_the_admin_cert(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    created = await ready_cloudspace(platform, tenant, "access", 1, 1024)
    namespace = f"cs-{key(created['id'])}"
    admin_secret = host.api.find("secrets", "vc-access", namespace)
    assert admin_secret is not None
    admin_cert = b64decode(admin_secret["data"]["client-certificate"])
    admin_key = b64decode(admin_secret["data"]["client-key"])
    secrets_of_admin = [
        admin_cert,
        admin_key,
        admin_secret["data"]["client-certificate"],
        admin_secret["data"]["client-key"],
    ]

    asked_at = datetime.now(UTC)
    vcluster = await kubeconfig_of(tenant, created["id"])
    expires = datetime.fromisoformat(vcluster["kubeconfigExpiresAt"].replace("Z", "+00:00"))
    assert asked_at + timedelta(seconds=TTL_S - 60) <= expires
    assert expires <= asked_at + timedelta(seconds=TTL_S + 60)
    config = yaml.safe_load(vcluster["kubeconfig"])
    (user,) = config["users"]
    assert set(user["user"]) == {"token"}
    assert config["clusters"][0]["cluster"]["server"] == host.vcluster_url(namespace, "access")
    async with tenant_client(vcluster["kubeconfig"]) as client:
        listed = await CoreV1Api(client).list_namespace()
        assert "kube-system" in {ns.metadata.name for ns in listed.items}

    url = f"{platform.server.base}/api/v1/cloudspaces/{created['id']}/vclusters/access/kubeconfig"
    status, headers, body = await fetch(url, tenant.tokens["editor"])
    assert status == 200 and headers["content-type"].startswith("application/yaml")
    # The expiry in the API's one DateTime shape (UTC, milliseconds, Z), as the field has it.
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", headers["x-kubeconfig-expires-at"]
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", vcluster["kubeconfigExpiresAt"])
    downloaded = yaml.safe_load(body)
    assert set(downloaded["users"][0]["user"]) == {"token"}
    async with tenant_client(body) as client:
        await CoreV1Api(client).list_namespace()
    # The token expires: once the vCluster ends its tokens, the kubeconfig stops working.
    vcluster_api = host.vcluster(namespace, "access")
    vcluster_api.expire_tokens()
    async with tenant_client(body) as client:
        with pytest.raises(ApiException) as expired:
            await CoreV1Api(client).list_namespace()
        assert expired.value.status == 401

    # A VIEWER is refused the kubeconfig on both routes (the expiry it may read); another
    # org (or a wrong name) is not found.
    viewer = await tenant.viewer.call(KUBECONFIG, {"id": created["id"]})
    assert [(e["path"][-1], e["extensions"]["code"]) for e in viewer["errors"]] == [
        ("kubeconfig", "FORBIDDEN")
    ]
    assert viewer["data"]["cloudSpace"]["vclusters"][0]["ready"] is True  # the rest answers
    assert (await fetch(url, tenant.tokens["viewer"]))[0] == 403
    other = await platform.tenant("other")
    assert (await fetch(url, other.tokens["admin"]))[0] == 404
    wrong_name = url.replace("/vclusters/access/", "/vclusters/nope/")
    assert (await fetch(wrong_name, tenant.tokens["admin"]))[0] == 404
    assert (await fetch(url, None))[0] == 401
    foreign = await other.admin.data(KUBECONFIG, {"id": created["id"]})
    assert foreign["cloudSpace"] is None

    # No answer and no log line carries the admin certificate or key.
    answers = [json.dumps(vcluster), body, json.dumps(viewer), json.dumps(foreign)]
    for text in [*answers, platform.server.log()]:
        for secret in secrets_of_admin:
            assert secret.strip() not in text


TWO_KUBECONFIGS = """
query($a: ID!, $b: ID!) {
  a: cloudSpace(id: $a) { vclusters { kubeconfig } }
  b: cloudSpace(id: $b) { vclusters { kubeconfig } }
}"""


async def test_one_query_mints_no_more_kubeconfigs_than_its_live_call_budget(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    """This module's server allows one live call per request: of two vClusters'
    kubeconfigs asked at once, one is minted and the other field is PROVIDER_ERROR
    naming the limit; asked alone, each is minted."""
    # The longest name allowed (52): the chart's StatefulSet, Services and release take it.
    first = await ready_cloudspace(platform, tenant, "budget-" + "a" * 45, 1, 1024)
    second = await ready_cloudspace(platform, tenant, "budget-b", 1, 1024)
    answer = await tenant.editor.call(TWO_KUBECONFIGS, {"a": first["id"], "b": second["id"]})
    minted = [answer["data"][alias]["vclusters"][0]["kubeconfig"] for alias in ("a", "b")]
    assert sorted(kubeconfig is None for kubeconfig in minted) == [False, True]
    (refused,) = answer["errors"]
    assert refused["path"][-1] == "kubeconfig"
    assert refused["extensions"]["code"] == "PROVIDER_ERROR"
    assert "too many live calls" in refused["message"]
    assert "SPACEDOCK_LIVE_CALLS_PER_REQUEST" in refused["message"]
    for created in (first, second):
        alone = yaml.safe_load((await kubeconfig_of(tenant, created["id"]))["kubeconfig"])
        assert alone["users"][0]["user"]["token"]


async def fetch(url: str, token: str | None) -> tuple[int, dict[str, str], str]:
    def get() -> tuple[int, dict[str, str], str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers=headers), timeout=30
            ) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
        except urllib.error.HTTPError as failed:
            return (
                failed.code,
                {k.lower(): v for k, v in failed.headers.items()},
                failed.read().decode(),
            )

    return await asyncio.to_thread(get)


async def test_a_failed_step_is_retried_from_where_it_failed(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    host.api.fail_apply(kind="HelmRelease", name="flaky", times=2, code=500)
    async with watching(platform, tenant) as watcher:
        created = await create(tenant, "flaky", cpu=1, memory_mib=1024)
        failed = await watcher.until(created["id"], "FAILED")
        await watcher.until(created["id"], "READY")
    assert "HTTP 500" in failed["message"]
    phases = watcher.phases(created["id"])
    assert phases[:3] == ["PENDING", "PROVISIONING", "FAILED"]
    assert phases[-2:] == ["INSTALLING_FLUX", "READY"]
    # Retried from the failed step: back to PROVISIONING, nothing before it redone twice.
    after_failures = [p for p in phases[phases.index("FAILED") :] if p != "FAILED"]
    assert after_failures == ["PROVISIONING", "INSTALLING_FLUX", "READY"]
    assert host.api.created_twice() == []
    namespace = f"cs-{key(created['id'])}"
    # The step before the failed one ran once: the namespace was applied once.
    assert host.api.count(verb="apply", resource="namespaces", name=namespace) == 1


async def test_a_helm_failure_is_failed_with_helms_words_then_retried(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    # The HelmRelease's apply waits until the failure is switched on for its namespace.
    host.api.hold_applies(kind="HelmRelease", name="helmfail")
    words = (
        "Helm install failed for release {ns}/helmfail with chart vcluster@0.36.1: "
        'PersistentVolumeClaim "data-helmfail-0" is invalid: storage class "fast" not found'
    )
    async with watching(platform, tenant) as watcher:
        created = await create(tenant, "helmfail", cpu=0.5, memory_mib=512)
        namespace = f"cs-{key(created['id'])}"
        said = words.format(ns=namespace)
        host.flux.fail("HelmRelease", namespace, "helmfail", said, reason="InstallFailed")
        host.api.release_applies()
        failed = await watcher.until(created["id"], "FAILED")
        assert failed["message"] == f"the vCluster's HelmRelease failed: {said}"
        shown = await tenant.viewer.data(ONE, {"id": created["id"]})
        assert shown["cloudSpace"]["phase"] == "FAILED"
        assert shown["cloudSpace"]["message"] == failed["message"]
        host.flux.heal()  # the operator fixed the storage class: the retry succeeds
        await watcher.until(created["id"], "READY")


async def test_a_stalled_helm_release_is_reset_and_retried_once_the_cause_is_fixed(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    # Every apply of the vCluster's StatefulSet is refused (a policy webhook, say): Helm
    # fails its install and remediation retries (3) until the release is Stalled, after
    # which helm-controller tries no more by itself.
    host.api.fail_apply(kind="StatefulSet", name="stuck", times=None)
    async with watching(platform, tenant) as watcher:
        created = await create(tenant, "stuck", cpu=0.5, memory_mib=512)
        namespace = f"cs-{key(created['id'])}"
        failed = await watcher.until(created["id"], "FAILED")
        assert failed["message"].startswith(
            f"the vCluster's HelmRelease failed: Helm install failed for release {namespace}/stuck"
        )
        assert 'injected fault applying StatefulSet "stuck"' in failed["message"]

        def release() -> dict[str, Any] | None:
            return host.api.find("helmreleases", "stuck", namespace, "helm.toolkit.fluxcd.io")

        async def reset() -> dict[str, Any] | None:
            found = release()
            return found if (found or {}).get("status", {}).get("lastHandledResetAt") else None

        # The Stalled release was reset as `flux reconcile hr --reset` does it.
        annotations = (await eventually(reset))["metadata"]["annotations"]
        token = annotations["reconcile.fluxcd.io/resetAt"]
        assert annotations["reconcile.fluxcd.io/requestedAt"] == token
        host.api.heal()  # the operator fixed the webhook: the next retry's reset installs it
        await watcher.until(created["id"], "READY")
    ready = release()
    assert ready is not None
    assert {c["type"] for c in ready["status"]["conditions"]} == {"Ready", "Released"}
    assert "installFailures" not in ready["status"]
    # The reset went beside spacedock's apply: the release's spec is still spacedock's.
    assert ready["spec"]["values"]["controlPlane"]["distro"] == {"k8s": {"enabled": True}}


async def test_a_host_without_flux_is_refused_saying_what_to_install(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    with HostStandIn(flux=False) as bare:
        space = await make.register_generic_space(
            tenant.admin, name="no-flux", server=bare.url, ca=bare.ca_pem, token=bare.token
        )
        async with watching(platform, tenant) as watcher:
            payload = await tenant.editor.mutate(
                CREATE,
                {
                    "input": {
                        "name": "bare",
                        "hostSpaceId": space["id"],
                        "cpu": 0.5,
                        "memoryMiB": 256,
                    }
                },
            )
            assert payload["userErrors"] == []
            created = payload["cloudSpace"]
            failed = await watcher.until(created["id"], "FAILED")
        assert failed["message"].startswith("PRECONDITION_FAILED: the host space does not run Flux")
        assert "helmreleases.helm.toolkit.fluxcd.io" in failed["message"]
        assert "install Flux's source-, helm- and kustomize-controller" in failed["message"]
        assert bare.api.count(verb="apply", resource="namespaces") == 0  # nothing written
        deleted = await tenant.admin.mutate(
            DELETE, {"input": {"id": created["id"], "confirmName": "bare"}}
        )
        assert deleted["userErrors"] == []

        async def gone() -> bool:
            return (await tenant.viewer.data(ONE, {"id": created["id"]}))["cloudSpace"] is None

        await eventually(gone)


async def test_deleting_shows_its_blocker_then_deleted_once(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
    async with watching(platform, tenant) as watcher:
        created = await create(tenant, "going", cpu=1, memory_mib=1024)
        await watcher.until(created["id"], "READY")
        host.api.linger_namespaces()
        payload = await tenant.admin.mutate(
            DELETE, {"input": {"id": created["id"], "confirmName": "going"}}
        )
        assert payload["userErrors"] == [] and payload["cloudSpace"]["phase"] == "DELETING"

        async def blocked() -> dict[str, Any] | None:
            found = [
                e for e in watcher.of(created["id"]) if e["phase"] == "DELETING" and e["message"]
            ]
            return found[-1] if found else None

        blocker = await eventually(blocked)
        assert "NamespaceContentRemaining" in blocker["message"]
        assert "persistentvolumeclaims" in blocker["message"]
        shown = await tenant.viewer.data(ONE, {"id": created["id"]})
        assert shown["cloudSpace"]["phase"] == "DELETING"
        # Deleting again meanwhile is harmless: it is already on its way out.
        again = await tenant.admin.mutate(
            DELETE, {"input": {"id": created["id"], "confirmName": "going"}}
        )
        assert again["userErrors"] == [] and again["cloudSpace"]["phase"] == "DELETING"
        assert "NamespaceContentRemaining" in shown["cloudSpace"]["message"]
        host.api.release_namespaces()
        deleted = await watcher.until(created["id"], "DELETED")
        # Another CloudSpace's whole life later, DELETED is still the last event, sent once.
        other = await create(tenant, "after", cpu=0.5, memory_mib=512)
        await watcher.until(other["id"], "READY")
    phases = watcher.phases(created["id"])
    assert phases.count("DELETED") == 1 and phases[-1] == "DELETED"
    assert deleted["previous"] == "DELETING" and deleted["cloudSpace"] is None
    assert (await tenant.viewer.data(ONE, {"id": created["id"]}))["cloudSpace"] is None
    namespace = f"cs-{key(created['id'])}"
    assert host.api.find("namespaces", namespace) is None
    assert host.api.find("statefulsets", "going", namespace, group="apps") is None
    assert ("going", namespace) not in {(n, ns) for ns, n in host.vclusters}
    copy_name = f"tenant-{key(created['id'])}-kubeconfig"
    assert host.api.find("secrets", copy_name, "spacedock-system") is None


async def test_a_cloudspace_on_the_orgs_own_space_shows_its_host_both_ways(
    platform: Platform, tenant: Org
) -> None:
    # A host of its own: creation reads the host's nodes live, and the module's shared host,
    # busy with every earlier test's vClusters, answered that too slowly beside the suite.
    with HostStandIn() as host:
        host.flux.serve_vcluster_chart()
        host.flux.serve_flux_manifests()
        space = await make.register_generic_space(
            tenant.admin, name="own-host", server=host.url, ca=host.ca_pem, token=host.token
        )
        payload = await tenant.editor.mutate(
            CREATE,
            {"input": {"name": "on-own", "hostSpaceId": space["id"], "cpu": 0.5, "memoryMiB": 256}},
        )
    assert payload["userErrors"] == []
    created = payload["cloudSpace"]
    assert created["hostSpace"] == {"id": space["id"], "name": "own-host"}
    data = await tenant.viewer.data(
        "query($id: ID!) { space(id: $id) { cloudSpaces { id name hostSpace { id } } } }",
        {"id": space["id"]},
    )
    assert data["space"]["cloudSpaces"] == [
        {"id": created["id"], "name": "on-own", "hostSpace": {"id": space["id"]}}
    ]
    refused = await tenant.admin.mutate(make.DEREGISTER_SPACE, {"input": {"id": space["id"]}})
    assert [e["code"] for e in refused["userErrors"]] == ["PRECONDITION_FAILED"]


async def test_the_host_makes_room_for_each_vclusters_control_plane_and_flux(
    platform: Platform, tenant: Org
) -> None:
    # A host of 4 cores of its own. Each vCluster takes 0.5 for its control plane and
    # 0.6 for Flux's controllers inside it beside its quota: 2.9 is the most that fits.
    with HostStandIn(nodes=[("4", "16Gi")]) as host:
        space = await make.register_generic_space(
            tenant.admin, name="small-host", server=host.url, ca=host.ca_pem, token=host.token
        )

        async def ask(name: str, cpu: float) -> list[tuple[tuple[str, ...], str]]:
            payload = await tenant.editor.mutate(
                CREATE,
                {"input": {"name": name, "hostSpaceId": space["id"], "cpu": cpu, "memoryMiB": 64}},
            )
            return [(tuple(e["field"]), e["code"]) for e in payload["userErrors"]]

        assert await ask("too-big", 3.0) == [(("input", "cpu"), "QUOTA_EXCEEDED")]
        assert await ask("fits", 2.9) == []
        # 0.6 cores are left beside the control plane alone, none beside Flux's too: a
        # second vCluster would take the room the first one's Flux runs in.
        assert await ask("second", 0.1) == [(("input", "cpu"), "QUOTA_EXCEEDED")]


async def test_an_added_vcluster_needs_room_for_its_control_plane_and_flux(
    platform: Platform, tenant: Org
) -> None:
    # 4 cores: a CloudSpace of 1 core with one vCluster takes 2.1, a second vCluster 1.1
    # more; 0.8 are left then, too little for a third or for another CloudSpace.
    add = """
    mutation($input: AddVClusterInput!) {
      addVCluster(input: $input) { vcluster { id name } userErrors { field message code } }
    }"""
    names = "query($id: ID!) { cloudSpace(id: $id) { vclusters { name } } }"
    with HostStandIn(nodes=[("4", "16Gi")]) as host:
        space = await make.register_generic_space(
            tenant.admin, name="room-host", server=host.url, ca=host.ca_pem, token=host.token
        )
        created = await tenant.editor.mutate(
            CREATE,
            {"input": {"name": "roomy", "hostSpaceId": space["id"], "cpu": 1, "memoryMiB": 64}},
        )
        assert created["userErrors"] == []
        cloud_space_id = created["cloudSpace"]["id"]

        second = await tenant.editor.mutate(
            add, {"input": {"cloudSpaceId": cloud_space_id, "name": "second"}}
        )
        assert second["userErrors"] == []
        third = await tenant.editor.mutate(
            add, {"input": {"cloudSpaceId": cloud_space_id, "name": "third"}}
        )
        [refusal] = third["userErrors"]
        assert (refusal["field"], refusal["code"]) == (["input", "cloudSpaceId"], "QUOTA_EXCEEDED")
        assert refusal["message"].startswith(
            "cpu 1 (+3.3 for its 3 vClusters' control planes and Flux) is more than this host"
        ), refusal["message"]
        assert third["vcluster"] is None
        data = await tenant.viewer.data(names, {"id": cloud_space_id})
        assert [v["name"] for v in data["cloudSpace"]["vclusters"]] == ["roomy", "second"]
        another = await tenant.editor.mutate(
            CREATE,
            {"input": {"name": "other", "hostSpaceId": space["id"], "cpu": 0.1, "memoryMiB": 64}},
        )
        assert [e["code"] for e in another["userErrors"]] == ["QUOTA_EXCEEDED"]
