"""A CloudSpace's settings, and the names of its objects on the host and inside its vCluster."""

from __future__ import annotations

from dataclasses import dataclass

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
    # How long a reconciler holds a CloudSpace between renewals (core.cloudspaces.reconciler).
    reconcile_lease_s: float = 30.0
    kubeconfig_ttl_s: int = 3600
    # Strict quota (issue 22): the HTTPS address under which the vClusters reach spacedock's
    # admission webhook, and the CA of its certificate (None: the system roots). Without
    # the address no webhook is registered and the headroom quotas alone apply.
    admission_url: str | None = None
    admission_ca_pem: str | None = None


def key_of(cloud_space_id: str) -> str:
    """The DNS-1123-safe form of an id that names a CloudSpace's objects."""
    return cloud_space_id.lower().replace("_", "-")


def host_namespace(cloud_space_id: str) -> str:
    return f"cs-{key_of(cloud_space_id)}"


def kubeconfig_copy_name(cloud_space_id: str) -> str:
    return f"tenant-{key_of(cloud_space_id)}-kubeconfig"


def admin_secret_name(name: str) -> str:
    return f"vc-{name}"
