"""What a CloudSpace is on its host: its host namespace, where tenants reach its vCluster,
and what the namespace's deletion waits on (README "CloudSpaces").

Everything here is pure: the reconciler decides when to apply, `providers.host` how. The
vCluster itself is the official chart's, through the host's Flux (.chart); the settings
and names are in core.cloudspaces.settings, quantities in .quantities, what goes inside
the vCluster in .tenant, kubeconfigs in .kubeconfigs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.cloudspaces.settings import (
    CLOUDSPACE_LABEL,
    DEFAULT_LIMIT,
    DEFAULT_REQUEST,
    DEFAULTS_NAME,
    MANAGED_BY,
    SYSTEM_NAMESPACE,
    CloudSpaceSettings,
    host_namespace,
    kubeconfig_copy_name,
)
from core.spaces.cluster_endpoints import HOST_NAME
from providers.errors import UnexpectedAnswer


@dataclass(frozen=True)
class Target:
    """One vCluster of a CloudSpace as the manifests need it: `id` is the CloudSpace's,
    `name` the vCluster's (its Helm release), `cpu`/`memory_mib` the CloudSpace's quota,
    which its `vclusters` share."""

    id: str
    name: str
    cpu: float
    memory_mib: int
    # How many vClusters the host namespace holds: each brings a control plane and Flux.
    vclusters: int = 1
    # False for a vCluster not named like its CloudSpace: its objects outside the host
    # namespace carry its name too.
    named_like_cloud_space: bool = True

    @property
    def copy_name(self) -> str:
        """Its kubeconfig copy in spacedock-system (core.cloudspaces.kubeconfigs)."""
        return kubeconfig_copy_name(self.id, None if self.named_like_cloud_space else self.name)

    @property
    def namespace(self) -> str:
        return host_namespace(self.id)

    @property
    def labels(self) -> dict[str, str]:
        return {**MANAGED_BY, CLOUDSPACE_LABEL: self.id}


def address_of(settings: CloudSpaceSettings, target: Target) -> str | None:
    """The vCluster's address from the template; None: the LoadBalancer's address is used."""
    if not settings.vcluster_url_template:
        return None
    return settings.vcluster_url_template.format(
        name=target.name, namespace=target.namespace, id=target.id
    ).rstrip("/")


def load_balancer_address(service: Mapping[str, Any]) -> str | None:
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    if not ingress or not isinstance(ingress[0], Mapping):
        return None
    host = ingress[0].get("ip") or ingress[0].get("hostname")
    if not isinstance(host, str) or not host:
        return None
    # The host cluster wrote this, and it becomes the server of every kubeconfig: only an
    # IP address or a host name, never a URL of the cluster's choosing.
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.lower()
        if len(name) > 253 or not all(HOST_NAME.fullmatch(label) for label in name.split(".")):
            raise UnexpectedAnswer(
                "the LoadBalancer Service's address is neither an IP address nor a host name"
            ) from None
        return f"https://{name}"
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            raise UnexpectedAnswer("the LoadBalancer Service's address names a network interface")
        return f"https://[{address.compressed}]"
    return f"https://{address}"


def host_namespace_object(target: Target) -> dict[str, Any]:
    """The CloudSpace's host namespace. Its quota, defaults and network policy are the
    vCluster chart's `policies` (core.cloudspaces.chart), applied by the host's Flux."""
    labels = {
        **target.labels,
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": target.namespace, "labels": labels},
    }


def limit_range(labels: Mapping[str, str], namespace: str) -> dict[str, Any]:
    """The defaults of a namespace inside the vCluster, so every pod counts."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": DEFAULTS_NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "limits": [
                {"type": "Container", "defaultRequest": DEFAULT_REQUEST, "default": DEFAULT_LIMIT}
            ]
        },
    }


def system_namespace() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": SYSTEM_NAMESPACE, "labels": dict(MANAGED_BY)},
    }


def namespace_blocker(namespace: Mapping[str, Any]) -> str:
    """What keeps a terminating namespace, from its conditions."""
    conditions = (namespace.get("status") or {}).get("conditions") or []
    for wanted in ("NamespaceContentRemaining", "NamespaceFinalizersRemaining"):
        for condition in conditions:
            if (
                isinstance(condition, Mapping)
                and condition.get("type") == wanted
                and condition.get("status") == "True"
            ):
                said = str(condition.get("message") or condition.get("reason") or wanted)
                return f"{wanted}: {said[:300]}"
    name = (namespace.get("metadata") or {}).get("name", "")
    return f"waiting for host namespace {name} to be removed"
