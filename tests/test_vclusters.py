"""The rules behind a CloudSpace's objects, without a cluster: quantities as the API server
writes them, headroom quotas, the vCluster's address from a template or its LoadBalancer,
the Flux manifests' order, what blocks a namespace, and the admin Secret's keys."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from core import vclusters as vc
from providers.errors import UnexpectedAnswer


def test_quantities_read_as_the_api_server_writes_them() -> None:
    assert vc.cores_of("500m") == 0.5
    assert vc.cores_of("2") == 2.0
    assert vc.mib_of("8Gi") == 8192
    assert vc.mib_of("134217728") == 128
    assert vc.mib_of("1000M") == pytest.approx(953.674, rel=1e-4)
    assert (vc.cpu_text(2.5), vc.memory_text(2560)) == ("2500m", "2560Mi")
    with pytest.raises(ValueError):
        vc.cores_of("two")


def test_headroom_is_what_is_used_here_plus_what_is_left_of_the_quota() -> None:
    used = {"team-a": vc.Used(1.5, 1024), "team-b": vc.Used(0.25, 256)}
    objects = vc.headroom_objects(["team-a", "team-b", "new"], used, cpu=2, memory_mib=2048)
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
    over = vc.headroom_objects(["team-a"], {"team-a": vc.Used(3, 4096)}, cpu=2, memory_mib=2048)
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
    assert vc.used_by_namespace(quotas) == {"a": vc.Used(1.5, 1024), "b": vc.Used(0, 0)}


def test_the_address_comes_from_the_template_or_the_load_balancer() -> None:
    target = vc.Target(id="cs_ABC_1", name="prod", cpu=1, memory_mib=512)
    templated = vc.CloudSpaceSettings(vcluster_url_template="https://{name}.vc.example.com/")
    assert vc.address_of(templated, target) == "https://prod.vc.example.com"
    assert vc.address_of(vc.CloudSpaceSettings(), target) is None
    assert target.namespace == "cs-cs-abc-1"
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
    # Without a template the Service is a LoadBalancer; with one, a ClusterIP behind it.
    (plain, _) = vc.vcluster_services(vc.CloudSpaceSettings(), target)
    assert plain["spec"]["type"] == "LoadBalancer"
    (behind, _) = vc.vcluster_services(templated, target)
    assert behind["spec"]["type"] == "ClusterIP"
    workload = vc.vcluster_workload(templated, target, "https://prod.vc.example.com")
    (container,) = workload[-1]["spec"]["template"]["spec"]["containers"]
    assert "--tls-san=prod.vc.example.com" in container["args"]


def test_flux_manifests_apply_crds_first_and_refuse_what_is_not_kubernetes() -> None:
    text = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: source-controller, namespace: flux-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: flux-system}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gitrepositories.source.toolkit.fluxcd.io}
"""
    kinds = [o["kind"] for o in vc.flux_objects(text)]
    assert kinds == ["CustomResourceDefinition", "Namespace", "Deployment"]
    with pytest.raises(ValueError):
        vc.flux_objects("just: [a, list")
    with pytest.raises(ValueError):
        vc.flux_objects("- 1\n- 2\n")
    assert not vc.flux_installed([])
    assert not vc.flux_installed([{"status": {"availableReplicas": 1}}, {"status": {}}])
    assert vc.flux_installed([{"status": {"availableReplicas": 1}}])


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
    access = vc.admin_access(full)
    assert (access.ca_pem, access.client_certificate_pem, access.client_key_pem) == (
        "ca",
        "cert",
        "key",
    )
    with pytest.raises(ValueError, match="client-key"):
        vc.admin_access(data(config="c", certificate_authority="ca", client_certificate="cert"))
