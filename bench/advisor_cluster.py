"""The vCluster bench/advisor.py analyses: a vCluster stand-in (sim/host_standin.py)
in a process of its own, seeded with 25 objects in each of `--namespaces` namespaces (5,000
over 200 by default) as Kubernetes' controllers would store them: per namespace two
Deployments with their ReplicaSets and three running pods each, a StatefulSet with two
pods, two Services with their EndpointSlices, an Ingress, a bound PVC, an HPA, a
PodDisruptionBudget, a CronJob with its finished Job, and two warning Events. Every fifth
namespace's first Deployment has no probes and no limits (configuration findings). With
`--metrics`, metrics-server answers too (a PodMetrics per pod: one more list).

It prints one JSON line (the vCluster's URL, CA, admin certificate and key, the object
count) and serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sim import workloads as w  # noqa: E402
from sim.host_standin import HostStandIn, VClusterApi  # noqa: E402

Obj = dict[str, Any]


def seed(api: VClusterApi, namespace: str, careless: bool, metrics: bool) -> int:
    put = api.put
    api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    count = 0
    pods: list[Obj] = []
    for index in range(2):
        spec = w.container(probes=not (careless and index == 0))
        if careless and index == 0:
            spec["resources"].pop("limits")
        deployment = put(w.deployment(namespace, f"app-{index}", [spec], replicas=3))
        deployment["status"] = {"observedGeneration": 1, "replicas": 3, "availableReplicas": 3}
        put(deployment)
        replica_set = put(w.replica_set(deployment))
        for _ in range(3):
            pod = put(w.pod_of(replica_set))
            pod["status"] = w.running(pod)
            pods.append(put(pod))
        count += 5
    labels = {"app": "db"}
    statefulset = put(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [w.container("db")]},
                },
            },
        }
    )
    for _ in range(2):
        pod = put(w.pod_of(statefulset))
        pod["status"] = w.running(pod)
        pods.append(put(pod))
    count += 3
    for index in range(2):
        service = put(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"app-{index}", "namespace": namespace},
                "spec": {
                    "selector": {"app": f"app-{index}"},
                    "ports": [{"name": "http", "port": 80}],
                },
            }
        )
        put(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"app-{index}-x1",
                    "namespace": namespace,
                    "labels": {"kubernetes.io/service-name": service["metadata"]["name"]},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}],
            }
        )
        count += 2
    backend = {"service": {"name": "app-0", "port": {"number": 80}}}
    put(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "front", "namespace": namespace},
            "spec": {"defaultBackend": backend},
        }
    )
    claim = put(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    claim["status"] = {"phase": "Bound"}
    put(claim)
    put(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "app-1", "namespace": namespace},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app-1"},
                "minReplicas": 3,
                "maxReplicas": 6,
            },
        }
    )
    put(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": namespace},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
        }
    )
    count += 4
    job_spec = {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [w.container("job", port=None)]}
        }
    }
    cronjob = put(
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": namespace},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job_spec}},
        }
    )
    job = put(w.job_of(cronjob, 3600))
    job["status"] = w.job_finished(True, 3600)
    put(job)
    count += 2
    for pod in pods[:2]:
        put(
            w.warning_event(
                pod, "Unhealthy", "Readiness probe failed: connection refused", "kubelet"
            )
        )
        count += 1
    if metrics:
        for pod in pods:
            name = pod["spec"]["containers"][0]["name"]
            api.set_pod_metrics(namespace, pod["metadata"]["name"], {name: ("5m", "30Mi")})
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=200)
    parser.add_argument("--metrics", action="store_true", help="metrics-server answers too")
    args = parser.parse_args()
    host = HostStandIn(ready_delay_s=0.0).start()
    vcluster = host._start_vcluster("cs-bench", "bench")
    if args.metrics:
        vcluster.serve_metrics()
    objects = sum(
        seed(vcluster, f"team-{n:03}", n % 5 == 0, args.metrics) for n in range(args.namespaces)
    )
    print(
        json.dumps(
            {
                "url": vcluster.url,
                "ca": host.vcluster_ca_pem,
                "cert": vcluster.admin.certificate_pem,
                "key": vcluster.admin.key_pem,
                "objects": objects,
                "pid": os.getpid(),
            }
        ),
        flush=True,
    )
    sys.stdin.read()
    host.stop()


if __name__ == "__main__":
    main()
