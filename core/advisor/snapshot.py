"""One run's view of a vCluster: the objects the advisor read, by kind, and the indexes
the rules share (objects by uid, each pod's controller, events by object).

A pod's failure is reported on the workload that controls it (its ReplicaSet's
Deployment, its Job's CronJob, its StatefulSet), so the finding keeps its name when
the pod is replaced and one finding covers all the workload's pods; a pod no
controller owns is reported on itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from core.advisor.model import ObjectRef

Obj = Mapping[str, Any]

# Namespaces spacedock and Kubernetes keep for themselves: configuration rules leave them
# alone (the tenant did not write what runs there); failures there are still reported.
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "flux-system"})


@dataclass(frozen=True)
class Kind:
    """A list the advisor reads: `key` names it in a snapshot."""

    key: str
    api_version: str
    kind: str
    plural: str
    optional: bool = False  # an API that may not be served (Flux, metrics-server): 404 is fine
    field_selector: str | None = None

    @property
    def path(self) -> str:
        group = "/api" if "/" not in self.api_version else "/apis"
        return f"{group}/{self.api_version}/{self.plural}"


FLUX_KINDS = (
    Kind(
        "kustomizations", "kustomize.toolkit.fluxcd.io/v1", "Kustomization", "kustomizations", True
    ),
    Kind("helmreleases", "helm.toolkit.fluxcd.io/v2", "HelmRelease", "helmreleases", True),
    Kind(
        "gitrepositories", "source.toolkit.fluxcd.io/v1", "GitRepository", "gitrepositories", True
    ),
    Kind(
        "helmrepositories",
        "source.toolkit.fluxcd.io/v1",
        "HelmRepository",
        "helmrepositories",
        True,
    ),
    Kind(
        "ocirepositories", "source.toolkit.fluxcd.io/v1", "OCIRepository", "ocirepositories", True
    ),
    Kind("helmcharts", "source.toolkit.fluxcd.io/v1", "HelmChart", "helmcharts", True),
    Kind("buckets", "source.toolkit.fluxcd.io/v1", "Bucket", "buckets", True),
)
METRICS = Kind("podmetrics", "metrics.k8s.io/v1beta1", "PodMetrics", "pods", True)
KINDS: tuple[Kind, ...] = (
    Kind("pods", "v1", "Pod", "pods"),
    Kind("deployments", "apps/v1", "Deployment", "deployments"),
    Kind("replicasets", "apps/v1", "ReplicaSet", "replicasets"),
    Kind("statefulsets", "apps/v1", "StatefulSet", "statefulsets"),
    Kind("daemonsets", "apps/v1", "DaemonSet", "daemonsets"),
    Kind("jobs", "batch/v1", "Job", "jobs"),
    Kind("cronjobs", "batch/v1", "CronJob", "cronjobs"),
    Kind("services", "v1", "Service", "services"),
    Kind("endpointslices", "discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
    Kind("ingresses", "networking.k8s.io/v1", "Ingress", "ingresses"),
    Kind("pvcs", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    Kind("hpas", "autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
    Kind("pdbs", "policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    # Only warnings: normal events are most of a cluster's and say nothing is wrong.
    Kind("events", "v1", "Event", "events", field_selector="type=Warning"),
    *FLUX_KINDS,
    METRICS,
)
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "CronJob", "Job")


def meta(obj: Obj) -> Mapping[str, Any]:
    found = obj.get("metadata")
    return found if isinstance(found, Mapping) else {}


def spec(obj: Obj) -> Mapping[str, Any]:
    found = obj.get("spec")
    return found if isinstance(found, Mapping) else {}


def status(obj: Obj) -> Mapping[str, Any]:
    found = obj.get("status")
    return found if isinstance(found, Mapping) else {}


def ref_of(obj: Obj) -> ObjectRef:
    data = meta(obj)
    return ObjectRef(
        str(obj.get("kind", "")), str(data.get("namespace") or ""), str(data.get("name", ""))
    )


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    for found in listed(status(obj).get("conditions")):
        if isinstance(found, Mapping) and found.get("type") == kind:
            return found
    return None


def selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) matching `labels`; an empty one
    matches everything, as for a PodDisruptionBudget."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in listed(selector.get("matchExpressions")):
        key, operator = expression.get("key"), expression.get("operator")
        values = listed(expression.get("values"))
        present = key in labels
        if operator == "In" and (not present or labels[key] not in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclass
class Snapshot:
    """What one run read. `truncated` names lists cut at the bound; `absent` the optional
    APIs the vCluster does not serve."""

    objects: dict[str, list[Obj]]
    quota_cpu: float
    quota_memory_mib: float
    truncated: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()
    _owner_memo: dict[str, Obj] = field(default_factory=dict)

    def of(self, key: str) -> list[Obj]:
        return self.objects.get(key, [])

    @property
    def object_count(self) -> int:
        return sum(len(items) for items in self.objects.values())

    @property
    def complete(self) -> bool:
        """Every list was read whole: what was not seen is gone."""
        return not self.truncated

    @cached_property
    def by_uid(self) -> dict[str, Obj]:
        found: dict[str, Obj] = {}
        for key in ("deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs"):
            for obj in self.of(key):
                uid = meta(obj).get("uid")
                if isinstance(uid, str):
                    found[uid] = obj
        return found

    def controller_of(self, obj: Obj) -> Obj | None:
        for owner in listed(meta(obj).get("ownerReferences")):
            if isinstance(owner, Mapping) and owner.get("controller"):
                return self.by_uid.get(str(owner.get("uid")))
        return None

    def top(self, obj: Obj) -> Obj:
        """The outermost controller of `obj` the snapshot holds (itself if none)."""
        uid = str(meta(obj).get("uid", ""))
        if uid and uid in self._owner_memo:
            return self._owner_memo[uid]
        current, seen = obj, 0
        while (parent := self.controller_of(current)) is not None and seen < 8:
            current, seen = parent, seen + 1
        if uid:
            self._owner_memo[uid] = current
        return current

    @cached_property
    def pods_by_top(self) -> dict[ObjectRef, list[Obj]]:
        grouped: dict[ObjectRef, list[Obj]] = defaultdict(list)
        for pod in self.of("pods"):
            grouped[ref_of(self.top(pod))].append(pod)
        return grouped

    def pods_of(self, workload: Obj) -> list[Obj]:
        return self.pods_by_top.get(ref_of(workload), [])

    @cached_property
    def pods_by_namespace(self) -> dict[str, list[Obj]]:
        grouped: dict[str, list[Obj]] = defaultdict(list)
        for pod in self.of("pods"):
            grouped[str(meta(pod).get("namespace", ""))].append(pod)
        return grouped

    @cached_property
    def events_by_object(self) -> dict[ObjectRef, list[Obj]]:
        grouped: dict[ObjectRef, list[Obj]] = defaultdict(list)
        for event in self.of("events"):
            involved = event.get("involvedObject") or event.get("regarding") or {}
            if isinstance(involved, Mapping):
                grouped[
                    ObjectRef(
                        str(involved.get("kind", "")),
                        str(involved.get("namespace") or meta(event).get("namespace") or ""),
                        str(involved.get("name", "")),
                    )
                ].append(event)
        for events in grouped.values():
            events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return grouped

    def events_of(self, ref: ObjectRef, reasons: Iterable[str] | None = None) -> list[Obj]:
        wanted = None if reasons is None else set(reasons)
        return [
            event
            for event in self.events_by_object.get(ref, [])
            if wanted is None or event.get("reason") in wanted
        ]

    def named(self, key: str) -> dict[tuple[str, str], Obj]:
        """Objects of a kind by (namespace, name)."""
        return {
            (str(meta(o).get("namespace", "")), str(meta(o).get("name", ""))): o
            for o in self.of(key)
        }

    def workloads(self) -> Iterator[tuple[Obj, Mapping[str, Any]]]:
        """Each workload with its pod template: Deployments, StatefulSets, DaemonSets,
        CronJobs, and Jobs no CronJob runs."""
        for key in ("deployments", "statefulsets", "daemonsets"):
            for obj in self.of(key):
                yield obj, spec(obj).get("template") or {}
        for obj in self.of("cronjobs"):
            job = spec(obj).get("jobTemplate") or {}
            yield obj, (job.get("spec") or {}).get("template") or {}
        for obj in self.of("jobs"):
            if self.controller_of(obj) is None:
                yield obj, spec(obj).get("template") or {}
