"""The host stand-in's Flux, driven through kubernetes-asyncio over TLS as spacedock will
drive it: the vCluster chart through a HelmRelease, Flux's manifests into the vCluster
through a remote Kustomization, Git and Helm sources for apps, and the words Flux,
Helm and the API server fail with (issues 22 and 23)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import (
    ApiextensionsV1Api,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
)

from sim.flux_standin import is_ready
from sim.host_standin import HostStandIn
from tests.support.kube_clients import (
    APPLY,
    kube,
    kube_from,
    kubectl,
    message,
    refused,
    status_of,
)

LOFT = "https://charts.loft.sh"
MIRROR = "https://charts.mirror.example"
FLUX_MANIFESTS = "oci://ghcr.io/fluxcd/flux-manifests"
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
GROUPS = {
    "GitRepository": ("source.toolkit.fluxcd.io", "v1", "gitrepositories"),
    "OCIRepository": ("source.toolkit.fluxcd.io", "v1", "ocirepositories"),
    "HelmRepository": ("source.toolkit.fluxcd.io", "v1", "helmrepositories"),
    "HelmChart": ("source.toolkit.fluxcd.io", "v1", "helmcharts"),
    "HelmRelease": ("helm.toolkit.fluxcd.io", "v2", "helmreleases"),
    "Kustomization": ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations"),
}


@pytest.fixture(scope="module")
def standin() -> Iterator[HostStandIn]:
    with HostStandIn(ready_delay_s=0.02) as host:
        host.flux.serve_vcluster_chart(LOFT)
        host.flux.serve_flux_manifests(FLUX_MANIFESTS)
        yield host


@pytest.fixture
def host(standin: HostStandIn) -> Iterator[HostStandIn]:
    yield standin
    standin.heal()


def flux(kind: str, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    group, version, _ = GROUPS[kind]
    return {
        "apiVersion": f"{group}/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


async def apply(client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    group, version, plural = GROUPS[obj["kind"]]
    meta = obj["metadata"]
    applied: dict[str, Any] = await CustomObjectsApi(client).patch_namespaced_custom_object(
        group, version, meta["namespace"], plural, meta["name"], obj, **APPLY
    )
    return applied


async def namespace(client: Any, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await CoreV1Api(client).patch_namespace(name, body, **APPLY)


def host_client(host: HostStandIn) -> Any:
    return kube(host.url, host.ca_pem, token=host.token)


def vcluster_release(
    namespace: str, name: str, values: dict[str, Any], version: str = "0.36.1"
) -> dict[str, Any]:
    return flux(
        "HelmRelease",
        namespace,
        name,
        {
            "interval": "10m",
            "chart": {
                "spec": {
                    "chart": "vcluster",
                    "version": version,
                    "sourceRef": {"kind": "HelmRepository", "name": "loft"},
                }
            },
            "values": values,
        },
    )


def loft_repository(namespace: str, url: str = LOFT) -> dict[str, Any]:
    return flux("HelmRepository", namespace, "loft", {"url": url, "interval": "1h"})


def condition(obj: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any]:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind:
            result: dict[str, Any] = found
            return result
    return {}


async def flux_object(
    host: HostStandIn, kind: str, namespace: str, name: str, test: Any
) -> dict[str, Any]:
    """The Flux object once `test(obj)` holds."""
    group, _, plural = GROUPS[kind]

    def check() -> dict[str, Any] | None:
        found = host.api.find(plural, name, namespace, group=group)
        return found if found is not None and test(found) else None

    result: dict[str, Any] = await host.flux.until(check)
    return result


async def failed(
    host: HostStandIn, kind: str, namespace: str, name: str, api: Any = None
) -> dict[str, Any]:
    """The object once its Ready condition is False at its generation."""
    group, _, plural = GROUPS[kind]
    cluster = api or host.api

    def check() -> dict[str, Any] | None:
        found = cluster.find(plural, name, namespace, group=group)
        ready = condition(found)
        generation = (found or {}).get("metadata", {}).get("generation")
        if ready.get("status") == "False" and ready.get("observedGeneration") == generation:
            return found
        return None

    result: dict[str, Any] = await host.flux.until(check)
    return result


async def git_app(client: Any, ns: str, name: str, url: str, **spec: Any) -> None:
    """A GitRepository of `url`'s main branch and a Kustomization of it, both `name`."""
    source = {"url": url, "interval": "1m", "ref": {"branch": "main"}}
    await apply(client, flux("GitRepository", ns, name, source))
    sourced = {"interval": "5m", **spec, "sourceRef": {"kind": "GitRepository", "name": name}}
    await apply(client, flux("Kustomization", ns, name, sourced))


def secret_text(secret: Any, key: str) -> str:
    return base64.b64decode(secret.data[key]).decode()


# -- Flux installed, and what it accepts ------------------------------------------
async def test_the_host_serves_fluxs_crds_and_a_host_can_be_started_without_them(
    host: HostStandIn,
) -> None:
    async with host_client(host) as client:
        crds = await ApiextensionsV1Api(client).list_custom_resource_definition()
        names = {crd.metadata.name for crd in crds.items}
        assert {
            "gitrepositories.source.toolkit.fluxcd.io",
            "helmrepositories.source.toolkit.fluxcd.io",
            "ocirepositories.source.toolkit.fluxcd.io",
            "helmreleases.helm.toolkit.fluxcd.io",
            "kustomizations.kustomize.toolkit.fluxcd.io",
        } <= names
        release = await ApiextensionsV1Api(client).read_custom_resource_definition(
            "helmreleases.helm.toolkit.fluxcd.io"
        )
        assert [v.name for v in release.spec.versions if v.served] == ["v2"]

    with HostStandIn(flux=False) as bare:
        async with kube(bare.url, bare.ca_pem, token=bare.token) as client:
            missing = await refused(
                ApiextensionsV1Api(client).read_custom_resource_definition(
                    "helmreleases.helm.toolkit.fluxcd.io"
                )
            )
            assert missing.status == 404
            unserved = await refused(apply(client, vcluster_release("default", "x", {})))
            assert unserved.status == 404


async def test_flux_objects_are_checked_against_the_pinned_crd_schemas(host: HostStandIn) -> None:
    async with host_client(host) as client:
        await namespace(client, "cs-schema")
        bad = vcluster_release("cs-schema", "bad", {})
        bad["spec"]["interval"] = "10 minutes"
        wrong = await refused(apply(client, bad))
        assert wrong.status == 422
        assert message(wrong) == (
            'HelmRelease.helm.toolkit.fluxcd.io "bad" is invalid: spec.interval: Invalid value: '
            "\"10 minutes\": spec.interval in body should match '^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$'"
        )
        assert status_of(wrong)["details"]["causes"][0]["field"] == "spec.interval"

        both = vcluster_release("cs-schema", "both", {})
        both["spec"]["chartRef"] = {"kind": "OCIRepository", "name": "charts"}
        cel = await refused(apply(client, both))
        assert message(cel).endswith(
            'spec: Invalid value: "object": either chart or chartRef must be set'
        )

        unpruned = flux(
            "Kustomization",
            "cs-schema",
            "apps",
            {"interval": "10m", "sourceRef": {"kind": "GitRepository", "name": "apps"}},
        )
        required = await refused(apply(client, unpruned))
        assert message(required).endswith("spec.prune: Required value")

        scp = flux(
            "GitRepository", "cs-schema", "scp", {"interval": "1m", "url": "git@github.com:o/r.git"}
        )
        assert "spec.url in body should match '^(http|https|ssh)://.*$'" in message(
            await refused(apply(client, scp))
        )

        # A field the CRD does not declare: server-side apply fails; a create prunes it
        # (the server's default, Warn) or refuses it under fieldValidation=Strict.
        typo = loft_repository("cs-schema")
        typo["spec"]["intervall"] = "1h"
        applied = await refused(apply(client, typo))
        assert applied.status == 500
        assert message(applied) == (
            "failed to create typed patch object (cs-schema/loft; source.toolkit.fluxcd.io/v1, "
            "Kind=HelmRepository): .spec.intervall: field not declared in schema"
        )
        custom = CustomObjectsApi(client)
        args = ("source.toolkit.fluxcd.io", "v1", "cs-schema", "helmrepositories")
        strict = await refused(
            custom.create_namespaced_custom_object(*args, typo, field_validation="Strict")
        )
        assert strict.status == 400
        assert 'strict decoding error: unknown field "spec.intervall"' in message(strict)
        created = await custom.create_namespaced_custom_object(*args, typo)
        assert "intervall" not in created["spec"] and created["spec"]["url"] == LOFT
        # The CRD's defaults are filled in, as the API server's structural defaulting does.
        await apply(client, vcluster_release("cs-schema", "defaults", {}))
        release = await custom.get_namespaced_custom_object(
            "helm.toolkit.fluxcd.io", "v2", "cs-schema", "helmreleases", "defaults"
        )
        assert release["spec"]["chart"]["spec"]["reconcileStrategy"] == "ChartVersion"


# -- the vCluster chart through a HelmRelease ---------------------------------------
async def test_a_vcluster_release_with_valid_values_runs_a_vcluster_whose_kubeconfig_works(
    host: HostStandIn,
) -> None:
    ns = "cs-good"
    server = host.vcluster_url(ns, "demo")
    values = {
        "controlPlane": {
            "distro": {"k8s": {"enabled": True}},
            "statefulSet": {
                "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
                "persistence": {"volumeClaim": {"enabled": True, "size": "5Gi"}},
            },
            "proxy": {"extraSANs": ["demo.cs-good.example"]},
        },
        "exportKubeConfig": {"server": server, "context": "cs-good-demo"},
        "policies": {
            "resourceQuota": {"enabled": True, "quota": {"requests.cpu": "4", "limits.cpu": "8"}},
            "limitRange": {"enabled": True, "default": {"cpu": "500m"}},
            "networkPolicy": {"enabled": True},
        },
        "telemetry": {"enabled": False},
    }
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        await apply(client, vcluster_release(ns, "demo", values))
        release = await host.flux.until_ready("HelmRelease", ns, "demo")
        ready = condition(release)
        assert ready["reason"] == "InstallSucceeded"
        assert ready["message"] == (
            "Helm install succeeded for release cs-good/demo.v1 with chart vcluster@0.36.1"
        )
        status = release["status"]
        assert status["lastAttemptedRevision"] == "0.36.1"
        assert status["helmChart"] == "cs-good/cs-good-demo"
        assert status["history"][0]["status"] == "deployed"
        assert status["history"][0]["chartVersion"] == "0.36.1"
        assert status["observedGeneration"] == release["metadata"]["generation"]
        chart = host.api.find("helmcharts", "cs-good-demo", ns, group="source.toolkit.fluxcd.io")
        assert condition(chart)["message"] == "pulled 'vcluster' chart with version '0.36.1'"

        core = CoreV1Api(client)
        exported = await core.read_namespaced_secret("vc-demo", ns)
        assert set(exported.data) == {
            "config",
            "certificate-authority",
            "client-certificate",
            "client-key",
            "token",
        }
        config = secret_text(exported, "config")
        assert yaml.safe_load(config)["clusters"][0]["cluster"]["server"] == server
        assert yaml.safe_load(config)["current-context"] == "cs-good-demo"

        # The chart's policies, with the values coalesced over the chart's defaults.
        quota = await core.read_namespaced_resource_quota("vc-demo", ns)
        assert quota.spec.hard["requests.cpu"] == "4" and quota.spec.hard["limits.cpu"] == "8"
        assert quota.spec.hard["count/pods"] == "20"  # the chart's default, kept
        limits = await core.read_namespaced_limit_range("vc-demo", ns)
        assert limits.spec.limits[0].default == {
            "cpu": "500m",
            "ephemeral-storage": "8Gi",
            "memory": "512Mi",
        }
        statefulset = await AppsV1Api(client).read_namespaced_stateful_set("demo", ns)
        assert statefulset.spec.template.spec.containers[0].resources.requests == {
            "cpu": "200m",
            "memory": "256Mi",
            "ephemeral-storage": "1Gi",
        }
        policies = {
            p["metadata"]["name"]
            for p in host.api.find_all("networkpolicies", ns, "networking.k8s.io")
        }
        assert {"vc-work-demo", "vc-cp-demo"} <= policies

    async with kube_from(config) as vcluster:
        names = {n.metadata.name for n in (await CoreV1Api(vcluster).list_namespace()).items}
    assert {"default", "kube-system"} <= names
    shown = kubectl(config, "get", "ns", "-o", "name")
    assert shown.returncode == 0, shown.stderr
    assert "namespace/kube-system" in shown.stdout.split()

    # Deleting the HelmRelease uninstalls: the control plane, and with it the vCluster
    # and the Secret its syncer wrote.
    async with host_client(host) as client:
        await CustomObjectsApi(client).delete_namespaced_custom_object(
            "helm.toolkit.fluxcd.io", "v2", ns, "helmreleases", "demo"
        )
        await host.flux.until(lambda: host.api.find("secrets", "vc-demo", ns) is None or None)
        assert (ns, "demo") not in host.vclusters
        assert host.api.find("statefulsets", "demo", ns, group="apps") is None
        assert host.api.find("resourcequotas", "vc-demo", ns) is None
    gone = kubectl(config, "get", "ns")
    assert gone.returncode != 0


async def test_values_the_chart_does_not_know_fail_the_release_with_helms_words(
    host: HostStandIn,
) -> None:
    ns = "cs-badvalues"
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        await apply(
            client,
            vcluster_release(
                ns, "unknown", {"controlPlane": {"distro": {"k3s": {"enabled": True}}}}
            ),
        )
        await apply(client, vcluster_release(ns, "typed", {"telemetry": {"enabled": "no"}}))
        unknown = await failed(host, "HelmRelease", ns, "unknown")
        typed = await failed(host, "HelmRelease", ns, "typed")
    prefix = "values don't meet the specifications of the schema(s) in the following chart(s):\nvcluster:\n"
    assert condition(unknown)["reason"] == "InstallFailed"
    assert condition(unknown)["message"] == (
        f"Helm install failed for release {ns}/unknown with chart vcluster@0.36.1: {prefix}"
        "- at '/controlPlane/distro': additional properties 'k3s' not allowed"
    )
    assert condition(typed)["message"].endswith(
        f"{prefix}- at '/telemetry/enabled': got string, want boolean"
    )
    stalled = condition(unknown, "Stalled")
    assert (stalled["reason"], stalled["message"]) == (
        "RetriesExceeded",
        "Failed to install after 1 attempt(s)",
    )
    assert unknown["status"]["installFailures"] == 1
    # Nothing of the chart was installed.
    assert host.api.find("statefulsets", "unknown", ns, group="apps") is None
    assert host.api.find("secrets", "vc-unknown", ns) is None


async def test_a_chart_version_the_repository_lacks_fails_with_fluxs_words(
    host: HostStandIn,
) -> None:
    ns = "cs-noversion"
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        await apply(client, vcluster_release(ns, "demo", {}, version="9.9.9"))
        release = await failed(host, "HelmRelease", ns, "demo")
    assert condition(release)["reason"] == "SourceNotReady"
    assert condition(release)["message"] == (
        f"HelmChart '{ns}/{ns}-demo' is not ready: invalid chart reference: failed to get chart "
        "version for remote reference: no 'vcluster' chart with version matching '9.9.9' found"
    )


async def test_a_mirror_serves_the_chart_and_an_unknown_or_unreachable_repository_fails(
    host: HostStandIn,
) -> None:
    ns = "cs-mirror"
    host.flux.serve_vcluster_chart(MIRROR)
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns, MIRROR))
        await apply(
            client,
            vcluster_release(
                ns, "demo", {"exportKubeConfig": {"server": host.vcluster_url(ns, "demo")}}
            ),
        )
        await host.flux.until_ready("HelmRelease", ns, "demo")

        await apply(
            client, flux("HelmRepository", ns, "nowhere", {"url": "https://charts.nowhere.example"})
        )
        nowhere = await failed(host, "HelmRepository", ns, "nowhere")
        assert condition(nowhere)["message"] == (
            "failed to fetch Helm repository index: failed to cache index to temporary file: "
            'Get "https://charts.nowhere.example/index.yaml": dial tcp: lookup '
            "charts.nowhere.example: no such host"
        )
        host.flux.unreachable(MIRROR)
        await apply(client, flux("HelmRepository", ns, "down", {"url": MIRROR, "interval": "5m"}))
        down = await failed(host, "HelmRepository", ns, "down")
        assert (
            "dial tcp charts.mirror.example:443: connect: connection refused"
            in condition(down)["message"]
        )


async def test_an_oci_mirror_of_the_chart_serves_it_through_a_helm_repository_of_type_oci(
    host: HostStandIn,
) -> None:
    ns = "cs-ocimirror"
    host.flux.serve_vcluster_chart("oci://registry.mirror.example/charts")
    async with host_client(host) as client:
        await namespace(client, ns)
        oci = flux(
            "HelmRepository",
            ns,
            "loft",
            {"url": "oci://registry.mirror.example/charts", "type": "oci", "interval": "1h"},
        )
        await apply(client, oci)
        await apply(
            client,
            vcluster_release(
                ns, "demo", {"exportKubeConfig": {"server": host.vcluster_url(ns, "demo")}}
            ),
        )
        release = await host.flux.until_ready("HelmRelease", ns, "demo")
    assert release["status"]["history"][0]["chartVersion"] == "0.36.1"
    static = host.api.find("helmrepositories", "loft", ns, group="source.toolkit.fluxcd.io")
    assert static is not None and not static.get("status", {}).get("conditions")


async def test_helm_waits_for_the_control_plane_and_a_name_too_long_for_its_pods_never_runs(
    host: HostStandIn,
) -> None:
    ns = "cs-waits"
    long = "v" * 53  # the controller-revision-hash label would pass 63 characters
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        host.api.stall(f"{ns}/held")
        await apply(client, vcluster_release(ns, "held", {}))
        release = await flux_object(
            host,
            "HelmRelease",
            ns,
            "held",
            lambda obj: condition(obj).get("reason") == "Progressing",
        )
        assert condition(release)["status"] == "Unknown"
        assert condition(release, "Reconciling")["message"] == (
            "Running 'install' action with timeout of 5m0s"
        )
        assert host.api.find("secrets", "vc-held", ns) is None
        host.api.unstall(f"{ns}/held")
        await host.flux.until_ready("HelmRelease", ns, "held")

        await apply(client, vcluster_release(ns, long, {}))
        events = await host.flux.until(
            lambda: [
                e for e in host.api.find_all("events", ns) if e["involvedObject"]["name"] == long
            ]
        )
    assert events[0]["reason"] == "FailedCreate"
    assert "must be no more than 63 characters" in events[0]["message"]
    stuck = host.api.find("helmreleases", long, ns, group="helm.toolkit.fluxcd.io")
    assert not is_ready(stuck) and (ns, long) not in host.vclusters


# -- Flux into the vCluster ---------------------------------------------------------
async def test_a_remote_kustomization_of_fluxs_manifests_waits_for_its_secret_then_runs_flux_inside(
    host: HostStandIn,
) -> None:
    ns = "cs-flux"
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(
            client,
            flux(
                "OCIRepository",
                ns,
                "flux-manifests",
                {"url": FLUX_MANIFESTS, "interval": "1h", "ref": {"tag": "v2.9.4"}},
            ),
        )
        source = await host.flux.until_ready("OCIRepository", ns, "flux-manifests")
        assert source["status"]["artifact"]["revision"].startswith("v2.9.4@sha256:")
        await apply(
            client,
            flux(
                "Kustomization",
                ns,
                "flux-demo",
                {
                    "interval": "10m",
                    "prune": True,
                    "path": "./",
                    "wait": True,
                    "timeout": "5m",
                    "sourceRef": {"kind": "OCIRepository", "name": "flux-manifests"},
                    "kubeConfig": {"secretRef": {"name": "vc-demo", "key": "config"}},
                },
            ),
        )
        # A kubeconfig whose server is the vCluster's default (localhost:8443) is no use.
        default = {"server": "https://localhost:8443", "certificate-authority-data": "eA=="}
        stray = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": default}],
            "users": [{"name": "u", "user": {"token": "x"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        secret: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "stray", "namespace": ns},
            "stringData": {"config": yaml.safe_dump(stray)},
        }
        core: Any = CoreV1Api(client)
        await core.create_namespaced_secret(ns, secret)
        elsewhere = flux(
            "Kustomization",
            ns,
            "elsewhere",
            {
                "interval": "10m",
                "prune": True,
                "sourceRef": {"kind": "OCIRepository", "name": "flux-manifests"},
                "kubeConfig": {"secretRef": {"name": "stray", "key": "config"}},
            },
        )
        await apply(client, elsewhere)
        refused_there = await failed(host, "Kustomization", ns, "elsewhere")
        assert condition(refused_there)["message"] == (
            'Get "https://localhost:8443/api?timeout=32s": dial tcp 127.0.0.1:8443: connect: '
            "connection refused"
        )
        waiting = await failed(host, "Kustomization", ns, "flux-demo")
        assert condition(waiting)["reason"] == "ReconciliationFailed"
        assert condition(waiting)["message"] == (
            f"unable to read KubeConfig secret '{ns}/vc-demo' error: secrets \"vc-demo\" not found"
        )
        server = host.vcluster_url(ns, "demo")
        await apply(client, loft_repository(ns))
        await apply(client, vcluster_release(ns, "demo", {"exportKubeConfig": {"server": server}}))
        applied = await host.flux.until_ready("Kustomization", ns, "flux-demo")
    assert (
        condition(applied)["message"]
        == f"Applied revision: {source['status']['artifact']['revision']}"
    )
    assert applied["status"]["lastAppliedRevision"] == source["status"]["artifact"]["revision"]
    entries = {e["id"] for e in applied["status"]["inventory"]["entries"]}
    assert "flux-system_source-controller_apps_Deployment" in entries
    assert "_flux-system__Namespace" in entries

    vcluster = host.vcluster(ns, "demo")
    exported = host.api.find("secrets", "vc-demo", ns)
    assert exported is not None
    config = base64.b64decode(exported["data"]["config"]).decode()
    async with kube_from(config) as client:
        deployments = await AppsV1Api(client).list_namespaced_deployment(
            "flux-system", label_selector="app.kubernetes.io/part-of=flux"
        )
        crds = await ApiextensionsV1Api(client).list_custom_resource_definition()
    found = {d.metadata.name: d for d in deployments.items}
    assert set(found) == {
        "source-controller",
        "kustomize-controller",
        "helm-controller",
        "notification-controller",
        "image-reflector-controller",
        "image-automation-controller",
        "source-watcher",
    }
    for deployment in found.values():  # available at their current generation, as flux check reads
        assert deployment.status.observed_generation == deployment.metadata.generation
        assert deployment.status.available_replicas == 1
    helm = found["helm-controller"].spec.template.spec.containers[0]
    assert helm.image == "ghcr.io/fluxcd/helm-controller:v1.6.3"
    assert helm.resources.requests == {"cpu": "100m", "memory": "64Mi"}
    assert "kustomizations.kustomize.toolkit.fluxcd.io" in {c.metadata.name for c in crds.items}
    assert (
        vcluster.find("kustomizations", "x", "default", group="kustomize.toolkit.fluxcd.io") is None
    )


async def test_flux_inside_a_vcluster_delivers_an_app_from_git(host: HostStandIn) -> None:
    """Issue 23: once Flux runs inside, its objects there reconcile like the host's."""
    ns = "cs-apps"
    server = host.vcluster_url(ns, "demo")
    repo = host.flux.git("https://git.example/team/app.git")
    sha = repo.commit({"deploy/web.yaml": yaml.safe_dump(deployment("web"))})
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        await apply(client, vcluster_release(ns, "demo", {"exportKubeConfig": {"server": server}}))
        await host.flux.until_ready("HelmRelease", ns, "demo")
        await apply(
            client,
            flux(
                "OCIRepository",
                ns,
                "flux",
                {"url": FLUX_MANIFESTS, "interval": "1h", "ref": {"tag": "v2.9.4"}},
            ),
        )
        await apply(
            client,
            flux(
                "Kustomization",
                ns,
                "flux",
                {
                    "interval": "10m",
                    "prune": True,
                    "wait": True,
                    "sourceRef": {"kind": "OCIRepository", "name": "flux"},
                    "kubeConfig": {"secretRef": {"name": "vc-demo", "key": "config"}},
                },
            ),
        )
        await host.flux.until_ready("Kustomization", ns, "flux")
    vcluster = host.vcluster(ns, "demo")
    exported = host.api.find("secrets", "vc-demo", ns)
    assert exported is not None
    async with kube_from(base64.b64decode(exported["data"]["config"]).decode()) as inside:
        await git_app(
            inside,
            "flux-system",
            "app",
            repo.url,
            prune=True,
            path="./deploy",
            targetNamespace="default",
        )
        app = await host.flux.until_ready("Kustomization", "flux-system", "app", api=vcluster)
        web = await AppsV1Api(inside).read_namespaced_deployment("web", "default")
    assert app["status"]["lastAppliedRevision"] == f"main@sha1:{sha}"
    assert web.metadata.name == "web"
    assert host.api.find("deployments", "web", "default", group="apps") is None  # inside only


# -- sources and Kustomizations for apps ----------------------------------------------
def deployment(name: str, image: str = "nginx:1.27") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}]},
            },
        },
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


async def test_git_sources_fail_with_fluxs_messages(host: HostStandIn) -> None:
    ns = "cs-git"
    repo = host.flux.git("https://git.example/team/config.git")
    sha = repo.commit({"README.md": "hi"})
    private = host.flux.git("https://git.example/team/private.git")
    private.commit({"a.yaml": "{}"})
    private.private(username="git", password="s3cret")
    async with host_client(host) as client:
        await namespace(client, ns)
        sources: dict[str, dict[str, Any]] = {
            "good": {"url": repo.url, "ref": {"branch": "main"}},
            "default-branch": {"url": repo.url},
            "badref": {"url": repo.url, "ref": {"branch": "nope"}},
            "nohost": {"url": "https://git.nowhere.example/x.git", "ref": {"branch": "main"}},
            "nosecret": {"url": private.url, "secretRef": {"name": "missing"}},
            "anonymous": {"url": private.url, "ref": {"branch": "main"}},
        }
        for name, spec in sources.items():
            await apply(client, flux("GitRepository", ns, name, {"interval": "1m", **spec}))
        good = await host.flux.until_ready("GitRepository", ns, "good")
        results = {
            name: condition(await failed(host, "GitRepository", ns, name))
            for name in ("default-branch", "badref", "nohost", "nosecret", "anonymous")
        }
    assert good["status"]["artifact"]["revision"] == f"main@sha1:{sha}"
    assert condition(good)["message"] == f"stored artifact for revision 'main@sha1:{sha}'"
    unable = "failed to checkout and determine revision: unable to clone"
    assert results["default-branch"]["message"] == (
        f"{unable} '{repo.url}': couldn't find remote ref \"refs/heads/master\""
    )
    assert results["badref"]["reason"] == "GitOperationFailed"
    assert results["badref"]["message"] == (
        f"{unable} '{repo.url}': couldn't find remote ref \"refs/heads/nope\""
    )
    assert results["nohost"]["message"] == (
        f"{unable} 'https://git.nowhere.example/x.git': dial tcp: lookup git.nowhere.example: "
        "no such host"
    )
    assert (results["nosecret"]["reason"], results["nosecret"]["message"]) == (
        "AuthenticationFailed",
        f"failed to get secret '{ns}/missing': secrets \"missing\" not found",
    )
    assert results["anonymous"]["message"].endswith("authentication required")


async def test_a_kustomization_applies_a_repositorys_files_reports_its_inventory_and_prunes(
    host: HostStandIn,
) -> None:
    ns = "cs-kustomize"
    repo = host.flux.git("https://git.example/team/web.git")
    first = repo.commit(
        {
            "apps/web/deployment.yaml": yaml.safe_dump(deployment("web")),
            "apps/web/service.yaml": yaml.safe_dump(service("web")),
            "other/ignored.yaml": yaml.safe_dump(service("elsewhere")),
        }
    )
    async with host_client(host) as client:
        await namespace(client, ns)
        await namespace(client, "team-web")
        images = [{"name": "nginx", "newName": "mirror.example/nginx", "newTag": "1.28"}]
        await git_app(
            client,
            ns,
            "web",
            repo.url,
            prune=True,
            wait=True,
            path="./apps/web",
            targetNamespace="team-web",
            images=images,
        )
        applied = await host.flux.until_ready("Kustomization", ns, "web")
        assert applied["status"]["lastAppliedRevision"] == f"main@sha1:{first}"
        assert applied["status"]["inventory"]["entries"] == [
            {"id": "team-web_web__Service", "v": "v1"},
            {"id": "team-web_web_apps_Deployment", "v": "v1"},
        ]
        web = await AppsV1Api(client).read_namespaced_deployment("web", "team-web")
        assert web.spec.template.spec.containers[0].image == "mirror.example/nginx:1.28"
        assert web.metadata.managed_fields[0].manager == "kustomize-controller"
        assert host.api.find("services", "elsewhere", "team-web") is None

        second = repo.commit({"apps/web/deployment.yaml": yaml.safe_dump(deployment("web"))})
        pruned = await flux_object(
            host,
            "Kustomization",
            ns,
            "web",
            lambda obj: obj["status"].get("lastAppliedRevision") == f"main@sha1:{second}",
        )
        assert [e["id"] for e in pruned["status"]["inventory"]["entries"]] == [
            "team-web_web_apps_Deployment"
        ]
        assert host.api.find("services", "web", "team-web") is None

        await CustomObjectsApi(client).delete_namespaced_custom_object(
            "kustomize.toolkit.fluxcd.io", "v1", ns, "kustomizations", "web"
        )
        await host.flux.until(
            lambda: host.api.find("deployments", "web", "team-web", group="apps") is None or None
        )


async def test_a_kustomization_reports_what_the_api_server_refuses(host: HostStandIn) -> None:
    ns = "cs-refused"
    repo = host.flux.git("https://git.example/team/broken.git")
    repo.commit({"svc.yaml": yaml.safe_dump(service("1web"))})
    async with host_client(host) as client:
        await namespace(client, ns)
        await git_app(client, ns, "broken", repo.url, prune=False, targetNamespace=ns)
        broken = await failed(host, "Kustomization", ns, "broken")
    assert condition(broken)["reason"] == "ReconciliationFailed"
    assert condition(broken)["message"].startswith(
        f'Service/{ns}/1web dry-run failed (Invalid): Service "1web" is invalid: metadata.name: '
        'Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric'
    )


async def test_a_helm_chart_a_test_registers_installs_its_objects_with_the_values(
    host: HostStandIn,
) -> None:
    ns = "cs-charts"
    charts = host.flux.helm("https://charts.example")

    def render(values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
        made = deployment(release, values["image"])
        made["spec"]["replicas"] = values["replicas"]
        return [made]

    charts.add_chart(
        "web",
        "1.2.0",
        render=render,
        defaults={"image": "nginx:1.27", "replicas": 1},
        schema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"image": {"type": "string"}, "replicas": {"type": "integer"}},
            "additionalProperties": False,
        },
    )
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, flux("HelmRepository", ns, "charts", {"url": charts.url}))
        release = {
            "interval": "5m",
            "chart": {
                "spec": {
                    "chart": "web",
                    "version": ">=1.0.0 <2.0.0",
                    "sourceRef": {"kind": "HelmRepository", "name": "charts"},
                }
            },
            "values": {"replicas": 3},
        }
        await apply(client, flux("HelmRelease", ns, "web", release))
        ready = await host.flux.until_ready("HelmRelease", ns, "web")
        web = await AppsV1Api(client).read_namespaced_deployment("web", ns)
        assert web.spec.replicas == 3 and web.spec.template.spec.containers[0].image == "nginx:1.27"
        assert web.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"
        assert ready["status"]["inventory"]["entries"] == [
            {"id": f"{ns}_web_apps_Deployment", "v": "v1"}
        ]
        assert host.api.find("secrets", "sh.helm.release.v1.web.v1", ns) is not None

        release["values"] = {"replicas": "three"}
        await apply(client, flux("HelmRelease", ns, "web", release))
        upgrade = await failed(host, "HelmRelease", ns, "web")
    assert condition(upgrade)["reason"] == "UpgradeFailed"
    assert condition(upgrade)["message"] == (
        f"Helm upgrade failed for release {ns}/web with chart web@1.2.0: values don't meet the "
        "specifications of the schema(s) in the following chart(s):\nweb:\n"
        "- at '/replicas': got string, want integer"
    )


# -- switches a test drives ------------------------------------------------------------
async def test_fault_switches_stall_and_fail_a_release_and_requested_at_is_handled(
    host: HostStandIn,
) -> None:
    ns = "cs-switches"
    async with host_client(host) as client:
        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        host.flux.stall("HelmRelease", ns, "demo")
        await apply(client, vcluster_release(ns, "demo", {}))
        stalled = await flux_object(
            host, "HelmRelease", ns, "demo", lambda obj: condition(obj).get("status") == "Unknown"
        )
        assert condition(stalled)["reason"] == "Progressing"
        assert host.api.find("statefulsets", "demo", ns, group="apps") is None
        host.flux.fail("HelmRelease", ns, "demo", "Helm install failed: disk full")
        failure = await failed(host, "HelmRelease", ns, "demo")
        assert condition(failure)["message"] == "Helm install failed: disk full"
        host.flux.heal()
        await host.flux.until_ready("HelmRelease", ns, "demo")

        body = {
            "metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "2026-12-01T10:00:00Z"}}
        }
        custom: Any = CustomObjectsApi(client)  # untyped: _content_type is a call option
        await custom.patch_namespaced_custom_object(
            "helm.toolkit.fluxcd.io",
            "v2",
            ns,
            "helmreleases",
            "demo",
            body,
            _content_type="application/merge-patch+json",
        )
        handled = await flux_object(
            host,
            "HelmRelease",
            ns,
            "demo",
            lambda obj: obj["status"].get("lastHandledReconcileAt") == "2026-12-01T10:00:00Z",
        )
    assert is_ready(handled)

    # Suspended, a release is left alone: a new spec is not reconciled.
    async with host_client(host) as client:
        suspended = vcluster_release(ns, "demo", {"telemetry": {"enabled": "no"}})
        suspended["spec"]["suspend"] = True
        await apply(client, suspended)
    after = await host.flux.until(
        lambda: host.api.find("helmreleases", "demo", ns, group="helm.toolkit.fluxcd.io")
    )
    assert after["metadata"]["generation"] > after["status"]["observedGeneration"]
    assert condition(after)["reason"] == "InstallSucceeded"


async def test_a_stalled_release_is_tried_again_only_on_a_reset_request(
    host: HostStandIn,
) -> None:
    """As helm-controller v2 does: RetriesExceeded stalls the release for good, until
    `reconcile.fluxcd.io/resetAt` equals a new `reconcile.fluxcd.io/requestedAt`
    (`flux reconcile hr --reset`); a reset without it is recorded and does nothing."""
    ns, name = "cs-reset", "resetme"
    group, version, plural = GROUPS["HelmRelease"]
    release = vcluster_release(ns, name, {})
    release["spec"]["install"] = {"remediation": {"retries": 2}}
    host.api.fail_apply(kind="StatefulSet", name=name, times=None)  # e.g. a webhook refusing
    async with host_client(host) as client:
        custom = CustomObjectsApi(client)

        async def annotate(annotations: dict[str, str]) -> None:
            await custom.patch_namespaced_custom_object(
                group,
                version,
                ns,
                plural,
                name,
                {"metadata": {"annotations": annotations}},
                **MERGE,
            )

        await namespace(client, ns)
        await apply(client, loft_repository(ns))
        await apply(client, release)

        def stalled(obj: dict[str, Any]) -> bool:
            return condition(obj, "Stalled").get("status") == "True"

        found = await flux_object(host, "HelmRelease", ns, name, stalled)
        assert condition(found, "Stalled")["reason"] == "RetriesExceeded"
        assert condition(found, "Stalled")["message"] == "Failed to install after 3 attempt(s)"
        assert found["status"]["installFailures"] == 3
        assert condition(found)["message"].endswith(f'injected fault applying StatefulSet "{name}"')
        host.heal()  # the cause is fixed; the release stays stalled

        # A reset without the matching reconcile request is recorded, and nothing more.
        await annotate({"reconcile.fluxcd.io/resetAt": "first"})
        found = await flux_object(
            host,
            "HelmRelease",
            ns,
            name,
            lambda o: o["status"].get("lastHandledResetAt") == "first",
        )
        assert stalled(found) and found["status"]["installFailures"] == 3
        assert host.api.find("statefulsets", name, ns, group="apps") is None

        # The pair, as `flux reconcile hr --reset` writes it: the counts are cleared and
        # Helm installs again.
        token = "2026-12-06T03:00:00.000000Z"
        await annotate(
            {"reconcile.fluxcd.io/resetAt": token, "reconcile.fluxcd.io/requestedAt": token}
        )
        ready = await host.flux.until_ready("HelmRelease", ns, name)
        assert not stalled(ready)
        assert "installFailures" not in ready["status"]
        assert ready["status"]["lastHandledResetAt"] == token
        assert ready["status"]["lastHandledReconcileAt"] == token
        assert host.api.find("statefulsets", name, ns, group="apps") is not None


# -- what a change wakes ------------------------------------------------------------------
async def test_a_write_wakes_only_the_flux_objects_that_read_what_it_changed() -> None:
    """A write reconciles the Flux objects that read what it changed, and no other: a
    ConfigMap nothing read wakes none (a stand-in that reconciled everything after every
    write starved its loop once a test had several CloudSpaces); a kubeconfig Secret
    deleted fails the Kustomization that reads it, and one of its objects deleted is applied
    again."""
    with HostStandIn(ready_delay_s=0.02) as own:
        ns = "cs-wakes"
        repo = own.flux.git("https://git.example/team/wakes.git")
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": ns},
            "data": {"a": "1"},
        }
        repo.commit({"deploy/settings.yaml": yaml.safe_dump(config_map)})
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "host",
                    "cluster": {
                        "server": own.url,
                        "certificate-authority-data": base64.b64encode(
                            own.ca_pem.encode()
                        ).decode(),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": own.token}}],
            "contexts": [{"name": "host", "context": {"cluster": "host", "user": "admin"}}],
            "current-context": "host",
        }
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "host-kubeconfig", "namespace": ns},
            "stringData": {"config": yaml.safe_dump(kubeconfig)},
        }
        async with host_client(own) as client:
            core: Any = CoreV1Api(client)
            await namespace(client, ns)
            await core.create_namespaced_secret(ns, secret)
            await git_app(
                client,
                ns,
                "app",
                repo.url,
                prune=True,
                path="./deploy",
                kubeConfig={"secretRef": {"name": "host-kubeconfig", "key": "config"}},
            )
            await own.flux.until_ready("Kustomization", ns, "app")
            await own.flux.until(lambda: not own.flux.busy())
            before = own.flux.reconciled
            unrelated = {**config_map, "metadata": {"name": "unrelated", "namespace": ns}}
            await core.create_namespaced_config_map(ns, unrelated)
            await own.flux.until(lambda: not own.flux.busy())
            assert own.flux.reconciled == before

            await core.delete_namespaced_config_map("settings", ns)
            await flux_object(
                own,
                "Kustomization",
                ns,
                "app",
                lambda _: own.api.find("configmaps", "settings", ns),
            )

            await core.delete_namespaced_secret("host-kubeconfig", ns)
            gone = await failed(own, "Kustomization", ns, "app")
            assert condition(gone)["message"] == (
                f"unable to read KubeConfig secret '{ns}/host-kubeconfig' error: secrets "
                '"host-kubeconfig" not found'
            )
            await core.create_namespaced_secret(ns, secret)
            await own.flux.until_ready("Kustomization", ns, "app")
