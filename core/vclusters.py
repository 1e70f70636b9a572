"""What a CloudSpace is on the clusters: its settings, the names of its objects, the
quantities, and the manifests the reconciler applies (README "CloudSpaces").

Everything here is pure: the reconciler decides when to apply, `providers.host` how.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml

from core.cluster_endpoints import HOST_NAME
from providers.errors import UnexpectedAnswer

MANAGED_BY = {"app.kubernetes.io/managed-by": "spacedock"}
CLOUDSPACE_LABEL = "spacedock.dev/cloudspace"
SYSTEM_NAMESPACE = "spacedock-system"
QUOTA_NAME = "spacedock-quota"
DEFAULTS_NAME = "spacedock-defaults"
TENANT_ACCOUNT = "spacedock-tenant"
TENANT_ACCOUNT_NAMESPACE = "kube-system"
FLUX_NAMESPACE = "flux-system"
API_PORT = 8443
# Requests a container gets when it states none, so every pod counts against the quota.
DEFAULT_REQUEST = {"cpu": "100m", "memory": "128Mi"}
DEFAULT_LIMIT = {"cpu": "500m", "memory": "512Mi"}
DEFAULT_IMAGE = "ghcr.io/loft-sh/vcluster:0.19.7"
DEFAULT_FLUX_MANIFESTS = "https://github.com/fluxcd/flux2/releases/download/v2.4.0/install.yaml"


@dataclass(frozen=True)
class CloudSpaceSettings:
    """The SPACEDOCK_* settings of CloudSpaces (README "Settings")."""

    default_host_space: str | None = None
    default_cpu: float = 2.0
    default_memory_mib: int = 4096
    control_plane_cpu: float = 0.5
    control_plane_memory_mib: int = 512
    vcluster_image: str = DEFAULT_IMAGE
    vcluster_url_template: str | None = None
    flux_manifests: str = DEFAULT_FLUX_MANIFESTS
    reconcile_interval_s: float = 30.0
    kubeconfig_ttl_s: int = 3600


def key_of(cloud_space_id: str) -> str:
    """The DNS-1123-safe form of an id that names a CloudSpace's objects."""
    return cloud_space_id.lower().replace("_", "-")


def host_namespace(cloud_space_id: str) -> str:
    return f"cs-{key_of(cloud_space_id)}"


def kubeconfig_copy_name(cloud_space_id: str) -> str:
    return f"tenant-{key_of(cloud_space_id)}-kubeconfig"


def admin_secret_name(name: str) -> str:
    return f"vc-{name}"


# -- quantities -------------------------------------------------------------

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(n|u|m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def quantity(text: object) -> Decimal:
    """A Kubernetes quantity ("500m", "8Gi", "2") as a number; ValueError when it is none."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"not a quantity: {str(text)[:40]!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation as bad:
        raise ValueError(f"not a quantity: {str(text)[:40]!r}") from bad


def cpu_text(cores: float) -> str:
    return f"{max(0, round(cores * 1000))}m"


def memory_text(mib: float) -> str:
    return f"{max(0, math.floor(mib))}Mi"


def cores_of(text: object) -> float:
    return float(quantity(text))


def mib_of(text: object) -> float:
    return float(quantity(text) / _SUFFIX["Mi"])


# -- the host ---------------------------------------------------------------


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


@dataclass(frozen=True)
class AdminAccess:
    """What the vCluster's own Secret holds: never stored, never returned."""

    ca_pem: str
    client_certificate_pem: str
    client_key_pem: str
    config: str


def admin_access(secret: Mapping[str, Any]) -> AdminAccess:
    """The vc-<name> Secret's keys; ValueError when one is missing or not base64."""
    data = secret.get("data") or {}

    def field(key: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"the vCluster Secret has no {key}")
        return base64.b64decode(value, validate=True).decode()

    return AdminAccess(
        ca_pem=field("certificate-authority"),
        client_certificate_pem=field("client-certificate"),
        client_key_pem=field("client-key"),
        config=field("config"),
    )


def kubeconfig_copy(target: Target, access: AdminAccess, address: str) -> dict[str, Any]:
    """Secret tenant-<key>-kubeconfig: the admin kubeconfig with the reachable address."""
    try:
        config = yaml.safe_load(access.config)
    except yaml.YAMLError:
        config = None
    if not isinstance(config, dict) or not isinstance(config.get("clusters"), list):
        config = admin_kubeconfig(target.name, address, access)
    for cluster in config["clusters"]:
        if isinstance(cluster, dict) and isinstance(cluster.get("cluster"), dict):
            cluster["cluster"]["server"] = address
    text = yaml.safe_dump(config, sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": kubeconfig_copy_name(target.id),
            "namespace": SYSTEM_NAMESPACE,
            "labels": target.labels,
        },
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def admin_kubeconfig(name: str, address: str, access: AdminAccess) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": address, "certificate-authority-data": _b64(access.ca_pem)},
            }
        ],
        "users": [
            {
                "name": f"{name}-admin",
                "user": {
                    "client-certificate-data": _b64(access.client_certificate_pem),
                    "client-key-data": _b64(access.client_key_pem),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
        "current-context": name,
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


# -- inside the vCluster --------------------------------------------------------


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
    namespaces: Iterable[str], used: Mapping[str, Used], cpu: float, memory_mib: int
) -> list[dict[str, Any]]:
    """Per namespace: defaults and a quota of `used here + (quota - used everywhere)`."""
    total_cpu = sum(u.cpu for u in used.values())
    total_memory = sum(u.memory_mib for u in used.values())
    free_cpu = max(0.0, cpu - total_cpu)
    free_memory = max(0.0, memory_mib - total_memory)
    objects: list[dict[str, Any]] = []
    for namespace in namespaces:
        here = used.get(namespace, Used(0.0, 0.0))
        objects.append(_limit_range(MANAGED_BY, namespace))
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


def flux_objects(text: str) -> list[dict[str, Any]]:
    """The Flux install manifests, CRDs first, then namespaces, then the rest in order.
    ValueError when the text is not Kubernetes YAML."""
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc]
    except yaml.YAMLError as bad:
        raise ValueError("the Flux manifests are not valid YAML") from bad
    objects: list[dict[str, Any]] = []
    for document in documents:
        if not isinstance(document, dict) or not document.get("kind"):
            raise ValueError("the Flux manifests hold something that is not a Kubernetes object")
        if document["kind"].endswith("List"):
            objects.extend(item for item in document.get("items") or [] if isinstance(item, dict))
        else:
            objects.append(document)
    first = {"CustomResourceDefinition": 0, "Namespace": 1}
    return sorted(objects, key=lambda obj: first.get(obj["kind"], 2))


def flux_installed(deployments: Iterable[Mapping[str, Any]]) -> bool:
    found = list(deployments)
    return bool(found) and all(
        ((d.get("status") or {}).get("availableReplicas") or 0) >= 1 for d in found
    )


def tenant_kubeconfig(name: str, address: str, ca_pem: str, token: str) -> str:
    """A kubeconfig for the tenant: the vCluster's CA, a short-lived token, no certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": address, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": TENANT_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": TENANT_ACCOUNT}}],
        "current-context": name,
    }
    return yaml.safe_dump(config, sort_keys=False)
