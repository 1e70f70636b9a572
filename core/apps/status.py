"""Flux's view of an app in one vocabulary: READY, PROGRESSING, FAILED, SUSPENDED or UNKNOWN,
with the reason and message of the object that decides it, the revisions Flux applied and
attempted, and the workloads it runs. Pure functions over the objects the status loop read.

Which object decides: a source (GitRepository, HelmRepository) or a HelmChart that is not
Ready for its current generation tells why first (a bad URL, a missing ref, a missing
credential, a chart version that does not exist); then the Kustomization or HelmRelease. An
object is current when its `status.observedGeneration` is its `metadata.generation`, as
`flux get` and kstatus read it; until then it is PROGRESSING.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

Obj = Mapping[str, Any]


class AppStatus(StrEnum):
    READY = "READY"
    PROGRESSING = "PROGRESSING"
    FAILED = "FAILED"
    SUSPENDED = "SUSPENDED"
    UNKNOWN = "UNKNOWN"
    DELETING = "DELETING"


# Ready=False with these reasons is Flux still working, not failing.
STILL_WORKING = frozenset({"Progressing", "ProgressingWithRetry", "DependencyNotReady"})
WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    ready: int | None
    desired: int | None


@dataclass(frozen=True)
class Observation:
    status: AppStatus
    reason: str | None
    message: str | None
    last_applied: str | None = None
    last_attempted: str | None = None
    handled_sync: str | None = None
    workloads: tuple[Workload, ...] = ()


@dataclass(frozen=True)
class Reading:
    """What the status loop read of one app: its objects (None when absent)."""

    source: Obj | None
    deploy: Obj | None
    chart: Obj | None = None  # a HelmRelease's HelmChart, read only when it is not ready


def workloads_json(workloads: tuple[Workload, ...]) -> str:
    return json.dumps([asdict(w) for w in workloads], sort_keys=True)


def workloads_of(text: str) -> list[Workload]:
    return [Workload(**fields) for fields in json.loads(text)]


def _condition(obj: Obj | None, kind: str = "Ready") -> Obj | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def current(obj: Obj | None) -> bool:
    """Flux has reported on the object's current generation."""
    if obj is None:
        return False
    generation = (obj.get("metadata") or {}).get("generation")
    return (obj.get("status") or {}).get("observedGeneration") == generation


def verdict(obj: Obj | None) -> tuple[AppStatus, str | None, str | None]:
    """One Flux object's own status, reason and message."""
    if obj is None:
        return AppStatus.UNKNOWN, None, None
    ready = _condition(obj)
    stalled = _condition(obj, "Stalled")
    if stalled is not None and stalled.get("status") == "True":
        return AppStatus.FAILED, stalled.get("reason"), stalled.get("message")
    if not current(obj) or ready is None:
        message = None if ready is None else ready.get("message")
        return AppStatus.PROGRESSING, "Progressing", message or "Flux has not reconciled it yet"
    reason, message = ready.get("reason"), ready.get("message")
    if ready.get("status") == "True":
        return AppStatus.READY, reason, message
    if ready.get("status") == "False" and reason not in STILL_WORKING:
        return AppStatus.FAILED, reason, message
    return AppStatus.PROGRESSING, reason, message


def observe(reading: Reading, workload_index: Mapping[tuple[str, str, str], Obj]) -> Observation:
    """The app's status from its objects and the workloads their inventory names."""
    deploy, source = reading.deploy, reading.source
    status_of = (deploy or {}).get("status") or {}
    found = _workloads(status_of, workload_index)
    common: dict[str, Any] = {
        "last_applied": status_of.get("lastAppliedRevision") or _helm_deployed(status_of),
        "last_attempted": status_of.get("lastAttemptedRevision"),
        "handled_sync": status_of.get("lastHandledReconcileAt"),
        "workloads": found,
    }
    if deploy is None or source is None:
        missing = "Kustomization or HelmRelease" if deploy is None else "source"
        return Observation(
            AppStatus.UNKNOWN,
            "NotFound",
            f"the app's {missing} is not in the cluster (deleted outside spacedock?); "
            "syncApp or updateApp writes it again",
            **common,
        )
    if (deploy.get("spec") or {}).get("suspend"):
        return Observation(
            AppStatus.SUSPENDED,
            "Suspended",
            "Flux applies no change while the app is suspended; resumeApp resumes it",
            **common,
        )
    for upstream in (source, reading.chart):
        status, reason, message = verdict(upstream)
        if status is AppStatus.FAILED:
            return Observation(status, reason, message, **common)
    status, reason, message = verdict(deploy)
    if status is AppStatus.READY and not _applied_latest(deploy, source):
        status, reason = AppStatus.PROGRESSING, "Progressing"
        message = "the source has a new revision that Flux has not applied yet"
    return Observation(status, reason, message, **common)


def _applied_latest(deploy: Obj, source: Obj) -> bool:
    """A Kustomization applied the artifact its GitRepository holds now (a HelmRelease's
    chart is tracked by its own generation)."""
    if deploy.get("kind") != "Kustomization":
        return True
    artifact = ((source.get("status") or {}).get("artifact") or {}).get("revision")
    return artifact is None or (deploy.get("status") or {}).get("lastAppliedRevision") == artifact


def _helm_deployed(status: Obj) -> str | None:
    """A HelmRelease's deployed chart version (`status.history`, newest first)."""
    for entry in status.get("history") or []:
        if isinstance(entry, Mapping) and entry.get("status") == "deployed":
            version = entry.get("chartVersion")
            return str(version) if version is not None else None
    return None


def _workloads(status: Obj, index: Mapping[tuple[str, str, str], Obj]) -> tuple[Workload, ...]:
    found = []
    for entry in (status.get("inventory") or {}).get("entries") or []:
        parsed = inventory_entry(entry)
        if parsed is None or parsed[2] not in WORKLOAD_KINDS:
            continue
        namespace, name, kind = parsed
        obj = index.get((kind, namespace, name))
        ready, desired = replicas(obj) if obj is not None else (None, None)
        found.append(Workload(kind, namespace, name, ready, desired))
    return tuple(sorted(found, key=lambda w: (w.namespace, w.kind, w.name)))


def inventory_entry(entry: Any) -> tuple[str, str, str] | None:
    """(namespace, name, kind) of an inventory entry `<ns>_<name>_<group>_<kind>` of the
    `apps` group; None for any other."""
    text = entry.get("id") if isinstance(entry, Mapping) else None
    if not isinstance(text, str) or text.count("_") < 3:
        return None
    namespace, rest = text.split("_", 1)
    name_group, kind = rest.rsplit("_", 1)
    name, group = name_group.rsplit("_", 1)
    return (namespace, name, kind) if group == "apps" else None


def replicas(obj: Obj) -> tuple[int | None, int | None]:
    """(ready, desired) of a Deployment, StatefulSet or DaemonSet."""
    status = obj.get("status") or {}
    if obj.get("kind") == "DaemonSet":
        return status.get("numberReady", 0), status.get("desiredNumberScheduled")
    desired = (obj.get("spec") or {}).get("replicas", 1)
    return status.get("readyReplicas", 0) or 0, desired


def revision_outcome(
    reading: Reading,
    observation: Observation,
    source_generation: int | None,
    deploy_generation: int | None,
) -> str | None:
    """READY or FAILED once Flux has answered for the generations an applied revision
    wrote; None while it has not."""

    def reached(obj: Obj | None, generation: int | None) -> bool:
        observed = ((obj or {}).get("status") or {}).get("observedGeneration")
        return generation is None or (isinstance(observed, int) and observed >= generation)

    if not (
        reached(reading.source, source_generation) and reached(reading.deploy, deploy_generation)
    ):
        return None
    if observation.status is AppStatus.READY:
        return "READY"
    if observation.status is AppStatus.FAILED:
        return "FAILED"
    return None
