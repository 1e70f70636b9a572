"""Benchmark of the host stand-in's Flux simulation under load (sim/flux_standin.py), against
the full pass it replaced, measured in the same run.

The test suite drives several CloudSpaces through one host stand-in while other workers
share the machine's cores; a stand-in that works on every Flux object after every write
starves its own event loop, and the server's live calls to it time out. This bench applies
N CloudSpace-like sets (a Namespace, the vCluster chart's HelmRepository and HelmRelease with
spacedock's own values, the Flux manifests' OCIRepository and the remote Kustomization that
installs Flux into the vCluster through `vc-<name>`: core.cloudspaces.chart) to one
`HostStandIn` over HTTPS, as spacedock's reconciler does, waits until every Kustomization is
Ready, then writes M ConfigMaps (unrelated to Flux) into those namespaces, the traffic of a
test once its CloudSpaces are up. Each phase runs twice on a fresh stand-in: with the
stand-in's scheduling (only the objects a change concerns) and with `full_passes` (every
Flux object after every change, the stand-in before it).

Figures per mode: time per write (median, p95), time until all N are Ready, Flux objects
reconciled and reconcile runs (with the time per run), the stand-in loop's lag (how late a
10 ms timer on it fires: median, p95, max) and this process's CPU seconds.

Run: `.venv/bin/python bench/host_standin.py` (`--count 12 --writes 200`; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from core.cloudspaces import chart  # noqa: E402
from core.cloudspaces.settings import CloudSpaceSettings  # noqa: E402
from core.cloudspaces.vclusters import Target  # noqa: E402
from sim.flux_standin import Flux, is_ready  # noqa: E402
from sim.host_standin import HostStandIn  # noqa: E402

APPLY = {"Content-Type": "application/apply-patch+yaml"}
PATHS = {
    "Namespace": "/api/v1/namespaces/{name}",
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps/{name}",
    "HelmRepository": "/apis/source.toolkit.fluxcd.io/v1/namespaces/{namespace}/helmrepositories/{name}",
    "OCIRepository": "/apis/source.toolkit.fluxcd.io/v1/namespaces/{namespace}/ocirepositories/{name}",
    "HelmRelease": "/apis/helm.toolkit.fluxcd.io/v2/namespaces/{namespace}/helmreleases/{name}",
    "Kustomization": "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{namespace}/kustomizations/{name}",
}


@dataclass
class Figures:
    label: str
    count: int
    setup_writes: list[float] = field(default_factory=list)
    churn_writes: list[float] = field(default_factory=list)
    to_ready_s: float = 0.0
    cpu_s: float = 0.0
    reconciled_setup: int = 0
    reconciled_churn: int = 0
    runs: list[float] = field(default_factory=list)
    setup_lag: list[float] = field(default_factory=list)
    churn_lag: list[float] = field(default_factory=list)


class LagProbe:
    """A timer on the stand-in's loop that records how late it fires."""

    def __init__(self, loop: asyncio.AbstractEventLoop, period_s: float = 0.01) -> None:
        self.loop, self.period_s = loop, period_s
        self.late: list[float] = []
        self.running = True
        loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        if self.running:
            due = self.loop.time() + self.period_s
            self.loop.call_at(due, self._fired, due)

    def _fired(self, due: float) -> None:
        self.late.append(self.loop.time() - due)
        self._arm()

    def take(self) -> list[float]:
        """The lags recorded so far; the next call returns only later ones."""
        taken, self.late = self.late, []
        return taken

    def stop(self) -> list[float]:
        self.running = False
        return self.take()


def timed_runs(flux: Flux, runs: list[float]) -> None:
    """Record the duration of each reconcile run of this Flux."""
    original = flux._run

    async def run() -> None:
        started = time.perf_counter()
        try:
            await original()
        finally:
            runs.append(time.perf_counter() - started)

    flux._run = run  # type: ignore[method-assign]


def cloudspace(settings: CloudSpaceSettings, host: HostStandIn, index: int) -> list[Any]:
    target = Target(id=f"cs_bench{index:03d}", name=f"bench{index:03d}", cpu=1.0, memory_mib=1024)
    address = host.vcluster_url(target.namespace, target.name)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target.namespace}},
        chart.chart_repository(settings, target),
        chart.helm_release(settings, target, address),
        chart.flux_source(settings, target),
        chart.flux_kustomization(target),
    ]


async def apply(session: aiohttp.ClientSession, host: HostStandIn, obj: Any) -> float:
    meta = obj["metadata"]
    path = PATHS[obj["kind"]].format(name=meta["name"], namespace=meta.get("namespace", ""))
    started = time.perf_counter()
    async with session.patch(
        f"{host.url}{path}?fieldManager=bench&force=true", data=json.dumps(obj), headers=APPLY
    ) as answer:
        body = await answer.json()
        if answer.status >= 400:
            raise RuntimeError(f"{obj['kind']} {meta['name']}: {answer.status} {body}")
    return time.perf_counter() - started


async def run_mode(label: str, count: int, writes: int, full: bool) -> Figures:
    figures = Figures(label, count)
    with HostStandIn() as host:
        host.flux.full_passes = full
        host.flux.serve_vcluster_chart(CloudSpaceSettings().vcluster_chart_url)
        host.flux.serve_flux_manifests()
        timed_runs(host.flux, figures.runs)
        settings = CloudSpaceSettings(vcluster_url_template=host.vcluster_url_template)
        context = ssl.create_default_context(cadata=host.ca_pem)
        headers = {"Authorization": f"Bearer {host.token}"}
        probe = LagProbe(host._loop)
        cpu, started = time.process_time(), time.perf_counter()
        reconciled = host.flux.reconciled
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=4), headers=headers
        ) as session:
            sets = [cloudspace(settings, host, i) for i in range(count)]
            for objects in sets:
                for obj in objects:
                    figures.setup_writes.append(await apply(session, host, obj))
            kustomizations = [s[4]["metadata"] for s in sets]

            def all_ready() -> bool:
                return all(
                    is_ready(
                        host.api.find(
                            "kustomizations",
                            m["name"],
                            m["namespace"],
                            group="kustomize.toolkit.fluxcd.io",
                        )
                    )
                    for m in kustomizations
                )

            await host.flux.until(all_ready, timeout_s=600)
            figures.to_ready_s = time.perf_counter() - started
            figures.setup_lag = probe.take()
            figures.reconciled_setup = host.flux.reconciled - reconciled
            for i in range(writes):
                namespace = sets[i % count][0]["metadata"]["name"]
                config_map = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"churn-{i}", "namespace": namespace},
                    "data": {"n": str(i)},
                }
                figures.churn_writes.append(await apply(session, host, config_map))
            await host.flux.until(lambda: not host.flux.busy(), timeout_s=60)
        figures.cpu_s = time.process_time() - cpu
        figures.reconciled_churn = host.flux.reconciled - reconciled - figures.reconciled_setup
        figures.churn_lag = probe.stop()
    return figures


def ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


def lags(values: list[float]) -> str:
    return f"{ms(values, 0.5)} / {ms(values, 0.95)} / {ms(values, 1.0)} ms"


def table(results: list[Figures]) -> str:
    rows = [
        (
            f"time until all {results[0].count} Kustomizations are Ready",
            [f"{f.to_ready_s:.1f} s" for f in results],
        ),
        (
            "write while they come up, median / p95",
            [f"{ms(f.setup_writes, 0.5)} / {ms(f.setup_writes, 0.95)} ms" for f in results],
        ),
        (
            "ConfigMap write once Ready, median / p95",
            [f"{ms(f.churn_writes, 0.5)} / {ms(f.churn_writes, 0.95)} ms" for f in results],
        ),
        (
            "stand-in loop lag while they come up, median / p95 / max",
            [lags(f.setup_lag) for f in results],
        ),
        (
            "stand-in loop lag once Ready, median / p95 / max",
            [lags(f.churn_lag) for f in results],
        ),
        (
            "Flux objects reconciled while they come up / per ConfigMap once Ready",
            [
                f"{f.reconciled_setup} / {f.reconciled_churn / max(1, len(f.churn_writes)):.1f}"
                for f in results
            ],
        ),
        (
            "reconcile runs (median / max per run)",
            [f"{len(f.runs)} ({ms(f.runs, 0.5)} / {ms(f.runs, 1.0)} ms)" for f in results],
        ),
        ("CPU seconds (this process)", [f"{f.cpu_s:.1f}" for f in results]),
    ]
    lines = [
        "| | " + " | ".join(f.label for f in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=12, help="CloudSpace-like sets")
    parser.add_argument("--writes", type=int, default=200, help="ConfigMaps once Ready")
    parser.add_argument("--only", choices=("scheduled", "full"), help="one mode alone")
    args = parser.parse_args()
    # One set first, unreported: the first vCluster pays for caches every later one reuses
    # (Flux's manifests parsed, schemas built), and neither mode should carry that.
    await run_mode("warm-up", 1, 0, False)
    results = []
    for label, full in (("only what a change concerns", False), ("baseline: full passes", True)):
        if args.only and (args.only == "full") != full:
            continue
        results.append(await run_mode(label, args.count, args.writes, full))
        print(f"{label}: done", file=sys.stderr, flush=True)
    print(table(results))


if __name__ == "__main__":
    asyncio.run(main())
