"""The SPACEDOCK_* variables as api/settings.py reads them: values as the README gives them,
an empty value as unset, and every refusal naming its variable."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.settings import Settings
from api.settings_values import SettingsError
from sim.pki import CertificateAuthority


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in os.environ:
        if name.startswith("SPACEDOCK_"):
            monkeypatch.delenv(name)
    yield monkeypatch


def test_values_are_read_from_their_variables(env: pytest.MonkeyPatch) -> None:
    env.setenv("SPACEDOCK_PORT", "9000")
    env.setenv("SPACEDOCK_PROBE_INTERVAL_S", "1.5")
    env.setenv("SPACEDOCK_CLUSTER_DENY_CIDRS", "10.0.0.0/8, fd00::/8,")
    env.setenv("SPACEDOCK_AMBIENT_CREDENTIAL_ORGS", "acme, , globex")
    env.setenv("SPACEDOCK_CORS_ORIGINS", "HTTP://LocalHost:80, https://app.example:8443")
    env.setenv("SPACEDOCK_RECONCILE_INTERVAL_S", "7")
    env.setenv("SPACEDOCK_RECONCILE_LEASE_S", "12")
    env.setenv("SPACEDOCK_VCLUSTER_URL_TEMPLATE", "https://{name}.{namespace}.example")
    settings = Settings.from_env()
    assert (settings.port, settings.probe_interval_s) == (9000, 1.5)
    assert settings.cluster_deny_cidrs == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert settings.ambient_credential_orgs == frozenset({"acme", "globex"})
    assert settings.cors_origins == ("http://localhost", "https://app.example:8443")
    assert settings.cloudspaces.reconcile_interval_s == 7
    assert settings.cloudspaces.reconcile_lease_s == 12
    assert settings.cloudspaces.vcluster_url_template == "https://{name}.{namespace}.example"


def test_an_empty_value_is_the_default(env: pytest.MonkeyPatch) -> None:
    defaults = Settings.from_env()
    for name in (
        "SPACEDOCK_HOST",
        "SPACEDOCK_PORT",
        "SPACEDOCK_OIDC_ORG_CLAIM",
        "SPACEDOCK_SECRET_KEY",
    ):
        env.setenv(name, "")
    assert Settings.from_env() == defaults
    assert (defaults.host, defaults.port, defaults.oidc_org_claim) == ("127.0.0.1", 8000, "org")
    assert defaults.secret_key is None


REFUSED = {
    "SPACEDOCK_PROBE_INTERVAL_S=soon": "SPACEDOCK_PROBE_INTERVAL_S must be a number, got 'soon'",
    "SPACEDOCK_PROBE_TIMEOUT_S=0": "SPACEDOCK_PROBE_TIMEOUT_S must be greater than 0, got '0'",
    "SPACEDOCK_PORT=80.5": "SPACEDOCK_PORT must be a whole number, got '80.5'",
    "SPACEDOCK_TOKEN_CACHE_TTL_S=0.05": "SPACEDOCK_TOKEN_CACHE_TTL_S must be greater than 0.1",
    "SPACEDOCK_KUBECONFIG_TTL_S=500": "SPACEDOCK_KUBECONFIG_TTL_S must be greater than 599",
    "SPACEDOCK_RECONCILE_LEASE_S=0.5": "SPACEDOCK_RECONCILE_LEASE_S must be greater than 0.5",
    "SPACEDOCK_CLUSTER_DENY_CIDRS=10.0.0.0/8,bad": "SPACEDOCK_CLUSTER_DENY_CIDRS must be "
    "comma-separated CIDRs",
    "SPACEDOCK_CORS_ORIGINS=http://x.example/path": "SPACEDOCK_CORS_ORIGINS must be "
    "comma-separated origins",
    "SPACEDOCK_OIDC_ISSUER=https://issuer.example": "SPACEDOCK_OIDC_AUDIENCE must be set with "
    "SPACEDOCK_OIDC_ISSUER",
    "SPACEDOCK_VCLUSTER_URL_TEMPLATE=http://{name}": "SPACEDOCK_VCLUSTER_URL_TEMPLATE must be "
    "an https:// URL template",
    "SPACEDOCK_VCLUSTER_URL_TEMPLATE=https://{pod}": "SPACEDOCK_VCLUSTER_URL_TEMPLATE may only "
    "use {name}, {namespace} and {id}",
    "SPACEDOCK_VCLUSTER_IMAGE_REGISTRY=https://registry.example": "SPACEDOCK_VCLUSTER_IMAGE_"
    "REGISTRY must be a registry host with an optional port and path, no scheme",
    "SPACEDOCK_VCLUSTER_IMAGE_REGISTRY=registry.example/Loft": "SPACEDOCK_VCLUSTER_IMAGE_"
    "REGISTRY must be a registry host with an optional port and path",
    "SPACEDOCK_ADMISSION_URL=http://spacedock.example": "SPACEDOCK_ADMISSION_URL must be a "
    "https:// URL, got 'http://spacedock.example'",
    "SPACEDOCK_ADMISSION_URL=https://spacedock.example/?x=1": "SPACEDOCK_ADMISSION_URL must have "
    "no query",
    "SPACEDOCK_ADMISSION_CA_FILE=/nonexistent/ca.pem": "SPACEDOCK_ADMISSION_CA_FILE cannot be "
    "read (/nonexistent/ca.pem): No such file or directory",
    "SPACEDOCK_ADMISSION_CA_FILE=/etc/hostname": "SPACEDOCK_ADMISSION_CA_FILE must name a PEM "
    "file of CA certificates",
    "SPACEDOCK_PUBLIC_URL=ftp://spacedock.example": "SPACEDOCK_PUBLIC_URL must be a http:// or "
    "https:// URL",
    "SPACEDOCK_VCLUSTER_CHART_URL=ftp://charts.example": "SPACEDOCK_VCLUSTER_CHART_URL must be a "
    "https:// or http:// or oci:// URL",
    "SPACEDOCK_FLUX_MANIFESTS_URL=https://ghcr.io/fluxcd": "SPACEDOCK_FLUX_MANIFESTS_URL must be "
    "a oci:// URL",
    # Retired settings, still set: refused, naming what replaced them.
    "SPACEDOCK_FLUX_MANIFESTS=https://github.com/fluxcd/flux2/releases/download/v2.4.0/"
    "install.yaml": "SPACEDOCK_FLUX_MANIFESTS is no longer read: Flux is installed into each "
    "vCluster by the host's Flux from an OCI artifact; set SPACEDOCK_FLUX_MANIFESTS_URL",
    "SPACEDOCK_VCLUSTER_IMAGE=ghcr.io/loft-sh/vcluster:0.19.7": "SPACEDOCK_VCLUSTER_IMAGE is no "
    "longer read: the vCluster comes from its Helm chart, which pins its images; set "
    "SPACEDOCK_VCLUSTER_CHART_VERSION",
}


def test_the_chart_and_flux_manifests_come_from_their_settings(env: pytest.MonkeyPatch) -> None:
    defaults = Settings.from_env().cloudspaces
    assert (defaults.vcluster_chart_url, defaults.vcluster_chart_version) == (
        "https://charts.loft.sh",
        "0.36.1",
    )
    assert (defaults.flux_manifests_url, defaults.flux_manifests_tag) == (
        "oci://ghcr.io/fluxcd/flux-manifests",
        "v2.9.4",
    )
    # An air-gapped site's mirrors.
    env.setenv("SPACEDOCK_VCLUSTER_CHART_URL", "oci://registry.example/charts/")
    env.setenv("SPACEDOCK_FLUX_MANIFESTS_URL", "oci://registry.example/fluxcd/flux-manifests")
    env.setenv("SPACEDOCK_FLUX_MANIFESTS_TAG", "v2.9.4")
    env.setenv("SPACEDOCK_VCLUSTER_IMAGE_REGISTRY", "registry.example:5000/vcluster/")
    mirrored = Settings.from_env().cloudspaces
    assert mirrored.vcluster_chart_url == "oci://registry.example/charts"
    assert mirrored.vcluster_image_registry == "registry.example:5000/vcluster"
    assert defaults.vcluster_image_registry is None  # the chart's own registries
    assert mirrored.flux_manifests_url == "oci://registry.example/fluxcd/flux-manifests"


def test_the_admission_address_and_its_ca_reach_the_cloudspace_settings(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text(CertificateAuthority().pem)
    env.setenv("SPACEDOCK_ADMISSION_URL", "https://spacedock.example/sd/")
    env.setenv("SPACEDOCK_ADMISSION_CA_FILE", str(ca))
    env.setenv("SPACEDOCK_PUBLIC_URL", "https://spacedock.example/")
    settings = Settings.from_env()
    assert settings.cloudspaces.admission_url == "https://spacedock.example/sd"
    assert settings.cloudspaces.admission_ca_pem == ca.read_text()
    assert settings.public_url == "https://spacedock.example"
    env.delenv("SPACEDOCK_ADMISSION_URL")  # unset: no webhook is registered
    assert Settings.from_env().cloudspaces.admission_url is None


@pytest.mark.parametrize("given", REFUSED)
def test_a_refusal_names_the_variable(env: pytest.MonkeyPatch, given: str) -> None:
    name, _, value = given.partition("=")
    env.setenv(name, value)
    with pytest.raises(SettingsError) as refused:
        Settings.from_env()
    assert str(refused.value).startswith(REFUSED[given])
