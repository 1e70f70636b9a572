"""The host-cluster and vCluster stand-ins, driven through kubernetes-asyncio the
way spacedock's reconciler drives them, so the CloudSpace tests can trust what
they build on."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import (
    ApiClient,
    ApiextensionsV1Api,
    AppsV1Api,
    AuthenticationV1TokenRequest,
    CoreV1Api,
    CustomObjectsApi,
    V1TokenRequestSpec,
)
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import new_client_from_config_dict
from kubernetes_asyncio.dynamic import DynamicClient

from sim.host_standin import HostStandIn
from sim.kube_quota import (
    apply_limit_range_defaults,
    format_quantity,
    quantity_units,
    quota_refusal,
    quota_status,
)
from sim.pki import KeyPair
from tests.support.kube_clients import APPLY, kube, message, refused

T = TypeVar("T")


CHARTS = "https://charts.loft.sh"


@pytest.fixture(scope="module")
def standin() -> Iterator[HostStandIn]:
    with HostStandIn(ready_delay_s=0.02) as host:
        host.flux.serve_vcluster_chart(CHARTS)
        yield host


@pytest.fixture
def host(standin: HostStandIn) -> Iterator[HostStandIn]:
    """The module's stand-in, healed and with fresh counts for each test."""
    standin.api.reset_counts()
    yield standin
    standin.heal()


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.dev"},
    "spec": {
        "group": "example.dev",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def host_client(host: HostStandIn) -> Any:
    return kube(host.url, host.ca_pem, token=host.token)


async def eventually(check: Callable[[], Awaitable[T | None]], timeout_s: float = 10.0) -> T:
    """Poll until `check` returns something truthy; bounded, never a fixed sleep."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def apis(client: ApiClient) -> tuple[Any, Any]:
    """The core and apps APIs, untyped: apply bodies are plain dicts, as spacedock sends them."""
    return CoreV1Api(client), AppsV1Api(client)


def reason(error: ApiException) -> str:
    found: str = json.loads(error.body or b"{}")["reason"]
    return found


def statefulset(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "replicas": 1,
            "serviceName": f"{name}-headless",
            "selector": {"matchLabels": {"app": "vcluster", "release": name}},
            "template": {
                "metadata": {"labels": {"app": "vcluster", "release": name}},
                "spec": {"containers": [{"name": "syncer", "image": "vcluster:0.20"}]},
            },
        },
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def apply_flux(client: ApiClient, kind: str, ns: str, name: str, spec: Any) -> None:
    """Server-side apply of one of Flux's objects, as spacedock's reconciler writes them."""
    group, plural = {
        "HelmRepository": ("source.toolkit.fluxcd.io", "helmrepositories"),
        "HelmRelease": ("helm.toolkit.fluxcd.io", "helmreleases"),
    }[kind]
    version = "v2" if kind == "HelmRelease" else "v1"
    meta = {"name": name, "namespace": ns}
    body = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": meta, "spec": spec}
    await CustomObjectsApi(client).patch_namespaced_custom_object(
        group, version, ns, plural, name, body, **APPLY
    )


async def start_vcluster(host: HostStandIn, ns: str, name: str) -> dict[str, str]:
    """Install a vCluster as spacedock does, from the chart through the host's Flux, with
    its kubeconfig exported for the gateway's address; its Secret's data, decoded."""
    async with host_client(host) as client:
        core, _ = apis(client)
        await core.patch_namespace(ns, namespace(ns), **APPLY)
        source = {"url": CHARTS, "interval": "1h"}
        chart = {
            "chart": "vcluster",
            "version": "0.36.1",
            "sourceRef": {"kind": "HelmRepository", "name": "charts"},
        }
        values = {"exportKubeConfig": {"server": host.vcluster_url(ns, name)}}
        release = {"interval": "10m", "chart": {"spec": chart}, "values": values}
        await apply_flux(client, "HelmRepository", ns, "charts", source)
        await apply_flux(client, "HelmRelease", ns, name, release)

        async def secret() -> Any:
            try:
                return await core.read_namespaced_secret(f"vc-{name}", ns)
            except ApiException as error:
                assert error.status == 404
                return None

        found = await eventually(secret)
    return {key: base64.b64decode(value).decode() for key, value in found.data.items()}


async def test_server_side_apply_creates_once_then_updates_only_on_change(
    host: HostStandIn,
) -> None:
    host.api.stall("web")  # no status updates: only applies may move resourceVersion
    async with host_client(host) as client:
        core, apps = apis(client)
        await core.patch_namespace("cs-apply", namespace("cs-apply"), **APPLY)
        desired = statefulset("web", "cs-apply", {"tier": "a", "old": "yes"})
        first = await apps.patch_namespaced_stateful_set("web", "cs-apply", desired, **APPLY)
        again = await apps.patch_namespaced_stateful_set("web", "cs-apply", desired, **APPLY)
        assert again.metadata.resource_version == first.metadata.resource_version
        assert again.metadata.uid == first.metadata.uid
        assert [f.manager for f in again.metadata.managed_fields] == ["spacedock"]

        desired["metadata"]["labels"] = {"tier": "b"}
        desired["spec"]["replicas"] = 2
        changed = await apps.patch_namespaced_stateful_set("web", "cs-apply", desired, **APPLY)
        assert int(changed.metadata.resource_version) > int(first.metadata.resource_version)
        assert changed.metadata.labels == {"tier": "b"}  # the dropped label is gone
        assert changed.metadata.generation == 2

        duplicate = await refused(
            apps.create_namespaced_stateful_set("cs-apply", statefulset("web", "cs-apply"))
        )
        assert duplicate.status == 409 and reason(duplicate) == "AlreadyExists"
        missing = await refused(apps.delete_namespaced_stateful_set("nope", "cs-apply"))
        assert message(missing) == 'statefulsets.apps "nope" not found'

    assert host.api.count("apply", "statefulsets.apps", "cs-apply", "web") == 3
    assert host.api.count("create", "statefulsets.apps") == 1
    assert host.api.creations()["statefulsets.apps/cs-apply/web"] == 1
    assert host.api.created_twice() == []


async def test_apply_needs_a_field_manager_and_conflicts_without_force(
    host: HostStandIn,
) -> None:
    async with host_client(host) as client:
        core, _ = apis(client)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owned", "namespace": "default"},
            "data": {"k": "spacedock"},
        }
        await core.patch_namespaced_config_map("owned", "default", body, **APPLY)
        body["data"]["k"] = "intruder"
        unnamed = await refused(
            core.patch_namespaced_config_map(
                "owned", "default", body, _content_type="application/apply-patch+yaml"
            )
        )
        assert unnamed.status == 422 and "fieldManager: Required value" in message(unnamed)
        conflict = await refused(
            core.patch_namespaced_config_map(
                "owned",
                "default",
                body,
                field_manager="other",
                _content_type="application/apply-patch+yaml",
            )
        )
        assert conflict.status == 409 and 'conflict with "spacedock": .data.k' in message(conflict)
        stored = await core.read_namespaced_config_map("owned", "default")
        assert stored.data == {"k": "spacedock"}
        elsewhere = await refused(
            core.patch_namespaced_config_map("owned", "kube-system", body, **APPLY)
        )
        assert elsewhere.status == 400 and "does not match the namespace" in message(elsewhere)


async def test_discovery_serves_the_dynamic_client_and_learns_crd_kinds(host: HostStandIn) -> None:
    async with host_client(host) as client:
        dynamic = await DynamicClient(client)
        statefulsets = await dynamic.resources.get(api_version="apps/v1", kind="StatefulSet")
        assert statefulsets.namespaced and statefulsets.name == "statefulsets"
        bindings = await dynamic.resources.get(
            api_version="rbac.authorization.k8s.io/v1", kind="ClusterRoleBinding"
        )
        assert not bindings.namespaced

        crds = await dynamic.resources.get(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
        )
        applied = await dynamic.server_side_apply(
            crds,
            body=WIDGET_CRD,
            name=WIDGET_CRD["metadata"]["name"],
            field_manager="spacedock",
            force_conflicts=True,
        )
        established = {c["type"]: c["status"] for c in applied.status.conditions}
        assert established["Established"] == "True"

        rediscovered = await DynamicClient(client)
        await rediscovered.resources.invalidate_cache()
        widgets = await rediscovered.resources.get(api_version="example.dev/v1", kind="Widget")
        widget = {
            "apiVersion": "example.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "tenant", "namespace": "default", "labels": {"team": "a"}},
            "spec": {"size": 2},
        }
        await rediscovered.server_side_apply(
            widgets, body=widget, name="tenant", namespace="default", field_manager="spacedock"
        )
        listed = await rediscovered.get(widgets, namespace="default", label_selector="team=a")
        assert [item.metadata.name for item in listed.items] == ["tenant"]
        none = await rediscovered.get(widgets, namespace="default", label_selector="team=b")
        assert none.items == []

        # apiextensions/v1 wants a schema for every version, as the API server does.
        schemaless = copy.deepcopy(WIDGET_CRD)
        schemaless["metadata"]["name"] = "gadgets.example.dev"
        schemaless["spec"]["names"] = {"kind": "Gadget", "plural": "gadgets"}
        del schemaless["spec"]["versions"][0]["schema"]
        extensions: Any = ApiextensionsV1Api(client)  # untyped: a dict body
        refusal = await refused(extensions.create_custom_resource_definition(schemaless))
        assert refusal.status == 422
        assert message(refusal).endswith(
            "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"
        )


async def test_a_ready_vcluster_release_brings_its_secret_and_its_api(
    host: HostStandIn,
) -> None:
    secret = await start_vcluster(host, "cs-ready", "demo")
    assert set(secret) == {
        "config",
        "certificate-authority",
        "client-certificate",
        "client-key",
        "token",
    }
    kubeconfig = yaml.safe_load(secret["config"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == host.vcluster_url("cs-ready", "demo")

    async with host_client(host) as client:
        ready = await AppsV1Api(client).read_namespaced_stateful_set("demo", "cs-ready")
        assert ready.status.ready_replicas == 1

    # The address the reconciler builds from SPACEDOCK_VCLUSTER_URL_TEMPLATE.
    url = host.vcluster_url_template.format(namespace="cs-ready", name="demo", id="ignored")
    kubeconfig["clusters"][0]["cluster"]["server"] = url
    client = await new_client_from_config_dict(kubeconfig)
    try:
        names = {n.metadata.name for n in (await CoreV1Api(client).list_namespace()).items}
    finally:
        await client.close()
    assert {"default", "kube-system", "kube-public"} <= names
    assert secret["certificate-authority"] == host.vcluster_ca_pem
    assert host.api.creations()["secrets/cs-ready/vc-demo"] == 1


async def test_each_vcluster_accepts_only_its_own_admin_certificate(host: HostStandIn) -> None:
    first = await start_vcluster(host, "cs-one", "one")
    await start_vcluster(host, "cs-two", "two")
    admin = KeyPair(first["client-certificate"], first["client-key"])
    async with kube(host.vcluster_url("cs-one", "one"), host.vcluster_ca_pem, cert=admin) as c:
        await CoreV1Api(c).list_namespace()
    async with kube(host.vcluster_url("cs-two", "two"), host.vcluster_ca_pem, cert=admin) as c:
        assert (await refused(CoreV1Api(c).list_namespace())).status == 401
    async with kube(host.vcluster_url("cs-none", "x"), host.vcluster_ca_pem, cert=admin) as c:
        assert (await refused(CoreV1Api(c).list_namespace())).status == 503


async def test_token_request_tokens_work_on_their_vcluster_until_they_expire(
    host: HostStandIn,
) -> None:
    secret = await start_vcluster(host, "cs-token", "tok")
    admin = KeyPair(secret["client-certificate"], secret["client-key"])
    url = host.vcluster_url("cs-token", "tok")
    async with kube(url, host.vcluster_ca_pem, cert=admin) as client:
        core, _ = apis(client)
        await core.patch_namespaced_service_account(
            "spacedock-tenant",
            "kube-system",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "spacedock-tenant", "namespace": "kube-system"},
            },
            **APPLY,
        )
        before = dt.datetime.now(dt.UTC).replace(microsecond=0)
        issued = await core.create_namespaced_service_account_token(
            "spacedock-tenant",
            "kube-system",
            AuthenticationV1TokenRequest(
                spec=V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
            ),
        )
        too_short = await refused(
            core.create_namespaced_service_account_token(
                "spacedock-tenant",
                "kube-system",
                AuthenticationV1TokenRequest(
                    spec=V1TokenRequestSpec(audiences=[], expiration_seconds=60)
                ),
            )
        )
        assert too_short.status == 422
    token = issued.status.token
    expires = issued.status.expiration_timestamp
    assert before + dt.timedelta(seconds=3600) <= expires <= before + dt.timedelta(seconds=3602)

    async with kube(url, host.vcluster_ca_pem, token=token) as client:
        created = await apis(client)[0].create_namespace({"metadata": {"name": "team-a"}})
        assert created.metadata.name == "team-a"
    assert host.vcluster("cs-token", "tok").count("create", "serviceaccounts/token") == 2
    assert host.vcluster("cs-token", "tok").count("create", "namespaces", name="team-a") == 1

    await start_vcluster(host, "cs-other", "other")
    async with kube(host.vcluster_url("cs-other", "other"), host.vcluster_ca_pem, token=token) as c:
        assert (await refused(CoreV1Api(c).list_namespace())).status == 401
    async with kube(host.url, host.ca_pem, token="made-up") as c:
        assert (await refused(CoreV1Api(c).list_namespace())).status == 401

    host.vcluster("cs-token", "tok").expire_tokens()
    async with kube(url, host.vcluster_ca_pem, token=token) as client:
        assert (await refused(CoreV1Api(client).list_namespace())).status == 401


def pod(name: str, cpu: str | None = None, memory: str | None = None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    container: dict[str, Any] = {"name": "app", "image": "nginx"}
    if requests:
        container["resources"] = {"requests": requests}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


def quota_objects(ns: str, cpu: str, memory: str) -> list[dict[str, Any]]:
    """What the reconciler puts in a vCluster namespace: defaults and the headroom quota."""
    return [
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "spacedock-defaults", "namespace": ns},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
                        "default": {"cpu": "200m", "memory": "256Mi"},
                    }
                ]
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "spacedock-quota", "namespace": ns},
            "spec": {"hard": {"requests.cpu": cpu, "requests.memory": memory}},
        },
    ]


async def test_quota_admission_refuses_a_pod_over_the_headroom_across_namespaces(
    host: HostStandIn,
) -> None:
    secret = await start_vcluster(host, "cs-quota", "q")
    admin = KeyPair(secret["client-certificate"], secret["client-key"])
    async with kube(host.vcluster_url("cs-quota", "q"), host.vcluster_ca_pem, cert=admin) as client:
        core, _ = apis(client)
        # A CloudSpace quota of 1 CPU / 1Gi over two namespaces, sized as headroom.
        for ns in ("team-a", "team-b"):
            await core.patch_namespace(ns, namespace(ns), **APPLY)
        for obj in quota_objects("team-a", "1", "1Gi") + quota_objects("team-b", "1", "1Gi"):
            await core.patch_namespaced_limit_range(
                obj["metadata"]["name"], obj["metadata"]["namespace"], obj, **APPLY
            ) if obj["kind"] == "LimitRange" else await core.patch_namespaced_resource_quota(
                obj["metadata"]["name"], obj["metadata"]["namespace"], obj, **APPLY
            )
        await core.create_namespaced_pod("team-a", pod("big", cpu="600m", memory="512Mi"))
        quota_a = await core.read_namespaced_resource_quota("spacedock-quota", "team-a")
        assert quota_a.status.used == {"requests.cpu": "600m", "requests.memory": "512Mi"}

        # The reconciler refreshes team-b's headroom: 0 used here + (1 - 0.6) left.
        headroom = quota_objects("team-b", "400m", "512Mi")[1]
        await core.patch_namespaced_resource_quota("spacedock-quota", "team-b", headroom, **APPLY)
        defaulted = await core.create_namespaced_pod("team-b", pod("small"))
        assert defaulted.spec.containers[0].resources.requests == {"cpu": "100m", "memory": "128Mi"}

        over = await refused(core.create_namespaced_pod("team-b", pod("x", cpu="400m")))
        assert over.status == 403
        assert message(over) == (
            'pods "x" is forbidden: exceeded quota: spacedock-quota, '
            "requested: requests.cpu=400m, used: requests.cpu=100m, limited: requests.cpu=400m"
        )
        quota_b = await core.read_namespaced_resource_quota("spacedock-quota", "team-b")
        assert quota_b.status.used == {"requests.cpu": "100m", "requests.memory": "128Mi"}
        assert quota_b.status.hard == {"requests.cpu": "400m", "requests.memory": "512Mi"}

        await core.delete_namespaced_pod("big", "team-a")
        quota_a = await core.read_namespaced_resource_quota("spacedock-quota", "team-a")
        assert quota_a.status.used == {"requests.cpu": "0", "requests.memory": "0"}
    pods = host.vcluster("cs-quota", "q").find_all("pods")
    assert [p["metadata"]["name"] for p in pods] == ["small"]


def test_quantities_parse_and_print_as_the_api_server_does() -> None:
    assert quantity_units("requests.cpu", "500m") == 500
    assert quantity_units("requests.cpu", "1") == 1000
    assert quantity_units("requests.cpu", "0.25") == 250
    assert quantity_units("requests.memory", "512Mi") == 512 * 2**20
    assert quantity_units("requests.memory", "1Gi") == 2**30
    assert quantity_units("requests.memory", "1G") == 10**9
    assert quantity_units("requests.memory", "1e3") == 1000
    assert format_quantity("requests.cpu", 1500) == "1500m"
    assert format_quantity("requests.cpu", 2000) == "2"
    assert format_quantity("requests.memory", 3 * 2**29) == "1536Mi"
    assert format_quantity("requests.memory", 0) == "0"
    with pytest.raises(ValueError):
        quantity_units("cpu", "lots")


async def test_a_lingering_namespace_terminates_with_its_blocker_until_released(
    host: HostStandIn,
) -> None:
    await start_vcluster(host, "cs-linger", "gone")
    host.api.linger_namespaces()
    async with host_client(host) as client:
        core, _ = apis(client)
        await core.delete_namespace("cs-linger")
        held = await core.read_namespace("cs-linger")
        assert held.status.phase == "Terminating"
        conditions = {c.type: c for c in held.status.conditions}
        assert conditions["NamespaceContentRemaining"].status == "True"
        assert "persistentvolumeclaims" in conditions["NamespaceContentRemaining"].message
        assert "pvc-protection" in conditions["NamespaceFinalizersRemaining"].message
        again = await refused(core.delete_namespace("cs-linger"))
        assert again.status == 409
        refused_content = await refused(
            core.create_namespaced_config_map("cs-linger", {"metadata": {"name": "late"}})
        )
        assert refused_content.status == 403 and "being terminated" in message(refused_content)
        assert (await refused(core.read_namespaced_secret("vc-gone", "cs-linger"))).status == 404
        assert ("cs-linger", "gone") not in host.vclusters

        host.api.release_namespaces()
        assert (await refused(core.read_namespace("cs-linger"))).status == 404

        await core.patch_namespace("cs-quick", namespace("cs-quick"), **APPLY)
        await core.delete_namespace("cs-quick")
        assert (await refused(core.read_namespace("cs-quick"))).status == 404


async def test_fault_switches_fail_applies_and_stall_workloads(host: HostStandIn) -> None:
    async with host_client(host) as client:
        core, apps = apis(client)
        await core.patch_namespace("cs-fault", namespace("cs-fault"), **APPLY)
        host.api.fail_apply(kind="StatefulSet", name="flaky", times=2)
        for _ in range(2):
            failed = await refused(
                apps.patch_namespaced_stateful_set(
                    "flaky", "cs-fault", statefulset("flaky", "cs-fault"), **APPLY
                )
            )
            assert failed.status == 500 and reason(failed) == "InternalError"
        await apps.patch_namespaced_stateful_set(
            "other", "cs-fault", statefulset("other", "cs-fault"), **APPLY
        )
        await apps.patch_namespaced_stateful_set(
            "flaky", "cs-fault", statefulset("flaky", "cs-fault"), **APPLY
        )
        assert host.api.count("apply", "statefulsets.apps", "cs-fault", "flaky") == 3
        assert host.api.creations()["statefulsets.apps/cs-fault/flaky"] == 1

        host.api.fail_apply(times=1)
        failed = await refused(core.patch_namespace("cs-fault", namespace("cs-fault"), **APPLY))
        assert failed.status == 500
        await core.patch_namespace("cs-fault", namespace("cs-fault"), **APPLY)

        host.api.stall("stuck")
        await apps.patch_namespaced_stateful_set(
            "stuck", "cs-fault", statefulset("stuck", "cs-fault"), **APPLY
        )
        await apps.patch_namespaced_stateful_set(
            "later", "cs-fault", statefulset("later", "cs-fault"), **APPLY
        )

        async def ready(name: str) -> bool:
            found = await apps.read_namespaced_stateful_set(name, "cs-fault")
            return bool(found.status.ready_replicas)

        # "later" was created after "stuck", with the same delay: once it is
        # ready, "stuck" would have been too.
        await eventually(lambda: ready("later"))
        assert not await ready("stuck")
        host.api.unstall("stuck")
        await eventually(lambda: ready("stuck"))
        # A StatefulSet no release of the vCluster chart made runs no vCluster, ready or not:
        # a reconciler cannot fake one with its own templates.
        assert ("cs-fault", "stuck") not in host.vclusters
        assert ("cs-fault", "later") not in host.vclusters
        assert host.api.find("secrets", "vc-stuck", "cs-fault") is None


async def test_nodes_report_allocatable_and_load_balancers_an_address(host: HostStandIn) -> None:
    host.set_nodes([("4", "16Gi"), ("2", "8Gi"), ("2", "8Gi")])
    async with host_client(host) as client:
        core, _ = apis(client)
        nodes = (await core.list_node()).items
        allocatable = sorted(
            (n.status.allocatable["cpu"], n.status.allocatable["memory"]) for n in nodes
        )
        assert allocatable == [("2", "8Gi"), ("2", "8Gi"), ("4", "16Gi")]
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "vc", "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 443, "targetPort": 8443}]},
        }
        applied = await core.patch_namespaced_service("vc", "default", service, **APPLY)
        assert applied.status.load_balancer.ingress[0].ip == "127.0.0.1"
    host.set_nodes([("8", "32Gi")])


async def test_the_host_takes_a_client_certificate_and_refuses_strangers(host: HostStandIn) -> None:
    async with kube(host.url, host.ca_pem, cert=host.client_certificate()) as client:
        names = {n.metadata.name for n in (await CoreV1Api(client).list_namespace()).items}
        assert "kube-system" in names
    async with kube(host.url, host.ca_pem, token="wrong") as client:
        assert (await refused(CoreV1Api(client).list_namespace())).status == 401


async def test_refuse_closes_the_host_or_the_vclusters_until_listen(host: HostStandIn) -> None:
    secret = await start_vcluster(host, "cs-refuse", "r")
    admin = KeyPair(secret["client-certificate"], secret["client-key"])
    host.refuse(host=False)
    async with host_client(host) as client:
        await CoreV1Api(client).list_namespace()
    async with kube(host.vcluster_url("cs-refuse", "r"), host.vcluster_ca_pem, cert=admin) as c:
        with pytest.raises(aiohttp.ClientConnectorError):
            await CoreV1Api(c).list_namespace()
        host.refuse()
        async with host_client(host) as client:
            with pytest.raises(aiohttp.ClientConnectorError):
                await CoreV1Api(client).list_namespace()
        host.listen()
        await CoreV1Api(c).list_namespace()


async def test_a_crds_kind_is_stored_under_its_path_and_listed_by_labels(
    host: HostStandIn,
) -> None:
    widget = {
        "apiVersion": "example.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default", "labels": {"team": "a"}},
        "spec": {"size": 1},
    }
    async with host_client(host) as client:
        unknown = "/apis/example.dev/v1/namespaces/default/gizmos/g1"
        with pytest.raises(ApiException) as missing:  # a kind no CRD declares is not served
            await client.call_api(unknown, "GET", auth_settings=["BearerToken"])
        assert missing.value.status == 404
        await ApiextensionsV1Api(client).patch_custom_resource_definition(
            WIDGET_CRD["metadata"]["name"], WIDGET_CRD, **APPLY
        )
        path = "/apis/example.dev/v1/namespaces/default/widgets/w1"
        await client.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", "spacedock"), ("force", "true")],
            header_params={"Content-Type": "application/apply-patch+yaml"},
            body=widget,
            auth_settings=["BearerToken"],
        )
        core, _ = apis(client)
        for ns, team in (("default", "a"), ("kube-system", "a"), ("kube-public", "b")):
            config_map = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "labelled", "namespace": ns, "labels": {"team": team}},
            }
            await core.patch_namespaced_config_map("labelled", ns, config_map, **APPLY)
        team_a = await core.list_config_map_for_all_namespaces(label_selector="team=a")
        assert sorted(c.metadata.namespace for c in team_a.items) == ["default", "kube-system"]
        not_a = await core.list_namespaced_config_map("kube-public", label_selector="team!=a")
        assert [c.metadata.name for c in not_a.items] == ["labelled"]

        patched = await core.patch_namespaced_config_map(
            "labelled", "default", {"data": {"k": "v"}}
        )  # a strategic merge patch, as kubectl sends
        assert patched.data == {"k": "v"} and patched.metadata.labels == {"team": "a"}
    stored = host.api.find("widgets", "w1", "default", group="example.dev")
    assert stored is not None and stored["spec"] == {"size": 1}
    assert host.api.count("apply", "widgets.example.dev", "default", "w1") == 1
    assert host.api.count("list", "configmaps") == 2


async def test_a_token_dies_with_its_service_account(host: HostStandIn) -> None:
    secret = await start_vcluster(host, "cs-bound", "b")
    admin = KeyPair(secret["client-certificate"], secret["client-key"])
    url = host.vcluster_url("cs-bound", "b")
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}}
    async with kube(url, host.vcluster_ca_pem, cert=admin) as client:
        core, _ = apis(client)
        await core.create_namespaced_service_account("default", account)
        issued = await core.create_namespaced_service_account_token(
            "tenant", "default", {"spec": {"audiences": [], "expirationSeconds": 600}}
        )
        token = issued.status.token
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        assert claims["sub"] == "system:serviceaccount:default:tenant"
        async with kube(url, host.vcluster_ca_pem, token=token) as tenant:
            await CoreV1Api(tenant).list_namespace()
            await core.delete_namespaced_service_account("tenant", "default")
            await core.create_namespaced_service_account("default", account)
            assert (await refused(CoreV1Api(tenant).list_namespace())).status == 401
        unknown = await refused(
            core.create_namespaced_service_account_token(
                "nobody", "default", {"spec": {"audiences": []}}
            )
        )
        assert unknown.status == 404


def test_limit_range_defaults_and_quota_words_follow_the_api_server() -> None:
    defaults = [
        {
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"cpu": "500m", "memory": "512Mi"},
                        "defaultRequest": {"cpu": "100m"},
                    }
                ]
            }
        }
    ]
    pod: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "bare"},
                {"name": "capped", "resources": {"limits": {"cpu": "300m"}}},
            ]
        },
    }
    apply_limit_range_defaults(pod, defaults)
    bare, capped = (c["resources"] for c in pod["spec"]["containers"])
    # defaultRequest wins over default for requests; memory falls back to default.
    assert bare["requests"] == {"cpu": "100m", "memory": "512Mi"}
    assert bare["limits"] == {"cpu": "500m", "memory": "512Mi"}
    # A container's own limit is its request, before any LimitRange default.
    assert capped["requests"] == {"cpu": "300m", "memory": "512Mi"}

    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "1", "pods": "1"}}}
    unstated = {"metadata": {"name": "u"}, "spec": {"containers": [{"name": "c"}]}}
    assert quota_refusal(unstated, [quota], []) == (
        'pods "u" is forbidden: failed quota: q: must specify requests.cpu'
    )
    assert quota_refusal(pod, [quota], []) is None
    second = {**pod, "metadata": {"name": "second"}}
    # Only what is exceeded is named (400m + 400m of cpu still fit).
    assert quota_refusal(second, [quota], [pod]) == (
        'pods "second" is forbidden: exceeded quota: q, '
        "requested: pods=1, used: pods=1, limited: pods=1"
    )
    assert quota_status(quota, [pod]) == {
        "hard": {"requests.cpu": "1", "pods": "1"},
        "used": {"requests.cpu": "400m", "pods": "1"},
    }


async def test_flux_deployments_in_a_vcluster_become_available_after_the_delay(
    host: HostStandIn,
) -> None:
    secret = await start_vcluster(host, "cs-flux", "f")
    admin = KeyPair(secret["client-certificate"], secret["client-key"])
    vcluster = host.vcluster("cs-flux", "f")
    vcluster.stall("kustomize-controller")
    async with kube(host.vcluster_url("cs-flux", "f"), host.vcluster_ca_pem, cert=admin) as client:
        core, apps = apis(client)
        await core.patch_namespace("flux-system", namespace("flux-system"), **APPLY)
        for name in ("source-controller", "kustomize-controller"):
            deployment = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "flux-system"},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "manager", "image": f"fluxcd/{name}"}]},
                    },
                },
            }
            await apps.patch_namespaced_deployment(name, "flux-system", deployment, **APPLY)

        async def available(name: str) -> int:
            found = await apps.read_namespaced_deployment(name, "flux-system")
            return int(found.status.available_replicas or 0)

        assert await eventually(lambda: available("source-controller")) == 1
        assert await available("kustomize-controller") == 0
        vcluster.unstall("kustomize-controller")
        assert await eventually(lambda: available("kustomize-controller")) == 1
    # The host saw none of it.
    assert host.api.count(resource="deployments.apps", namespace="flux-system") == 0
