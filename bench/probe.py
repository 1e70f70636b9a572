"""Benchmark of the probe loop (issue "Live clusters"), each figure against a baseline
measured in the same run.

1. Throughput and CPU. N GENERIC spaces are registered (through `core.spaces.register`)
   against Kubernetes API stand-ins served by a separate process on loopback, with an
   added answer latency. The real probe loop (`core.probe_loop.ProbeLoop`: real
   database, leases, result writes, events) then probes the fleet with every space due
   at once, so it runs saturated: once with our hot path (`providers.probe.VersionProber`)
   and once with the baseline, a new kubernetes-asyncio `ApiClient` per probe as the SDK
   is usually used. A warm-up pass comes first (credentials minted, TLS contexts built,
   the first UNKNOWN -> ACTIVE events written). Figures: probes per second sustained,
   CPU seconds of this process per probe (the database thread included; the stand-ins
   are measured apart), SQL statements per probe, and from these the largest fleet one
   process keeps within a 60 s interval.
2. Detection latency. A real `spacedock serve` process probes one stand-in every 1 s
   with threshold 3. The stand-in stops listening, and we time the INACTIVE event's
   arrival at a gql WebSocket subscriber, against a client polling the status once a
   second (what a frontend without subscriptions would see).

This machine is shared: the wall-clock figures depend on what else runs, so the report
also shows how busy the machine was besides this benchmark. CPU per probe is the
steadier figure.

Run: `.venv/bin/python bench/probe.py` (about three minutes; `--help` for sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import sqlalchemy as sa  # noqa: E402
import uvloop  # noqa: E402
from gql import gql  # noqa: E402
from kubernetes_asyncio.client import ApiClient, Configuration, VersionApi  # noqa: E402
from sqlmodel import col  # noqa: E402

from bench.common import machine_busy_s, process_cpu_s  # noqa: E402
from core.events import InProcessBus  # noqa: E402
from core.health import HealthRule  # noqa: E402
from core.probe_loop import ProbeLoop, ProbeSettings  # noqa: E402
from core.rbac import Role, Viewer  # noqa: E402
from core.secrets import SecretBox  # noqa: E402
from core.services import Services  # noqa: E402
from core.spaces import RegisterSpaceRequest, register  # noqa: E402
from core.tokens import create_token  # noqa: E402
from db.engine import Database  # noqa: E402
from db.tables import Space  # noqa: E402
from providers.credentials import ClusterCredentials  # noqa: E402
from providers.probe import ProbeOutcome, Prober, VersionProber  # noqa: E402
from tests.support.factories import REGISTER_SPACE, succeeded  # noqa: E402
from tests.support.graphql import GraphQL  # noqa: E402
from tests.support.kube_standin import KubeStandIn  # noqa: E402
from tests.support.server import Backend, Server, mint_token  # noqa: E402

INTERVAL_S = 60.0
TIMEOUT_S = 5.0
REGISTER_BATCH = 100


# -- stand-ins, in their own process ------------------------------------------------------
@dataclass(frozen=True)
class StandIn:
    url: str
    ca: str
    token: str


def serve_standins(count: int, latency_ms: float) -> None:
    """Child process: start `count` stand-ins (each its own CA), announce them as JSON
    lines, serve until stdin closes."""
    standins = [KubeStandIn().start() for _ in range(count)]
    for standin in standins:
        standin.delay_s = latency_ms / 1000
        print(json.dumps({"url": standin.url, "ca": standin.ca_pem, "token": standin.token}))
    sys.stdout.flush()
    sys.stdin.read()
    for standin in standins:
        standin.stop()


@contextlib.contextmanager
def standin_process(count: int, latency_ms: float) -> Iterator[tuple[list[StandIn], int]]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-standins", str(count), "--latency-ms", str(latency_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        yield [StandIn(**json.loads(child.stdout.readline())) for _ in range(count)], child.pid
    finally:
        child.stdin.close()
        child.wait(timeout=30)


# -- the baseline prober ------------------------------------------------------------------
class ApiClientPerProbe:
    """The usual kubernetes-asyncio way: a Configuration and an ApiClient per call, the CA
    written to a file for it, then `VersionApi().get_code()`."""

    async def probe(self, credentials: ClusterCredentials) -> ProbeOutcome:
        started = time.perf_counter()
        configuration = Configuration(
            host=credentials.server,
            api_key={"BearerToken": credentials.token or ""},
            api_key_prefix={"BearerToken": "Bearer"},
        )
        with tempfile.NamedTemporaryFile("w", suffix=".crt") as ca_file:
            ca_file.write(credentials.ca_pem)
            ca_file.flush()
            configuration.ssl_ca_cert = ca_file.name
            client = ApiClient(configuration)
        try:
            info = await VersionApi(client).get_code(_request_timeout=TIMEOUT_S)
        except Exception as error:
            return ProbeOutcome(False, _ms(started), error=type(error).__name__)
        finally:
            await client.close()
        return ProbeOutcome(True, _ms(started), version=info.git_version)

    async def close(self) -> None:
        return None


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


# -- throughput -----------------------------------------------------------------------------
async def register_fleet(services: Services, standins: list[StandIn], count: int) -> None:
    async with services.unit() as unit:
        org, _ = await create_token(unit, f"bench-{random.getrandbits(32):08x}", "ADMIN")
    viewer = Viewer(org.id, org.name, Role.ADMIN)
    for start in range(0, count, REGISTER_BATCH):
        async with services.unit() as unit:
            for index in range(start, min(count, start + REGISTER_BATCH)):
                standin = standins[index % len(standins)]
                config = {
                    "clusterName": f"cluster-{index}",
                    "server": f"{standin.url}/c{index}",
                    "caCert": standin.ca,
                    "serviceAccountToken": standin.token,
                }
                request = RegisterSpaceRequest(
                    f"space-{index}", "GENERIC", "KUBERNETES", None, config, False
                )
                await register(unit, viewer, services.secrets, request, ())


@dataclass(frozen=True)
class Pass:
    probes: int
    failures: int
    wall_s: float
    cpu_s: float
    standin_cpu_s: float
    machine_busy_s: float
    statements: int

    @property
    def rate(self) -> float:
        return self.probes / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return self.cpu_s / self.probes * 1000

    @property
    def standin_cpu_ms(self) -> float:
        return self.standin_cpu_s / self.probes * 1000

    @property
    def other_load_cores(self) -> float:
        """Cores kept busy by everything besides this benchmark and its stand-ins."""
        return max(0.0, self.machine_busy_s - self.cpu_s - self.standin_cpu_s) / self.wall_s

    @property
    def fleet_per_interval(self) -> float:
        return self.rate * INTERVAL_S

    @property
    def fleet_per_interval_at_70_percent(self) -> float:
        return 0.7 * INTERVAL_S / (self.cpu_s / self.probes)


async def probe_due_once(services: Services, loop: ProbeLoop, count: int, standin_pid: int) -> Pass:
    """Makes the first `count` spaces due now (the rest a day later), wakes the loop and
    waits until all their results are written."""
    async with services.unit() as unit:
        first = sa.select(col(Space.id)).order_by(col(Space.id)).limit(count).scalar_subquery()
        due = sa.case((col(Space.id).in_(first), unit.now), else_=unit.now + timedelta(days=1))
        await unit.session.execute(sa.update(Space).values(next_probe_at=due))
        started_at = unit.now
    probes, failures = loop.stats.probes, loop.stats.failures
    statements = services.database.statement_count
    cpu, standin_cpu, busy = time.process_time(), process_cpu_s(standin_pid), machine_busy_s()
    wall = time.perf_counter()
    services.probe_wanted.set()
    written = 0
    while written < count:
        await asyncio.sleep(0.05)
        if loop.stats.probes - probes >= count:
            async with services.read() as session:
                query = sa.select(sa.func.count()).where(col(Space.last_probe_at) >= started_at)
                written = int((await session.execute(query)).scalar_one())
    wall = time.perf_counter() - wall
    return Pass(
        probes=loop.stats.probes - probes,
        failures=loop.stats.failures - failures,
        wall_s=wall,
        cpu_s=time.process_time() - cpu,
        standin_cpu_s=process_cpu_s(standin_pid) - standin_cpu,
        machine_busy_s=machine_busy_s() - busy,
        statements=services.database.statement_count - statements,
    )


async def measure(
    name: str, services: Services, prober: Prober, fleet: int, warm_up: int, args: Any, pid: int
) -> Pass:
    settings = ProbeSettings(
        interval_s=INTERVAL_S, timeout_s=TIMEOUT_S, concurrency=args.concurrency
    )
    loop = ProbeLoop(services, prober, settings)
    loop.start()
    try:
        warm = await probe_due_once(services, loop, warm_up, pid)
        print(f"  {name}: warm-up pass over {warm_up:,} spaces, {warm.rate:,.0f}/s", flush=True)
        measured = await probe_due_once(services, loop, fleet, pid)
        print(f"  {name}: measured pass over {fleet:,} spaces, {measured.rate:,.0f}/s", flush=True)
    finally:
        await loop.stop()
    if measured.failures:
        print(f"  {name}: {measured.failures} probes failed (stand-ins overloaded?)", flush=True)
    return measured


async def throughput(args: argparse.Namespace, database_url: str) -> tuple[Pass, Pass]:
    database = Database(database_url)
    await database.migrate()
    services = Services(
        database=database,
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(INTERVAL_S),
    )
    try:
        with standin_process(args.standins, args.latency_ms) as (standins, pid):
            began = time.perf_counter()
            await register_fleet(services, standins, args.spaces)
            took = time.perf_counter() - began
            print(f"  registered {args.spaces:,} spaces in {took:.1f}s", flush=True)
            ours = await measure(
                "hot path", services, VersionProber(TIMEOUT_S), args.spaces, args.spaces, args, pid
            )
            baseline = await measure(
                "ApiClient/probe",
                services,
                ApiClientPerProbe(),
                min(args.spaces, args.baseline_spaces),
                min(args.spaces, 300),
                args,
                pid,
            )
        return ours, baseline
    finally:
        if not database.is_sqlite:
            async with database.transaction() as session:
                await session.execute(sa.delete(Space))
        await database.dispose()


# -- detection latency ----------------------------------------------------------------------
class Watch:
    """A real server probing one stand-in, watched by a subscriber and by a poller."""

    def __init__(self, client: GraphQL, space_id: str) -> None:
        self.client = client
        self.space_id = space_id
        self.statuses: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
        self.delivery_s: dict[str, list[float]] = {"ACTIVE": [], "INACTIVE": [], "UNKNOWN": []}
        self.polls: list[tuple[str, float]] = []

    async def subscribe(self, session: Any) -> None:
        query = gql("subscription($id: ID) { spaceStatusChanged(spaceId: $id) { status at } }")
        query.variable_values = {"id": self.space_id}
        async for result in session.subscribe(query):
            event = result["spaceStatusChanged"]
            # From the transaction that wrote the event (its `at`) to this subscriber.
            written = datetime.fromisoformat(event["at"]).timestamp()
            self.delivery_s[event["status"]].append(time.time() - written)
            self.statuses.put_nowait((event["status"], time.perf_counter()))

    async def pushed(self, wanted: str) -> float:
        while True:
            status, at = await asyncio.wait_for(self.statuses.get(), 30)
            if status == wanted:
                return at

    async def poll(self) -> None:
        """Once a second, on its own schedule, unrelated to when a cluster goes down."""
        query = "query($id: ID!) { space(id: $id) { status } }"
        while True:
            data = await self.client.data(query, {"id": self.space_id})
            self.polls.append((data["space"]["status"], time.perf_counter()))
            await asyncio.sleep(1.0)

    async def polled(self, wanted: str, since: float) -> float:
        while True:
            seen = [at for status, at in self.polls if status == wanted and at >= since]
            if seen:
                return seen[0]
            await asyncio.sleep(0.05)


async def detection(trials: int) -> tuple[list[float], list[float], list[float]]:
    directory = Path(tempfile.mkdtemp(prefix="spacedock-bench-"))
    backend = Backend.sqlite(directory)
    settings = {"INTERVAL_S": "1", "FAILURE_THRESHOLD": "3", "TIMEOUT_S": "0.5"}
    server = Server(
        backend=backend,
        log_path=directory / "server.log",
        env={f"SPACEDOCK_PROBE_{name}": value for name, value in settings.items()},
    )
    await asyncio.to_thread(server.start)
    pushed: list[float] = []
    polled: list[float] = []
    try:
        client = GraphQL(server.url, server.ws_url, await mint_token(backend.url, "bench", "admin"))
        with KubeStandIn() as cluster:
            config = {
                "clusterName": "watched",
                "server": cluster.url,
                "caCert": cluster.ca_pem,
                "serviceAccountToken": cluster.token,
            }
            payload = await client.mutate(
                REGISTER_SPACE,
                {"input": {"name": "watched", "provider": "GENERIC", "config": config}},
            )
            watch = Watch(client, succeeded(payload)["space"]["id"])
            async with client.websocket() as session:
                reader = asyncio.create_task(watch.subscribe(session))
                poller = asyncio.create_task(watch.poll())
                await watch.pushed("ACTIVE")
                for trial in range(trials):
                    await asyncio.sleep(1.0 + random.random())  # down at any moment of an interval
                    cluster.refuse()
                    down_at = time.perf_counter()
                    pushed.append(await watch.pushed("INACTIVE") - down_at)
                    polled.append(await watch.polled("INACTIVE", down_at) - down_at)
                    print(
                        f"  trial {trial + 1}: subscriber {pushed[-1]:.2f}s, poller {polled[-1]:.2f}s",
                        flush=True,
                    )
                    cluster.heal()
                    await watch.pushed("ACTIVE")
                for task in (reader, poller):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
    finally:
        await asyncio.to_thread(server.stop)
    return pushed, polled, watch.delivery_s["INACTIVE"]


# -- report ---------------------------------------------------------------------------------
def report_throughput(ours: Pass, baseline: Pass) -> None:
    print()
    print("Probe throughput: the real loop and database, stand-ins in another process")
    print(f"  {'':36}{'hot path':>14}{'ApiClient/probe':>18}")
    rows = [
        ("spaces in the measured pass", f"{ours.probes:,}", f"{baseline.probes:,}"),
        ("wall time", f"{ours.wall_s:.2f} s", f"{baseline.wall_s:.2f} s"),
        ("probes per second sustained", f"{ours.rate:,.0f}", f"{baseline.rate:,.0f}"),
        ("CPU per probe, this process", f"{ours.cpu_ms:.2f} ms", f"{baseline.cpu_ms:.2f} ms"),
        (
            "CPU per probe, stand-ins",
            f"{ours.standin_cpu_ms:.2f} ms",
            f"{baseline.standin_cpu_ms:.2f} ms",
        ),
        (
            "SQL statements per probe",
            f"{ours.statements / ours.probes:.3f}",
            f"{baseline.statements / baseline.probes:.3f}",
        ),
        (
            "other load on the machine",
            f"{ours.other_load_cores:.2f} cores",
            f"{baseline.other_load_cores:.2f} cores",
        ),
        (
            "fleet per 60 s at this rate",
            f"{ours.fleet_per_interval:,.0f}",
            f"{baseline.fleet_per_interval:,.0f}",
        ),
        (
            "fleet per 60 s, 70% of a core",
            f"{ours.fleet_per_interval_at_70_percent:,.0f}",
            f"{baseline.fleet_per_interval_at_70_percent:,.0f}",
        ),
    ]
    for label, mine, theirs in rows:
        print(f"  {label:36}{mine:>14}{theirs:>18}")
    print(
        f"  CPU per probe: hot path {baseline.cpu_ms / ours.cpu_ms:.1f}x cheaper than the baseline."
        " Fleet at 70% of a core = 0.7 x 60 s / CPU per probe."
    )


def report_detection(pushed: list[float], polled: list[float], delivery: list[float]) -> None:
    print()
    print("Cluster down -> INACTIVE, interval 1 s, threshold 3 (real server, gql WebSocket)")
    for label, values in (
        ("subscriber (spaceStatusChanged)", pushed),
        ("baseline: poll status every 1 s", polled),
    ):
        print(
            f"  {label:34} median {statistics.median(values):.2f} s, "
            f"min {min(values):.2f} s, max {max(values):.2f} s ({len(values)} trials)"
        )
    print(
        f"  Of this, event transaction -> subscriber: median {statistics.median(delivery) * 1000:.0f} ms;"
        " the rest is the third failing probe, 2-3 intervals after the cluster went down."
    )


async def main(args: argparse.Namespace) -> None:
    database_url = args.database_url or (
        f"sqlite+aiosqlite:///{Path(tempfile.mkdtemp(prefix='spacedock-bench-')) / 'bench.db'}"
    )
    engine = "Postgres" if args.database_url else "SQLite"
    print(
        f"spacedock probe benchmark: {os.cpu_count()} cores, uvloop, {engine}, "
        f"{args.standins} stand-ins answering after {args.latency_ms:g} ms, "
        f"concurrency {args.concurrency}",
        flush=True,
    )
    ours, baseline = await throughput(args, database_url)
    report_throughput(ours, baseline)
    if args.detection_trials:
        print("\nDetection latency", flush=True)
        report_detection(*await detection(args.detection_trials))
    verdict = "met" if ours.fleet_per_interval >= 10_000 else "missed"
    print(
        f"\nTarget of 10,000 spaces per 60 s interval in one process: {verdict} at the measured "
        f"rate ({ours.fleet_per_interval:,.0f}); "
        f"{ours.fleet_per_interval_at_70_percent:,.0f} by CPU at 70% of a core."
    )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spaces", type=int, default=10_000, help="fleet for the hot path")
    parser.add_argument(
        "--baseline-spaces", type=int, default=3_000, help="of those, probed by the baseline"
    )
    parser.add_argument("--latency-ms", type=float, default=20.0, help="stand-in answer delay")
    parser.add_argument("--standins", type=int, default=4, help="stand-in API servers")
    parser.add_argument("--concurrency", type=int, default=256, help="probes in flight at most")
    parser.add_argument("--detection-trials", type=int, default=5, help="0 skips detection")
    parser.add_argument("--database-url", help="Postgres URL of an empty database")
    parser.add_argument("--serve-standins", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.serve_standins:
        serve_standins(arguments.serve_standins, arguments.latency_ms)
    else:
        # The server runs on uvloop (uvicorn's default when it is installed); so does this.
        uvloop.run(main(arguments))
