"""The App Advisor end to end: the running server analyses a READY CloudSpace's vCluster
(the host stand-in's) on its loop, and a gql subscriber of adviceChanged sees each
failure rule fire on an object made to fail that way and resolve once it is fixed; each
configuration rule fire, and clear once its suggested patch is applied with kubectl; a
second run neither duplicates a finding nor reopens a dismissed one; exemptions hold;
another org's findings are NOT_FOUND; a finding belongs to the app whose inventory holds its
object (App.advice), and resolves once the app is deleted. (What a page of CloudSpace cards
costs in SQL is in test_advisor_reads.py, away from this server's busy loops.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gql.transport.exceptions import TransportQueryError

from sim import workloads as w
from sim.host_standin import HostStandIn
from tests.conftest import Org
from tests.support import apps
from tests.support.advisor import (
    ADVICE,
    DISMISS,
    EXEMPT,
    RESTORE,
    UNEXEMPT,
    Tenant,
    advice_of,
    runs_after,
    watching,
)
from tests.support.advisor import CHANGES as CHANGES_QUERY
from tests.support.cloudspaces import CREATE, ONE, Platform, eventually, request, serve_platform
from tests.support.graphql import GraphQL
from tests.support.server import Backend

INTERVAL_S = 0.5


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
        "SPACEDOCK_ADVISOR_INTERVAL_S": str(INTERVAL_S),
        "SPACEDOCK_APP_STATUS_INTERVAL_S": "0.2",
        "SPACEDOCK_APP_RETRY_INTERVAL_S": "0.5",
    }
    yield from serve_platform(backend, host, directory / "server.log", env)


async def ready_cloudspace(org: Org, name: str, cpu: float = 4, memory_mib: int = 4096) -> str:
    payload = await org.editor.mutate(
        CREATE, {"input": {"name": name, "cpu": cpu, "memoryMiB": memory_mib}}
    )
    assert payload["userErrors"] == [], payload["userErrors"]
    cloud_space_id: str = payload["cloudSpace"]["id"]

    async def ready() -> bool:
        data = await org.viewer.data(ONE, {"id": cloud_space_id})
        return bool(data["cloudSpace"]["phase"] == "READY")

    await eventually(ready, 90)
    return cloud_space_id


@pytest.fixture(scope="module")
def space(platform: Platform) -> tuple[Org, str]:
    """One tenant's READY CloudSpace, shared by the module's tests (each its own namespace)."""

    async def made() -> tuple[Org, str]:
        org = await platform.tenant()
        return org, await ready_cloudspace(org, "shop")

    return asyncio.run(made())


async def deployment(
    tenant: Tenant, namespace: str, name: str, containers: list[dict[str, Any]], replicas: int = 2
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """A Deployment with the ReplicaSet and running pods its controllers would make."""
    made = await tenant.create(w.deployment(namespace, name, containers, replicas=replicas))
    replica_set = await tenant.create(w.replica_set(made))
    pods = []
    for _ in range(replicas):
        pod = await tenant.create(w.pod_of(replica_set))
        pods.append(await tenant.status(pod, w.running(pod)))
    return made, replica_set, pods


async def test_the_advisor_is_enabled_with_ready_and_a_healthy_workload_has_no_finding(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    async with Tenant(host, cloud_space_id).connected() as tenant:
        await tenant.namespace("calm")
        await deployment(tenant, "calm", "api", [w.container()])
        await runs_after(org, cloud_space_id)
        found = await advice_of(org, cloud_space_id)
        calm = [f for f in found["advice"]["nodes"] if f["object"]["namespace"] == "calm"]
        assert calm == []
    assert found["advisor"]["enabled"] is True and found["advisor"]["complete"] is True
    assert found["advisor"]["lastError"] is None and found["advisor"]["objectsRead"] > 0


async def test_a_crash_loop_reaches_a_subscriber_and_resolves_once_fixed(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    async with (
        watching(platform, org, cloud_space_id) as advice,
        Tenant(host, cloud_space_id).connected() as tenant,
    ):
        await tenant.namespace("crash")
        _, _, pods = await deployment(tenant, "crash", "web", [w.container()])
        await tenant.status(
            pods[0], w.crash_looping(pods[0], "web", "Error", 1, message="panic: boom")
        )
        event = await advice.until("crash-loop", "web", "NEW")
        finding = event["finding"]
        assert finding["severity"] == "CRITICAL" and finding["family"] == "FAILURE"
        assert finding["object"] == {"kind": "Deployment", "namespace": "crash", "name": "web"}
        assert any("last exit Error with exit code 1" in line for line in finding["evidence"])
        assert any("panic: boom" in line for line in finding["evidence"])
        assert finding["explanation"] is None  # no model configured: the rules' text is all
        await tenant.status(pods[0], w.running(pods[0]))
        resolved = await advice.until("crash-loop", "web", "RESOLVED")
        assert resolved["finding"]["id"] == finding["id"] and resolved["finding"]["resolvedAt"]


async def test_pod_and_workload_failures_fire_with_their_evidence_and_resolve_once_fixed(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    for name in ("refused", "down"):  # their status is written below, not by the stand-in
        tenant.api.stall(f"pods/{name}")
    async with watching(platform, org, cloud_space_id) as advice, tenant.connected():
        await tenant.namespace("pods")
        _, _, mem = await deployment(tenant, "pods", "mem", [w.container()])
        _, _, pull = await deployment(
            tenant, "pods", "pull", [w.container(image="registry.example.com/team/pull:9.9.9")]
        )
        _, _, config = await deployment(tenant, "pods", "config", [w.container()])
        _, _, big = await deployment(tenant, "pods", "big", [w.container()])
        refused, refused_rs, _ = await deployment(
            tenant, "pods", "refused", [w.container()], replicas=1
        )
        down, _, _ = await deployment(tenant, "pods", "down", [w.container()])
        await tenant.status(mem[0], w.crash_looping(mem[0], "web", "OOMKilled", 137))
        await tenant.status(pull[0], w.pulling_fails(pull[0], "web"))
        secret_missing = 'secret "db-credentials" not found'
        await tenant.status(
            config[0], w.waiting_on(config[0], "web", "CreateContainerConfigError", secret_missing)
        )
        no_room = "0/2 nodes are available: 2 Insufficient memory. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        await tenant.status(big[1], w.unschedulable(no_room))
        quota = (
            'Error creating: pods "refused-x" is forbidden: exceeded quota: spacedock-quota, '
            "requested: requests.cpu=100m, used: requests.cpu=4, limited: requests.cpu=4"
        )
        await tenant.create(
            w.warning_event(refused_rs, "FailedCreate", quota, "replicaset-controller")
        )
        await tenant.status(
            refused, {"replicas": 1, "availableReplicas": 0, "unavailableReplicas": 1}
        )
        await tenant.status(refused_rs, {"replicas": 0, "readyReplicas": 0})
        unavailable = w.condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
        await tenant.status(
            down,
            {
                "replicas": 2,
                "unavailableReplicas": 2,
                "observedGeneration": 1,
                "conditions": [unavailable],
            },
        )

        oom = (await advice.until("oom-killed", "mem", "NEW"))["finding"]
        assert "OOMKilled (exit code 137) with a memory limit of 256Mi" in oom["evidence"][0]
        assert oom["patch"] is not None and "512Mi" in oom["patch"]
        image = (await advice.until("image-pull", "pull", "NEW"))["finding"]
        assert "registry.example.com/team/pull:9.9.9" in image["title"]
        assert any("Back-off pulling image" in line for line in image["evidence"])
        missing = (await advice.until("container-config", "config", "NEW"))["finding"]
        assert any(secret_missing in line for line in missing["evidence"])
        pending = (await advice.until("pod-unschedulable", "big", "NEW"))["finding"]
        assert any("2 Insufficient memory" in line for line in pending["evidence"])
        created = (await advice.until("create-refused", "refused", "NEW"))["finding"]
        assert any("exceeded quota: spacedock-quota" in line for line in created["evidence"])
        assert "quota" in created["suggestion"]
        gone = (await advice.until("workload-unavailable", "down", "NEW"))["finding"]
        assert gone["severity"] == "CRITICAL"  # not one replica available

        for pod in (mem[0], pull[0], config[0], big[1]):
            await tenant.status(pod, w.running(pod))
        await tenant.status(refused_rs, {"replicas": 1, "readyReplicas": 1})
        await tenant.status(
            refused, {"replicas": 1, "availableReplicas": 1, "unavailableReplicas": None}
        )
        available = w.condition(
            "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability."
        )
        await tenant.status(
            down, {"availableReplicas": 2, "unavailableReplicas": None, "conditions": [available]}
        )
        for rule, name in (
            ("oom-killed", "mem"),
            ("crash-loop", "mem"),
            ("image-pull", "pull"),
            ("container-config", "config"),
            ("pod-unschedulable", "big"),
            ("create-refused", "refused"),
            ("workload-unavailable", "down"),
        ):
            await advice.until(rule, name, "RESOLVED")


def service(namespace: str, name: str, app: str, port: int = 80) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"app": app},
            "ports": [{"name": "http", "port": port, "targetPort": 8080}],
        },
    }


def endpoint_slice(
    service_obj: dict[str, Any], pods: list[dict[str, Any]], ready: bool
) -> dict[str, Any]:
    """The EndpointSlice the endpoint-slice controller keeps for a Service's pods."""
    meta = service_obj["metadata"]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{meta['name']}-abcde",
            "namespace": meta["namespace"],
            "labels": {
                "kubernetes.io/service-name": meta["name"],
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": [f"10.244.0.{index + 10}"],
                "conditions": {"ready": ready, "serving": ready, "terminating": False},
                "targetRef": {
                    "kind": "Pod",
                    "namespace": meta["namespace"],
                    "name": pod["metadata"]["name"],
                    "uid": pod["metadata"]["uid"],
                },
            }
            for index, pod in enumerate(pods)
        ],
    }


async def test_failures_around_the_pods_fire_and_resolve_once_fixed(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    # A repository of this run's own: the host (and its Flux remotes) outlives the backend.
    repo = f"https://git.example.com/{cloud_space_id.lower()}/shop-config.git"
    async with watching(platform, org, cloud_space_id) as advice, tenant.connected():
        await tenant.namespace("edge")
        await deployment(tenant, "edge", "api", [w.container()])
        _, _, dark_pods = await deployment(tenant, "edge", "dark", [w.container()])
        for pod in dark_pods:
            await tenant.status(pod, {"conditions": w.conditions(False)})
        ghost = await tenant.create(service("edge", "ghost", "gohst"))
        dark = await tenant.create(service("edge", "dark", "dark"))
        dark_slice = await tenant.create(endpoint_slice(dark, dark_pods, ready=False))
        await tenant.create(service("edge", "api", "api"))
        front = await tenant.create(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": "front", "namespace": "edge"},
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
                                            "service": {"name": "api", "port": {"number": 8080}}
                                        },
                                    }
                                ]
                            },
                        }
                    ]
                },
            }
        )
        claim = await tenant.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "edge"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "fast",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        )
        await tenant.status(claim, {"phase": "Pending"})
        await tenant.create(
            w.warning_event(
                claim,
                "ProvisioningFailed",
                'storageclass.storage.k8s.io "fast" not found',
                "persistentvolume-controller",
            )
        )
        hpa: dict[str, Any] = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "api", "namespace": "edge"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                "minReplicas": 2,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 70},
                        },
                    }
                ],
            },
        }
        scaler = await tenant.create(hpa)
        no_metrics = "failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"
        await tenant.status(
            scaler,
            {
                "currentReplicas": 2,
                "desiredReplicas": 2,
                "conditions": [
                    w.condition("ScalingActive", "False", "FailedGetResourceMetric", no_metrics)
                ],
            },
        )
        stray = await tenant.create(
            {
                **hpa,
                "metadata": {"name": "stray", "namespace": "edge"},
                "spec": {
                    **hpa["spec"],
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "gone",
                    },
                },
            }
        )
        nightly = await tenant.create(
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "nightly", "namespace": "edge"},
                "spec": {
                    "schedule": "0 3 * * *",
                    "jobTemplate": {
                        "spec": {
                            "backoffLimit": 6,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [w.container("report", port=None)],
                                }
                            },
                        }
                    },
                },
            }
        )
        older = await tenant.create(w.job_of(nightly, 7200))
        await tenant.status(older, w.job_finished(True, 7200))
        failed_run = await tenant.create(w.job_of(nightly, 600))
        await tenant.status(failed_run, w.job_finished(False, 600))
        source = await tenant.create(
            {
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "GitRepository",
                "metadata": {"name": "shop-config", "namespace": "edge"},
                "spec": {"url": repo, "interval": "1m", "ref": {"branch": "main"}},
            }
        )

        selects = (await advice.until("service-selects-nothing", "ghost", "NEW"))["finding"]
        assert "selector app=gohst matches none" in selects["evidence"][0]
        unready = (await advice.until("service-no-ready-endpoints", "dark", "NEW"))["finding"]
        assert "0 of 2 endpoints ready" in unready["evidence"][0]
        backend = (await advice.until("ingress-backend-missing", "front", "NEW"))["finding"]
        assert "port 8080: it has 80" in backend["evidence"][0]
        pvc = (await advice.until("pvc-pending", "data", "NEW"))["finding"]
        assert any('"fast" not found' in line for line in pvc["evidence"])
        metrics = (await advice.until("hpa-no-metrics", "api", "NEW"))["finding"]
        assert any("FailedGetResourceMetric" in line for line in metrics["evidence"])
        target = (await advice.until("hpa-target-missing", "stray", "NEW"))["finding"]
        assert "Deployment gone" in target["evidence"][0]
        cron = (await advice.until("cronjob-failing", "nightly", "NEW"))["finding"]
        assert "BackoffLimitExceeded" in cron["evidence"][0]
        flux = (await advice.until("flux-not-ready", "shop-config", "NEW"))["finding"]
        assert any(
            "unable to clone" in line for line in flux["evidence"]
        )  # source-controller's words

        await tenant.call(
            "PATCH",
            tenant.path(ghost),
            {"spec": {"selector": {"app": "api"}}},
            "application/strategic-merge-patch+json",
        )
        await tenant.call(
            "PUT",
            tenant.path(dark_slice),
            {
                **dark_slice,
                **endpoint_slice(dark, dark_pods, ready=True),
                "metadata": dark_slice["metadata"],
            },
        )
        front["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {
            "name": "http"
        }
        await tenant.call("PUT", tenant.path(front), front)
        await tenant.status(claim, {"phase": "Bound"})
        await tenant.status(
            scaler,
            {
                "conditions": [
                    w.condition(
                        "ScalingActive",
                        "True",
                        "ValidMetricFound",
                        "the HPA was able to successfully calculate a replica count",
                    )
                ]
            },
        )
        await tenant.delete(stray)
        fixed_run = await tenant.create(w.job_of(nightly, 60))
        await tenant.status(fixed_run, w.job_finished(True, 60))
        host.flux.git(repo).commit(
            {"deploy.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop\n"}
        )
        await tenant.call(
            "PATCH",
            tenant.path(source),
            {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}},
            "application/merge-patch+json",
        )
        for rule, name in (
            ("service-selects-nothing", "ghost"),
            ("service-no-ready-endpoints", "dark"),
            ("ingress-backend-missing", "front"),
            ("pvc-pending", "data"),
            ("hpa-no-metrics", "api"),
            ("hpa-target-missing", "stray"),
            ("cronjob-failing", "nightly"),
            ("flux-not-ready", "shop-config"),
        ):
            await advice.until(rule, name, "RESOLVED")


CONFIGURATION_RULES = (
    "requests-missing",
    "limits-missing",
    "readiness-probe-missing",
    "liveness-probe-missing",
    "image-tag-latest",
    "run-as-root",
    "privileged",
    "privilege-escalation",
    "host-port",
    "single-replica",
    "surge-exceeds-headroom",
)


async def test_each_configuration_rule_fires_and_its_patch_applied_with_kubectl_clears_it(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    careless = {
        "name": "web",
        "image": "registry.example.com/team/careless",
        "ports": [{"containerPort": 8080, "hostPort": 8080}],
        "securityContext": {"privileged": True},
    }
    hungry = w.container(
        "web", requests={"cpu": "3", "memory": "1Gi"}, limits={"cpu": "3", "memory": "1Gi"}
    )
    async with watching(platform, org, cloud_space_id) as advice, tenant.connected():
        await tenant.namespace("config")
        made, _, _ = await deployment(tenant, "config", "careless", [careless], replicas=1)
        # One replica takes 3 of the CloudSpace's 4 cores: a second (the surge) cannot fit.
        wide, _, _ = await deployment(tenant, "config", "hungry", [hungry], replicas=1)
        await tenant.create(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "hungry", "namespace": "config"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "hungry"}}},
            }
        )
        found = {}
        for rule in CONFIGURATION_RULES:
            name = "hungry" if rule == "surge-exceeds-headroom" else "careless"
            finding = (await advice.until(rule, name, "NEW"))["finding"]
            assert finding["family"] == "CONFIGURATION" and finding["patch"], finding
            assert (
                f"kubectl patch deployment {name} -n config --patch-file fix.yaml"
                in finding["suggestion"]
            )
            found[rule] = finding
        assert found["privileged"]["severity"] == "CRITICAL"
        assert (
            "its pods run registry.example.com/team/careless@sha256:"
            in found["image-tag-latest"]["evidence"][0]
        )
        for rule in CONFIGURATION_RULES:
            target = wide if rule == "surge-exceeds-headroom" else made
            tenant.kubectl_patch(target, found[rule]["patch"])
            await advice.until(rule, target["metadata"]["name"], "RESOLVED")
        patched = tenant.api.find("deployments", "careless", "config", group="apps")
        assert patched is not None
        (web,) = patched["spec"]["template"]["spec"]["containers"]
        assert web["securityContext"] == {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
        }
        assert (
            "hostPort" not in web["ports"][0] and web["readinessProbe"]["tcpSocket"]["port"] == 8080
        )
        assert patched["spec"]["replicas"] == 2


async def test_host_namespaces_and_requests_above_use_clear_with_their_patches(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    tenant.api.serve_metrics()  # metrics-server answers in this vCluster from now on
    idle = w.container(
        "web", requests={"cpu": "2", "memory": "1Gi"}, limits={"cpu": "2", "memory": "1Gi"}
    )
    async with watching(platform, org, cloud_space_id) as advice, tenant.connected():
        await tenant.namespace("host")
        shared = w.deployment("host", "shared", [w.container()])
        shared["spec"]["template"]["spec"]["hostNetwork"] = True
        made = await tenant.create(shared)
        lazy, _, pods = await deployment(tenant, "host", "lazy", [idle], replicas=1)
        for pod in pods:
            tenant.api.set_pod_metrics("host", pod["metadata"]["name"], {"web": ("12m", "40Mi")})
        network = (await advice.until("host-network", "shared", "NEW"))["finding"]
        assert network["evidence"] == ["hostNetwork: true"]
        usage = (await advice.until("requests-above-usage", "lazy", "NEW"))["finding"]
        assert usage["severity"] == "INFO"
        assert "uses 12m CPU and 40Mi" in usage["evidence"][0]
        tenant.kubectl_patch(made, network["patch"])
        tenant.kubectl_patch(lazy, usage["patch"])
        await advice.until("host-network", "shared", "RESOLVED")
        await advice.until("requests-above-usage", "lazy", "RESOLVED")
        patched = tenant.api.find("deployments", "lazy", "host", group="apps")
        assert patched is not None
        (web,) = patched["spec"]["template"]["spec"]["containers"]
        assert web["resources"]["requests"] == {"cpu": "24m", "memory": "80Mi"}  # twice the use
        assert web["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}


async def test_runs_keep_one_finding_a_dismissal_holds_and_exemptions_hold(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    tenant = Tenant(host, cloud_space_id)
    async with watching(platform, org, cloud_space_id) as advice, tenant.connected():
        await tenant.namespace("keep")
        await deployment(tenant, "keep", "solo", [w.container(probes=False)], replicas=1)
        solo = (await advice.until("readiness-probe-missing", "solo", "NEW"))["finding"]
        single = (await advice.until("single-replica", "solo", "NEW"))["finding"]
        await runs_after(org, cloud_space_id, 2)
        listed = await advice_of(org, cloud_space_id, first=100)
        mine = [f for f in listed["advice"]["nodes"] if f["object"]["namespace"] == "keep"]
        assert sorted(f["ruleId"] for f in mine) == [
            "liveness-probe-missing",
            "readiness-probe-missing",
            "single-replica",
        ]  # one finding per rule and object, however many runs
        assert [e["change"] for e in advice.of("readiness-probe-missing", "solo")] == ["NEW"]
        assert mine[0]["lastSeenAt"] > mine[0]["firstSeenAt"]

        refused = await org.editor.mutate(DISMISS, {"input": {"id": solo["id"], "reason": " "}})
        assert refused["userErrors"] == [
            {
                "field": ["input", "reason"],
                "message": "reason is required: say why",
                "code": "INVALID",
            }
        ]
        viewer = await org.viewer.mutate(DISMISS, {"input": {"id": solo["id"], "reason": "x"}})
        assert viewer["userErrors"][0]["code"] == "FORBIDDEN"
        dismissed = await org.editor.mutate(
            DISMISS, {"input": {"id": solo["id"], "reason": "a batch worker: no traffic"}}
        )
        assert dismissed["userErrors"] == []
        assert dismissed["finding"]["dismissed"] is True
        assert dismissed["finding"]["dismissReason"] == "a batch worker: no traffic"
        await advice.until("readiness-probe-missing", "solo", "DISMISSED")
        await runs_after(org, cloud_space_id, 2)
        assert [e["change"] for e in advice.of("readiness-probe-missing", "solo")] == [
            "NEW",
            "DISMISSED",
        ]
        shown = await advice_of(org, cloud_space_id, first=100)
        assert solo["id"] not in [f["id"] for f in shown["advice"]["nodes"]]
        with_dismissed = await advice_of(org, cloud_space_id, first=100, dismissed=True)
        assert solo["id"] in [f["id"] for f in with_dismissed["advice"]["nodes"]]
        restored = await org.editor.mutate(
            RESTORE, {"input": {"id": solo["id"], "reason": "it serves after all"}}
        )
        assert restored["finding"]["dismissed"] is False
        again = await org.editor.mutate(RESTORE, {"input": {"id": solo["id"], "reason": "twice"}})
        assert again["userErrors"][0]["code"] == "PRECONDITION_FAILED"

        unknown = await org.editor.mutate(
            EXEMPT,
            {"input": {"cloudSpaceId": cloud_space_id, "ruleId": "no-such-rule", "reason": "x"}},
        )
        assert unknown["userErrors"][0]["field"] == ["input", "ruleId"]
        exempted = await org.editor.mutate(
            EXEMPT,
            {
                "input": {
                    "cloudSpaceId": cloud_space_id,
                    "ruleId": "single-replica",
                    "reason": "one is enough here",
                }
            },
        )
        assert exempted["userErrors"] == [] and exempted["exemption"]["ruleId"] == "single-replica"
        await advice.until("single-replica", "solo", "RESOLVED")
        await runs_after(org, cloud_space_id, 2)
        assert [e["change"] for e in advice.of("single-replica", "solo")] == ["NEW", "RESOLVED"]
        state = await advice_of(org, cloud_space_id, first=1)
        assert state["advisor"]["exemptions"][0]["reason"] == "one is enough here"
        lifted = await org.editor.mutate(
            UNEXEMPT, {"input": {"cloudSpaceId": cloud_space_id, "ruleId": "single-replica"}}
        )
        assert lifted["userErrors"] == []
        back = await advice.until("single-replica", "solo", "REOPENED")
        assert back["finding"]["id"] == single["id"]  # the same finding, by its fingerprint

        audit = await org.admin.data(
            '{ auditEvents(first: 20, filter: {action: "dismissFinding"}) { nodes { action outcome input targetIds } } }'
        )
        events = audit["auditEvents"]["nodes"]
        assert {"OK", "FORBIDDEN", "INVALID"} <= {e["outcome"] for e in events}
        assert any(solo["id"] in e["targetIds"] for e in events if e["outcome"] == "OK")


async def test_another_orgs_findings_are_not_found_and_view_policies_hold(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    async with Tenant(host, cloud_space_id).connected() as tenant:
        await tenant.namespace("theirs")
        await deployment(tenant, "theirs", "lone", [w.container()], replicas=1)

        async def found() -> dict[str, Any] | None:
            listed = await advice_of(org, cloud_space_id, first=100)
            hits = [f for f in listed["advice"]["nodes"] if f["object"]["name"] == "lone"]
            return hits[0] if hits else None

        finding = await eventually(found)
        await refused_to_another_org(platform, cloud_space_id, finding["id"])
        await refused_without_advice_manage(org, cloud_space_id, finding["id"])
    mine = await org.viewer.data(
        "query($id: ID!) { node(id: $id) { ... on AdvisorFinding { ruleId } } }",
        {"id": finding["id"]},
    )
    assert mine["node"] == {"ruleId": "single-replica"}

    # A custom role without advice:view reads the CloudSpace, not its advice.
    role = await org.admin.mutate(
        "mutation($input: CreateRoleInput!) { createRole(input: $input) { role { id } } }",
        {"input": {"name": "spaces only", "policies": ["cloudspace:view"]}},
    )
    token = await org.admin.mutate(
        "mutation($input: CreateApiTokenInput!) { createApiToken(input: $input) { token } }",
        {"input": {"name": "spaces only", "role": role["role"]["id"]}},
    )
    limited = GraphQL(org.viewer.url, org.viewer.ws_url, token["token"])
    answer = await limited.call(
        "query($id: ID!) { cloudSpace(id: $id) { name adviceCounts { total } advice { totalCount } } }",
        {"id": cloud_space_id},
    )
    assert answer["data"]["cloudSpace"] == {"name": "shop", "adviceCounts": None, "advice": None}
    assert {e["extensions"]["code"] for e in answer["errors"]} == {"FORBIDDEN"}


async def refused_without_advice_manage(org: Org, cloud_space_id: str, finding_id: str) -> None:
    """A VIEWER (advice:view, not advice:manage) reads findings and changes none of them."""
    exempt = {"cloudSpaceId": cloud_space_id, "ruleId": "single-replica", "reason": "x"}
    for mutation, variables in (
        (DISMISS, {"input": {"id": finding_id, "reason": "mine to say"}}),
        (RESTORE, {"input": {"id": finding_id, "reason": "mine to say"}}),
        (EXEMPT, {"input": exempt}),
        (UNEXEMPT, {"input": {"cloudSpaceId": cloud_space_id, "ruleId": "single-replica"}}),
    ):
        payload = await org.viewer.mutate(mutation, variables)
        assert payload["userErrors"] == [
            {"field": None, "message": "Your role VIEWER lacks advice:manage.", "code": "FORBIDDEN"}
        ], payload
    state = await advice_of(org, cloud_space_id, first=100)
    assert state["advisor"]["exemptions"] == []
    assert finding_id in [f["id"] for f in state["advice"]["nodes"]]  # still open, not dismissed


async def refused_to_another_org(platform: Platform, cloud_space_id: str, finding_id: str) -> None:
    """Another org learns nothing of a finding: not by id, not by its CloudSpace, not by
    changing it, not by subscribing to it."""
    rival = await platform.tenant("rival")
    node = await rival.admin.data("query($id: ID!) { node(id: $id) { id } }", {"id": finding_id})
    assert node["node"] is None
    assert (await rival.admin.data(ADVICE, {"id": cloud_space_id}))["cloudSpace"] is None
    exempt = {"cloudSpaceId": cloud_space_id, "ruleId": "single-replica", "reason": "x"}
    for mutation, variables in (
        (DISMISS, {"input": {"id": finding_id, "reason": "not mine"}}),
        (RESTORE, {"input": {"id": finding_id, "reason": "not mine"}}),
        (EXEMPT, {"input": exempt}),
        (UNEXEMPT, {"input": {"cloudSpaceId": cloud_space_id, "ruleId": "single-replica"}}),
    ):
        payload = await rival.admin.mutate(mutation, variables)
        assert payload["userErrors"][0]["code"] == "NOT_FOUND", payload
    async with rival.viewer.websocket() as session:
        with pytest.raises(TransportQueryError) as refused:
            async for _ in session.subscribe(request(CHANGES_QUERY, {"id": cloud_space_id})):
                break
    assert refused.value.errors is not None
    assert refused.value.errors[0]["extensions"]["code"] == "NOT_FOUND"


APP_ADVICE = """query($id: ID!) { app(id: $id) { name advice(first: 50) {
    totalCount counts { critical warning info total }
    nodes { ruleId appId object { kind namespace name } }
} } }"""


async def test_a_finding_belongs_to_the_app_whose_inventory_holds_its_object(
    platform: Platform, space: tuple[Org, str], host: HostStandIn
) -> None:
    org, cloud_space_id = space
    url = f"https://git.example/{cloud_space_id.lower()}/storefront.git"
    host.flux.git(url).commit(
        {
            "deploy/app.yaml": apps.manifests(
                apps.deployment("storefront"), apps.service("storefront")
            )
        }
    )
    async with Tenant(host, cloud_space_id).connected() as tenant:
        await tenant.namespace("loose")  # beside the app, in no inventory
        await deployment(tenant, "loose", "stray", [w.container()], replicas=1)
        created = await apps.create(
            org.editor,
            "storefront",
            {"cloudSpaceId": cloud_space_id, "namespace": "store"},
            apps.git_input(url),
        )
        app_id = created["app"]["id"]
        await apps.until_status(org.viewer, app_id, "READY")

        async def app_findings() -> dict[str, Any] | None:
            found = (await org.viewer.data(APP_ADVICE, {"id": app_id}))["app"]["advice"]
            rules = {(n["ruleId"], n["object"]["name"]) for n in found["nodes"]}
            wanted = {("single-replica", "storefront"), ("service-selects-nothing", "storefront")}
            return found if wanted <= rules else None

        found = await eventually(app_findings)
        assert {n["appId"] for n in found["nodes"]} == {app_id}
        assert {n["object"]["namespace"] for n in found["nodes"]} == {"store"}
        assert found["totalCount"] == found["counts"]["total"] == len(found["nodes"])
        listed = await org.viewer.data(
            "query($id: ID!, $app: ID) { cloudSpace(id: $id) { advice(appId: $app, first: 100) { "
            "nodes { ruleId appId object { name } } } } }",
            {"id": cloud_space_id, "app": app_id},
        )
        in_space = listed["cloudSpace"]["advice"]["nodes"]
        assert {n["appId"] for n in in_space} == {app_id} and len(in_space) == len(found["nodes"])
        everything = await advice_of(org, cloud_space_id, first=100)
        stray = [n for n in everything["advice"]["nodes"] if n["object"]["name"] == "stray"]
        assert stray and {n["appId"] for n in stray} == {None}
        rival = await platform.tenant("rival")
        assert (await rival.viewer.data(APP_ADVICE, {"id": app_id}))["app"] is None

        deleted = await org.admin.mutate(
            apps.DELETE, {"input": {"id": app_id, "confirmName": "storefront"}}
        )
        assert deleted["userErrors"] == [], deleted

        async def resolved() -> bool:
            left = await org.viewer.data(
                "query($id: ID!, $app: ID) { cloudSpace(id: $id) { advice(appId: $app) { totalCount } } }",
                {"id": cloud_space_id, "app": app_id},
            )
            return bool(left["cloudSpace"]["advice"]["totalCount"] == 0)

        await eventually(resolved)  # what the app deployed is pruned: its findings resolve
