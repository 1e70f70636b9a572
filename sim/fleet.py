"""A simulated fleet for the demo: a dozen GENERIC clusters in every state a probe reports,
the three clouds with a discovered cluster each, and a host cluster that carries
CloudSpaces. All of it on 127.0.0.1, from the same simulators the tests run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from sim.clouds import Clouds
from sim.host_standin import HostStandIn
from sim.kube_standin import KubeStandIn

# How often the flapping cluster goes down or comes back, unless told otherwise.
FLAP_PERIOD_S = 45.0


@dataclass(frozen=True)
class GenericCluster:
    """A cluster to register as a GENERIC space: where it is, and what a probe will find."""

    name: str
    server: str
    ca_pem: str
    token: str
    plays: str


@dataclass(frozen=True)
class CloudCluster:
    provider: str
    name: str
    region: str
    resource_group: str | None = None


CLOUD_CLUSTERS = (
    CloudCluster("AWS", "eks-payments", "us-east-1"),
    CloudCluster("GCP", "gke-analytics", "europe-west1"),
    CloudCluster("AZURE", "aks-storefront", "westeurope", "spacedock-rg"),
)


@dataclass
class Fleet:
    """The running simulators (see `running()`) and what to register on them."""

    healthy: KubeStandIn
    wrong_ca: KubeStandIn
    down: KubeStandIn
    failing: KubeStandIn
    flapping: KubeStandIn
    clouds: Clouds
    host: HostStandIn
    flap_period_s: float = FLAP_PERIOD_S
    _stop_flapping: threading.Event = field(default_factory=threading.Event)

    @property
    def generic_clusters(self) -> list[GenericCluster]:
        """Twelve clusters: seven healthy, and one for each way a probe fails."""
        healthy = self.healthy
        clusters = [
            GenericCluster(name, f"{healthy.url}/{name}", healthy.ca_pem, healthy.token, "healthy")
            for name in ("web", "api", "batch", "search", "billing", "staging", "edge")
        ]
        return [
            *clusters,
            GenericCluster(
                "legacy", f"{healthy.url}/legacy", healthy.ca_pem, "revoked-token", "401"
            ),
            GenericCluster(
                "impostor", self.wrong_ca.url, self.wrong_ca.ca_pem, self.wrong_ca.token, "TLS"
            ),
            GenericCluster(
                "decommissioned", self.down.url, self.down.ca_pem, self.down.token, "down"
            ),
            GenericCluster(
                "overloaded", self.failing.url, self.failing.ca_pem, self.failing.token, "503"
            ),
            GenericCluster(
                "flaky", self.flapping.url, self.flapping.ca_pem, self.flapping.token, "flapping"
            ),
        ]

    @property
    def server_env(self) -> dict[str, str]:
        """What points a spacedock server at the simulated clouds."""
        return self.clouds.env

    @property
    def cloudspace_env(self) -> dict[str, str]:
        """What lets a spacedock server carve CloudSpaces out of the host cluster (whose
        Flux serves the vCluster chart and Flux's manifests at the settings' defaults)."""
        return {"SPACEDOCK_VCLUSTER_URL_TEMPLATE": self.host.vcluster_url_template}

    def _flap(self) -> None:
        up = True
        while not self._stop_flapping.wait(self.flap_period_s):
            if up:
                self.flapping.refuse()
            else:
                self.flapping.listen()
            up = not up


@contextmanager
def running(flap_period_s: float = FLAP_PERIOD_S) -> Iterator[Fleet]:
    """Starts every simulator, and stops them all on the way out."""
    with ExitStack() as stack:
        kubes = [stack.enter_context(KubeStandIn(token=f"sim-{n}")) for n in range(5)]
        healthy, wrong_ca, down, failing, flapping = kubes
        wrong_ca.present_wrong_ca()
        down.refuse()
        failing.status_code = 503
        clouds = Clouds().start()
        stack.callback(clouds.stop)
        for cluster in CLOUD_CLUSTERS:
            clouds.add_cluster(
                cluster.provider, cluster.name, cluster.region, cluster.resource_group
            )
        host = stack.enter_context(HostStandIn())
        host.flux.serve_vcluster_chart()
        host.flux.serve_flux_manifests()
        fleet = Fleet(healthy, wrong_ca, down, failing, flapping, clouds, host, flap_period_s)
        flapper = threading.Thread(target=fleet._flap, name="sim-flapping", daemon=True)
        flapper.start()
        stack.callback(flapper.join, 5)
        stack.callback(fleet._stop_flapping.set)
        yield fleet
