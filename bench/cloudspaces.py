"""Benchmark of the CloudSpace reconciler (issue "CloudSpaces"), against a baseline
measured in the same run.

N CloudSpaces are created (through `core.cloudspaces.lifecycle.create`) on one host space, a host
stand-in (sim/host_standin.py) served by a separate process on loopback with
its readiness delays set to zero, so what is timed is spacedock's own work. The real
reconciler (`core.cloudspaces.reconciler.Reconciler`: real database, leased claims, one transaction
per step, events, kubernetes-asyncio server-side applies through TLS) then drives all of
them to READY: once with its default concurrency, and once as the baseline, a serial
controller (concurrency 1, one CloudSpace at a time, as a single-worker operator queue
does). Each run has a fresh database and fresh CloudSpaces on the same stand-in.

Figures per run: time until all are READY, the median and p95 time from the start to a
CloudSpace's READY event, CPU seconds of this process per CloudSpace (the database
thread included; the stand-in is another process), API calls and SQL statements per
CloudSpace.

Run: `.venv/bin/python bench/cloudspaces.py` (`--count 200`; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402
from sqlmodel import col  # noqa: E402

from bench.common import percentile, print_table  # noqa: E402
from core.cloudspaces import capacity as host_capacity  # noqa: E402
from core.cloudspaces import lifecycle as cloudspaces  # noqa: E402
from core.cloudspaces.reconciler import Reconciler  # noqa: E402
from core.cloudspaces.settings import CloudSpaceSettings  # noqa: E402
from core.common.events import InProcessBus  # noqa: E402
from core.common.rbac import Role, Viewer  # noqa: E402
from core.common.secrets import SecretBox  # noqa: E402
from core.common.services import Services  # noqa: E402
from core.orgs.bootstrap import create_token  # noqa: E402
from core.spaces.health import HealthRule  # noqa: E402
from core.spaces.lifecycle import RegisterSpaceRequest, register  # noqa: E402
from db.cloudspace_tables import CloudSpace, CloudSpaceEvent  # noqa: E402
from db.engine import Database  # noqa: E402

STANDIN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from sim.host_standin import HostStandIn
host = HostStandIn(ready_delay_s=0.0, nodes=[("100000", "100000Ti")]).start()
host.flux.serve_vcluster_chart()  # the defaults of the settings: charts.loft.sh, ghcr.io
host.flux.serve_flux_manifests()
print(json.dumps({"url": host.url, "ca": host.ca_pem, "token": host.token,
                  "template": host.vcluster_url_template}), flush=True)
sys.stdin.read()
"""


@dataclass
class Figures:
    label: str
    count: int
    wall_s: float
    cpu_s: float
    api_calls: int
    statements: int
    to_ready_s: list[float]
    waits: int
    failures: int


async def run(label: str, count: int, concurrency: int, host: dict[str, Any]) -> Figures:
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
                reconcile_interval_s=3600,  # READY is the end of the run
            ),
        )
        try:
            async with services.unit() as unit:
                org, _ = await create_token(unit, "bench", "ADMIN")
                viewer = Viewer(org.id, org.name, Role.ADMIN)
                space = await register(
                    unit,
                    viewer,
                    services.secrets,
                    RegisterSpaceRequest(
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
                    ),
                    (),
                )
            room = host_capacity.Capacity(1e9, 1e12)
            async with services.unit() as unit:
                for index in range(count):
                    request = cloudspaces.CreateRequest(f"{label}-{index}", space.id, 0.1, 128)
                    await cloudspaces.create(unit, services, viewer, request, room)
            reconciler = Reconciler(services, concurrency=concurrency)
            statements = database.statement_count
            cpu = time.process_time()
            started = time.perf_counter()
            reconciler.start()
            # The database is the observer, as in the tests: no hook into the reconciler.
            while await _ready(services) < count:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu
            statements = database.statement_count - statements
            await reconciler.stop()
            to_ready = await _times_to_ready(services, started_at=await _first_claim(services))
            stats = reconciler.stats
            return Figures(
                label,
                count,
                wall,
                cpu,
                stats.api_calls,
                statements,
                to_ready,
                stats.waits,
                stats.failures,
            )
        finally:
            await database.dispose()


async def _ready(services: Services) -> int:
    async with services.read() as session:
        query = sa.select(sa.func.count()).where(col(CloudSpace.phase) == "READY")
        return int(await session.scalar(query) or 0)


async def _first_claim(services: Services) -> Any:
    async with services.read() as session:
        query = sa.select(sa.func.min(CloudSpaceEvent.at)).where(
            col(CloudSpaceEvent.phase) == "PROVISIONING"
        )
        return await session.scalar(query)


async def _times_to_ready(services: Services, started_at: Any) -> list[float]:
    async with services.read() as session:
        query = sa.select(col(CloudSpaceEvent.at)).where(col(CloudSpaceEvent.phase) == "READY")
        return sorted((at - started_at).total_seconds() for at in await session.scalars(query))


def report(runs: list[Figures]) -> None:
    print()
    header = ["", *(r.label for r in runs)]
    rows = [
        ("CloudSpaces driven to READY", [str(r.count) for r in runs]),
        ("time until all are READY", [f"{r.wall_s:.2f} s" for r in runs]),
        ("CloudSpaces READY per second", [f"{r.count / r.wall_s:.1f}" for r in runs]),
        (
            "time to a CloudSpace's READY, median / p95",
            [
                f"{statistics.median(r.to_ready_s):.2f} s / {percentile(r.to_ready_s, 0.95):.2f} s"
                for r in runs
            ],
        ),
        ("CPU per CloudSpace (this process)", [f"{1000 * r.cpu_s / r.count:.1f} ms" for r in runs]),
        ("API calls per CloudSpace", [f"{r.api_calls / r.count:.1f}" for r in runs]),
        ("SQL statements per CloudSpace", [f"{r.statements / r.count:.1f}" for r in runs]),
        ("waits (not ready yet, polled again)", [str(r.waits) for r in runs]),
        ("failed steps", [str(r.failures) for r in runs]),
    ]
    print_table(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="CloudSpaces per run")
    parser.add_argument("--concurrency", type=int, default=32, help="the reconciler's")
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
        runs = [
            asyncio.run(run("reconciler", args.count, args.concurrency, host)),
            asyncio.run(run("baseline-serial", args.count, 1, host)),
        ]
        report(runs)
    finally:
        if standin.stdin is not None:
            standin.stdin.close()
        standin.wait(timeout=10)


if __name__ == "__main__":
    main()
