"""The values spacedock gives the vCluster chart pass the pinned chart's own schema
(0.36.1's values.schema.json, copied from loft-sh/vcluster `chart/` at tag v0.36.1 into
tests/support/upstream/vcluster/), coalesced over its values.yaml as Helm does; and the
schema is strict enough that a key the chart does not know fails (issue 22)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from core.cloudspaces import chart
from core.cloudspaces.quantities import cores_of, mib_of
from core.cloudspaces.settings import (
    DEFAULT_CHART_VERSION,
    FLUX_LIMITS_CPU,
    FLUX_REQUESTS_CPU,
    CloudSpaceSettings,
)
from core.cloudspaces.vclusters import Target
from sim import vcluster_chart

TARGET = Target(id="cs_0123456789abcdef", name="team-a", cpu=4.0, memory_mib=8192)
TEMPLATE = "https://vc.example.com/{namespace}/{name}"


def problems(values: dict[str, Any]) -> list[str]:
    """What the pinned chart's schema says of these values, coalesced over its defaults."""
    merged = vcluster_chart.coalesce(vcluster_chart.default_values(), values)
    validator = jsonschema.Draft202012Validator(vcluster_chart.values_schema())
    return sorted(
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(merged)
    )


@pytest.mark.parametrize(
    ("template", "address"),
    [
        (TEMPLATE, "https://vc.example.com/cs-0123456789abcdef/team-a"),
        (None, "https://203.0.113.7"),  # a LoadBalancer's address
        (None, None),  # a LoadBalancer that has no address yet
    ],
)
def test_our_values_pass_the_pinned_charts_schema(
    template: str | None, address: str | None
) -> None:
    settings = CloudSpaceSettings(vcluster_url_template=template)
    assert settings.vcluster_chart_version == vcluster_chart.CHART_VERSION == DEFAULT_CHART_VERSION
    values = chart.release_values(settings, TARGET, address)
    assert problems(values) == []
    # And what the chart's templates would refuse (the stand-in renders them as 0.36.1 does).
    merged = vcluster_chart.coalesce(vcluster_chart.default_values(), values)
    assert vcluster_chart.template_failure(merged) is None
    assert vcluster_chart.release_name_failure(TARGET.name) is None


def test_a_key_the_chart_does_not_know_fails() -> None:
    values = chart.release_values(CloudSpaceSettings(), TARGET, "https://203.0.113.7")
    # k3s was the distro of older charts; 0.36 knows only k8s.
    values["controlPlane"]["distro"]["k3s"] = {"enabled": True}
    values["policies"]["resourceQuota"]["quotas"] = {}
    found = problems(values)
    assert len(found) == 2, found
    assert found[0].startswith("controlPlane/distro: Additional properties are not allowed ('k3s'")
    assert found[1].startswith("policies/resourceQuota: Additional properties are not allowed")
    # A wrong type fails too.
    typed = chart.release_values(CloudSpaceSettings(), TARGET, None)
    typed["telemetry"]["enabled"] = "no"
    assert problems(typed) == ["telemetry/enabled: 'no' is not of type 'boolean'"]


def test_the_host_quota_holds_the_tenants_quota_flux_and_the_control_plane() -> None:
    settings = CloudSpaceSettings(control_plane_cpu=0.5, control_plane_memory_mib=512)
    values = chart.release_values(settings, TARGET, None)
    quota = values["policies"]["resourceQuota"]["quota"]
    assert cores_of(quota["requests.cpu"]) == pytest.approx(4.0 + FLUX_REQUESTS_CPU + 0.5)
    assert mib_of(quota["requests.memory"]) == 8192 + 7 * 64 + 512
    # Flux's seven controllers have limits of 1 cpu and 1Gi each; the tenant's pods get
    # the LimitRange's default limit, 5x their default request.
    assert cores_of(quota["limits.cpu"]) == pytest.approx(5 * 4.0 + FLUX_LIMITS_CPU + 0.5)
    assert mib_of(quota["limits.memory"]) == 5 * 8192 + 7 * 1024 + 512
    limits = values["policies"]["limitRange"]
    assert cores_of(limits["default"]["cpu"]) == 5 * cores_of(limits["defaultRequest"]["cpu"])
    assert values["policies"]["networkPolicy"]["enabled"] is True
    assert values["controlPlane"]["statefulSet"]["persistence"]["volumeClaim"]["enabled"] is True


def test_the_exported_kubeconfig_names_the_address_tenants_use() -> None:
    address = "https://vc.example.com:8443/cs-0123456789abcdef/team-a"
    values = chart.release_values(
        CloudSpaceSettings(vcluster_url_template=TEMPLATE), TARGET, address
    )
    assert values["exportKubeConfig"] == {"server": address, "context": "team-a"}
    assert values["controlPlane"]["proxy"]["extraSANs"] == ["vc.example.com"]
    assert values["controlPlane"]["service"]["spec"]["type"] == "ClusterIP"
    exposed = chart.release_values(CloudSpaceSettings(), TARGET, None)
    assert exposed["controlPlane"]["service"]["spec"]["type"] == "LoadBalancer"
    assert "exportKubeConfig" not in exposed


def images(values: dict[str, Any]) -> list[str]:
    """The images of the control plane the chart renders for these values (as the stand-in
    renders 0.36.1's statefulset.yaml)."""
    merged = vcluster_chart.coalesce(vcluster_chart.default_values(), values)
    (statefulset,) = [
        o for o in vcluster_chart.render(merged, TARGET.name, "ns") if o["kind"] == "StatefulSet"
    ]
    pod = statefulset["spec"]["template"]["spec"]
    return [c["image"] for c in pod["containers"] + pod.get("initContainers", [])]


def test_an_air_gapped_site_pulls_the_vclusters_images_from_its_mirror() -> None:
    mirror = "registry.example:5000/vcluster"
    settings = CloudSpaceSettings(vcluster_image_registry=mirror)
    values = chart.release_values(settings, TARGET, None)
    # Through the chart's own key, so the schema accepts it and every image follows it.
    assert values["controlPlane"]["advanced"] == {"defaultImageRegistry": mirror}
    assert problems(values) == []
    found = images(values)
    assert len(found) == 2 and all(i.startswith(f"{mirror}/") for i in found), found
    # Unset, the chart's own registries, and no key of ours.
    plain = chart.release_values(CloudSpaceSettings(), TARGET, None)
    assert "advanced" not in plain["controlPlane"]
    assert not any(i.startswith(f"{mirror}/") for i in images(plain))
