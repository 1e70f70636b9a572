"""The rules behind a CloudSpace's objects, without a cluster: quantities as the API server
writes them, headroom quotas, the vCluster's address from a template or its LoadBalancer,
how Flux objects' conditions read, what blocks a namespace, the admin Secret's keys, what pods and
workloads request, the quota webhook's configuration, and kubeconfig names."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import yaml

from api.logs import logged_path
from core.cloudspaces import (
    admission,
    chart,
    kubeconfigs,
    pod_requests,
    quantities,
    tenant,
    vcluster_rules,
)
from core.cloudspaces import settings as cloudspace_settings
from core.cloudspaces import vclusters as vc
from core.cloudspaces.admission_review import MalformedReview, review_of
from core.cloudspaces.pod_requests import Need
from core.cloudspaces.quantities import parse_quantity
from providers.errors import UnexpectedAnswer
from sim.kube_admission import configuration_errors
from sim.kube_quota import quantity_units
from sim.kube_validation import builtin_schemas


def test_quantities_read_as_the_api_server_writes_them() -> None:
    assert quantities.cores_of("500m") == 0.5
    assert quantities.cores_of("2") == 2.0
    assert quantities.mib_of("8Gi") == 8192
    assert quantities.mib_of("134217728") == 128
    assert quantities.mib_of("1000M") == pytest.approx(953.674, rel=1e-4)
    assert (quantities.cpu_text(2.5), quantities.memory_text(2560)) == ("2500m", "2560Mi")
    with pytest.raises(ValueError):
        quantities.cores_of("two")


# Every suffix and form the API server accepts, with its value (k8s.io/apimachinery's
# resource.Quantity); the product and the stand-ins read them with this one parser.
QUANTITIES = {
    "1n": Decimal("1e-9"),
    "1u": Decimal("1e-6"),
    "250m": Decimal("0.25"),
    "3": Decimal(3),
    "1k": Decimal(1000),
    "1M": Decimal(10**6),
    "2G": Decimal(2 * 10**9),
    "1T": Decimal(10**12),
    "1P": Decimal(10**15),
    "1E": Decimal(10**18),
    "1Ki": Decimal(1024),
    "1.5Mi": Decimal(3 * 2**19),
    "1Gi": Decimal(2**30),
    "1Ti": Decimal(2**40),
    "1Pi": Decimal(2**50),
    "1Ei": Decimal(2**60),
    "1e3": Decimal(1000),
    "5E-3": Decimal("0.005"),
    "1.5e+2": Decimal(150),
    ".5": Decimal("0.5"),
    "2.": Decimal(2),
    "+4": Decimal(4),
    "-1": Decimal(-1),
}


@pytest.mark.parametrize("text", QUANTITIES)
def test_every_quantity_the_api_server_accepts_parses(text: str) -> None:
    assert parse_quantity(text) == QUANTITIES[text]


def test_a_pebibyte_of_memory_is_a_quota() -> None:
    assert quantities.mib_of("1Pi") == 2**30
    assert quantity_units("requests.memory", "1Pi") == 2**50  # the stand-in's count


@pytest.mark.parametrize(
    "text", ["", "two", "Mi", "1ki", "1MI", "1e", "1e3Mi", "1.2.3", "1 Gi", "--1", "1Zi", "e3"]
)
def test_what_the_api_server_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


def test_headroom_is_what_is_used_here_plus_what_is_left_of_the_quota() -> None:
    used = {"team-a": tenant.Used(1.5, 1024), "team-b": tenant.Used(0.25, 256)}
    objects = tenant.headroom_objects(["team-a", "team-b", "new"], used, cpu=2, memory_mib=2048)
    hard = {
        o["metadata"]["namespace"]: o["spec"]["hard"]
        for o in objects
        if o["kind"] == "ResourceQuota"
    }
    assert hard == {
        "team-a": {"requests.cpu": "1750m", "requests.memory": "1792Mi"},
        "team-b": {"requests.cpu": "500m", "requests.memory": "1024Mi"},
        "new": {"requests.cpu": "250m", "requests.memory": "768Mi"},
    }
    limit_ranges = [o for o in objects if o["kind"] == "LimitRange"]
    assert len(limit_ranges) == 3  # a pod without requests still counts, in every namespace
    # Over the quota already (it was lowered): nothing more anywhere, never below the used.
    over = tenant.headroom_objects(
        ["team-a"], {"team-a": tenant.Used(3, 4096)}, cpu=2, memory_mib=2048
    )
    assert over[1]["spec"]["hard"] == {"requests.cpu": "3000m", "requests.memory": "4096Mi"}


def test_usage_counts_only_our_quotas() -> None:
    quotas: list[dict[str, Any]] = [
        {
            "metadata": {"name": "spacedock-quota", "namespace": "a"},
            "status": {"used": {"requests.cpu": "1500m", "requests.memory": "1Gi"}},
        },
        {
            "metadata": {"name": "someone-elses", "namespace": "a"},
            "status": {"used": {"requests.cpu": "9", "requests.memory": "9Gi"}},
        },
        {"metadata": {"name": "spacedock-quota", "namespace": "b"}, "status": {}},
    ]
    assert tenant.used_by_namespace(quotas) == {"a": tenant.Used(1.5, 1024), "b": tenant.Used(0, 0)}


def test_the_address_comes_from_the_template_or_the_load_balancer() -> None:
    target = vc.Target(id="cs_ABC_1", name="prod", cpu=1, memory_mib=512)
    templated = cloudspace_settings.CloudSpaceSettings(
        vcluster_url_template="https://{name}.vc.example.com/"
    )
    assert vc.address_of(templated, target) == "https://prod.vc.example.com"
    assert vc.address_of(cloudspace_settings.CloudSpaceSettings(), target) is None
    assert target.namespace == "cs-abc-1"  # the id's own cs_ is not doubled
    service = {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}}}
    assert vc.load_balancer_address(service) == "https://lb.example.com"
    assert vc.load_balancer_address(
        {"status": {"loadBalancer": {"ingress": [{"ip": "fd00::1"}]}}}
    ) == ("https://[fd00::1]")
    assert vc.load_balancer_address({"status": {"loadBalancer": {}}}) is None
    # Whatever else the host cluster writes there never becomes a kubeconfig's server.
    for hostile in ["evil.example/steal?x=", "a" * 300, "lb.example.com\nX: y", "fe80::1%eth0"]:
        key = "ip" if ":" in hostile else "hostname"
        with pytest.raises(UnexpectedAnswer):
            vc.load_balancer_address({"status": {"loadBalancer": {"ingress": [{key: hostile}]}}})
    # Without a template the chart's Service is a LoadBalancer; with one, a ClusterIP
    # behind it, and the address is a TLS SAN of the vCluster's certificate.
    plain = chart.release_values(cloudspace_settings.CloudSpaceSettings(), target, None)
    assert plain["controlPlane"]["service"]["spec"]["type"] == "LoadBalancer"
    behind = chart.release_values(templated, target, "https://prod.vc.example.com")
    assert behind["controlPlane"]["service"]["spec"]["type"] == "ClusterIP"
    assert behind["controlPlane"]["proxy"]["extraSANs"] == ["prod.vc.example.com"]


def test_flux_objects_conditions_read_as_flux_writes_them() -> None:
    def release(generation: int, observed: int, *conditions: tuple[str, str, str]) -> Any:
        return {
            "metadata": {"generation": generation},
            "status": {
                "observedGeneration": observed,
                "conditions": [
                    {"type": t, "status": s, "reason": r, "message": f"{t} {r}"}
                    for t, s, r in conditions
                ],
            },
        }

    assert chart.condition_of(None) == chart.Condition(False, False, None)
    assert chart.condition_of(release(1, 1, ("Ready", "True", "InstallSucceeded"))).ready
    # An older generation's Ready says nothing of the current spec.
    stale = chart.condition_of(release(2, 1, ("Ready", "True", "InstallSucceeded")))
    assert not stale.ready and not stale.failed
    progressing = chart.condition_of(release(1, 1, ("Ready", "Unknown", "Progressing")))
    assert (progressing.ready, progressing.failed) == (False, False)
    assert progressing.message == "Ready Progressing"
    failed = chart.condition_of(release(1, 1, ("Ready", "False", "InstallFailed")))
    assert failed.failed and failed.message == "Ready InstallFailed"
    assert not failed.stalled  # helm-controller retries it by itself
    stalled = chart.condition_of(
        release(1, 1, ("Ready", "False", "RetriesExceeded"), ("Stalled", "True", "RetriesExceeded"))
    )
    assert stalled.failed and stalled.stalled  # it does not: spacedock resets it
    # The reset, as `flux reconcile hr --reset` writes it: one token in both annotations.
    at = datetime(2026, 12, 6, 3, 0, 1, 250000, tzinfo=UTC)
    assert chart.reset_request(at) == {
        "reconcile.fluxcd.io/resetAt": "2026-12-06T03:00:01.250000Z",
        "reconcile.fluxcd.io/requestedAt": "2026-12-06T03:00:01.250000Z",
    }
    # A source not ready yet is waited on: Flux retries it.
    assert not chart.condition_of(release(1, 1, ("Ready", "False", "SourceNotReady"))).failed
    # A Kustomization's failures are its own.
    applied = release(1, 1, ("Ready", "False", "HealthCheckFailed"))
    assert chart.condition_of(applied, chart.KUSTOMIZE_FAILURES).failed
    assert not chart.condition_of(
        release(1, 1, ("Ready", "False", "ArtifactFailed")), chart.KUSTOMIZE_FAILURES
    ).failed

    def deployment(generation: int, observed: int, available: str) -> dict[str, Any]:
        return {
            "metadata": {"generation": generation},
            "status": {
                "observedGeneration": observed,
                "conditions": [{"type": "Available", "status": available}],
            },
        }

    assert not chart.flux_deployments_available([])
    assert chart.flux_deployments_available([deployment(1, 1, "True")])
    assert not chart.flux_deployments_available([deployment(2, 1, "True")])
    assert not chart.flux_deployments_available(
        [deployment(1, 1, "True"), deployment(1, 1, "False")]
    )


def test_a_lingering_namespace_names_its_blocker() -> None:
    namespace = {
        "metadata": {"name": "cs-x"},
        "status": {
            "phase": "Terminating",
            "conditions": [
                {"type": "NamespaceDeletionDiscoveryFailure", "status": "False"},
                {
                    "type": "NamespaceContentRemaining",
                    "status": "True",
                    "message": "Some resources are remaining: persistentvolumeclaims.",
                },
            ],
        },
    }
    assert vc.namespace_blocker(namespace) == (
        "NamespaceContentRemaining: Some resources are remaining: persistentvolumeclaims."
    )
    assert vc.namespace_blocker({"metadata": {"name": "cs-x"}}) == (
        "waiting for host namespace cs-x to be removed"
    )


def test_the_admin_secret_must_hold_every_key() -> None:
    def data(**values: str) -> dict[str, dict[str, str]]:
        return {
            "data": {
                k.replace("_", "-"): base64.b64encode(v.encode()).decode()
                for k, v in values.items()
            }
        }

    full = data(config="c", certificate_authority="ca", client_certificate="cert", client_key="key")
    access = kubeconfigs.admin_access(full)
    assert (access.ca_pem, access.client_certificate_pem, access.client_key_pem) == (
        "ca",
        "cert",
        "key",
    )
    with pytest.raises(ValueError, match="client-key"):
        kubeconfigs.admin_access(
            data(config="c", certificate_authority="ca", client_certificate="cert")
        )


def container(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "image": "i", "resources": {"requests": requests}, **extra}


def test_a_pods_requests_are_reckoned_as_the_scheduler_reckons_them() -> None:
    spec: dict[str, Any] = {"containers": [container("500m", "1Gi"), container("1", "512Mi")]}
    assert pod_requests.pod_need(spec) == Need(1500, 1536 * 2**20)
    # An init container runs alone: only the largest counts against the containers' sum.
    spec["initContainers"] = [container("2", "64Mi"), container("100m", "4Gi")]
    assert pod_requests.pod_need(spec) == Need(2000, 4 * 2**30)
    # A sidecar (restartPolicy Always) keeps running: it adds to the rest and to later inits.
    spec["initContainers"] = [container("250m", "128Mi", restartPolicy="Always"), container("2")]
    assert pod_requests.pod_need(spec) == Need(2250, 1664 * 2**20)
    # Overhead is on top; pod-level requests win where given; a limit alone is the request.
    spec = {"containers": [container("1")], "overhead": {"cpu": "250m", "memory": "10Mi"}}
    assert pod_requests.pod_need(spec) == Need(1250, 10 * 2**20)
    spec = {"containers": [container("1", "1Gi")], "resources": {"requests": {"cpu": "3"}}}
    assert pod_requests.pod_need(spec) == Need(3000, 2**30)
    limited = {"name": "c", "image": "i", "resources": {"limits": {"cpu": "750m"}}}
    assert pod_requests.pod_need({"containers": [limited]}) == Need(750, 0)
    # A template's pod gets the LimitRange's defaults where it says nothing.
    bare = {"containers": [{"name": "c", "image": "i"}]}
    assert pod_requests.pod_need(bare) == Need(0, 0)
    assert pod_requests.pod_need(bare, defaults=True) == Need(100, 128 * 2**20)
    # Quantities round up to what the API server counts, and print as it writes them.
    assert pod_requests.millicores("0.0001") == 1
    assert [pod_requests.cpu_text(m) for m in (4000, 2500, 1)] == ["4", "2500m", "1m"]
    assert [pod_requests.memory_text(b) for b in (2**31, 1536 * 2**20, 1000)] == [
        "2Gi",
        "1536Mi",
        "1000",
    ]


def test_a_workload_asks_for_its_pods_now_or_later() -> None:
    def of(group: str, resource: str, spec: dict[str, Any]) -> pod_requests.Workload:
        return pod_requests.workload_of(group, resource, {"spec": spec})

    pod_spec = {"containers": [container("2")]}
    template = {"template": {"spec": pod_spec}}
    two_cores = Need(2000, 128 * 2**20)  # the memory default fills in
    assert of("apps", "deployments", {"replicas": 3, **template}) == pod_requests.Workload(
        3, two_cores
    )
    assert of("apps", "statefulsets", template).pods == 1  # replicas default to 1
    assert of("apps", "daemonsets", {**template}).pods == 1
    assert of("batch", "jobs", {"parallelism": 4, "completions": 2, **template}).pods == 2
    suspended = of("batch", "jobs", {"suspend": True, **template})
    assert suspended.later and suspended.need == two_cores
    cron = of("batch", "cronjobs", {"jobTemplate": {"spec": {"parallelism": 2, **template}}})
    assert cron.later and cron.need == two_cores.times(2)
    owned = {"metadata": {"ownerReferences": [{"kind": "Deployment", "controller": True}]}}
    assert pod_requests.controlled(owned) and not pod_requests.controlled({"metadata": {}})


def test_observed_usage_counts_pods_that_have_not_ended() -> None:
    def stored(name: str, cpu: str, phase: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [container(cpu, "1Mi")]},
        }
        if phase:
            found["status"] = {"phase": phase}
        return found

    pods = [stored("a", "1"), stored("b", "2", "Running"), stored("c", "4", "Succeeded")]
    usage, seen = admission.observed_usage(pods)
    assert usage == Need(3000, 2 * 2**20)
    assert seen == {("ns", "a"), ("ns", "b"), ("ns", "c")}  # a seen pod's reservation ends


def test_the_webhook_configuration_is_one_the_api_server_accepts() -> None:
    url = "https://spacedock.example/api/v1/admission/cs_1/prod/s3cret"
    manifest = admission.webhook_manifest(url, "-----BEGIN CERTIFICATE-----\n")
    assert builtin_schemas("1.31").check(manifest).errors == []
    assert builtin_schemas("1.31").check(manifest).unknown == []
    assert configuration_errors(manifest) == []
    (hook,) = manifest["webhooks"]
    assert hook["clientConfig"] == {
        "url": url,
        "caBundle": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(),
    }
    assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
        "Ignore",
        "NoneOnDryRun",
        10,
    )
    assert hook["admissionReviewVersions"] == ["v1"]
    resources = {r for rule in hook["rules"] for r in rule["resources"]}
    assert {"pods", "deployments", "deployments/scale", "statefulsets/scale", "jobs"} <= resources
    assert {"replicasets/scale", "cronjobs", "daemonsets", "statefulsets"} <= resources
    assert "caBundle" not in admission.webhook_manifest(url, None)["webhooks"][0]["clientConfig"]
    # The secret at the end of its path never reaches the log.
    assert logged_path("/api/v1/admission/cs_1/prod/s3cret?timeout=5s") == (
        "/api/v1/admission/cs_1/prod/…"
    )
    assert logged_path("/graphql?query=x") == "/graphql"


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}},
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "", "resource": {"resource": "pods"}},
        },
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "resource": {"resource": "pods"}, "object": []},
        },
    ],
)
def test_what_is_no_admission_review_is_refused(document: object) -> None:
    with pytest.raises(MalformedReview):
        review_of(document)


def test_kubeconfig_names_are_unique_per_cloudspace_and_vcluster() -> None:
    first = kubeconfigs.kubeconfig_names("cs_AB_1", "default")
    assert first == ("spacedock-ab-1-default", "spacedock-ab-1-default-tenant", first[0])
    assert kubeconfigs.kubeconfig_names("cs_AB_2", "default") != first
    assert kubeconfigs.kubeconfig_names("cs_AB_1", "staging") != first
    text = kubeconfigs.tenant_kubeconfig(
        "cs_AB_1", "default", "https://vc.example", "CA", {"token": "t"}
    )
    config = yaml.safe_load(text)
    assert config["contexts"][0]["context"] == {
        "cluster": first[0],
        "user": first[1],
        "namespace": "default",
    }
    credential = kubeconfigs.exec_credential("t", datetime(2030, 1, 2, 3, 4, 5, 678, tzinfo=UTC))
    assert credential == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "t", "expirationTimestamp": "2030-01-02T03:04:05Z"},
    }


@pytest.mark.parametrize(
    ("name", "taken", "code"),
    [
        ("second", ["first"], None),
        ("first", ["first"], "CONFLICT"),
        ("config-first", ["first"], "CONFLICT"),  # Secret vc-config-first is first's
        ("first-headless", ["first"], "CONFLICT"),  # Service first-headless is first's
        ("kube-dns-first", ["first"], "CONFLICT"),
        ("web", ["snapshot-web"], "CONFLICT"),  # the other way round
        ("configs", ["first"], None),
        ("1st", [], "INVALID"),  # a Service's name starts with a letter
        ("a" * 53, [], "INVALID"),  # Helm's release name and the pods' revision label
        ("a" * 52, [], None),
    ],
)
def test_a_vcluster_name_shares_no_chart_object_with_another(
    name: str, taken: list[str], code: str | None
) -> None:
    problem = vcluster_rules.name_problem(name, taken)
    assert (None if problem is None else problem[1]) == code, problem


def test_each_release_quota_holds_every_vcluster_of_the_namespace() -> None:
    """Each vCluster's release puts a quota on the one host namespace: each makes room for
    the tenant's quota and every vCluster's control plane and Flux."""
    settings = cloudspace_settings.CloudSpaceSettings(vcluster_url_template="https://x/{name}")
    one = vc.Target(id="cs_1", name="a", cpu=4, memory_mib=8192)
    two = vc.Target(
        id="cs_1", name="b", cpu=4, memory_mib=8192, vclusters=2, named_like_cloud_space=False
    )
    quota = {
        target.vclusters: chart.release_values(settings, target, None)["policies"]["resourceQuota"][
            "quota"
        ]
        for target in (one, two)
    }
    assert (quota[1]["requests.cpu"], quota[2]["requests.cpu"]) == ("5100m", "6200m")
    assert quota[2]["requests.memory"] == "10112Mi"  # 8192 + 2 x (448 + 512)
    assert (one.copy_name, two.copy_name) == ("tenant-1-kubeconfig", "tenant-1-b-kubeconfig")
