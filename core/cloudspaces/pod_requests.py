"""What pods request, read from a pod or from a workload's pod template, the way the API
server and the scheduler reckon it (k8s.io/component-helpers `PodRequests`): containers
add up, init containers run one at a time (sidecars, `restartPolicy: Always`, stay and
add up too), the pod-level `resources` win where given, `overhead` is on top. Kept exact
in millicores and bytes, so a sum never drifts from what the API server counts.

Pure: the strict-quota webhook (core.cloudspaces.admission) and its observations use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.cloudspaces.quantities import SUFFIXES, parse_quantity
from core.cloudspaces.settings import DEFAULT_REQUEST

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Need:
    """CPU (millicores) and memory (bytes) requested."""

    cpu_m: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Need) -> Need:
        return Need(self.cpu_m + other.cpu_m, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Need) -> Need:
        return Need(self.cpu_m - other.cpu_m, self.memory_bytes - other.memory_bytes)

    def times(self, count: int) -> Need:
        return Need(self.cpu_m * count, self.memory_bytes * count)

    def most(self, other: Need) -> Need:
        """Each resource's larger value."""
        return Need(max(self.cpu_m, other.cpu_m), max(self.memory_bytes, other.memory_bytes))

    def items(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return (("requests.cpu", self.cpu_m), ("requests.memory", self.memory_bytes))

    @property
    def nothing(self) -> bool:
        return self.cpu_m <= 0 and self.memory_bytes <= 0


def millicores(quantity: object) -> int:
    """A CPU quantity in millicores, rounded up as the API server's MilliValue does."""
    return math.ceil(parse_quantity(quantity) * 1000)


def whole_bytes(quantity: object) -> int:
    return math.ceil(parse_quantity(quantity))


def cpu_text(cpu_m: int) -> str:
    """Millicores as the API server writes them: "4", "2500m"."""
    return str(cpu_m // 1000) if cpu_m % 1000 == 0 else f"{cpu_m}m"


def memory_text(memory_bytes: int) -> str:
    """Bytes in the largest binary unit that holds them whole: "1536Mi", "2Gi", "100"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(SUFFIXES[suffix])
        if memory_bytes and memory_bytes % unit == 0:
            return f"{memory_bytes // unit}{suffix}"
    return str(memory_bytes)


def texts(need: Need, keys: tuple[str, ...]) -> str:
    """`requests.cpu=2500m,requests.memory=1Gi` for the keys asked, as quota refusals say."""
    shown = {
        "requests.cpu": cpu_text(need.cpu_m),
        "requests.memory": memory_text(need.memory_bytes),
    }
    return ",".join(f"{key}={shown[key]}" for key in keys)


def _resources(holder: Obj | None, defaults: bool) -> Need:
    """A container's (or the pod's own) requests; a limit without a request is the request,
    as API defaulting makes it; with `defaults`, what LimitRange spacedock-defaults adds."""
    resources = (holder or {}).get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    cpu = requests.get("cpu", limits.get("cpu"))
    memory = requests.get("memory", limits.get("memory"))
    if defaults:
        cpu = DEFAULT_REQUEST["cpu"] if cpu is None else cpu
        memory = DEFAULT_REQUEST["memory"] if memory is None else memory
    return Need(0 if cpu is None else millicores(cpu), 0 if memory is None else whole_bytes(memory))


def pod_need(spec: Obj | None, *, defaults: bool = False) -> Need:
    """What one pod of this spec requests. `defaults` for a template, whose pods get the
    LimitRange's defaults when they are made (a pod under admission has them already)."""
    spec = spec or {}
    total = Need()
    for container in spec.get("containers") or []:
        total += _resources(container, defaults)
    sidecars = Need()
    init_peak = Need()
    for container in spec.get("initContainers") or []:
        need = _resources(container, defaults)
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the rest
            total += need
            sidecars += need
            need = sidecars
        else:
            need += sidecars
        init_peak = init_peak.most(need)
    total = total.most(init_peak)
    own = ((spec.get("resources") or {}).get("requests")) or {}  # pod-level resources
    if "cpu" in own:
        total = Need(millicores(own["cpu"]), total.memory_bytes)
    if "memory" in own:
        total = Need(total.cpu_m, whole_bytes(own["memory"]))
    overhead = spec.get("overhead") or {}
    return total + Need(millicores(overhead.get("cpu", 0)), whole_bytes(overhead.get("memory", 0)))


def counts(pod: Obj) -> bool:
    """Whether a pod counts against a quota: it has not ended (as ResourceQuota counts)."""
    return ((pod.get("status") or {}).get("phase")) not in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Workload:
    """The pods a workload object asks for: how many at once, each needing `per_pod`.
    `later`: none start now (a CronJob, a suspended Job), so only the whole quota bounds it."""

    pods: int
    per_pod: Need
    later: bool = False

    @property
    def need(self) -> Need:
        return self.per_pod.times(self.pods)


# The workload resources the webhook sees: (group, plural) → the kind's singular, lowercase.
WORKLOADS = {
    ("apps", "deployments"): "deployment",
    ("apps", "statefulsets"): "statefulset",
    ("apps", "replicasets"): "replicaset",
    ("apps", "daemonsets"): "daemonset",
    ("batch", "jobs"): "job",
    ("batch", "cronjobs"): "cronjob",
}


def _count(value: object, default: int) -> int:
    return value if isinstance(value, int) and value >= 0 else default


def _job(spec: Obj) -> Workload:
    template = ((spec.get("template") or {}).get("spec")) or {}
    parallel = _count(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if isinstance(completions, int) and completions >= 0:
        parallel = min(parallel, completions)
    return Workload(parallel, pod_need(template, defaults=True), bool(spec.get("suspend")))


def workload_of(group: str, resource: str, obj: Obj) -> Workload:
    """The pods `obj` (of a resource in WORKLOADS) asks for. A DaemonSet counts one pod:
    how many nodes it lands on is not known at admission."""
    spec = obj.get("spec") or {}
    if (group, resource) == ("batch", "jobs"):
        return _job(spec)
    if (group, resource) == ("batch", "cronjobs"):
        job = _job(((spec.get("jobTemplate") or {}).get("spec")) or {})
        return Workload(job.pods, job.per_pod, later=True)
    template = ((spec.get("template") or {}).get("spec")) or {}
    pods = 1 if resource == "daemonsets" else _count(spec.get("replicas"), 1)
    return Workload(pods, pod_need(template, defaults=True))


def controlled(obj: Obj) -> bool:
    """Made by a controller (a Deployment's ReplicaSet, a CronJob's Job): its owner was
    checked, and its pods are checked as they are made."""
    owners = ((obj.get("metadata") or {}).get("ownerReferences")) or []
    return any(isinstance(owner, Mapping) and owner.get("controller") for owner in owners)
