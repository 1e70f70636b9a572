"""Configuration rules: what will break later (Polaris's checks), each with the strategic
merge patch of the workload that clears it once applied.

They read the pod templates of the tenant's workloads (Deployments, StatefulSets,
DaemonSets, CronJobs, Jobs no CronJob runs), never the system namespaces, and never a
workload another controller owns (an operator would undo the patch).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from core.advisor import patches, rules
from core.advisor.collect import Collector, said
from core.advisor.model import Evidence, ObjectRef, Rule
from core.advisor.snapshot import (
    SYSTEM_NAMESPACES,
    Obj,
    Snapshot,
    listed,
    meta,
    ref_of,
    selects,
    spec,
    status,
)
from core.cloudspaces.quantities import parse_quantity

DEFAULT_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
# What a pinned image may be made of (a patch carries it); anything else gets no patch.
IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
DEFAULT_LIMITS = {"cpu": "500m", "memory": "256Mi"}
SERVING_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
Container = Mapping[str, Any]
# A container's share of a patch, or None when the rule holds for it.
ContainerCheck = Callable[[Obj, Container], "tuple[str, dict[str, Any]] | None"]


def tenant_workloads(snapshot: Snapshot) -> list[tuple[Obj, Mapping[str, Any]]]:
    return [
        (obj, template)
        for obj, template in snapshot.workloads()
        if meta(obj).get("namespace") not in SYSTEM_NAMESPACES
        and not any(o.get("controller") for o in listed(meta(obj).get("ownerReferences")))
    ]


def check(snapshot: Snapshot, out: Collector) -> None:
    for obj, template in tenant_workloads(snapshot):
        pod_spec = template.get("spec") or {}
        containers = [c for c in listed(pod_spec.get("containers")) if isinstance(c, Mapping)]
        init = [c for c in listed(pod_spec.get("initContainers")) if isinstance(c, Mapping)]
        serving = obj.get("kind") in SERVING_KINDS
        checks: list[tuple[Rule, ContainerCheck, bool]] = [
            (rules.REQUESTS_MISSING, _requests, False),
            (rules.LIMITS_MISSING, _limits, False),
            (rules.IMAGE_TAG, _pinned(snapshot), True),
            (rules.RUN_AS_ROOT, _root(pod_spec), True),
            (rules.PRIVILEGED, _privileged, True),
            (rules.PRIVILEGE_ESCALATION, _escalation, True),
        ]
        if serving:
            checks += [
                (rules.READINESS_MISSING, _probe("readinessProbe", {"periodSeconds": 10}), False),
                (
                    rules.LIVENESS_MISSING,
                    _probe("livenessProbe", {"initialDelaySeconds": 15, "periodSeconds": 20}),
                    False,
                ),
            ]
        if not pod_spec.get("hostNetwork"):
            checks.append((rules.HOST_PORT, _host_port, True))
        for rule, container_check, with_init in checks:
            if out.wants(rule):
                _per_container(
                    obj, rule, container_check, containers, init if with_init else [], out
                )
        _host_namespaces(obj, pod_spec, out)
    _single_replica(snapshot, out)


def _per_container(
    obj: Obj,
    rule: Rule,
    container_check: ContainerCheck,
    containers: list[Container],
    init: list[Container],
    out: Collector,
) -> None:
    """One finding per workload and rule, its patch covering every container at fault."""
    ref = ref_of(obj)
    evidence: list[Evidence] = []
    patched: dict[str, list[dict[str, Any]]] = {}
    names: list[str] = []
    images: list[str] = []
    for key, group in (("containers", containers), ("initContainers", init)):
        for container in group:
            found = container_check(obj, container)
            if found is None:
                continue
            line, fields = found
            name = str(container.get("name", ""))
            evidence.append(Evidence(f"container {name}: {line}"))
            names.append(name)
            images.append(said(container.get("image", "")))
            if fields:
                patched.setdefault(key, []).append({"name": name, **fields})
    if not evidence:
        return
    patch = patches.text(patches.pod_spec_patch(ref.kind, patched)) if patched else None
    out.add(
        rule,
        ref,
        title=f"{rule.title} ({ref.kind} {ref.name})",
        evidence=evidence,
        suggestion=_suggestion(rule, ref, patch),
        patch=patch,
        names=names,
        images=images,
    )


def _suggestion(rule: Rule, ref: ObjectRef, patch: str | None) -> str:
    why = {
        rules.REQUESTS_MISSING.id: "Without requests the scheduler cannot place it well and the "
        "namespace's defaults decide for you.",
        rules.LIMITS_MISSING.id: "Without limits one container can take the node's memory from "
        "the others.",
        rules.READINESS_MISSING.id: "Without a readiness probe, traffic reaches it before it can "
        "answer.",
        rules.LIVENESS_MISSING.id: "Without a liveness probe, a hung container is never restarted.",
        rules.IMAGE_TAG.id: "A moving tag runs whatever was pushed last; pin the digest you run.",
        rules.RUN_AS_ROOT.id: "Root in a container is root on the node once anything escapes; the "
        "image must work as another user.",
        rules.PRIVILEGED.id: "A privileged container controls the node.",
        rules.PRIVILEGE_ESCALATION.id: "A setuid binary could make it root.",
        rules.HOST_PORT.id: "A host port ties the pod to nodes where that port is free.",
    }.get(rule.id, "")
    if patch is None:
        return why
    return f"{why} Apply the patch: {patches.command(ref)}".strip()


def _requests(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
    requests = ((container.get("resources") or {}).get("requests")) or {}
    limits = ((container.get("resources") or {}).get("limits")) or {}
    missing = [r for r in ("cpu", "memory") if not requests.get(r)]
    if not missing:
        return None
    fields = {r: limits.get(r, DEFAULT_REQUESTS[r]) for r in missing}
    return f"no {' or '.join(missing)} request", {"resources": {"requests": fields}}


def _limits(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
    requests = ((container.get("resources") or {}).get("requests")) or {}
    limits = ((container.get("resources") or {}).get("limits")) or {}
    missing = [r for r in ("cpu", "memory") if not limits.get(r)]
    if not missing:
        return None
    fields = {r: _at_least(requests.get(r), DEFAULT_LIMITS[r]) for r in missing}
    return f"no {' or '.join(missing)} limit", {"resources": {"limits": fields}}


def _at_least(request: Any, default: str) -> str:
    """A limit no lower than the request (the API server refuses a limit below it)."""
    if request is None:
        return default
    try:
        return str(request) if parse_quantity(request) > parse_quantity(default) else default
    except ValueError:
        return default


def _probe(field: str, timing: dict[str, int]) -> ContainerCheck:
    def check(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
        ports = [p for p in listed(container.get("ports")) if isinstance(p, Mapping)]
        if container.get(field) or not ports:
            return None  # a container that serves nothing needs no probe to take traffic
        port = ports[0].get("containerPort")
        return f"serves port {port} with no {field}", {
            field: {"tcpSocket": {"port": port}, **timing}
        }

    return check


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference."""
    name, _, digest = image.partition("@")
    repository, tag = name, None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = (
            name[: len(name) - len(last)] + last.split(":", 1)[0],
            last.split(":", 1)[1],
        )
    return repository, tag, digest or None


def _pinned(snapshot: Snapshot) -> ContainerCheck:
    def check(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
        image = str(container.get("image", ""))
        repository, tag, digest = split_image(image)
        if digest or (tag and tag != "latest"):
            return None
        running = _running_digest(snapshot, obj, str(container.get("name", "")))
        line = f"image {said(image)} has {'no tag' if tag is None else 'the tag latest'}"
        if running is None or not IMAGE_REFERENCE.fullmatch(repository):
            return f"{line}; no pod runs it yet to pin its digest", {}
        pinned = f"{repository}@{running}"
        return f"{line}; its pods run {pinned}", {"image": pinned}

    return check


def _running_digest(snapshot: Snapshot, obj: Obj, container: str) -> str | None:
    for pod in snapshot.pods_of(obj):
        for state in listed(status(pod).get("containerStatuses")) + listed(
            status(pod).get("initContainerStatuses")
        ):
            image_id = str(state.get("imageID", "")) if isinstance(state, Mapping) else ""
            digest = image_id.rsplit("@", 1)[-1]
            if state.get("name") == container and DIGEST.fullmatch(digest):
                return digest
    return None


def _security(container: Container) -> Mapping[str, Any]:
    found = container.get("securityContext")
    return found if isinstance(found, Mapping) else {}


def _root(pod_spec: Mapping[str, Any]) -> ContainerCheck:
    pod_context = pod_spec.get("securityContext") or {}

    def check(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
        context = _security(container)
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        user = context.get("runAsUser", pod_context.get("runAsUser"))
        if user == 0:
            fix = {"runAsNonRoot": True, "runAsUser": 10001}
            return "runs as user 0 (root)", {"securityContext": fix}
        if non_root is True or user is not None:
            return None
        return "neither runAsNonRoot nor runAsUser is set", {
            "securityContext": {"runAsNonRoot": True}
        }

    return check


def _privileged(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
    if _security(container).get("privileged") is not True:
        return None
    return "privileged: true", {"securityContext": {"privileged": False}}


def _escalation(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
    context = _security(container)
    if context.get("allowPrivilegeEscalation") is False:
        return None
    fix: dict[str, Any] = {"allowPrivilegeEscalation": False}
    if context.get("privileged") is True:  # the API server refuses the one without the other
        fix["privileged"] = False
    stated = "true" if context.get("allowPrivilegeEscalation") else "unset (allowed)"
    return f"allowPrivilegeEscalation {stated}", {"securityContext": fix}


def _host_port(obj: Obj, container: Container) -> tuple[str, dict[str, Any]] | None:
    bound = [
        p for p in listed(container.get("ports")) if isinstance(p, Mapping) and p.get("hostPort")
    ]
    if not bound:
        return None
    shown = ", ".join(str(p["hostPort"]) for p in bound)
    fields = {"ports": [{"containerPort": p.get("containerPort"), "hostPort": None} for p in bound]}
    return f"hostPort {shown}", fields


def _host_namespaces(obj: Obj, pod_spec: Mapping[str, Any], out: Collector) -> None:
    shared = [key for key in ("hostNetwork", "hostPID", "hostIPC") if pod_spec.get(key) is True]
    if not shared:
        return
    ref = ref_of(obj)
    patch = patches.text(patches.pod_spec_patch(ref.kind, dict.fromkeys(shared, False)))
    out.add(
        rules.HOST_NETWORK,
        ref,
        title=f"{rules.HOST_NETWORK.title} ({ref.kind} {ref.name})",
        evidence=[Evidence(f"{key}: true") for key in shared],
        suggestion="It sees and can reach everything of the node's. "
        + f"Apply the patch: {patches.command(ref)}",
        patch=patch,
    )


def _single_replica(snapshot: Snapshot, out: Collector) -> None:
    scaled = {
        (
            str(meta(h).get("namespace", "")),
            str((spec(h).get("scaleTargetRef") or {}).get("name", "")),
        )
        for h in snapshot.of("hpas")
    }
    budgets = snapshot.of("pdbs")
    for key in ("deployments", "statefulsets"):
        for obj in snapshot.of(key):
            ref = ref_of(obj)
            replicas = spec(obj).get("replicas", 1)
            if (
                ref.namespace in SYSTEM_NAMESPACES
                or replicas != 1
                or (ref.namespace, ref.name) in scaled
            ):
                continue  # 0: scaled down on purpose; an autoscaler owns the count
            labels = ((spec(obj).get("template") or {}).get("metadata") or {}).get("labels") or {}
            if any(
                meta(b).get("namespace") == ref.namespace
                and selects(spec(b).get("selector") or {}, labels)
                for b in budgets
            ):
                continue
            patch = patches.text({"spec": {"replicas": 2}})
            out.add(
                rules.SINGLE_REPLICA,
                ref,
                title=f"{ref.kind} {ref.name} runs one replica and no PodDisruptionBudget",
                evidence=[Evidence("replicas: 1, and no PodDisruptionBudget selects its pods")],
                suggestion=(
                    "A node drain or a crash takes it down entirely. Run two replicas (the patch; "
                    f"{patches.command(ref)}) and add a PodDisruptionBudget with maxUnavailable: 1."
                ),
                patch=patch,
            )
