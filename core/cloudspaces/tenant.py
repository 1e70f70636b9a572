"""What spacedock keeps inside a vCluster: the tenant's account and the headroom quotas and
defaults of every namespace (Flux comes through the host's Flux: core.cloudspaces.chart)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.cloudspaces.quantities import (
    cores_of,
    cpu_text,
    memory_text,
    mib_of,
)
from core.cloudspaces.settings import (
    MANAGED_BY,
    QUOTA_NAME,
    TENANT_ACCOUNT,
    TENANT_ACCOUNT_NAMESPACE,
)
from core.cloudspaces.vclusters import limit_range


def tenant_account() -> list[dict[str, Any]]:
    """ServiceAccount spacedock-tenant, cluster-admin inside the vCluster."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": TENANT_ACCOUNT,
                "namespace": TENANT_ACCOUNT_NAMESPACE,
                "labels": dict(MANAGED_BY),
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": TENANT_ACCOUNT, "labels": dict(MANAGED_BY)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": TENANT_ACCOUNT,
                    "namespace": TENANT_ACCOUNT_NAMESPACE,
                }
            ],
        },
    ]


@dataclass(frozen=True)
class Used:
    cpu: float
    memory_mib: float


def used_by_namespace(quotas: Iterable[Mapping[str, Any]]) -> dict[str, Used]:
    """status.used of our spacedock-quota quotas, per namespace."""
    used: dict[str, Used] = {}
    for quota in quotas:
        metadata = quota.get("metadata") or {}
        if metadata.get("name") != QUOTA_NAME:
            continue
        status_used = (quota.get("status") or {}).get("used") or {}
        try:
            cpu = cores_of(status_used.get("requests.cpu", "0"))
            memory = mib_of(status_used.get("requests.memory", "0"))
        except ValueError:
            continue
        used[str(metadata.get("namespace", ""))] = Used(cpu, memory)
    return used


def headroom_objects(
    namespaces: Iterable[str],
    used: Mapping[str, Used],
    cpu: float,
    memory_mib: int,
    elsewhere: Used = Used(0.0, 0.0),
) -> list[dict[str, Any]]:
    """Per namespace: defaults and a quota of `used here + (quota - used everywhere)`;
    `elsewhere` is what the CloudSpace's other vClusters were last seen to use."""
    total_cpu = sum(u.cpu for u in used.values()) + elsewhere.cpu
    total_memory = sum(u.memory_mib for u in used.values()) + elsewhere.memory_mib
    free_cpu = max(0.0, cpu - total_cpu)
    free_memory = max(0.0, memory_mib - total_memory)
    objects: list[dict[str, Any]] = []
    for namespace in namespaces:
        here = used.get(namespace, Used(0.0, 0.0))
        objects.append(limit_range(MANAGED_BY, namespace))
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": QUOTA_NAME, "namespace": namespace, "labels": MANAGED_BY},
                "spec": {
                    "hard": {
                        "requests.cpu": cpu_text(here.cpu + free_cpu),
                        "requests.memory": memory_text(here.memory_mib + free_memory),
                    }
                },
            }
        )
    return objects
