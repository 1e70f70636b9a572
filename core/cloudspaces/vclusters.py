"""What a CloudSpace is on its host: the objects of its host namespace and its vCluster
(services, workload), where tenants reach it, and what its namespace's deletion waits on
(README "CloudSpaces").

Everything here is pure: the reconciler decides when to apply, `providers.host` how. The
settings and names are in core.cloudspaces.settings, quantities in .quantities, what goes
inside the vCluster in .tenant, kubeconfigs in .kubeconfigs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.cloudspaces.quantities import cpu_text, memory_text
from core.cloudspaces.settings import (
    API_PORT,
    CLOUDSPACE_LABEL,
    DEFAULT_LIMIT,
    DEFAULT_REQUEST,
    DEFAULTS_NAME,
    MANAGED_BY,
    QUOTA_NAME,
    SYSTEM_NAMESPACE,
    CloudSpaceSettings,
    admin_secret_name,
    host_namespace,
)
from core.spaces.cluster_endpoints import HOST_NAME
from providers.errors import UnexpectedAnswer


@dataclass(frozen=True)
class Target:
    """One CloudSpace as the manifests need it."""

    id: str
    name: str
    cpu: float
    memory_mib: int

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


def _meta(target: Target, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": target.labels}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def host_namespace_objects(settings: CloudSpaceSettings, target: Target) -> list[dict[str, Any]]:
    """Namespace, quota (the CloudSpace's plus the control plane's), defaults and the
    default-deny NetworkPolicy."""
    ns = target.namespace
    cpu = cpu_text(target.cpu + settings.control_plane_cpu)
    memory = memory_text(target.memory_mib + settings.control_plane_memory_mib)
    namespace_labels = {
        **target.labels,
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/warn": "restricted",
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": namespace_labels},
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(target, QUOTA_NAME, ns),
            "spec": {
                "hard": {
                    "requests.cpu": cpu,
                    "limits.cpu": cpu,
                    "requests.memory": memory,
                    "limits.memory": memory,
                }
            },
        },
        _limit_range(target.labels, ns),
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(target, "spacedock-default-deny", ns),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [
                    {"from": [{"podSelector": {}}]},
                    {"ports": [{"port": API_PORT, "protocol": "TCP"}]},
                ],
                "egress": [
                    {"to": [{"podSelector": {}}]},
                    # DNS and the host's API server, which the vCluster syncer talks to.
                    {
                        "ports": [
                            {"port": 53, "protocol": "UDP"},
                            {"port": 53, "protocol": "TCP"},
                            {"port": 443, "protocol": "TCP"},
                            {"port": 6443, "protocol": "TCP"},
                        ]
                    },
                ],
            },
        },
    ]


def _limit_range(labels: Mapping[str, str], namespace: str) -> dict[str, Any]:
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


def vcluster_services(settings: CloudSpaceSettings, target: Target) -> list[dict[str, Any]]:
    """The Services first: without a URL template the address is the LoadBalancer's, and
    the StatefulSet's --tls-san needs it."""
    ns, name = target.namespace, target.name
    selector = {"app": "vcluster", "release": name}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(target, name, ns),
            "spec": {
                "type": "ClusterIP" if settings.vcluster_url_template else "LoadBalancer",
                "selector": selector,
                "ports": [
                    {"name": "https", "port": 443, "targetPort": API_PORT, "protocol": "TCP"}
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(target, f"{name}-headless", ns),
            "spec": {
                "clusterIP": "None",
                "selector": selector,
                "ports": [
                    {"name": "https", "port": 443, "targetPort": API_PORT, "protocol": "TCP"}
                ],
            },
        },
    ]


def vcluster_workload(
    settings: CloudSpaceSettings, target: Target, address: str
) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding and the StatefulSet, pinned to the image setting."""
    ns, name = target.namespace, target.name
    account = admin_secret_name(name)
    selector = {"app": "vcluster", "release": name}
    san = address.removeprefix("https://").split("/")[0].rsplit(":", 1)[0].strip("[]")
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(target, account, ns),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(target, account, ns),
            "rules": [
                {
                    "apiGroups": ["", "apps", "networking.k8s.io", "discovery.k8s.io"],
                    "resources": ["*"],
                    "verbs": ["*"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(target, account, ns),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _meta(target, name, ns),
            "spec": {
                "serviceName": f"{name}-headless",
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**selector, **target.labels}},
                    "spec": {
                        "serviceAccountName": account,
                        "containers": [
                            {
                                "name": "syncer",
                                "image": settings.vcluster_image,
                                "args": [
                                    f"--name={name}",
                                    f"--tls-san={san}",
                                    f"--out-kube-config-secret={account}",
                                    f"--out-kube-config-server={address}",
                                ],
                                "ports": [{"containerPort": API_PORT, "name": "https"}],
                                "resources": {
                                    "requests": {
                                        "cpu": cpu_text(settings.control_plane_cpu),
                                        "memory": memory_text(settings.control_plane_memory_mib),
                                    },
                                    "limits": {
                                        "cpu": cpu_text(settings.control_plane_cpu),
                                        "memory": memory_text(settings.control_plane_memory_mib),
                                    },
                                },
                            }
                        ],
                    },
                },
            },
        },
    ]


def vcluster_object_paths(target: Target) -> list[tuple[str, str, str, str]]:
    """(apiVersion, kind, namespace, name) of the vCluster's objects, in deletion order."""
    ns, name = target.namespace, target.name
    account = admin_secret_name(name)
    return [
        ("apps/v1", "StatefulSet", ns, name),
        ("v1", "Service", ns, name),
        ("v1", "Service", ns, f"{name}-headless"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", ns, account),
        ("rbac.authorization.k8s.io/v1", "Role", ns, account),
        ("v1", "ServiceAccount", ns, account),
    ]


def statefulset_ready(statefulset: Mapping[str, Any] | None) -> bool:
    if statefulset is None:
        return False
    ready = (statefulset.get("status") or {}).get("readyReplicas") or 0
    return isinstance(ready, int) and ready >= 1


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
