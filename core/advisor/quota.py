"""Quota advice no other advisor can give: spacedock knows the CloudSpace's quota, so it
can tell that a rollout will stall for want of room, and (when metrics-server answers)
which requests hold quota that the pods never use.

The CloudSpace's quota is strict (an admission webhook and headroom quotas refuse any
pod past it), so a Deployment whose surge pods do not fit stops mid-rollout: the new
ReplicaSet's pods are refused until something else goes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.advisor import patches, rules
from core.advisor.collect import Collector
from core.advisor.configuration import tenant_workloads
from core.advisor.model import Evidence
from core.advisor.snapshot import Obj, Snapshot, listed, meta, ref_of, spec, status
from core.cloudspaces.quantities import cores_of, cpu_text, memory_text, mib_of

# Requests this many times what the busiest pod uses, and at least this much more, are far above.
OVER_FACTOR = 4
OVER_CPU = 0.1  # cores
OVER_MEMORY_MIB = 128
# The advice: twice the busiest pod's use, at least this.
FLOOR_CPU = 0.01
FLOOR_MEMORY_MIB = 32


@dataclass(frozen=True)
class Amount:
    cpu: float = 0.0
    memory_mib: float = 0.0

    def __add__(self, other: Amount) -> Amount:
        return Amount(self.cpu + other.cpu, self.memory_mib + other.memory_mib)

    def times(self, n: int) -> Amount:
        return Amount(self.cpu * n, self.memory_mib * n)

    def __str__(self) -> str:
        return f"{cpu_text(self.cpu)} CPU and {memory_text(self.memory_mib)}"


def _quantity(value: Any, parse: Any) -> float:
    try:
        return float(parse(value)) if value is not None else 0.0
    except ValueError:
        return 0.0


def requested(pod_spec: Mapping[str, Any]) -> Amount:
    """What a pod requests: its containers together (init containers run before them)."""
    total = Amount()
    for container in listed(pod_spec.get("containers")):
        if isinstance(container, Mapping):
            asked = (container.get("resources") or {}).get("requests") or {}
            total += Amount(
                _quantity(asked.get("cpu"), cores_of), _quantity(asked.get("memory"), mib_of)
            )
    return total


def in_use(snapshot: Snapshot) -> Amount:
    """What the CloudSpace's pods request now (the quota counts requests)."""
    total = Amount()
    for pod in snapshot.of("pods"):
        if status(pod).get("phase") not in ("Succeeded", "Failed"):
            total += requested(spec(pod))
    return total


def surge_of(deployment: Obj) -> int:
    """How many pods a rolling update may add above spec.replicas (maxSurge, 25% by default,
    rounded up as the Deployment controller rounds it)."""
    strategy = spec(deployment).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    replicas = int(spec(deployment).get("replicas", 1) or 0)
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if isinstance(surge, str) and surge.endswith("%"):
        try:
            return math.ceil(replicas * float(surge[:-1]) / 100)
        except ValueError:
            return 0
    return int(surge) if isinstance(surge, int) else 0


def check(snapshot: Snapshot, out: Collector) -> None:
    used = in_use(snapshot)
    free = Amount(snapshot.quota_cpu - used.cpu, snapshot.quota_memory_mib - used.memory_mib)
    workloads = tenant_workloads(snapshot)
    if out.wants(rules.SURGE_HEADROOM):
        for obj, template in workloads:
            if obj.get("kind") == "Deployment":
                _surge(snapshot, obj, template, used, free, out)
    if out.wants(rules.REQUESTS_ABOVE_USAGE) and "podmetrics" not in snapshot.absent:
        usage = {
            (str(meta(m).get("namespace", "")), str(meta(m).get("name", ""))): m
            for m in snapshot.of("podmetrics")
        }
        for obj, template in workloads:
            _over_requested(snapshot, obj, template, usage, out)


def _surge(
    snapshot: Snapshot,
    obj: Obj,
    template: Mapping[str, Any],
    used: Amount,
    free: Amount,
    out: Collector,
) -> None:
    surge = surge_of(obj)
    if surge <= 0:
        return
    running = snapshot.pods_of(obj)
    per_pod = requested(spec(running[0])) if running else requested(template.get("spec") or {})
    need = per_pod.times(surge)
    short = [
        what
        for what, needed, room in (
            ("CPU", need.cpu, free.cpu),
            ("memory", need.memory_mib, free.memory_mib),
        )
        if needed > room + 1e-9
    ]
    if not short:
        return
    ref = ref_of(obj)
    patch = {
        "spec": {
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            }
        }
    }
    out.add(
        rules.SURGE_HEADROOM,
        ref,
        title=f"A rollout of {ref.name} would stall: its surge does not fit in the quota",
        evidence=[
            Evidence(f"a rollout adds up to {surge} pod(s) of {per_pod}: {need} more"),
            Evidence(
                f"the CloudSpace's quota is {Amount(snapshot.quota_cpu, snapshot.quota_memory_mib)}; "
                f"its pods request {used}, leaving {Amount(max(free.cpu, 0), max(free.memory_mib, 0))}"
            ),
            Evidence(f"short of {' and '.join(short)}"),
        ],
        suggestion=(
            "Replace pods one at a time instead of adding new ones first (the patch: maxSurge 0, "
            f"maxUnavailable 1; {patches.command(ref)}), or raise the CloudSpace's quota."
        ),
        patch=patches.text(patch),
    )


def _over_requested(
    snapshot: Snapshot,
    obj: Obj,
    template: Mapping[str, Any],
    usage: Mapping[tuple[str, str], Obj],
    out: Collector,
) -> None:
    measured = [
        usage[(str(meta(p).get("namespace", "")), str(meta(p).get("name", "")))]
        for p in snapshot.pods_of(obj)
        if (str(meta(p).get("namespace", "")), str(meta(p).get("name", ""))) in usage
    ]
    if not measured:
        return
    ref = ref_of(obj)
    evidence: list[Evidence] = []
    fixes: list[dict[str, Any]] = []
    for container in listed((template.get("spec") or {}).get("containers")):
        if not isinstance(container, Mapping):
            continue
        name = str(container.get("name", ""))
        asked = (container.get("resources") or {}).get("requests") or {}
        busiest = _busiest(measured, name)
        fix: dict[str, str] = {}
        cpu, memory = _quantity(asked.get("cpu"), cores_of), _quantity(asked.get("memory"), mib_of)
        if cpu >= OVER_FACTOR * busiest.cpu and cpu - busiest.cpu >= OVER_CPU:
            fix["cpu"] = cpu_text(max(busiest.cpu * 2, FLOOR_CPU))
        if (
            memory >= OVER_FACTOR * busiest.memory_mib
            and memory - busiest.memory_mib >= OVER_MEMORY_MIB
        ):
            fix["memory"] = memory_text(math.ceil(max(busiest.memory_mib * 2, FLOOR_MEMORY_MIB)))
        if fix:
            evidence.append(
                Evidence(
                    f"container {name} requests {Amount(cpu, memory)}; the busiest of "
                    f"{len(measured)} pod(s) uses {busiest}"
                )
            )
            fixes.append({"name": name, "resources": {"requests": fix}})
    if fixes:
        out.add(
            rules.REQUESTS_ABOVE_USAGE,
            ref,
            title=f"{ref.kind} {ref.name} holds quota it does not use",
            evidence=evidence,
            suggestion=(
                "Requests are what the quota counts: lowering them to twice what the pods use "
                f"frees room for other workloads ({patches.command(ref)})."
            ),
            patch=patches.text(patches.pod_spec_patch(ref.kind, {"containers": fixes})),
            names=[f["name"] for f in fixes],
        )


def _busiest(measured: list[Obj], container: str) -> Amount:
    top = Amount()
    for metrics in measured:
        for entry in listed(metrics.get("containers")):
            if isinstance(entry, Mapping) and entry.get("name") == container:
                used = entry.get("usage") or {}
                top = Amount(
                    max(top.cpu, _quantity(used.get("cpu"), cores_of)),
                    max(top.memory_mib, _quantity(used.get("memory"), mib_of)),
                )
    return top
