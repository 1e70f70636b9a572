"""Failure rules on pods and workloads: what is broken now, with the evidence the
kubelet, the scheduler and the controllers left in status and events (k8sgpt's Pod,
Deployment, ReplicaSet and StatefulSet analyzers, reported on the workload)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.advisor import patches, rules
from core.advisor.collect import Collector, said
from core.advisor.model import Evidence, ObjectRef, Severity
from core.advisor.snapshot import (
    WORKLOAD_KINDS,
    Obj,
    Snapshot,
    condition,
    listed,
    meta,
    ref_of,
    spec,
    status,
)
from core.cloudspaces.quantities import memory_text, mib_of

PULL_FAILURES = frozenset(
    {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"}
)
CONFIG_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError"})
CREATE_REFUSAL_KINDS = {
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
}


def check(snapshot: Snapshot, out: Collector) -> None:
    for pod in snapshot.of("pods"):
        if status(pod).get("phase") in ("Succeeded", "Failed"):
            continue
        _containers(snapshot, pod, out)
        _unscheduled(snapshot, pod, out)
    _create_refused(snapshot, out)
    _unavailable(snapshot, out)


def _statuses(pod: Obj) -> list[tuple[Mapping[str, Any], bool]]:
    found = [(s, False) for s in listed(status(pod).get("containerStatuses"))]
    found += [(s, True) for s in listed(status(pod).get("initContainerStatuses"))]
    return [(s, init) for s, init in found if isinstance(s, Mapping)]


def _template_container(workload: Obj, name: str, init: bool) -> Mapping[str, Any] | None:
    pod_spec: Any = workload
    for key in patches.pod_spec_path(str(workload.get("kind"))):
        pod_spec = pod_spec.get(key) if isinstance(pod_spec, Mapping) else None
    if not isinstance(pod_spec, Mapping):
        pod_spec = spec(workload)  # a bare pod
    for container in listed(pod_spec.get("initContainers" if init else "containers")):
        if isinstance(container, Mapping) and container.get("name") == name:
            return container
    return None


def _containers(snapshot: Snapshot, pod: Obj, out: Collector) -> None:
    top = snapshot.top(pod)
    ref = ref_of(top)
    pod_name = str(meta(pod).get("name", ""))
    for state, init in _statuses(pod):
        name = str(state.get("name", ""))
        image = said(state.get("image", ""))
        waiting = (state.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason", ""))
        names = (pod_name, name)
        last = (state.get("lastState") or {}).get("terminated") or {}
        now = (state.get("state") or {}).get("terminated") or {}
        if reason == "CrashLoopBackOff":
            _crash_loop(snapshot, pod, ref, state, last, out, names)
        if "OOMKilled" in (last.get("reason"), now.get("reason")):
            _oom(top, ref, pod_name, name, init, out)
        if reason in PULL_FAILURES:
            out.add(
                rules.IMAGE_PULL,
                ref,
                title=f"Image {image} cannot be pulled",
                evidence=[
                    Evidence(f"pod {pod_name}, container {name}: {reason} for image {image}"),
                    Evidence(said(waiting.get("message", ""))),
                ],
                suggestion=(
                    "Check the image name and tag exist in the registry, and that the pod can "
                    "authenticate to it (imagePullSecrets in its namespace)."
                ),
                names=(*names, image),
                images=(image,),
            )
        if reason in CONFIG_FAILURES:
            out.add(
                rules.CONTAINER_CONFIG,
                ref,
                title=f"Container {name} cannot start: {reason}",
                evidence=[
                    Evidence(f"pod {pod_name}, container {name}: {reason}"),
                    Evidence(said(waiting.get("message", ""))),
                ],
                suggestion=(
                    "Create the Secret or ConfigMap the container refers to (env, envFrom, "
                    "volumes) in its namespace, or fix the reference."
                ),
                names=names,
            )


def _crash_loop(
    snapshot: Snapshot,
    pod: Obj,
    ref: ObjectRef,
    state: Mapping[str, Any],
    last: Mapping[str, Any],
    out: Collector,
    names: tuple[str, str],
) -> None:
    pod_name, name = names
    exit_code = last.get("exitCode")
    evidence = [
        Evidence(
            f"pod {pod_name}, container {name}: CrashLoopBackOff after "
            f"{state.get('restartCount', 0)} restarts; last exit {last.get('reason', 'unknown')}"
            + (f" with exit code {exit_code}" if exit_code is not None else "")
        )
    ]
    if last.get("message"):  # the application's own words: never sent to a model
        evidence.append(Evidence(said(last["message"]), shared=False))
    for event in snapshot.events_of(ref_of(pod), ("BackOff",))[-1:]:
        evidence.append(
            Evidence(
                f"event BackOff ({event.get('count', 1)} times): {said(event.get('message', ''))}"
            )
        )
    if last.get("reason") == "OOMKilled" or exit_code == 137:
        advice = "It is killed for memory: raise its memory limit (see the oom-killed finding)."
    elif exit_code in (126, 127):
        advice = "Its command cannot be run (exit code 126/127): check command and args."
    else:
        advice = (
            "Read why it exits with `kubectl logs --previous -n "
            f"{ref.namespace} {pod_name} -c {name}`; fix the cause, or its command and probes."
        )
    out.add(
        rules.CRASH_LOOP,
        ref,
        title=f"Container {name} keeps crashing",
        evidence=evidence,
        suggestion=advice,
        names=names,
    )


def _oom(top: Obj, ref: ObjectRef, pod_name: str, name: str, init: bool, out: Collector) -> None:
    container = _template_container(top, name, init) or {}
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    evidence = [
        Evidence(
            f"pod {pod_name}, container {name}: OOMKilled (exit code 137)"
            + (f" with a memory limit of {limit}" if limit else " with no memory limit of its own")
        )
    ]
    patch = None
    if limit and ref.kind in WORKLOAD_KINDS:
        try:
            raised = memory_text(mib_of(limit) * 2)
        except ValueError:
            raised = None
        if raised is not None:
            patch = patches.text(
                patches.container_patch(
                    ref.kind, name, {"resources": {"limits": {"memory": raised}}}, init=init
                )
            )
            evidence.append(Evidence(f"the patch doubles the limit to {raised}"))
    out.add(
        rules.OOM_KILLED,
        ref,
        title=f"Container {name} runs out of memory",
        evidence=evidence,
        suggestion=(
            "Give it more memory (its limit, and its request if it needs that much all the "
            "time), or find what makes it use more; " + (patches.command(ref) if patch else "")
        ).rstrip("; "),
        patch=patch,
        names=(pod_name, name),
    )


def _unscheduled(snapshot: Snapshot, pod: Obj, out: Collector) -> None:
    if status(pod).get("phase") != "Pending":
        return
    scheduled = condition(pod, "PodScheduled")
    if scheduled is None or scheduled.get("status") != "False":
        return
    message = said(scheduled.get("message", ""))
    pod_name = str(meta(pod).get("name", ""))
    if "quota" in message:
        advice = "The CloudSpace's quota is used up: raise it, or lower what pods request."
    elif "Insufficient" in message:
        advice = "No node has room for its requests: lower them, or make room (the CloudSpace's quota sizes what runs)."
    else:
        advice = "Check its node selector, affinity, tolerations and volumes against what the scheduler says."
    out.add(
        rules.UNSCHEDULABLE,
        ref_of(snapshot.top(pod)),
        title="Pods cannot be scheduled",
        evidence=[
            Evidence(f"pod {pod_name}: {scheduled.get('reason', 'Unschedulable')}: {message}")
        ],
        suggestion=advice,
        names=(pod_name,),
    )


def short_of_replicas(workload: Obj) -> bool:
    """Whether a workload has fewer pods ready than it wants."""
    kind, wanted, state = workload.get("kind"), spec(workload).get("replicas", 1), status(workload)
    if kind == "Deployment":
        return int(state.get("availableReplicas") or 0) < int(wanted or 0)
    if kind in ("StatefulSet", "ReplicaSet"):
        return int(state.get("readyReplicas") or 0) < int(wanted or 0)
    if kind == "DaemonSet":
        return int(state.get("numberAvailable") or 0) < int(
            state.get("desiredNumberScheduled") or 0
        )
    if kind == "Job":
        return condition(workload, "Complete") is None and condition(workload, "Failed") is None
    return kind == "CronJob"


def _create_refused(snapshot: Snapshot, out: Collector) -> None:
    for kind, key in CREATE_REFUSAL_KINDS.items():
        named = snapshot.named(key)
        for (namespace, name), obj in named.items():
            events = snapshot.events_of(ObjectRef(kind, namespace, name), ("FailedCreate",))
            if not events:
                continue
            top = snapshot.top(obj)
            if not short_of_replicas(obj) or not short_of_replicas(top):
                continue  # an old refusal: the pods exist now
            event = events[-1]
            message = said(event.get("message", ""))
            advice = (
                "The CloudSpace's quota has no room for these pods: raise the quota, lower the "
                "pods' requests, or scale something else down."
                if "exceeded quota" in message
                else "Admission refuses the pods: fix what the message names."
            )
            out.add(
                rules.CREATE_REFUSED,
                ref_of(top),
                title=f"{kind} {name} cannot create its pods",
                evidence=[
                    Evidence(
                        f"{kind} {name}: FailedCreate ({event.get('count', 1)} times): {message}"
                    )
                ],
                suggestion=advice,
                names=(name,),
            )


def _unavailable(snapshot: Snapshot, out: Collector) -> None:
    for obj in snapshot.of("deployments"):
        state, wanted = status(obj), int(spec(obj).get("replicas", 1) or 0)
        unavailable = int(state.get("unavailableReplicas") or 0)
        available, progressing = condition(obj, "Available"), condition(obj, "Progressing")
        stuck = [
            c for c in (available, progressing) if c is not None and c.get("status") == "False"
        ]
        if wanted and unavailable and stuck:
            lines = [f"{unavailable} of {wanted} replicas unavailable"]
            lines += [
                f"{c.get('type')}=False ({c.get('reason', '')}): {said(c.get('message', ''))}"
                for c in stuck
            ]
            _report_unavailable(snapshot, obj, int(state.get("availableReplicas") or 0), lines, out)
    for obj in snapshot.of("statefulsets"):
        state, wanted = status(obj), int(spec(obj).get("replicas", 1) or 0)
        observed = state.get("observedGeneration")
        ready = int(state.get("readyReplicas") or 0)
        if (
            wanted
            and observed is not None
            and observed == meta(obj).get("generation")
            and ready < wanted
        ):
            _report_unavailable(snapshot, obj, ready, [f"{ready} of {wanted} replicas ready"], out)
    for obj in snapshot.of("daemonsets"):
        state = status(obj)
        missing = int(state.get("numberUnavailable") or 0)
        if missing and int(state.get("desiredNumberScheduled") or 0):
            line = f"{missing} of {state.get('desiredNumberScheduled')} daemon pods unavailable"
            _report_unavailable(snapshot, obj, int(state.get("numberAvailable") or 0), [line], out)


def _report_unavailable(
    snapshot: Snapshot, obj: Obj, available: int, lines: list[str], out: Collector
) -> None:
    ref = ref_of(obj)
    out.add(
        rules.WORKLOAD_UNAVAILABLE,
        ref,
        title=f"{ref.kind} {ref.name} has unavailable replicas",
        evidence=[Evidence(line) for line in lines],
        suggestion=(
            "Its pods are not becoming ready: see the findings on its pods (crash loops, image "
            f"pulls, scheduling) and `kubectl describe {ref.kind.lower()} {ref.name} -n {ref.namespace}`."
        ),
        severity=Severity.CRITICAL if available == 0 else None,
        names=[str(meta(p).get("name", "")) for p in snapshot.pods_of(obj)],
    )
