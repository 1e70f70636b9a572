"""The Flux objects spacedock writes into a CloudSpace's host namespace: the vCluster from
its official chart (a HelmRepository and a HelmRelease whose values come from
`release_values`), and Flux into the vCluster (an OCIRepository of Flux's manifests and a
Kustomization that applies them through the vCluster's exported kubeconfig); and how to
read their conditions (README "CloudSpaces").

spacedock never renders the chart's templates itself: the host's helm-controller does,
so what runs is what the chart's authors ship. Everything here is pure; the reconciler's
steps (core.cloudspaces.steps) decide when to apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from core.cloudspaces.quantities import cpu_text, memory_text
from core.cloudspaces.settings import (
    DEFAULT_LIMIT,
    DEFAULT_REQUEST,
    FLUX_LIMITS_CPU,
    FLUX_LIMITS_MEMORY_MIB,
    LIMIT_RATIO,
    CloudSpaceSettings,
    admin_secret_name,
)
from core.cloudspaces.vclusters import Target

SOURCE_API = "source.toolkit.fluxcd.io/v1"
HELM_API = "helm.toolkit.fluxcd.io/v2"
KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"
CHART_REPOSITORY = "vcluster-charts"
FLUX_SOURCE = "flux-manifests"
# The CRDs a host needs for all of this; without them the host is refused.
FLUX_CRDS = (
    "helmrepositories.source.toolkit.fluxcd.io",
    "ocirepositories.source.toolkit.fluxcd.io",
    "helmreleases.helm.toolkit.fluxcd.io",
    "kustomizations.kustomize.toolkit.fluxcd.io",
)
MISSING_FLUX = (
    "PRECONDITION_FAILED: the host space does not run Flux (missing CRDs: {missing}); install "
    "Flux's source-, helm- and kustomize-controller on it (`flux install` or the "
    "flux-manifests OCI artifact) and the CloudSpace is retried"
)


def _meta(target: Target, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": target.namespace, "labels": target.labels}


def host_of(address: str) -> str:
    """The host name or IP address of a URL, as a TLS SAN names it."""
    return urlsplit(address).hostname or address


def release_values(
    settings: CloudSpaceSettings, target: Target, address: str | None
) -> dict[str, Any]:
    """The vCluster chart's values for one vCluster: the one place they are made.

    `address` is where tenants (and the host's Flux) reach the vCluster; None while a
    LoadBalancer has none yet (the release is upgraded once it has)."""
    control_cpu = cpu_text(settings.control_plane_cpu)
    control_memory = memory_text(settings.control_plane_memory_mib)
    # The host quota holds the tenant's quota, Flux's controllers inside each vCluster and
    # each control plane: requests exactly, limits at the LimitRange's ratio for the tenant.
    # Every vCluster's release puts its own quota on the one host namespace, and each such
    # quota bounds the whole namespace: each is sized for all the vClusters there.
    count = target.vclusters
    requests_cpu = target.cpu + count * settings.vcluster_overhead_cpu
    requests_memory = target.memory_mib + count * settings.vcluster_overhead_memory_mib
    limits_cpu = LIMIT_RATIO * target.cpu + count * (FLUX_LIMITS_CPU + settings.control_plane_cpu)
    limits_memory = LIMIT_RATIO * target.memory_mib + count * (
        FLUX_LIMITS_MEMORY_MIB + settings.control_plane_memory_mib
    )
    values: dict[str, Any] = {
        "controlPlane": {
            # 0.36 ships one distro, vanilla Kubernetes (k3s and k0s were removed).
            "distro": {"k8s": {"enabled": True}},
            "statefulSet": {
                "resources": {
                    "requests": {"cpu": control_cpu, "memory": control_memory},
                    "limits": {"cpu": control_cpu, "memory": control_memory},
                },
                # The embedded database on a volume: a restart keeps every object and the CA.
                "persistence": {"volumeClaim": {"enabled": True}},
            },
            "service": {
                "spec": {"type": "ClusterIP" if settings.vcluster_url_template else "LoadBalancer"}
            },
        },
        "policies": {
            "resourceQuota": {
                "enabled": True,
                "quota": {
                    "requests.cpu": cpu_text(requests_cpu),
                    "requests.memory": memory_text(requests_memory),
                    "limits.cpu": cpu_text(limits_cpu),
                    "limits.memory": memory_text(limits_memory),
                },
            },
            "limitRange": {
                "enabled": True,
                "default": dict(DEFAULT_LIMIT),
                "defaultRequest": dict(DEFAULT_REQUEST),
            },
            "networkPolicy": {"enabled": True},
        },
        "telemetry": {"enabled": False},
    }
    if settings.vcluster_image_registry is not None:
        # The chart's own switch: every image it deploys is pulled from this prefix.
        values["controlPlane"]["advanced"] = {
            "defaultImageRegistry": settings.vcluster_image_registry
        }
    if address is not None:
        values["controlPlane"]["proxy"] = {"extraSANs": [host_of(address)]}
        # The syncer writes vc-<name> with this server; spacedock and the host's Flux read it.
        values["exportKubeConfig"] = {"server": address, "context": target.name}
    return values


def chart_repository(settings: CloudSpaceSettings, target: Target) -> dict[str, Any]:
    """Where the chart comes from: an https Helm repository or an OCI registry (a mirror)."""
    spec: dict[str, Any] = {"url": settings.vcluster_chart_url, "interval": "1h"}
    if settings.vcluster_chart_url.startswith("oci://"):
        spec["type"] = "oci"
    return {
        "apiVersion": SOURCE_API,
        "kind": "HelmRepository",
        "metadata": _meta(target, CHART_REPOSITORY),
        "spec": spec,
    }


def helm_release(
    settings: CloudSpaceSettings, target: Target, address: str | None
) -> dict[str, Any]:
    return {
        "apiVersion": HELM_API,
        "kind": "HelmRelease",
        "metadata": _meta(target, target.name),
        "spec": {
            "interval": "10m",
            "releaseName": target.name,
            "chart": {
                "spec": {
                    "chart": "vcluster",
                    "version": settings.vcluster_chart_version,
                    "sourceRef": {"kind": "HelmRepository", "name": CHART_REPOSITORY},
                }
            },
            "install": {"remediation": {"retries": 3}},
            "upgrade": {"remediation": {"retries": 3}},
            "values": release_values(settings, target, address),
        },
    }


def release_differs(applied: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether the applied HelmRelease's chart version or values are not the wanted ones."""
    if applied is None:
        return True
    spec, wanted_spec = applied.get("spec") or {}, wanted["spec"]
    version = ((spec.get("chart") or {}).get("spec") or {}).get("version")
    return bool(
        spec.get("values") != wanted_spec["values"]
        or version != wanted_spec["chart"]["spec"]["version"]
    )


def release_server(release: Mapping[str, Any] | None) -> str | None:
    """The server the applied release exports its kubeconfig with."""
    values = ((release or {}).get("spec") or {}).get("values") or {}
    server = (values.get("exportKubeConfig") or {}).get("server")
    return server if isinstance(server, str) and server else None


def flux_source(settings: CloudSpaceSettings, target: Target) -> dict[str, Any]:
    return {
        "apiVersion": SOURCE_API,
        "kind": "OCIRepository",
        "metadata": _meta(target, FLUX_SOURCE),
        "spec": {
            "interval": "1h",
            "url": settings.flux_manifests_url,
            "ref": {"tag": settings.flux_manifests_tag},
        },
    }


def flux_kustomization_name(target: Target) -> str:
    return f"{target.name}-flux"


def flux_kustomization(target: Target) -> dict[str, Any]:
    """Flux's manifests applied into the vCluster by the host's kustomize-controller."""
    return {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": _meta(target, flux_kustomization_name(target)),
        "spec": {
            "interval": "10m",
            "timeout": "5m",
            "path": "./",
            # Prune: a Flux upgrade removes what the new manifests no longer hold.
            "prune": True,
            # Ready only once Flux's Deployments inside are available.
            "wait": True,
            "sourceRef": {"kind": "OCIRepository", "name": FLUX_SOURCE},
            "kubeConfig": {"secretRef": {"name": admin_secret_name(target.name), "key": "config"}},
        },
    }


@dataclass(frozen=True)
class Condition:
    """What a Flux object's conditions say at its current generation."""

    ready: bool
    failed: bool
    message: str | None
    # Stalled: helm-controller spent the remediation retries and tries no more by itself.
    stalled: bool = False


# helm-controller (v2 API) clears a HelmRelease's failure counts, so that a Stalled release
# (RetriesExceeded) is tried again, when `reconcile.fluxcd.io/resetAt` equals
# `reconcile.fluxcd.io/requestedAt` and both are new (`flux reconcile hr --reset`).
RESET_AT = "reconcile.fluxcd.io/resetAt"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


def reset_request(at: datetime) -> dict[str, str]:
    """The annotations that reset a Stalled HelmRelease, with a token of this moment."""
    token = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {RESET_AT: token, REQUESTED_AT: token}


# Ready=False reasons that are failures, not steps on the way (Flux retries them on its
# interval; the CloudSpace shows FAILED with Flux's words meanwhile and is retried too).
HELM_FAILURES = frozenset({"InstallFailed", "UpgradeFailed", "ValuesError"})
KUSTOMIZE_FAILURES = frozenset({"ReconciliationFailed", "BuildFailed", "HealthCheckFailed"})


def condition_of(
    obj: Mapping[str, Any] | None, failures: frozenset[str] = HELM_FAILURES
) -> Condition:
    """Ready=True at the current generation; failed when Stalled, or Ready=False with one of
    `failures`; else still in progress (with Flux's message, if any)."""
    if obj is None:
        return Condition(False, False, None)
    generation = (obj.get("metadata") or {}).get("generation")
    status = obj.get("status") or {}
    conditions = {
        c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)
    }
    ready = conditions.get("Ready") or {}
    message = str(ready.get("message") or "")[:1000] or None
    current = generation is None or status.get("observedGeneration") == generation
    if not current:
        return Condition(False, False, None)
    if ready.get("status") == "True":
        return Condition(True, False, message)
    stalled = (conditions.get("Stalled") or {}).get("status") == "True"
    if ready.get("status") == "False" and (stalled or ready.get("reason") in failures):
        return Condition(False, True, message, stalled)
    return Condition(False, False, message)


def flux_deployments_available(deployments: Sequence[Mapping[str, Any]]) -> bool:
    """Flux's controllers inside are available at their current generation, as `flux
    check` reads them."""
    if not deployments:
        return False
    for deployment in deployments:
        generation = (deployment.get("metadata") or {}).get("generation")
        status = deployment.get("status") or {}
        if generation is not None and status.get("observedGeneration") != generation:
            return False
        available = {
            c.get("type"): c.get("status")
            for c in status.get("conditions") or []
            if isinstance(c, Mapping)
        }.get("Available")
        if available != "True" and not (status.get("availableReplicas") or 0) >= 1:
            return False
    return True
