"""A CloudSpace's settings, and the names of its objects on the host and inside its vCluster."""

from __future__ import annotations

import re
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


# The vCluster chart (README "CloudSpaces": why 0.36.1) and Flux's manifests, as OCI
# artifacts; an air-gapped site points these settings at its mirror.
DEFAULT_CHART_URL = "https://charts.loft.sh"


DEFAULT_CHART_VERSION = "0.36.1"


DEFAULT_FLUX_MANIFESTS_URL = "oci://ghcr.io/fluxcd/flux-manifests"


DEFAULT_FLUX_MANIFESTS_TAG = "v2.9.4"


# What Flux v2.9.4's seven controllers ask for inside each vCluster (their pods run in the
# host namespace, so the host quota must make room for them beside the tenant's quota):
# requests 50m+5x100m+50m cpu and 64Mi each, limits 1 cpu and 1Gi each.
FLUX_REQUESTS_CPU = 0.6


FLUX_REQUESTS_MEMORY_MIB = 7 * 64


FLUX_LIMITS_CPU = 7.0


FLUX_LIMITS_MEMORY_MIB = 7 * 1024


# A container's default limit is this many times its default request (500m for 100m), so a
# tenant whose pods fill the quota with defaults stays within the host's limits quota.
LIMIT_RATIO = 5


# Helm refuses release names over 53 characters; the StatefulSet's pods carry the label
# `controller-revision-hash: <name>-<10 characters>`, at most 63: 52 is what both allow.
MAX_VCLUSTER_NAME = 52


@dataclass(frozen=True)
class CloudSpaceSettings:
    """The SPACEDOCK_* settings of CloudSpaces (README "Settings")."""

    default_host_space: str | None = None
    default_cpu: float = 2.0
    default_memory_mib: int = 4096
    control_plane_cpu: float = 0.5
    control_plane_memory_mib: int = 512
    vcluster_url_template: str | None = None
    vcluster_chart_url: str = DEFAULT_CHART_URL
    vcluster_chart_version: str = DEFAULT_CHART_VERSION
    flux_manifests_url: str = DEFAULT_FLUX_MANIFESTS_URL
    flux_manifests_tag: str = DEFAULT_FLUX_MANIFESTS_TAG
    # A registry mirror (`registry.example:5000/vcluster`) the vCluster's images come from
    # (the chart's controlPlane.advanced.defaultImageRegistry); None: the chart's registries.
    vcluster_image_registry: str | None = None
    reconcile_interval_s: float = 30.0
    # How long a reconciler holds a CloudSpace between renewals (core.cloudspaces.reconciler).
    reconcile_lease_s: float = 30.0
    kubeconfig_ttl_s: int = 3600
    # Strict quota (issue 22): the HTTPS address under which the vClusters reach spacedock's
    # admission webhook, and the CA of its certificate (None: the system roots). Without
    # the address no webhook is registered and the headroom quotas alone apply.
    admission_url: str | None = None
    admission_ca_pem: str | None = None

    # What each vCluster needs on the host beyond its tenant's quota: its control plane and
    # Flux's controllers inside it (their pods run in the host namespace). The host quota
    # (core.cloudspaces.chart) and the host's capacity (core.cloudspaces.capacity) count it.
    @property
    def vcluster_overhead_cpu(self) -> float:
        return self.control_plane_cpu + FLUX_REQUESTS_CPU

    @property
    def vcluster_overhead_memory_mib(self) -> int:
        return self.control_plane_memory_mib + FLUX_REQUESTS_MEMORY_MIB


# How an image reference starts: a registry host[:port], then lowercase path components.
IMAGE_REGISTRY = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
)


def image_registry(text: str) -> str:
    """A registry (and path) the chart can put before its images; ValueError saying why not."""
    found = text.rstrip("/")
    if not IMAGE_REGISTRY.fullmatch(found):
        raise ValueError(
            "must be a registry host with an optional port and path, no scheme "
            f"(e.g. registry.example:5000/vcluster), got {text!r}"
        )
    return found


def key_of(cloud_space_id: str) -> str:
    """The DNS-1123-safe form of an id that names a CloudSpace's objects, without the id's
    own `cs_` prefix (the names add their own: `cs-<key>`, not `cs-cs-<key>`)."""
    return cloud_space_id.lower().removeprefix("cs_").replace("_", "-")


def host_namespace(cloud_space_id: str) -> str:
    return f"cs-{key_of(cloud_space_id)}"


def kubeconfig_copy_name(cloud_space_id: str, vcluster: str | None = None) -> str:
    """The platform admins' copy of a vCluster's kubeconfig; `vcluster` None for the one
    named like its CloudSpace (the name it had when a CloudSpace had one vCluster)."""
    if vcluster is None:
        return f"tenant-{key_of(cloud_space_id)}-kubeconfig"
    return f"tenant-{key_of(cloud_space_id)}-{vcluster}-kubeconfig"


def admin_secret_name(name: str) -> str:
    return f"vc-{name}"
