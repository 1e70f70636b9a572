"""A CloudSpace on a host without SPACEDOCK_VCLUSTER_URL_TEMPLATE: the chart exposes the
vCluster through a LoadBalancer Service, whose address exists only once the chart is
installed, so the release is upgraded to export its kubeconfig with that address (and
to name it as a TLS SAN) before PROVISIONING goes on."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.host_standin import HostStandIn
from tests.support.cloudspaces import (
    CHART_ENV,
    CREATE,
    Platform,
    eventually,
    key,
    serve_chart_and_flux,
    start_platform,
)
from tests.support.server import Backend


@pytest.fixture(scope="module")
def host(backend: Backend) -> Iterator[HostStandIn]:
    del backend  # a host per backend
    with HostStandIn(nodes=[("16", "64Gi")]) as standin:
        serve_chart_and_flux(standin)
        yield standin


@pytest.fixture(scope="module")
def platform(
    backend: Backend, host: HostStandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    env = {**CHART_ENV, "SPACEDOCK_RECONCILE_INTERVAL_S": "0.2"}  # no URL template
    running = start_platform(backend, log_path, host.url, host.ca_pem, host.token, env)
    yield running
    running.server.stop()


async def test_the_release_exports_its_kubeconfig_with_the_load_balancers_address(
    platform: Platform, host: HostStandIn
) -> None:
    tenant = await platform.tenant()
    payload = await tenant.editor.mutate(
        CREATE, {"input": {"name": "edge", "cpu": 0.5, "memoryMiB": 256}}
    )
    assert payload["userErrors"] == []
    namespace = f"cs-{key(payload['cloudSpace']['id'])}"

    def release() -> dict[str, Any] | None:
        return host.api.find("helmreleases", "edge", namespace, group="helm.toolkit.fluxcd.io")

    async def exported() -> dict[str, Any] | None:
        found = release()
        values = (found or {}).get("spec", {}).get("values", {})
        return found if "exportKubeConfig" in values else None

    upgraded = await eventually(exported)
    values = upgraded["spec"]["values"]
    # The stand-in gives every LoadBalancer 127.0.0.1.
    assert values["exportKubeConfig"]["server"] == "https://127.0.0.1"
    assert values["controlPlane"]["proxy"]["extraSANs"] == ["127.0.0.1"]
    assert values["controlPlane"]["service"]["spec"]["type"] == "LoadBalancer"
    service = host.api.find("services", "edge", namespace)
    assert service is not None and service["spec"]["type"] == "LoadBalancer"

    async def secret_has_the_address() -> bool:
        found = host.api.find("secrets", "vc-edge", namespace)
        if found is None:
            return False
        config = yaml.safe_load(base64.b64decode(found["data"]["config"]))
        return bool(config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1")

    await eventually(secret_has_the_address)
    # Helm upgraded the release once for it: the second revision is the last.
    assert host.api.find("secrets", "sh.helm.release.v1.edge.v2", namespace) is not None
    assert host.api.find("secrets", "sh.helm.release.v1.edge.v3", namespace) is None
