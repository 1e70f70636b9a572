"""Benchmark of app delivery and the app status loop (issue 23), against baselines measured
in the same run.

Setup: a host stand-in (sim/host_standin.py) in a separate process on loopback,
readiness delays zero, a Git repository and a Helm chart registered in its Flux; the real
CloudSpace reconciler drives `--cloudspaces` CloudSpaces (default 50) to READY with Flux
v2.9.4 inside each vCluster; then `--apps` apps (default 500: half Git, half Helm) are
created through `core.apps.lifecycle.create`, spread evenly over the CloudSpaces, and their
first revisions delivered (objects created, not timed).

Delivery: the apps are suspended while deliveries are timed (Flux in the stand-in fetches
their sources but applies nothing), so the pace is spacedock's, not the stand-in's. Every app
gets a new revision (a new tag or chart version) and the real delivery
worker (`core.apps.delivery.Delivery`: leased claims, one transaction per step, events,
server-side applies through TLS into each vCluster) applies them all; then again with the
baseline, a serial worker (concurrency 1: one app at a time, as a single-worker queue).
Figures: revisions applied per second, CPU of this process per revision (the database thread
included; the stand-in is another process), SQL statements per revision.

Status: the apps are resumed and installed (every app READY, not timed); then the real status
loop (`core.apps.watch.StatusLoop`) reads every app for `--passes` intervals of the steady
state: per target cluster, one list per Flux kind and one per namespace and workload
kind. Baseline: a per-app poller in the same process, as a simple controller reads status
(for each app, a client to its cluster and a GET of each of its two Flux objects, then the
same rules and the same writes). Figures: CPU per app per interval, API calls and SQL
statements per app per interval.

Run: `.venv/bin/python bench/apps.py` (`--cloudspaces 50 --apps 500`; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402
from sqlmodel import col  # noqa: E402

from bench.common import print_table  # noqa: E402
from core.apps import flux, operations  # noqa: E402
from core.apps import lifecycle as apps  # noqa: E402
from core.apps.delivery import PER_CLUSTER, Delivery  # noqa: E402
from core.apps.requests import CreateRequest, SourceRequest, TargetRequest  # noqa: E402
from core.apps.settings import AppSettings  # noqa: E402
from core.apps.sources import GitSource, HelmSource  # noqa: E402
from core.apps.status import Reading, observe  # noqa: E402
from core.apps.targets import Reaches, read_world, target_of_app  # noqa: E402
from core.apps.watch import StatusLoop  # noqa: E402
from core.cloudspaces import capacity as host_capacity  # noqa: E402
from core.cloudspaces import lifecycle as cloudspaces  # noqa: E402
from core.cloudspaces.host_access import connect  # noqa: E402
from core.cloudspaces.reconciler import Reconciler  # noqa: E402
from core.cloudspaces.settings import CloudSpaceSettings  # noqa: E402
from core.common.events import InProcessBus  # noqa: E402
from core.common.rbac import Role, Viewer  # noqa: E402
from core.common.secrets import SecretBox  # noqa: E402
from core.common.services import Services  # noqa: E402
from core.orgs.bootstrap import create_token  # noqa: E402
from core.spaces.health import HealthRule  # noqa: E402
from core.spaces.lifecycle import RegisterSpaceRequest, register  # noqa: E402
from db.app_tables import App, AppRevision  # noqa: E402
from db.cloudspace_tables import CloudSpace  # noqa: E402
from db.engine import Database  # noqa: E402
from providers import host as host_api  # noqa: E402

GIT = "https://git.example/bench.git"
CHARTS = "https://charts.example"
STANDIN = f"""
import json, sys
sys.path.insert(0, sys.argv[1])
from sim.host_standin import HostStandIn
from tests.support import apps
host = HostStandIn(ready_delay_s=0.0, nodes=[("100000", "100000Ti")]).start()
host.flux.serve_vcluster_chart()  # the defaults of the settings: charts.loft.sh, ghcr.io
host.flux.serve_flux_manifests()
repo = host.flux.git({GIT!r})
repo.commit({{"deploy/app.yaml": apps.manifests(apps.deployment("bench"))}})
for tag in ("v1", "v2", "v3"):
    repo.tag(tag)
charts = host.flux.helm({CHARTS!r})
for version in ("1.0.0", "1.1.0", "1.2.0"):
    charts.add_chart("web", version, render=apps.chart_render("web"))
print(json.dumps({{"url": host.url, "ca": host.ca_pem, "token": host.token,
                  "template": host.vcluster_url_template}}), flush=True)
sys.stdin.read()
"""


@dataclass
class Delivered:
    label: str
    revisions: int
    wall_s: float
    cpu_s: float
    statements: int
    api_calls: int


@dataclass
class Watched:
    label: str
    reads: int  # apps read, all passes together
    cpu_s: float
    statements: int
    api_calls: int
    states: dict[str, int] = field(default_factory=dict)


class Bench:
    def __init__(self, services: Services, host: dict[str, Any], viewer: Viewer) -> None:
        self.services, self.host, self.viewer = services, host, viewer
        self.apps: list[str] = []

    async def setup(self, cloudspace_count: int, app_count: int) -> None:
        room = host_capacity.Capacity(1e9, 1e12)
        async with self.services.unit() as unit:
            space = await register(
                unit, self.viewer, self.services.secrets, _host_request(self.host), ()
            )
            for index in range(cloudspace_count):
                request = cloudspaces.CreateRequest(f"cs-{index}", space.id, 0.1, 128)
                await cloudspaces.create(unit, self.services, self.viewer, request, room)
        reconciler = Reconciler(self.services)
        reconciler.start()
        started = time.perf_counter()
        ready = col(CloudSpace.phase) == "READY"
        while await _count(self.services, CloudSpace, ready) < cloudspace_count:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        await reconciler.stop()
        print(
            f"{cloudspace_count} CloudSpaces READY in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        async with self.services.read() as session:
            ids = list(
                await session.scalars(sa.select(col(CloudSpace.id)).order_by(col(CloudSpace.id)))
            )
        for index in range(app_count):
            async with self.services.unit() as unit:
                done = await apps.create(
                    unit,
                    self.services,
                    self.viewer,
                    CreateRequest(
                        f"app-{index}",
                        TargetRequest(
                            cloud_space_id=ids[index % len(ids)], namespace=f"app-{index}"
                        ),
                        _source(index, 0),
                        # Suspended while deliveries are timed: the stand-in's Flux (one
                        # process for every vCluster) then fetches sources but installs
                        # nothing, so the stand-in does not set the pace.
                        suspended=True,
                    ),
                )
            self.apps.append(done.app.id)
        await self.deliver("first revisions (setup)", 32, revision=1)

    async def resume_all(self, timeout_s: float) -> None:
        """Every app resumed and installed by the stand-in's Flux: READY, read once."""
        for app_id in self.apps:
            async with self.services.unit() as unit:
                await operations.set_suspended(unit, self.viewer, app_id, False)
        settings = AppSettings(status_interval_s=2.0, retry_interval_s=1)
        reaches = Reaches(self.services, 20.0)
        delivery, loop = (
            Delivery(self.services, settings, reaches),
            StatusLoop(self.services, settings, reaches),
        )
        delivery.start()
        loop.start()
        started = time.perf_counter()
        while (await _states(self.services)).get("READY", 0) < len(self.apps):
            assert time.perf_counter() - started < timeout_s, await _states(self.services)
            await asyncio.sleep(1)
        await delivery.stop()
        await loop.stop()
        print(
            f"{len(self.apps)} apps resumed and READY in {time.perf_counter() - started:.1f} s",
            flush=True,
        )

    async def revise(self, number: int) -> None:
        for index, app_id in enumerate(self.apps):
            async with self.services.unit() as unit:
                await apps.update(
                    unit, self.services, self.viewer, app_id, _source(index, number - 1)
                )

    async def deliver(self, label: str, concurrency: int, revision: int) -> Delivered:
        settings = AppSettings(status_interval_s=3600, retry_interval_s=1)
        delivery = Delivery(
            self.services,
            settings,
            Reaches(self.services, 20.0),
            concurrency,
            min(concurrency, PER_CLUSTER),
        )
        statements = self.services.database.statement_count
        cpu = time.process_time()
        started = time.perf_counter()
        delivery.start()
        wanted = len(self.apps)
        while await _count(self.services, AppRevision, _applied(revision)) < wanted:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
        statements = self.services.database.statement_count - statements
        await delivery.stop()
        figures = Delivered(label, wanted, wall, cpu, statements, delivery.stats.api_calls)
        print(f"{label}: {wanted} revisions in {wall:.1f} s", flush=True)
        return figures

    async def watch(self, passes: int, interval_s: float) -> Watched:
        """Every app READY; a first pass is not counted, then `passes` intervals of the
        steady state."""
        settings = AppSettings(status_interval_s=interval_s, retry_interval_s=1)
        loop = StatusLoop(self.services, settings, Reaches(self.services, 20.0))
        await _all_due(self.services)
        loop.start()
        await _settled(loop, len(self.apps))
        first = loop.stats.apps
        statements = self.services.database.statement_count
        cpu = time.process_time()
        calls = loop.stats.api_calls
        await _settled(loop, first + passes * len(self.apps))
        cpu = time.process_time() - cpu
        statements = self.services.database.statement_count - statements
        reads, calls = loop.stats.apps - first, loop.stats.api_calls - calls
        await loop.stop()
        states = await _states(self.services)
        return Watched("status loop", reads, cpu, statements, calls, states)

    async def poll_each(self, passes: int) -> Watched:
        """The baseline: every app on its own, a client and two GETs each."""
        reaches = Reaches(self.services, 20.0)
        calls = 0

        def count() -> None:
            nonlocal calls
            calls += 1

        statements = self.services.database.statement_count
        cpu = time.process_time()
        reads = 0
        for _ in range(passes):
            for app_id in self.apps:
                async with self.services.read() as session:
                    app = await session.get(App, app_id)
                    assert app is not None
                    world = await read_world(session, [app])
                target = target_of_app(self.services, app, world, _now())
                credentials = await reaches.credentials(target)
                git = app.source_kind == "GIT"
                kinds = (
                    ("GitRepository", "Kustomization") if git else ("HelmRepository", "HelmRelease")
                )
                async with connect(self.services, credentials, on_call=count) as kube:
                    source, deploy = [
                        await kube.get(
                            host_api.path_of(flux.API_OF[kind], kind, app.namespace, app.name)
                        )
                        for kind in kinds
                    ]
                seen = observe(Reading(source, deploy), {})
                async with self.services.unit() as unit:
                    await _write_status(unit, app_id, seen.status.value, seen.reason, seen.message)
                reads += 1
        cpu = time.process_time() - cpu
        statements = self.services.database.statement_count - statements
        return Watched("baseline: per-app poller", reads, cpu, statements, calls)


async def _settled(loop: StatusLoop, reads: int) -> None:
    """Until the loop has read `reads` apps and has no cluster read in flight."""
    while loop.stats.apps < reads or loop.stats.in_flight:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


def _now() -> Any:
    from core.common.services import utcnow

    return utcnow()


async def _write_status(
    unit: Any, app_id: str, status: str, reason: str | None, message: str | None
) -> None:
    app = await unit.session.get(App, app_id)
    if (app.status, app.status_reason, app.status_message) != (status, reason, message):
        app.status, app.status_reason, app.status_message = status, reason, message
        unit.session.add(app)


def _host_request(host: dict[str, Any]) -> RegisterSpaceRequest:
    return RegisterSpaceRequest(
        name="host",
        provider="GENERIC",
        space_type="KUBERNETES",
        cloud_account_id=None,
        config={
            "clusterName": "host",
            "server": host["url"],
            "caCert": host["ca"],
            "serviceAccountToken": host["token"],
        },
        synthetic=False,
    )


def _source(index: int, step: int) -> SourceRequest:
    if index % 2 == 0:
        return SourceRequest(git=GitSource(GIT, tag=f"v{step + 1}", path="./deploy"))
    return SourceRequest(helm=HelmSource(CHARTS, "web", f"1.{step}.0"))


def _applied(number: int) -> Any:
    return sa.and_(
        col(AppRevision.number) == number,
        col(AppRevision.state).in_(["APPLIED", "READY", "FAILED", "SUPERSEDED"]),
    )


async def _count(services: Services, model: Any, condition: Any) -> int:
    async with services.read() as session:
        return int(
            await session.scalar(sa.select(sa.func.count()).select_from(model).where(condition))
            or 0
        )


async def _all_due(services: Services) -> None:
    async with services.unit() as unit:
        await unit.session.execute(sa.update(App).values(status_due_at=unit.now))


async def _states(services: Services) -> dict[str, int]:
    async with services.read() as session:
        rows = (
            await session.execute(
                sa.select(col(App.status), sa.func.count()).group_by(col(App.status))
            )
        ).all()
    return {status: int(count) for status, count in rows}


def report(delivered: list[Delivered], watched: list[Watched]) -> None:
    print()
    header = ["delivery", *(d.label for d in delivered)]
    rows = [
        ("revisions applied", [str(d.revisions) for d in delivered]),
        ("time until all are applied", [f"{d.wall_s:.1f} s" for d in delivered]),
        ("revisions applied per second", [f"{d.revisions / d.wall_s:.1f}" for d in delivered]),
        (
            "CPU per revision (this process)",
            [f"{1000 * d.cpu_s / d.revisions:.1f} ms" for d in delivered],
        ),
        ("API calls per revision", [f"{d.api_calls / d.revisions:.1f}" for d in delivered]),
        ("SQL statements per revision", [f"{d.statements / d.revisions:.1f}" for d in delivered]),
    ]
    print_table(header, rows)
    print()
    header = ["status", *(w.label for w in watched)]
    rows = [
        ("app reads", [str(w.reads) for w in watched]),
        ("CPU per app per interval", [f"{1000 * w.cpu_s / w.reads:.2f} ms" for w in watched]),
        ("API calls per app per interval", [f"{w.api_calls / w.reads:.2f}" for w in watched]),
        ("SQL statements per app per interval", [f"{w.statements / w.reads:.3f}" for w in watched]),
    ]
    print_table(header, rows)
    for w in watched:
        if w.states:
            print(f"statuses after the status loop: {json.dumps(w.states, sort_keys=True)}")


async def main_async(args: argparse.Namespace, host: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        database = Database(f"sqlite+aiosqlite:///{directory}/bench.db")
        await database.migrate()
        services = Services(
            database=database,
            bus=InProcessBus(),
            secrets=SecretBox(SecretBox.generate_key()),
            health=HealthRule(3600),
            cloudspaces=CloudSpaceSettings(
                vcluster_url_template=host["template"],
                reconcile_interval_s=3600,
            ),
        )
        try:
            async with services.unit() as unit:
                org, _ = await create_token(unit, "bench", "ADMIN")
            bench = Bench(services, host, Viewer(org.id, org.name, Role.ADMIN))
            await bench.setup(args.cloudspaces, args.apps)
            await bench.revise(2)
            delivered = [await bench.deliver("delivery worker (32 at once)", 32, revision=2)]
            await bench.revise(3)
            delivered.append(await bench.deliver("baseline: serial worker", 1, revision=3))
            await bench.resume_all(args.ready_timeout)
            watched = [await bench.watch(args.passes, args.interval)]
            watched.append(await bench.poll_each(args.passes))
            report(delivered, watched)
        finally:
            await database.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cloudspaces", type=int, default=50)
    parser.add_argument("--apps", type=int, default=500)
    parser.add_argument("--passes", type=int, default=3, help="status intervals measured")
    parser.add_argument("--interval", type=float, default=2.0, help="the status loop's, in s")
    parser.add_argument(
        "--ready-timeout", type=float, default=900.0, help="for every app to become READY, in s"
    )
    args = parser.parse_args()
    standin = subprocess.Popen(
        [sys.executable, "-c", STANDIN, str(REPO)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert standin.stdout is not None
        host = json.loads(standin.stdout.readline())
        asyncio.run(main_async(args, host))
    finally:
        if standin.stdin is not None:
            standin.stdin.close()
        standin.wait(timeout=30)


if __name__ == "__main__":
    main()
