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
    CREATE,
    DELETE,
    EVENTS,
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
def host() -> Iterator[HostStandIn]:
    # Room for every test's CloudSpaces and every tenant's default one.
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
        return [e["phase"] for e in self.of(cloud_space_id)]

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
    assert watcher.phases(created["id"]) == ["PENDING", "PROVISIONING", "INSTALLING_FLUX", "READY"]
    first = watcher.of(created["id"])[0]
    assert first["previous"] is None and first["message"] is None
    assert [e["previous"] for e in watcher.of(created["id"])[1:]] == [
        "PENDING",
        "PROVISIONING",
        "INSTALLING_FLUX",
    ]
    assert ready["cloudSpace"]["phase"] == "READY"

    namespace = f"cs-{key(created['id'])}"
    ns = host.api.find("namespaces", namespace)
    assert ns is not None
    labels = ns["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "spacedock"
    assert labels["spacedock.dev/cloudspace"] == created["id"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    quota = host.api.find("resourcequotas", "spacedock-quota", namespace)
    assert quota is not None
    assert quota["spec"]["hard"] == {  # the quota plus the control plane's allowance
        "requests.cpu": "2500m",
        "limits.cpu": "2500m",
        "requests.memory": "2560Mi",
        "limits.memory": "2560Mi",
    }
    assert host.api.find("limitranges", "spacedock-defaults", namespace) is not None
    policy = host.api.find(
        "networkpolicies", "spacedock-default-deny", namespace, group="networking.k8s.io"
    )
    assert policy is not None and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    statefulset = host.api.find("statefulsets", "prod-eu", namespace, group="apps")
    assert statefulset is not None
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/loft-sh/vcluster:0.19.7"
    assert any(arg.startswith("--tls-san=") for arg in container["args"])
    for service in ("prod-eu", "prod-eu-headless"):
        assert host.api.find("services", service, namespace) is not None
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
        "kustomize-controller",
        "source-controller",
    ]
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
    "vcluster-services",
    "vcluster-workload",
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

        async def host_quota_grew() -> bool:
            quota = host.api.find("resourcequotas", "spacedock-quota", namespace)
            return bool(quota and quota["spec"]["hard"]["requests.cpu"] == "3500m")

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
    assert message.startswith("cpu 63.5 (+0.5 for the control plane) is more than this host")
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
    first = await ready_cloudspace(platform, tenant, "budget-a", 1, 1024)
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
    host.api.fail_apply(kind="StatefulSet", name="flaky", times=2, code=500)
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
    # The steps before the failed one ran once: its two Services were applied once each.
    assert host.api.count(verb="apply", resource="services", namespace=namespace) == 2
    assert host.api.count(verb="apply", resource="statefulsets.apps", namespace=namespace) == 3


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
    copy_name = f"tenant-{key(created['id'])}-kubeconfig"
    assert host.api.find("secrets", copy_name, "spacedock-system") is None


async def test_a_cloudspace_on_the_orgs_own_space_shows_its_host_both_ways(
    platform: Platform, tenant: Org, healthy: HostStandIn
) -> None:
    host = healthy
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
