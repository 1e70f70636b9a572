"""Every App Advisor rule on its own, over snapshots of objects as Kubernetes writes them:
each fires on an object made to fail (or misconfigured) that way and says so with the
cluster's evidence; each configuration rule's patch, applied as the API server applies a
strategic merge patch (the stand-in's, from the kinds' own schemas), clears it; a
healthy, careful workload gets no finding at all. The same rules run end to end in
test_advisor.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from core.advisor.analysis import analyze
from core.advisor.anonymize import Masks
from core.advisor.model import Finding
from core.advisor.ownership import AppIndex
from sim import strategic_merge
from sim import workloads as w
from sim.kube_validation import builtin_schemas
from sim.workloads import healthy, snapshot, stored

Obj = dict[str, Any]
SCHEMAS = builtin_schemas("v1.31.2")


def findings(*objects: Obj, **options: Any) -> dict[str, Finding]:
    found = analyze(snapshot(*objects, **options), frozenset(), AppIndex())
    return {f"{item.finding.rule.id}:{item.finding.object.name}": item.finding for item in found}


def budget(namespace: str, name: str) -> Obj:
    return stored(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}},
        }
    )


def test_a_careful_healthy_workload_gets_no_finding() -> None:
    deployment, replica_set, pods = healthy()
    assert findings(deployment, replica_set, *pods) == {}


def test_a_crash_loop_is_reported_on_the_deployment_with_its_last_exit() -> None:
    deployment, replica_set, pods = healthy()
    pods[0]["status"] = w.crash_looping(
        pods[0], "web", "Error", 1, message="panic: db password is hunter2"
    )
    found = findings(deployment, replica_set, *pods)
    crash = found["crash-loop:web"]
    assert crash.object.kind == "Deployment" and crash.effective_severity == "CRITICAL"
    assert any("last exit Error with exit code 1" in e.text for e in crash.evidence)
    # The application's own words are shown, and never marked for a model.
    termination = [e for e in crash.evidence if "hunter2" in e.text]
    assert termination and not termination[0].shared
    assert pods[0]["metadata"]["name"] in crash.names


def test_oom_killed_gets_a_patch_that_doubles_the_memory_limit() -> None:
    deployment, replica_set, pods = healthy()
    pods[1]["status"] = w.crash_looping(pods[1], "web", "OOMKilled", 137)
    found = findings(deployment, replica_set, *pods)
    oom = found["oom-killed:web"]
    assert "memory limit of 256Mi" in oom.evidence[0].text
    assert oom.patch is not None
    patched = strategic_merge.apply(
        deployment,
        yaml.safe_load(oom.patch),
        SCHEMAS.kind_schema("apps/v1", "Deployment"),
        SCHEMAS.resolve,
    )
    (web,) = patched["spec"]["template"]["spec"]["containers"]
    assert web["resources"]["limits"]["memory"] == "512Mi"
    assert web["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def test_pull_failures_unschedulable_pods_and_refused_creation() -> None:
    deployment, replica_set, pods = healthy(replicas=3)
    pods[0]["status"] = w.pulling_fails(pods[0], "web")
    message = "0/3 nodes are available: 3 Insufficient memory."
    pods[1]["status"] = w.unschedulable(message)
    event = stored(
        w.warning_event(
            replica_set,
            "FailedCreate",
            'Error creating: pods "web-x" is forbidden: exceeded quota: spacedock-quota, '
            "requested: requests.cpu=2, used: requests.cpu=4, limited: requests.cpu=4",
            "replicaset-controller",
        )
    )
    deployment["status"] = {
        "observedGeneration": 1,
        "replicas": 3,
        "availableReplicas": 1,
        "unavailableReplicas": 2,
    }
    replica_set["status"] = {"replicas": 2, "readyReplicas": 1}
    found = findings(deployment, replica_set, *pods, event)
    assert "registry.example.com/team/web:1.4.2" in found["image-pull:web"].images
    assert message in found["pod-unschedulable:web"].evidence[0].text
    assert "exceeded quota" in found["create-refused:web"].evidence[0].text
    # Fixed: every pod runs, the refusal is history.
    for pod in pods:
        pod["status"] = w.running(pod)
    deployment["status"] = {"observedGeneration": 1, "replicas": 3, "availableReplicas": 3}
    replica_set["status"] = {"replicas": 3, "readyReplicas": 3}
    assert findings(deployment, replica_set, *pods, event) == {}


def test_a_deployment_with_no_available_replica_is_critical() -> None:
    deployment, replica_set, pods = healthy()
    deployment["status"] = {
        "observedGeneration": 1,
        "replicas": 2,
        "unavailableReplicas": 2,
        "conditions": [
            {
                "type": "Available",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
            }
        ],
    }
    found = findings(deployment, replica_set, *pods)
    assert found["workload-unavailable:web"].effective_severity == "CRITICAL"


def test_services_and_ingresses_that_point_at_nothing() -> None:
    deployment, replica_set, pods = healthy()
    service = stored(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"app": "wbe"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
    )
    ingress = stored(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "front", "namespace": "shop"},
            "spec": {
                "rules": [
                    {
                        "host": "shop.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {
                                        "service": {"name": "web", "port": {"number": 8080}}
                                    },
                                },
                                {
                                    "path": "/api",
                                    "pathType": "Prefix",
                                    "backend": {"service": {"name": "api", "port": {"number": 80}}},
                                },
                            ]
                        },
                    }
                ]
            },
        }
    )
    found = findings(deployment, replica_set, *pods, service, ingress)
    assert "selector app=wbe" in found["service-selects-nothing:web"].evidence[0].text
    texts = [e.text for e in found["ingress-backend-missing:front"].evidence]
    assert any("port 8080: it has 80" in t for t in texts)
    assert any("service api: no such Service" in t for t in texts)
    service["spec"]["selector"] = {"app": "web"}
    for pod in pods:
        pod["status"]["conditions"] = w.conditions(False)
    found = findings(deployment, replica_set, *pods, service, ingress)
    assert "service-selects-nothing:web" not in found
    assert "0 of 2 endpoints ready" in found["service-no-ready-endpoints:web"].evidence[0].text


@pytest.mark.parametrize(
    ("rule", "change"),
    [
        ("requests-missing", lambda c: c["resources"].pop("requests")),
        ("limits-missing", lambda c: c["resources"].pop("limits")),
        ("readiness-probe-missing", lambda c: c.pop("readinessProbe")),
        ("liveness-probe-missing", lambda c: c.pop("livenessProbe")),
        ("image-tag-latest", lambda c: c.update(image="registry.example.com/team/web")),
        ("run-as-root", lambda c: c.pop("securityContext")),
        ("privileged", lambda c: c["securityContext"].update(privileged=True)),
        ("privilege-escalation", lambda c: c["securityContext"].pop("allowPrivilegeEscalation")),
        ("host-port", lambda c: c["ports"][0].update(hostPort=8080)),
    ],
)
def test_each_container_rule_fires_and_its_patch_clears_it(rule: str, change: Any) -> None:
    deployment, replica_set, pods = healthy()
    change(deployment["spec"]["template"]["spec"]["containers"][0])
    if rule == "image-tag-latest":  # its pods run the image by digest
        for pod in pods:
            pod["spec"] = deployment["spec"]["template"]["spec"]
            pod["status"] = w.running(pod)
    found = findings(deployment, replica_set, *pods)
    finding = found[f"{rule}:web"]
    assert finding.patch is not None, finding
    patched = strategic_merge.apply(
        deployment,
        yaml.safe_load(finding.patch),
        SCHEMAS.kind_schema("apps/v1", "Deployment"),
        SCHEMAS.resolve,
    )
    assert SCHEMAS.check(patched).errors == []
    assert f"{rule}:web" not in findings(patched, replica_set, *pods)


def test_host_namespaces_single_replica_and_surge() -> None:
    deployment, replica_set, pods = healthy(replicas=1)
    deployment["spec"]["template"]["spec"]["hostNetwork"] = True
    found = findings(deployment, replica_set, *pods, cpu=0.1)
    for rule in ("host-network", "single-replica", "surge-exceeds-headroom"):
        finding = found[f"{rule}:web"]
        assert finding.patch is not None
        deployment = strategic_merge.apply(
            deployment,
            yaml.safe_load(finding.patch),
            SCHEMAS.kind_schema("apps/v1", "Deployment"),
            SCHEMAS.resolve,
        )
        assert f"{rule}:web" not in findings(deployment, replica_set, *pods, cpu=0.1)
    assert findings(deployment, replica_set, *pods, budget("shop", "web"), cpu=0.1) == {}


def test_requests_far_above_use_only_when_metrics_answer() -> None:
    deployment, replica_set, pods = healthy()
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {
        "cpu": "2",
        "memory": "2Gi",
    }
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "cpu": "2",
        "memory": "2Gi",
    }
    usage = [
        {
            "apiVersion": "metrics.k8s.io/v1beta1",
            "kind": "PodMetrics",
            "metadata": {"name": pod["metadata"]["name"], "namespace": "shop"},
            "containers": [{"name": "web", "usage": {"cpu": "12m", "memory": "40Mi"}}],
        }
        for pod in pods
    ]
    assert "requests-above-usage:web" not in findings(
        deployment, replica_set, *pods, cpu=16, memory_mib=65536
    )
    found = findings(deployment, replica_set, *pods, *usage, cpu=16, memory_mib=65536, metrics=True)
    finding = found["requests-above-usage:web"]
    assert finding.effective_severity == "INFO"
    patched = strategic_merge.apply(
        deployment,
        yaml.safe_load(finding.patch or ""),
        SCHEMAS.kind_schema("apps/v1", "Deployment"),
        SCHEMAS.resolve,
    )
    assert patched["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "24m",
        "memory": "80Mi",
    }
    assert "requests-above-usage:web" not in findings(
        patched, replica_set, *pods, *usage, cpu=16, memory_mib=65536, metrics=True
    )


def test_masks_hide_every_name_and_give_them_back() -> None:
    masks = Masks(
        namespaces=["shop"],
        objects=["web"],
        names=["web-7d9f", "registry.example.com/team/web:1.4.2"],
    )
    text = 'pod web-7d9f in shop: Back-off pulling image "registry.example.com/team/web:1.4.2" for web; webhook'
    masked = masks.mask(text)
    assert "shop" not in masked and "web-7d9f" not in masked and "registry" not in masked
    assert "webhook" in masked  # a name inside a longer word is not one
    assert masks.unmask(masked) == text


def test_the_readme_lists_every_rule_with_its_severity_and_what_it_reads() -> None:
    from pathlib import Path

    from core.advisor.rules import RULES

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for rule in RULES:
        row = (
            f"| `{rule.id}` | {rule.family.value.lower()} | {rule.severity.value} | {rule.reads} |"
        )
        assert row in readme, f"the README's App Advisor table lacks {rule.id} as the code has it"


def test_a_finding_belongs_to_the_app_whose_flux_inventory_holds_its_object() -> None:
    from core.advisor.ownership import inventories_of

    deployment, replica_set, pods = healthy("web", "store", replicas=1)
    kustomization = stored(
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {
                "name": "store",
                "namespace": "store",
                "labels": {"spacedock.dev/app": "app_a"},
            },
            "status": {"inventory": {"entries": [{"id": "store_web_apps_Deployment", "v": "v1"}]}},
        }
    )
    forged = stored(
        {
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {
                "name": "mine",
                "namespace": "store",
                "labels": {"spacedock.dev/app": "app_x"},
            },
            "status": {"inventory": {"entries": [{"id": "store_web_apps_Deployment", "v": "v1"}]}},
        }
    )
    view = snapshot(deployment, replica_set, *pods, kustomization, forged)
    index = AppIndex(inventories_of(view, {"app_a"}))  # app_x is no app of this org's here
    found = analyze(view, frozenset(), index)
    single = next(f for f in found if f.finding.rule.id == "single-replica")
    assert single.app_id == "app_a"
    assert AppIndex(inventories_of(view, set())).app_of(single.finding.object) is None
