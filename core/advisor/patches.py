"""The fixes the advisor suggests, as strategic merge patches in YAML: what
`kubectl patch <kind> <name> -n <namespace> --patch-file fix.yaml` applies (containers
merge by name, so a patch names only what changes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from core.advisor.model import ObjectRef


def pod_spec_path(kind: str) -> tuple[str, ...]:
    """Where a workload keeps its pod spec."""
    if kind == "CronJob":
        return ("spec", "jobTemplate", "spec", "template", "spec")
    return ("spec", "template", "spec")


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    result: dict[str, Any] = value
    return result


def pod_spec_patch(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    return nested(pod_spec_path(kind), dict(fields))


def container_patch(
    kind: str, container: str, fields: Mapping[str, Any], *, init: bool = False
) -> dict[str, Any]:
    """A patch of one container of a workload's pod template."""
    key = "initContainers" if init else "containers"
    return pod_spec_patch(kind, {key: [{"name": container, **fields}]})


def text(patch: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(patch), sort_keys=False, default_flow_style=False)


def command(ref: ObjectRef) -> str:
    """How to apply a finding's patch, saved as fix.yaml."""
    return f"kubectl patch {ref.kind.lower()} {ref.name} -n {ref.namespace} --patch-file fix.yaml"
