"""A vCluster's kubeconfigs: the admin access read from its Secret (never stored, never
returned), the platform admins' copy, and the tenant's kubeconfig with a short-lived token."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from core.cloudspaces.settings import SYSTEM_NAMESPACE, key_of
from core.cloudspaces.vclusters import Target


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
            "name": target.copy_name,
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


# The namespace a downloaded kubeconfig's context starts in.
CONTEXT_NAMESPACE = "default"


def kubeconfig_names(cloud_space_id: str, vcluster: str) -> tuple[str, str, str]:
    """Cluster, user and context names of a tenant kubeconfig: unique per CloudSpace and
    vCluster (the CloudSpace's key is unique across orgs), so several files merge
    (`KUBECONFIG=a:b`) without one entry hiding another."""
    base = f"spacedock-{key_of(cloud_space_id)}-{vcluster}"
    return base, f"{base}-tenant", base


@dataclass(frozen=True)
class ExecPlugin:
    """The kubeconfig's user runs `spacedock kubeconfig-token` for each fresh token."""

    spacedock_url: str
    token_file: str | None = None


INSTALL_HINT = (
    "This kubeconfig runs `spacedock kubeconfig-token` for its token. Install spacedock "
    "(the package serving this API) where kubectl runs, and give it your spacedock API token "
    "in SPACEDOCK_TOKEN, or in the file ~/.config/spacedock/token (or SPACEDOCK_TOKEN_FILE)."
)


def exec_user(cloud_space_id: str, vcluster: str, plugin: ExecPlugin) -> dict[str, Any]:
    """A client.authentication.k8s.io/v1 exec credential plugin: kubectl asks it for a
    token when it has none or the last one expired (or was refused), never storing one
    in the file. The person's own API token is read where they keep it."""
    args = [
        "kubeconfig-token",
        "--server",
        plugin.spacedock_url,
        "--cloud-space",
        cloud_space_id,
        "--vcluster",
        vcluster,
    ]
    if plugin.token_file is not None:
        args += ["--token-file", plugin.token_file]
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "spacedock",
            "args": args,
            "interactiveMode": "Never",
            "provideClusterInfo": False,
            "installHint": INSTALL_HINT,
        }
    }


def tenant_kubeconfig(
    cloud_space_id: str, vcluster: str, address: str, ca_pem: str, user: dict[str, Any]
) -> str:
    """A kubeconfig for the tenant: the vCluster's CA and `user` (a short-lived token, or
    the exec plugin that fetches one), never a certificate."""
    cluster, user_name, context = kubeconfig_names(cloud_space_id, vcluster)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": address, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user_name, "user": user}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": cluster, "user": user_name, "namespace": CONTEXT_NAMESPACE},
            }
        ],
        "current-context": context,
    }
    return yaml.safe_dump(config, sort_keys=False)


def exec_credential(token: str, expires_at: datetime) -> dict[str, Any]:
    """What `spacedock kubeconfig-token` hands kubectl: a client.authentication.k8s.io/v1
    ExecCredential; kubectl asks again once `expirationTimestamp` has passed."""
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "token": token,
            "expirationTimestamp": expires_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
