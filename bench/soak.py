"""Soak bench (issue 19): two replicas under steady load with faults, for --minutes.

What runs, all on loopback:

- a fresh Postgres database and two `spacedock serve` replicas on it (probe interval
  --interval s): A reaches Postgres directly, B through a TCP forwarder that is cut for
  --cut-s seconds halfway through (B's pool and LISTEN connection drop with it);
- --clusters TLS Kubernetes stand-ins in a child process; every space of every org
  (--orgs of them) is registered on each stand-in, so one stand-in going down flips one
  space per org. Each quiet minute a few stand-ins flip (--quiet-flips); every
  --storm-every minutes a storm takes --storm-share of them down at once and back half a
  minute later;
- --subscribers graphql-transport-ws subscribers per replica, spread over the orgs, half
  org-wide and half following a few spaces by `spaceIds`; each records every frame's
  event id and when it arrived (the event's `at` is when the server committed it);
- one `spaceProbed` watcher per org on A, recording every probe result's time per space
  (probe regularity: the gaps between a space's probes);
- a reader asking a page of spaces at about --reads-per-s per replica.

It prints, from what it recorded and from the database:

- probe regularity: gaps between consecutive probes of a space (p50 / p99 / max), how
  many exceed 2 intervals, probe lateness (gap minus interval), quiet vs storm minutes;
- delivery latency (receipt minus the event's `at`), quiet vs storm minutes, p50 / p99;
- events missed and duplicated per subscriber group (replica x org-wide/filtered),
  against the events the database holds for what each follows while it listened;
- RSS of each replica over time with its slope in MiB/h after the warm-up (the first
  --warmup-minutes) against the slope of those first minutes; open FDs and database
  connections at the start and the end of the run;
- reader latency p50 / p99.

The machine is shared: wall-clock figures depend on what else runs (the load average is
printed). Run: `.venv/bin/python bench/soak.py --postgres postgresql+asyncpg://postgres@127.0.0.1:5432/test --minutes 30`.
With `--before DIR` (a `git worktree` of an earlier commit) replica A runs that code: the two
replicas then compare before and after in one run, under the same load and the same storms
(B alone is cut, and its cut minute is reported apart).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import asyncpg  # type: ignore[import-untyped]  # noqa: E402
import sqlalchemy as sa  # noqa: E402
import uvloop  # noqa: E402

from bench.common import load_average, percentile, process_cpu_s, process_rss_kib  # noqa: E402
from tests.support.factories import REGISTER_SPACE  # noqa: E402
from tests.support.server import Backend, Server, mint_token  # noqa: E402
from tests.support.tcp_proxy import TcpProxy  # noqa: E402

EVENTS = "subscription($ids: [ID!]) { spaceStatusChanged(spaceIds: $ids) { id spaceId status at } }"
PROBED = "subscription($ids: [ID!]!) { spaceProbed(spaceIds: $ids) { spaceId result { at ok } } }"
HISTORY = """
query($after: String, $ids: [ID!]) {
  statusEvents(first: 100, after: $after, spaceIds: $ids) {
    pageInfo { hasNextPage endCursor }
    nodes { id }
  }
}"""
READ = "{ spaces(first: 50) { totalCount nodes { id name status lastProbe { at ok } } } }"
FOLLOWED_PER_FILTER = 5


# -- stand-ins, in their own process --------------------------------------------------------
def serve_standins(count: int) -> None:
    """Child process: `count` stand-ins announced as JSON lines; then commands on stdin:
    `down i j ...` answers 503 on those, `up i j ...` heals them."""
    from sim.kube_standin import KubeStandIn

    standins = [KubeStandIn().start() for _ in range(count)]
    for standin in standins:
        print(json.dumps({"url": standin.url, "ca": standin.ca_pem, "token": standin.token}))
    sys.stdout.flush()
    for line in sys.stdin:
        command, *numbers = line.split()
        for number in numbers:
            standins[int(number)].status_code = 503 if command == "down" else None
    for standin in standins:
        standin.stop()


class StandIns:
    def __init__(self, count: int) -> None:
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--serve-standins", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the stand-ins' own shutdown noise
            text=True,
            cwd=REPO,
        )
        assert self.child.stdout is not None
        self.clusters = [json.loads(self.child.stdout.readline()) for _ in range(count)]
        self.down: set[int] = set()

    def set(self, down: set[int], up: set[int]) -> None:
        assert self.child.stdin is not None
        if down:
            self.child.stdin.write("down " + " ".join(map(str, sorted(down))) + "\n")
        if up:
            self.child.stdin.write("up " + " ".join(map(str, sorted(up))) + "\n")
        self.child.stdin.flush()
        self.down = (self.down | down) - up

    def stop(self) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=30)


# -- what the clients record ------------------------------------------------------------------
@dataclass
class Subscriber:
    replica: str
    org: int
    space_ids: list[str] | None
    token: str
    url: str
    received: list[tuple[str, float, float]] = field(default_factory=list)  # id, at, got
    closes: list[int | None] = field(default_factory=list)
    baseline: str | None = None  # the org's newest event id once listening
    stopped_at: float = 0.0

    @property
    def group(self) -> str:
        return f"{self.replica} {'org-wide' if self.space_ids is None else 'spaceIds'}"


def event_time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def ws_session(
    http: aiohttp.ClientSession, url: str, token: str, query: str, variables: dict[str, Any]
) -> aiohttp.ClientWebSocketResponse:
    socket = await http.ws_connect(url, protocols=["graphql-transport-ws"], heartbeat=None)
    await socket.send_json(
        {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
    )
    ack = await socket.receive_json()
    assert ack["type"] == "connection_ack", ack
    payload = {"query": query, "variables": variables}
    await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
    return socket


async def follow(http: aiohttp.ClientSession, subscriber: Subscriber, stop: asyncio.Event) -> None:
    """Records every event frame; on a closed socket it reconnects and catches up from the
    last id as the README says (those are counted as closes)."""
    while not stop.is_set():
        try:
            socket = await ws_session(
                http, subscriber.url, subscriber.token, EVENTS, {"ids": subscriber.space_ids}
            )
        except (aiohttp.ClientError, OSError, AssertionError, RuntimeError, TypeError):
            if stop.is_set():
                return
            await asyncio.sleep(1)
            continue
        try:
            async for message in socket:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                frame = json.loads(message.data)
                data = (frame.get("payload") or {}).get("data")
                if frame["type"] == "next" and data:
                    event = data["spaceStatusChanged"]
                    subscriber.received.append((event["id"], event_time(event["at"]), time.time()))
        finally:
            await socket.close()
        subscriber.closes.append(socket.close_code)


async def watch_probes(
    http: aiohttp.ClientSession,
    url: str,
    token: str,
    space_ids: list[str],
    probes: dict[str, list[float]],
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        try:
            socket = await ws_session(http, url, token, PROBED, {"ids": space_ids})
        except (aiohttp.ClientError, OSError, AssertionError, RuntimeError, TypeError):
            if stop.is_set():
                return
            await asyncio.sleep(1)
            continue
        try:
            async for message in socket:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                frame = json.loads(message.data)
                data = (frame.get("payload") or {}).get("data")
                if frame["type"] == "next" and data:
                    probed = data["spaceProbed"]
                    probes[probed["spaceId"]].append(event_time(probed["result"]["at"]))
        finally:
            await socket.close()


async def read_loop(
    http: aiohttp.ClientSession,
    url: str,
    token: str,
    per_s: float,
    latencies: list[tuple[float, float, int]],
    stop: asyncio.Event,
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    while not stop.is_set():
        started = time.time()
        try:
            async with http.post(url, json={"query": READ}, headers=headers) as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, OSError):
            status = 0
        latencies.append((started, time.time() - started, status))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, 1 / per_s - (time.time() - started)))


# -- the run ------------------------------------------------------------------------------
@dataclass
class Sample:
    at: float
    rss_mib: dict[str, float]
    fds: dict[str, int]
    db_connections: int
    cpu_s: dict[str, float]


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def db_connections(admin_dsn: str, database: str) -> int:
    connection = await asyncpg.connect(admin_dsn)
    try:
        return int(
            await connection.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database
            )
        )
    finally:
        await connection.close()


async def history(
    http: aiohttp.ClientSession,
    url: str,
    token: str,
    after: str | None,
    space_ids: list[str] | None,
) -> list[str]:
    ids: list[str] = []
    headers = {"Authorization": f"Bearer {token}"}
    while True:
        body = {"query": HISTORY, "variables": {"after": after, "ids": space_ids}}
        async with http.post(url, json=body, headers=headers) as response:
            page = (await response.json())["data"]["statusEvents"]
        ids += [node["id"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def register_all(
    http: aiohttp.ClientSession, url: str, token: str, org: int, clusters: list[dict[str, str]]
) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    ids = []
    for number, cluster in enumerate(clusters):
        config = {
            "clusterName": f"c{number}",
            "server": cluster["url"],
            "caCert": cluster["ca"],
            "serviceAccountToken": cluster["token"],
        }
        body = {
            "query": REGISTER_SPACE,
            "variables": {
                "input": {"name": f"o{org}-c{number}", "provider": "GENERIC", "config": config}
            },
        }
        async with http.post(url, json=body, headers=headers) as response:
            payload = (await response.json())["data"]["registerSpace"]
        assert not payload["userErrors"], payload["userErrors"]
        ids.append(payload["space"]["id"])
    return ids


KINDS = ("quiet", "storm", "cut")


def minute_kind(kinds: dict[int, str], started: float, at: float) -> str:
    """What happened in the minute of `at`: quiet, a storm, or B's database cut."""
    return kinds.get(int((at - started) // 60), "quiet")


def slope_mib_per_h(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    xs = [t for t, _ in points]
    ys = [v for _, v in points]
    return statistics.linear_regression(xs, ys).slope * 3600


def pcts(values: list[float], unit_ms: bool = True) -> str:
    if not values:
        return "—"
    scale = 1000 if unit_ms else 1
    return (
        f"{percentile(values, 0.5) * scale:.0f} / {percentile(values, 0.99) * scale:.0f} / "
        f"{max(values) * scale:.0f}"
    )


async def run(args: argparse.Namespace, backend: Backend) -> None:
    random.seed(args.seed)
    admin_dsn = args.postgres.replace("postgresql+asyncpg", "postgresql")
    database_name = sa.make_url(backend.url).database or ""
    url = sa.make_url(backend.url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
    through = Backend("postgres", url.set(port=proxy.port).render_as_string(hide_password=False))
    env = {
        "SPACEDOCK_PROBE_INTERVAL_S": str(args.interval),
        "SPACEDOCK_PROBE_TIMEOUT_S": "2",
    }
    logs = Path(args.logs)
    await asyncio.to_thread(logs.mkdir, parents=True, exist_ok=True)
    before = Path(args.before) if args.before else REPO
    a = Server(backend=backend, log_path=logs / "a.log", env=dict(env), repo=before).start()
    b = Server(
        backend=through, log_path=logs / "b.log", env={**env, "SPACEDOCK_SECRET_KEY": a.secret_key}
    ).start()
    replicas = {"A": a, "B": b}
    standins = StandIns(args.clusters)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            org_tokens = []
            spaces: list[list[str]] = []
            for org in range(args.orgs):
                admin = await mint_token(backend.url, f"soak-{org}", "admin")
                viewer = await mint_token(backend.url, f"soak-{org}", "viewer")
                org_tokens.append((admin, viewer))
                spaces.append(await register_all(http, a.url, admin, org, standins.clusters))
            print(
                f"{args.orgs} orgs x {args.clusters} clusters = {args.orgs * args.clusters} spaces; "
                f"probe interval {args.interval:g} s; {load_average()}",
                flush=True,
            )

            subscribers: list[Subscriber] = []
            for name, server in replicas.items():
                for number in range(args.subscribers):
                    org = number % args.orgs
                    followed = (
                        None if number % 2 == 0 else random.sample(spaces[org], FOLLOWED_PER_FILTER)
                    )
                    subscribers.append(
                        Subscriber(name, org, followed, org_tokens[org][1], server.ws_url)
                    )
            for subscriber in subscribers:
                tasks.append(asyncio.create_task(follow(http, subscriber, stop)))
            probes: dict[str, list[float]] = defaultdict(list)
            for org in range(args.orgs):
                for start in range(0, len(spaces[org]), 100):
                    tasks.append(
                        asyncio.create_task(
                            watch_probes(
                                http,
                                a.ws_url,
                                org_tokens[org][1],
                                spaces[org][start : start + 100],
                                probes,
                                stop,
                            )
                        )
                    )
            expected_listening = args.subscribers + (args.orgs * ((args.clusters + 99) // 100))
            for _ in itertools.count():  # the gauges of the two servers
                with contextlib.suppress(OSError):  # a server busy admitting: ask again
                    if (
                        await asyncio.to_thread(a.metric, "spacedock_event_subscribers")
                        >= expected_listening
                        and await asyncio.to_thread(b.metric, "spacedock_event_subscribers")
                        >= args.subscribers
                    ):
                        break
                await asyncio.sleep(0.5)
            # What each subscriber must get: the org's events after its newest one now.
            newest = {}
            for org in range(args.orgs):
                known = await history(http, a.url, org_tokens[org][1], None, None)
                newest[org] = known[-1] if known else None
            for subscriber in subscribers:
                subscriber.baseline = newest[subscriber.org]
            readings: dict[str, list[tuple[float, float, int]]] = {"A": [], "B": []}
            for name, server in replicas.items():
                tasks.append(
                    asyncio.create_task(
                        read_loop(
                            http,
                            server.url,
                            org_tokens[0][1],
                            args.reads_per_s,
                            readings[name],
                            stop,
                        )
                    )
                )

            started = time.time()
            minutes = args.minutes
            storm_minutes = {m for m in range(1, minutes) if m % args.storm_every == 0}
            cut_minute = minutes // 2 if minutes >= 4 else None
            if cut_minute in storm_minutes:
                cut_minute = (cut_minute or 0) + 1
            kinds = {m: "storm" for m in storm_minutes}
            if cut_minute is not None:
                kinds[cut_minute] = "cut"
            samples: list[Sample] = []
            storm_size = max(1, round(args.clusters * args.storm_share))
            print(
                f"{minutes} min; storms at minutes {sorted(storm_minutes)} ({storm_size} stand-ins "
                f"each, {storm_size * args.orgs} spaces); B's database cut at minute {cut_minute} "
                f"for {args.cut_s:g} s",
                flush=True,
            )
            cut_done = False
            for minute in range(minutes):
                minute_start = started + minute * 60
                standins.set(set(), set(standins.down))  # last minute's flips come back
                if minute in storm_minutes:
                    storm = set(random.sample(range(args.clusters), storm_size))
                    standins.set(storm, set())
                    await sleep_until(
                        minute_start + 30, samples, replicas, admin_dsn, database_name
                    )
                    standins.set(set(), storm)
                else:
                    standins.set(set(random.sample(range(args.clusters), args.quiet_flips)), set())
                    if minute == cut_minute and not cut_done:
                        # From before this minute's flips become transitions (three failed
                        # probes) until after, so events are written during the cut.
                        await sleep_until(
                            minute_start + 5, samples, replicas, admin_dsn, database_name
                        )
                        await asyncio.to_thread(proxy.cut)
                        await sleep_until(
                            minute_start + 5 + args.cut_s,
                            samples,
                            replicas,
                            admin_dsn,
                            database_name,
                        )
                        await asyncio.to_thread(proxy.restore)
                        cut_done = True
                await sleep_until(minute_start + 60, samples, replicas, admin_dsn, database_name)
                s = samples[-1]
                print(
                    f"  minute {minute + 1}: RSS A {s.rss_mib['A']:.0f} MiB, B {s.rss_mib['B']:.0f} MiB; "
                    f"FDs {s.fds['A']}/{s.fds['B']}; db connections {s.db_connections}",
                    flush=True,
                )
            standins.set(set(), set(standins.down))
            ended = time.time()
            await asyncio.sleep(3 * args.interval)  # deliveries in flight arrive
            stop.set()
            for subscriber in subscribers:
                subscriber.stopped_at = time.time()
            await asyncio.sleep(1)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

            # -- the report ------------------------------------------------------------
            print(
                f"\n## soak: {minutes} min, {args.orgs * args.clusters} spaces, "
                f"{2 * args.subscribers} subscribers; {load_average()}"
            )
            # Probe regularity, delivery and reads, per minute kind (the first minute is
            # the warm-up of the probe schedule).
            gaps: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for times in probes.values():
                for earlier, later in itertools.pairwise(sorted(times)):
                    if started + 60 <= later <= ended:
                        gaps[minute_kind(kinds, started, later)].append(later - earlier)
            delivery: dict[str, dict[str, list[float]]] = {
                name: {kind: [] for kind in KINDS} for name in replicas
            }
            for subscriber in subscribers:
                for _, at, got in subscriber.received:
                    if started <= at <= ended:
                        kind = minute_kind(kinds, started, at)
                        delivery[subscriber.replica][kind].append(got - at)
            print("\n| figure | quiet minutes | storm minutes | minute of B's cut |")
            print("|---|---|---|---|")

            def table_row(label: str, values: dict[str, str]) -> None:
                print(f"| {label} | " + " | ".join(values[kind] for kind in KINDS) + " |")

            interval = args.interval
            table_row(
                "probe gap p50 / p99 / max (s)",
                {k: pcts(g, unit_ms=False) for k, g in gaps.items()},
            )
            table_row(
                "probe gaps over 2 intervals",
                {k: str(sum(x > 2 * interval for x in g)) for k, g in gaps.items()},
            )
            table_row(
                "probe lateness p99 (s)",
                {
                    k: f"{max(0.0, percentile(g, 0.99) - interval):.1f}" if g else "—"
                    for k, g in gaps.items()
                },
            )
            for name in replicas:
                table_row(
                    f"delivery on {name}, event `at` to receipt, p50 / p99 / max (ms)",
                    {k: pcts(d) for k, d in delivery[name].items()},
                )
            for name in replicas:
                reads: dict[str, list[float]] = {kind: [] for kind in KINDS}
                for at, took, _ in readings[name]:
                    reads[minute_kind(kinds, started, at)].append(took)
                table_row(
                    f"reader on {name} p50 / p99 / max (ms)", {k: pcts(r) for k, r in reads.items()}
                )
            statuses = Counter(s for name in replicas for _, _, s in readings[name])
            print(f"\nreader answers by HTTP status: {dict(statuses)}")

            # Missed and duplicated, against the database.
            print(
                "\n| subscriber group | subscribers | events expected | missed | duplicated | sockets closed |\n|---|---|---|---|---|---|"
            )
            by_group: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
            cache: dict[tuple[int, str | None, tuple[str, ...] | None], list[str]] = {}
            for subscriber in subscribers:
                key = (
                    subscriber.org,
                    subscriber.baseline,
                    None if subscriber.space_ids is None else tuple(subscriber.space_ids),
                )
                if key not in cache:
                    cache[key] = await history(
                        http,
                        a.url,
                        org_tokens[subscriber.org][1],
                        subscriber.baseline,
                        subscriber.space_ids,
                    )
                ids_expected = cache[key]
                ids_got = [event_id for event_id, _, _ in subscriber.received]
                counts = by_group[subscriber.group]
                counts[0] += 1
                counts[1] += len(ids_expected)
                counts[2] += len(set(ids_expected) - set(ids_got))
                counts[3] += len(ids_got) - len(set(ids_got))
                counts[4] += len(subscriber.closes)
            for group, (count, expected_n, missed, duplicated, closed) in sorted(by_group.items()):
                print(f"| {group} | {count} | {expected_n} | {missed} | {duplicated} | {closed} |")

            # Memory, FDs, connections.
            warm = started + args.warmup_minutes * 60
            print(
                "\n| replica | RSS first / last (MiB) | slope first minutes (MiB/h) | slope after warm-up (MiB/h) | FDs first / last |\n|---|---|---|---|---|"
            )
            for name in replicas:
                points = [(s.at, s.rss_mib[name]) for s in samples]
                early = slope_mib_per_h([p for p in points if p[0] <= warm])
                late = slope_mib_per_h([p for p in points if p[0] > warm])
                print(
                    f"| {name} | {points[0][1]:.0f} / {points[-1][1]:.0f} | "
                    f"{'—' if early is None else f'{early:.0f}'} | {'—' if late is None else f'{late:.0f}'} | "
                    f"{samples[0].fds[name]} / {samples[-1].fds[name]} |"
                )
            cpu_table(replicas, samples, subscribers, kinds, started)
            print(
                f"\ndatabase connections first / max / last: {samples[0].db_connections} / "
                f"{max(s.db_connections for s in samples)} / {samples[-1].db_connections}"
            )
            for name, server in replicas.items():
                log = server.log()
                print(
                    f"{name} log: {log.count('replayed')} replays, "
                    f"{log.count('never retrieved')} 'never retrieved', "
                    f"{log.count('Task was destroyed')} 'Task was destroyed', "
                    f"{log.count('Traceback')} tracebacks"
                )
    finally:
        stop.set()
        standins.stop()
        for server in replicas.values():
            server.stop()
        proxy.stop()


def per_minute(values: dict[str, float], span: dict[str, float], kind: str) -> float:
    return values.get(kind, 0.0) / span[kind] if span.get(kind) else 0.0


def cpu_table(
    replicas: dict[str, Server],
    samples: list[Sample],
    subscribers: list[Subscriber],
    kinds: dict[int, str],
    started: float,
) -> None:
    """Each replica's CPU per minute in quiet and storm minutes, and what a storm's extra
    events and deliveries cost it: (storm CPU - quiet CPU) / (storm - quiet count), per
    minute, so the probing both kinds of minute share drops out."""
    print(
        "\n| replica | CPU s per quiet / storm minute | events per quiet / storm minute | "
        "deliveries per quiet / storm minute | CPU ms per storm event | CPU ms per storm delivery |"
        "\n|---|---|---|---|---|---|"
    )
    for name in replicas:
        cpu: dict[str, float] = defaultdict(float)
        span: dict[str, float] = defaultdict(float)
        for earlier, later in itertools.pairwise(samples):
            kind = minute_kind(kinds, started, later.at)
            if later.at >= started + 60:  # the first minute warms up
                cpu[kind] += later.cpu_s[name] - earlier.cpu_s[name]
                span[kind] += (later.at - earlier.at) / 60
        events: dict[str, set[str]] = defaultdict(set)
        deliveries: dict[str, int] = defaultdict(int)
        for subscriber in subscribers:
            if subscriber.replica != name:
                continue
            for event_id, at, _ in subscriber.received:
                if at >= started + 60:
                    events[minute_kind(kinds, started, at)].add(event_id)
                    deliveries[minute_kind(kinds, started, at)] += 1

        counts = {kind: float(len(ids)) for kind, ids in events.items()}
        frames = {kind: float(n) for kind, n in deliveries.items()}
        extra_cpu = per_minute(cpu, span, "storm") - per_minute(cpu, span, "quiet")
        extra_events = per_minute(counts, span, "storm") - per_minute(counts, span, "quiet")
        extra_frames = per_minute(frames, span, "storm") - per_minute(frames, span, "quiet")
        print(
            f"| {name} | {per_minute(cpu, span, 'quiet'):.1f} / {per_minute(cpu, span, 'storm'):.1f} | "
            f"{per_minute(counts, span, 'quiet'):.0f} / {per_minute(counts, span, 'storm'):.0f} | "
            f"{per_minute(frames, span, 'quiet'):.0f} / {per_minute(frames, span, 'storm'):.0f} | "
            f"{extra_cpu * 1000 / extra_events if extra_events > 0 else float('nan'):.1f} | "
            f"{extra_cpu * 1000 / extra_frames if extra_frames > 0 else float('nan'):.2f} |"
        )


async def sleep_until(
    when: float, samples: list[Sample], replicas: dict[str, Server], admin_dsn: str, database: str
) -> None:
    """Sleeps until `when`, sampling memory, FDs and connections every 10 s."""
    while (left := when - time.time()) > 0:
        if not samples or time.time() - samples[-1].at >= 10:
            rss = {}
            fds = {}
            cpu = {}
            for name, server in replicas.items():
                assert server.process is not None
                rss[name] = process_rss_kib(server.process.pid) / 1024
                fds[name] = fd_count(server.process.pid)
                cpu[name] = process_cpu_s(server.process.pid)
            connections = await db_connections(admin_dsn, database)
            samples.append(Sample(time.time(), rss, fds, connections, cpu))
        await asyncio.sleep(min(left, 10 - (time.time() - samples[-1].at)))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--orgs", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=40)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--subscribers", type=int, default=100, help="per replica")
    parser.add_argument("--quiet-flips", type=int, default=2)
    parser.add_argument("--storm-every", type=int, default=3)
    parser.add_argument("--storm-share", type=float, default=0.1)
    parser.add_argument("--cut-s", type=float, default=20.0)
    parser.add_argument("--reads-per-s", type=float, default=2.0)
    parser.add_argument("--warmup-minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--logs", default="/tmp/spacedock-soak")
    parser.add_argument(
        "--before",
        help="a checkout (git worktree) whose code replica A runs, as the baseline of the "
        "same run; B runs this one",
    )
    parser.add_argument("--serve-standins", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.serve_standins:
        serve_standins(arguments.serve_standins)
    else:
        made = Backend.postgres(arguments.postgres)
        try:
            uvloop.run(run(arguments, made))
        finally:
            made.dispose(arguments.postgres)
