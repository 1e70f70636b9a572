"""Workloads and their status as Kubernetes' own components write them, for App Advisor
tests and its bench: a Deployment with the ReplicaSet and pods its controllers would
make (owner references, `pod-template-hash`), and the pod, workload, Job and HPA status a
kubelet, the scheduler and the controllers report when things go wrong.

The vCluster stand-in runs no pods, so a test writes these itself: objects through the
API like any client, status through the `status` subresource as a kubelet or a
controller does, which the stand-in checks against the kind's schema
(kubernetes-validate), status included. The words are the real components' (kubelet's
`CrashLoopBackOff` back-off message, the scheduler's `0/N nodes are available`, the
ReplicaSet controller's `FailedCreate`).
"""

from __future__ import annotations

import copy
import hashlib
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from core.advisor.snapshot import KINDS, Snapshot

Obj = dict[str, Any]


def stamp(ago_s: float = 0.0) -> str:
    return (datetime.now(UTC) - timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def container(
    name: str = "web",
    image: str = "registry.example.com/team/web:1.4.2",
    *,
    port: int | None = 8080,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    probes: bool = True,
    secure: bool = True,
    env: dict[str, str] | None = None,
) -> Obj:
    """A container as a careful team writes it (every configuration rule holds), unless told."""
    found: Obj = {"name": name, "image": image}
    if port is not None:
        found["ports"] = [{"containerPort": port, "name": "http"}]
    found["resources"] = {
        "requests": requests if requests is not None else {"cpu": "100m", "memory": "128Mi"},
        "limits": limits if limits is not None else {"cpu": "500m", "memory": "256Mi"},
    }
    if probes and port is not None:
        found["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 10}
        found["livenessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 20}
    if secure:
        found["securityContext"] = {"runAsNonRoot": True, "allowPrivilegeEscalation": False}
    if env:
        found["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return found


def deployment(
    namespace: str, name: str, containers: list[Obj], *, replicas: int = 2, **spec: Any
) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
            **spec,
        },
    }


def template_hash(workload: Obj) -> str:
    text = repr(workload["spec"]["template"]).encode()
    return hashlib.sha256(text).hexdigest()[:10]


def replica_set(owner: Obj) -> Obj:
    """The ReplicaSet the Deployment controller makes for the owner's current template."""
    hashed = template_hash(owner)
    meta = owner["metadata"]
    labels = {**owner["spec"]["template"]["metadata"]["labels"], "pod-template-hash": hashed}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{meta['name']}-{hashed}",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": {
            "replicas": owner["spec"].get("replicas", 1),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": owner["spec"]["template"]["spec"],
            },
        },
    }


def owner_reference(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_of(owner: Obj, template: Obj | None = None) -> Obj:
    """A pod the owner's controller makes (a ReplicaSet's, a StatefulSet's, a Job's)."""
    template = template or owner["spec"]["template"]
    meta = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{secrets.token_hex(3)[:5]}",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"].get("labels") or {}),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": template["spec"],
    }


# -- status, as a kubelet writes it ---------------------------------------------------
def container_status(
    spec: Obj,
    *,
    ready: bool = True,
    restarts: int = 0,
    waiting: Obj | None = None,
    last_terminated: Obj | None = None,
    image_id: str | None = None,
) -> Obj:
    digest = hashlib.sha256(spec["image"].encode()).hexdigest()
    state: Obj = {"running": {"startedAt": stamp(60)}} if waiting is None else {"waiting": waiting}
    found: Obj = {
        "name": spec["name"],
        "image": spec["image"],
        "imageID": image_id or f"{spec['image'].split(':')[0]}@sha256:{digest}",
        "ready": ready and waiting is None,
        "started": waiting is None,
        "restartCount": restarts,
        "state": state,
        "lastState": {} if last_terminated is None else {"terminated": last_terminated},
    }
    if waiting is None:
        found["containerID"] = f"containerd://{digest[:64]}"
    return found


def terminated(reason: str, exit_code: int, message: str | None = None) -> Obj:
    found: Obj = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": stamp(30),
        "finishedAt": stamp(20),
        "containerID": f"containerd://{secrets.token_hex(32)}",
    }
    if message is not None:
        found["message"] = message
    return found


def conditions(ready: bool, scheduled: bool = True, message: str = "") -> list[Obj]:
    now = stamp()
    found = [
        {
            "type": "PodScheduled",
            "status": "True" if scheduled else "False",
            "lastTransitionTime": now,
        }
    ]
    if not scheduled:
        found[0] |= {"reason": "Unschedulable", "message": message}
        return found
    state = "True" if ready else "False"
    found += [
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": state, "lastTransitionTime": now},
        {"type": "Ready", "status": state, "lastTransitionTime": now},
    ]
    if not ready:
        for entry in found[-2:]:
            entry |= {"reason": "ContainersNotReady", "message": "containers with unready status"}
    return found


def running(pod: Obj) -> Obj:
    """Every container started and ready."""
    statuses = [container_status(c) for c in pod["spec"]["containers"]]
    return {
        "phase": "Running",
        "conditions": conditions(True),
        "containerStatuses": statuses,
        "startTime": stamp(120),
    }


def crash_looping(
    pod: Obj, name: str, reason: str = "Error", exit_code: int = 1, message: str | None = None
) -> Obj:
    statuses = []
    for spec in pod["spec"]["containers"]:
        if spec["name"] != name:
            statuses.append(container_status(spec))
            continue
        waiting = {
            "reason": "CrashLoopBackOff",
            "message": f"back-off 5m0s restarting failed container={name} "
            f"pod={pod['metadata']['name']}_{pod['metadata']['namespace']}({pod['metadata']['uid']})",
        }
        last = terminated(reason, exit_code, message)
        statuses.append(container_status(spec, restarts=7, waiting=waiting, last_terminated=last))
    return {"phase": "Running", "conditions": conditions(False), "containerStatuses": statuses}


def pulling_fails(pod: Obj, name: str) -> Obj:
    statuses = []
    for spec in pod["spec"]["containers"]:
        if spec["name"] != name:
            statuses.append(container_status(spec))
            continue
        waiting = {
            "reason": "ImagePullBackOff",
            "message": f'Back-off pulling image "{spec["image"]}"',
        }
        statuses.append(container_status(spec, waiting=waiting, image_id=""))
    return {"phase": "Pending", "conditions": conditions(False), "containerStatuses": statuses}


def unschedulable(message: str) -> Obj:
    return {"phase": "Pending", "conditions": conditions(False, scheduled=False, message=message)}


def warning_event(involved: Obj, reason: str, message: str, component: str) -> Obj:
    meta = involved["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{secrets.token_hex(8)}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": component},
        "count": 3,
        "firstTimestamp": stamp(120),
        "lastTimestamp": stamp(),
    }


def waiting_on(pod: Obj, name: str, reason: str, message: str) -> Obj:
    """A container that cannot start (CreateContainerConfigError and the like)."""
    statuses = []
    for spec in pod["spec"]["containers"]:
        waiting = {"reason": reason, "message": message} if spec["name"] == name else None
        statuses.append(container_status(spec, waiting=waiting))
    return {"phase": "Pending", "conditions": conditions(False), "containerStatuses": statuses}


def condition(kind: str, status: str, reason: str = "", message: str = "") -> Obj:
    found: Obj = {"type": kind, "status": status, "lastTransitionTime": stamp()}
    if reason:
        found["reason"] = reason
    if message:
        found["message"] = message
    return found


def job_of(cronjob: Obj, started_ago_s: float) -> Obj:
    """A Job the CronJob controller makes for one run."""
    template = cronjob["spec"]["jobTemplate"]
    meta = cronjob["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-{int(datetime.now(UTC).timestamp() - started_ago_s) // 60}",
            "namespace": meta["namespace"],
            "ownerReferences": [owner_reference(cronjob)],
        },
        "spec": template["spec"],
    }


def job_finished(succeeded: bool, started_ago_s: float) -> Obj:
    if succeeded:
        return {
            "startTime": stamp(started_ago_s),
            "completionTime": stamp(started_ago_s - 5),
            "succeeded": 1,
            "conditions": [
                condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ),
                condition(
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ),
            ],
        }
    message = "Job has reached the specified backoff limit"
    return {
        "startTime": stamp(started_ago_s),
        "failed": 7,
        "conditions": [
            condition("FailureTarget", "True", "BackoffLimitExceeded", message),
            condition("Failed", "True", "BackoffLimitExceeded", message),
        ],
    }


# -- the same, as a snapshot the advisor would read (for tests of its rules alone) --------
def stored(obj: Obj) -> Obj:
    """An object as the API server hands it back: with a uid and a generation."""
    found = copy.deepcopy(obj)
    found["metadata"].setdefault("uid", str(uuid.uuid4()))
    found["metadata"].setdefault("generation", 1)
    return found


def healthy(
    name: str = "web", namespace: str = "shop", replicas: int = 2
) -> tuple[Obj, Obj, list[Obj]]:
    """A Deployment as careful teams write it, its ReplicaSet, and running pods."""
    made = stored(deployment(namespace, name, [container()], replicas=replicas))
    owner = stored(replica_set(made))
    pods = []
    for _ in range(replicas):
        pod = stored(pod_of(owner))
        pod["status"] = running(pod)
        pods.append(pod)
    made["status"] = {"observedGeneration": 1, "replicas": replicas, "availableReplicas": replicas}
    return made, owner, pods


def snapshot(
    *objects: Obj, cpu: float = 4.0, memory_mib: float = 4096, metrics: bool = False
) -> Snapshot:
    by_kind: dict[str, list[Obj]] = {kind.key: [] for kind in KINDS}
    keys = {kind.kind: kind.key for kind in KINDS}
    for obj in objects:
        by_kind[keys[obj["kind"]]].append(obj)
    absent = frozenset() if metrics else frozenset({"podmetrics"})
    return Snapshot(by_kind, cpu, memory_mib, absent=absent)  # type: ignore[arg-type]
