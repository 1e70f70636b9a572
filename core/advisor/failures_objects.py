"""Failure rules on what surrounds the pods: Services and their endpoints, Ingresses,
PersistentVolumeClaims, HorizontalPodAutoscalers, CronJobs and Flux's own objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.advisor import rules
from core.advisor.collect import Collector, said
from core.advisor.model import Evidence
from core.advisor.snapshot import (
    FLUX_KINDS,
    Obj,
    Snapshot,
    condition,
    listed,
    meta,
    ref_of,
    spec,
    status,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# How `flux reconcile` names each kind.
RECONCILE = {
    "Kustomization": "kustomization",
    "HelmRelease": "helmrelease",
    "GitRepository": "source git",
    "HelmRepository": "source helm",
    "OCIRepository": "source oci",
    "HelmChart": "source chart",
    "Bucket": "source bucket",
}
SCALE_TARGETS = {
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "ReplicaSet": "replicasets",
}


def check(snapshot: Snapshot, out: Collector) -> None:
    _services(snapshot, out)
    _ingresses(snapshot, out)
    _claims(snapshot, out)
    _autoscalers(snapshot, out)
    _cronjobs(snapshot, out)
    _flux(snapshot, out)


def _running(pod: Obj) -> bool:
    return status(pod).get("phase") not in ("Succeeded", "Failed") and not meta(pod).get(
        "deletionTimestamp"
    )


def _pod_ready(pod: Obj) -> bool:
    ready = condition(pod, "Ready")
    return ready is not None and ready.get("status") == "True"


def _services(snapshot: Snapshot, out: Collector) -> None:
    slices: dict[tuple[str, str], list[Obj]] = {}
    for endpoint_slice in snapshot.of("endpointslices"):
        owner = (meta(endpoint_slice).get("labels") or {}).get(SERVICE_NAME_LABEL)
        if owner:
            key = (str(meta(endpoint_slice).get("namespace", "")), str(owner))
            slices.setdefault(key, []).append(endpoint_slice)
    for service in snapshot.of("services"):
        selector = spec(service).get("selector")
        if (
            spec(service).get("type") == "ExternalName"
            or not isinstance(selector, Mapping)
            or not selector
        ):
            continue  # no selector: its endpoints are managed by hand
        namespace, name = (
            str(meta(service).get("namespace", "")),
            str(meta(service).get("name", "")),
        )
        shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        selector_names = [str(v) for v in selector.values()]
        pods = [
            pod
            for pod in snapshot.pods_by_namespace.get(namespace, [])
            if _running(pod)
            and all((meta(pod).get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        ref = ref_of(service)
        if not pods:
            out.add(
                rules.SERVICE_NO_PODS,
                ref,
                title=f"Service {name} selects no pod",
                evidence=[
                    Evidence(f"selector {shown} matches none of the pods in namespace {namespace}")
                ],
                suggestion=(
                    "Make the selector match the labels of the workload's pod template, or start "
                    "the workload that should serve it."
                ),
                names=selector_names,
            )
            continue
        found = slices.get((namespace, name))
        if found:
            endpoints = [
                e for s in found for e in listed(s.get("endpoints")) if isinstance(e, Mapping)
            ]
            ready = [e for e in endpoints if (e.get("conditions") or {}).get("ready") is not False]
            total = len(endpoints)
        else:  # no EndpointSlice yet: the pods' own readiness
            ready = [p for p in pods if _pod_ready(p)]
            total = len(pods)
        if ready:
            continue
        evidence = [Evidence(f"0 of {total} endpoints ready for selector {shown}")]
        for pod in pods[:3]:
            state = condition(pod, "Ready") or {}
            evidence.append(
                Evidence(
                    f"pod {meta(pod).get('name')}: Ready={state.get('status', 'Unknown')} "
                    f"({state.get('reason', '')}) {said(state.get('message', ''))}".rstrip()
                )
            )
        out.add(
            rules.SERVICE_NO_ENDPOINTS,
            ref,
            title=f"Service {name} has no ready endpoints",
            evidence=evidence,
            suggestion="Its pods are not ready: see their findings and readiness probes.",
            names=[*selector_names, *(str(meta(p).get("name", "")) for p in pods)],
        )


def _backends(ingress: Obj) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(host, where, backend) of every backend an Ingress names."""
    found: list[tuple[str, str, Mapping[str, Any]]] = []
    default = spec(ingress).get("defaultBackend")
    if isinstance(default, Mapping):
        found.append(("", "default backend", default))
    for rule in listed(spec(ingress).get("rules")):
        host = str(rule.get("host") or "")
        for path in listed((rule.get("http") or {}).get("paths")):
            backend = path.get("backend")
            if isinstance(backend, Mapping):
                found.append((host, f"{host or '*'}{path.get('path', '/')}", backend))
    return found


def _ingresses(snapshot: Snapshot, out: Collector) -> None:
    services = snapshot.named("services")
    for ingress in snapshot.of("ingresses"):
        namespace = str(meta(ingress).get("namespace", ""))
        evidence, names = [], []
        for host, where, backend in _backends(ingress):
            target = backend.get("service")
            if not isinstance(target, Mapping):
                continue  # a resource backend
            name, port = str(target.get("name", "")), target.get("port") or {}
            names += [name, host]
            service = services.get((namespace, name))
            if service is None:
                evidence.append(Evidence(f"{where} → service {name}: no such Service"))
                continue
            ports = [p for p in listed(spec(service).get("ports")) if isinstance(p, Mapping)]
            if "number" in port and port["number"] not in {p.get("port") for p in ports}:
                have = ", ".join(str(p.get("port")) for p in ports)
                evidence.append(
                    Evidence(f"{where} → service {name} port {port['number']}: it has {have}")
                )
            elif "name" in port and port["name"] not in {p.get("name") for p in ports}:
                have = ", ".join(str(p.get("name")) for p in ports if p.get("name"))
                evidence.append(
                    Evidence(
                        f"{where} → service {name} port {port['name']}: it has {have or 'no named port'}"
                    )
                )
        if evidence:
            out.add(
                rules.INGRESS_BACKEND,
                ref_of(ingress),
                title=f"Ingress {meta(ingress).get('name')} points at what is not there",
                evidence=evidence,
                suggestion="Point the backend at an existing Service and one of its ports, or create it.",
                names=names,
            )


def _claims(snapshot: Snapshot, out: Collector) -> None:
    for claim in snapshot.of("pvcs"):
        if status(claim).get("phase") != "Pending":
            continue
        namespace, name = str(meta(claim).get("namespace", "")), str(meta(claim).get("name", ""))
        waiting = [
            pod
            for pod in snapshot.pods_by_namespace.get(namespace, [])
            if status(pod).get("phase") == "Pending"
            and any(
                (volume.get("persistentVolumeClaim") or {}).get("claimName") == name
                for volume in listed(spec(pod).get("volumes"))
                if isinstance(volume, Mapping)
            )
        ]
        events = snapshot.events_of(ref_of(claim))
        if not events and not waiting:
            continue  # e.g. WaitForFirstConsumer before any pod uses it
        storage_class = spec(claim).get("storageClassName") or "(the default)"
        evidence = [Evidence(f"Pending, storage class {storage_class}")]
        evidence += [
            Evidence(
                f"event {e.get('reason')} ({e.get('count', 1)} times): {said(e.get('message', ''))}"
            )
            for e in events[-2:]
        ]
        evidence += [Evidence(f"pod {meta(p).get('name')} waits for it") for p in waiting[:3]]
        out.add(
            rules.PVC_PENDING,
            ref_of(claim),
            title=f"PersistentVolumeClaim {name} is not bound",
            evidence=evidence,
            suggestion="Use a storage class that exists and can provision this size and access mode.",
            names=[str(storage_class), *(str(meta(p).get("name", "")) for p in waiting)],
        )


def _autoscalers(snapshot: Snapshot, out: Collector) -> None:
    for hpa in snapshot.of("hpas"):
        namespace, name = str(meta(hpa).get("namespace", "")), str(meta(hpa).get("name", ""))
        target = spec(hpa).get("scaleTargetRef") or {}
        kind, target_name = str(target.get("kind", "")), str(target.get("name", ""))
        key = SCALE_TARGETS.get(kind)
        if key is not None and (namespace, target_name) not in snapshot.named(key):
            out.add(
                rules.HPA_TARGET,
                ref_of(hpa),
                title=f"HorizontalPodAutoscaler {name} scales a missing {kind}",
                evidence=[
                    Evidence(f"scaleTargetRef {kind} {target_name}: not found in {namespace}")
                ],
                suggestion="Point scaleTargetRef at an existing workload, or delete the autoscaler.",
                names=(target_name,),
            )
            continue
        stuck = [
            c
            for c in (condition(hpa, "ScalingActive"), condition(hpa, "AbleToScale"))
            if c is not None and c.get("status") == "False"
        ]
        if stuck:
            out.add(
                rules.HPA_METRICS,
                ref_of(hpa),
                title=f"HorizontalPodAutoscaler {name} cannot scale",
                evidence=[
                    Evidence(
                        f"{c.get('type')}=False ({c.get('reason', '')}): {said(c.get('message', ''))}"
                    )
                    for c in stuck
                ],
                suggestion=(
                    "Resource metrics need metrics-server and a request for that resource on "
                    "every container of the target; custom metrics need their adapter."
                ),
                names=(target_name,),
            )


def _cronjobs(snapshot: Snapshot, out: Collector) -> None:
    runs: dict[str, list[Obj]] = {}
    for job in snapshot.of("jobs"):
        parent = snapshot.controller_of(job)
        if parent is not None and parent.get("kind") == "CronJob":
            runs.setdefault(str(meta(parent).get("uid")), []).append(job)
    for cronjob in snapshot.of("cronjobs"):
        finished = [
            job for job in runs.get(str(meta(cronjob).get("uid")), []) if _finished(job) is not None
        ]
        finished.sort(
            key=lambda j: str(status(j).get("startTime") or meta(j).get("creationTimestamp") or "")
        )
        if not finished or _finished(finished[-1]) != "Failed":
            continue
        evidence = []
        for job in reversed(finished[-3:]):
            outcome = _finished(job)
            failed = condition(job, "Failed") or {}
            detail = (
                f" ({failed.get('reason', '')}: {said(failed.get('message', ''))})"
                if outcome == "Failed"
                else ""
            )
            evidence.append(Evidence(f"run {meta(job).get('name')}: {outcome}{detail}"))
        out.add(
            rules.CRONJOB_FAILING,
            ref_of(cronjob),
            title=f"CronJob {meta(cronjob).get('name')}'s last run failed",
            evidence=evidence,
            suggestion="Read the failed run's pod logs; check its backoffLimit and activeDeadlineSeconds.",
            names=[str(meta(j).get("name", "")) for j in finished[-3:]],
        )


def _finished(job: Obj) -> str | None:
    for kind in ("Complete", "Failed"):
        found = condition(job, kind)
        if found is not None and found.get("status") == "True":
            return kind
    return None


def _flux(snapshot: Snapshot, out: Collector) -> None:
    for kind in FLUX_KINDS:
        for obj in snapshot.of(kind.key):
            if spec(obj).get("suspend"):
                continue
            ready = condition(obj, "Ready")
            if ready is None or ready.get("status") != "False":
                continue
            source = (
                spec(obj).get("sourceRef")
                or (spec(obj).get("chart") or {}).get("spec", {}).get("sourceRef")
                or {}
            )
            evidence = [
                Evidence(
                    f"Ready=False ({ready.get('reason', '')}): {said(ready.get('message', ''))}"
                )
            ]
            if status(obj).get("lastAttemptedRevision"):
                evidence.append(
                    Evidence(
                        f"last attempted revision {said(status(obj)['lastAttemptedRevision'])}"
                    )
                )
            out.add(
                rules.FLUX_NOT_READY,
                ref_of(obj),
                title=f"{kind.kind} {meta(obj).get('name')} is not Ready",
                evidence=evidence,
                suggestion=(
                    "Fix what the condition names (a URL, a credential, a chart version, a "
                    "manifest that does not apply), then `flux reconcile "
                    f"{RECONCILE[kind.kind]} {meta(obj).get('name')} -n {meta(obj).get('namespace')}`."
                ),
                names=(str(source.get("name", "")),),
            )
