"""The settings that govern CloudSpaces (SPACEDOCK_DEFAULT_*, SPACEDOCK_VCLUSTER_*,
SPACEDOCK_FLUX_*, SPACEDOCK_RECONCILE_*, SPACEDOCK_KUBECONFIG_TTL_S and strict quota's
SPACEDOCK_ADMISSION_*): one part of api.settings.Settings, which builds
core.cloudspaces.settings.CloudSpaceSettings from them; also the retired variables they
replaced, refused at start."""

from __future__ import annotations

from pydantic import BaseModel, field_validator

from api.settings_values import address, pem_of, setting
from core.cloudspaces.settings import (
    DEFAULT_CHART_URL,
    DEFAULT_CHART_VERSION,
    DEFAULT_FLUX_MANIFESTS_TAG,
    DEFAULT_FLUX_MANIFESTS_URL,
    CloudSpaceSettings,
    image_registry,
)

# Settings spacedock no longer reads, and what replaced them: one still set is refused at
# start, so an operator does not believe it still applies.
RETIRED = {
    "SPACEDOCK_FLUX_MANIFESTS": (
        "Flux is installed into each vCluster by the host's Flux from an OCI artifact; set "
        "SPACEDOCK_FLUX_MANIFESTS_URL (an oci:// URL, default "
        f"{DEFAULT_FLUX_MANIFESTS_URL}) and SPACEDOCK_FLUX_MANIFESTS_TAG (default "
        f"{DEFAULT_FLUX_MANIFESTS_TAG}) instead, and unset it"
    ),
    "SPACEDOCK_VCLUSTER_IMAGE": (
        "the vCluster comes from its Helm chart, which pins its images; set "
        f"SPACEDOCK_VCLUSTER_CHART_VERSION (default {DEFAULT_CHART_VERSION}) and "
        "SPACEDOCK_VCLUSTER_CHART_URL instead, and unset it"
    ),
}


class CloudSpaceVariables(BaseModel):
    """CloudSpaces (core.cloudspaces.settings.CloudSpaceSettings, built by `cloudspaces`)."""

    default_host_space: str | None = setting(None, "SPACEDOCK_DEFAULT_HOST_SPACE")
    default_cloudspace_cpu: float = setting(2.0, "SPACEDOCK_DEFAULT_CLOUDSPACE_CPU", 0)
    default_cloudspace_memory_mib: int = setting(4096, "SPACEDOCK_DEFAULT_CLOUDSPACE_MEMORY_MIB", 0)
    vcluster_control_plane_cpu: float = setting(0.5, "SPACEDOCK_VCLUSTER_CONTROL_PLANE_CPU", 0)
    vcluster_control_plane_memory_mib: int = setting(
        512, "SPACEDOCK_VCLUSTER_CONTROL_PLANE_MEMORY_MIB", 0
    )
    vcluster_url_template: str | None = setting(None, "SPACEDOCK_VCLUSTER_URL_TEMPLATE")
    # Issue 22: the vCluster chart and Flux's manifests, delivered by the host's Flux; an
    # air-gapped site points them at its mirror.
    vcluster_chart_url: str = setting(DEFAULT_CHART_URL, "SPACEDOCK_VCLUSTER_CHART_URL")
    vcluster_chart_version: str = setting(DEFAULT_CHART_VERSION, "SPACEDOCK_VCLUSTER_CHART_VERSION")
    flux_manifests_url: str = setting(DEFAULT_FLUX_MANIFESTS_URL, "SPACEDOCK_FLUX_MANIFESTS_URL")
    flux_manifests_tag: str = setting(DEFAULT_FLUX_MANIFESTS_TAG, "SPACEDOCK_FLUX_MANIFESTS_TAG")
    # An air-gapped site's mirror of the vCluster's images (the chart's defaultImageRegistry).
    vcluster_image_registry: str | None = setting(None, "SPACEDOCK_VCLUSTER_IMAGE_REGISTRY")
    reconcile_interval_s: float = setting(30.0, "SPACEDOCK_RECONCILE_INTERVAL_S", 0)
    reconcile_lease_s: float = setting(30.0, "SPACEDOCK_RECONCILE_LEASE_S", 0.5)
    # The API server refuses TokenRequests shorter than 10 minutes.
    kubeconfig_ttl_s: int = setting(3600, "SPACEDOCK_KUBECONFIG_TTL_S", 599)
    # Strict quota at admission (issue 22): spacedock's address as the vClusters reach it
    # (the API server calls webhooks over HTTPS only) and the CA file of its certificate.
    admission_url: str | None = setting(None, "SPACEDOCK_ADMISSION_URL")
    admission_ca_file: str | None = setting(None, "SPACEDOCK_ADMISSION_CA_FILE")

    @field_validator("vcluster_url_template")
    @classmethod
    def _url_template(cls, template: str | None) -> str | None:
        if template is None:
            return None
        if not template.startswith("https://"):
            raise ValueError("must be an https:// URL template")
        try:
            template.format(name="n", namespace="ns", id="id")
        except (KeyError, IndexError, ValueError):
            raise ValueError("may only use {name}, {namespace} and {id}") from None
        return template

    @field_validator("vcluster_chart_url")
    @classmethod
    def _chart_url(cls, url: str) -> str:
        # What a HelmRepository takes: a Helm repository over http(s), or an OCI registry.
        found = address(url, ("https", "http", "oci"))
        assert found is not None
        return found

    @field_validator("vcluster_image_registry")
    @classmethod
    def _image_registry(cls, registry: str | None) -> str | None:
        return None if registry is None else image_registry(registry)

    @field_validator("flux_manifests_url")
    @classmethod
    def _manifests_url(cls, url: str) -> str:
        found = address(url, ("oci",))  # an OCIRepository's URL
        assert found is not None
        return found

    @field_validator("admission_url")
    @classmethod
    def _admission_url(cls, url: str | None) -> str | None:
        # The API server calls webhooks over HTTPS only.
        return address(url, ("https",))

    @field_validator("admission_ca_file")
    @classmethod
    def _admission_ca(cls, path: str | None) -> str | None:
        if path is not None:
            pem_of(path)
        return path

    @property
    def cloudspaces(self) -> CloudSpaceSettings:
        return CloudSpaceSettings(
            default_host_space=self.default_host_space,
            default_cpu=self.default_cloudspace_cpu,
            default_memory_mib=self.default_cloudspace_memory_mib,
            control_plane_cpu=self.vcluster_control_plane_cpu,
            control_plane_memory_mib=self.vcluster_control_plane_memory_mib,
            vcluster_url_template=self.vcluster_url_template,
            vcluster_chart_url=self.vcluster_chart_url,
            vcluster_chart_version=self.vcluster_chart_version,
            flux_manifests_url=self.flux_manifests_url,
            flux_manifests_tag=self.flux_manifests_tag,
            vcluster_image_registry=self.vcluster_image_registry,
            reconcile_interval_s=self.reconcile_interval_s,
            reconcile_lease_s=self.reconcile_lease_s,
            kubeconfig_ttl_s=self.kubeconfig_ttl_s,
            admission_url=self.admission_url,
            admission_ca_pem=None
            if self.admission_ca_file is None
            else pem_of(self.admission_ca_file),
        )
