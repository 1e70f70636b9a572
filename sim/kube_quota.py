"""Pod admission as the Kubernetes API server does it, for the stand-ins:
LimitRange defaults, then every ResourceQuota of the namespace, with the
server's own refusal messages, and the quota controller's `status.used`.

Pure functions over plain objects, so kube_api.py stays about storage and the
rules here can be read against the real ones: quantities parse as Kubernetes
quantities (`500m`, `1`, `0.5`, `512Mi`, `1Gi`, `1e3`) with the product's own parser
(core.cloudspaces.quantities, the API server's grammar) and print in the canonical form the API
server writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from core.cloudspaces.quantities import BINARY, parse_quantity

Obj = dict[str, Any]

# The quota keys that count pods, and which container field each one sums
# (None: the pod itself counts one).
QUOTA_KEYS: dict[str, tuple[str, str] | None] = {
    "requests.cpu": ("requests", "cpu"),
    "cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
    "pods": None,
}


def quantity_units(key: str, text: object) -> int:
    """Whole units a quota counts in: millicores for cpu, bytes or a count for the rest."""
    value = parse_quantity(text)
    return math.ceil(value * 1000) if key.endswith("cpu") else math.ceil(value)


def format_quantity(key: str, units: int) -> str:
    """The canonical form the API server writes (`500m`, `2`, `512Mi`, `1Gi`, `3`)."""
    if key.endswith("cpu"):
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if key.endswith("memory"):
        for power, suffix in reversed(list(enumerate(BINARY, start=1))):
            if units and units % 2 ** (10 * power) == 0:
                return f"{units // 2 ** (10 * power)}{suffix}"
    return str(units)


def _containers(pod: Obj) -> Iterator[tuple[str, Obj]]:
    spec = pod.get("spec") or {}
    for section in ("containers", "initContainers"):
        for container in spec.get(section) or []:
            yield section, container


def apply_limit_range_defaults(pod: Obj, limit_ranges: Iterable[Obj]) -> None:
    """Fill in each container's unset requests and limits as the API server does:
    a request the container leaves unset defaults to its own limit, then the
    LimitRanger fills unset limits from `default` and unset requests from
    `defaultRequest` (which itself defaults to `default`)."""
    default_requests: dict[str, Any] = {}
    default_limits: dict[str, Any] = {}
    for limit_range in limit_ranges:
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") == "Container":
                limits = item.get("default") or {}
                requests = {**limits, **(item.get("defaultRequest") or {})}
                default_limits = {**limits, **default_limits}
                default_requests = {**requests, **default_requests}
    for _, container in _containers(pod):
        resources = container.get("resources") or {}
        own_limits = resources.get("limits") or {}
        limits = {**default_limits, **own_limits}
        requests = {**default_requests, **own_limits, **(resources.get("requests") or {})}
        container["resources"] = {
            **resources,
            **({"limits": limits} if limits else {}),
            **({"requests": requests} if requests else {}),
        }


def pod_usage(pod: Obj) -> dict[str, int]:
    """What a pod counts against each quota key; a key it states nothing for is absent.
    Containers add up; an init container counts only where it asks more than them all."""
    sums: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for section, container in _containers(pod):
        resources = container.get("resources") or {}
        for key, source in QUOTA_KEYS.items():
            if source is None:
                continue
            value = (resources.get(source[0]) or {}).get(source[1])
            if value is None:
                continue
            units = quantity_units(key, value)
            if section == "containers":
                sums[key] = sums.get(key, 0) + units
            else:
                init_max[key] = max(init_max.get(key, 0), units)
    usage = {key: max(sums.get(key, 0), init_max.get(key, 0)) for key in {*sums, *init_max}}
    usage["pods"] = 1
    return usage


def total_usage(pods: Iterable[Obj]) -> dict[str, int]:
    """What the namespace's pods use, finished pods excluded."""
    used: dict[str, int] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for key, units in pod_usage(pod).items():
            used[key] = used.get(key, 0) + units
    return used


def quota_refusal(pod: Obj, quotas: Iterable[Obj], pods: Iterable[Obj]) -> str | None:
    """Why the quotas refuse this new pod (the API server's words), or None."""
    name = pod["metadata"]["name"]
    requested = pod_usage(pod)
    used = total_usage(pods)
    for quota in quotas:
        quota_name = quota["metadata"]["name"]
        hard = (quota.get("spec") or {}).get("hard") or {}
        constrained = [key for key in sorted(hard) if key in QUOTA_KEYS]
        missing = [key for key in constrained if key not in requested]
        if missing:
            return (
                f'pods "{name}" is forbidden: failed quota: {quota_name}: '
                f"must specify {','.join(missing)}"
            )
        over = [
            key
            for key in constrained
            if used.get(key, 0) + requested[key] > quantity_units(key, hard[key])
        ]
        if over:

            def listed(values: dict[str, int], keys: list[str] = over) -> str:
                return ",".join(f"{k}={format_quantity(k, values.get(k, 0))}" for k in keys)

            limited = {key: quantity_units(key, hard[key]) for key in over}
            return (
                f'pods "{name}" is forbidden: exceeded quota: {quota_name}, '
                f"requested: {listed(requested)}, used: {listed(used)}, "
                f"limited: {listed(limited)}"
            )
    return None


def quota_status(quota: Obj, pods: Iterable[Obj]) -> Obj:
    """The quota controller's status: `hard` as the spec says, `used` by the pods."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = total_usage(pods)
    return {
        "hard": dict(hard),
        "used": {key: format_quantity(key, used.get(key, 0)) for key in hard if key in QUOTA_KEYS},
    }
