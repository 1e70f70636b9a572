"""Benchmark of status fan-out to many graphql-transport-ws subscribers, against the
in-memory ceiling (bench/ceiling.py) measured in the same run.

For each size (1,000 and 5,000 subscribers by default) a fresh `spacedock serve` process
and a fresh ceiling process start; a few client processes on loopback open one WebSocket
per subscriber, each with `subscription { spaceStatusChanged { ... space { name status } } }`,
to both servers. Then, interleaved (spacedock, ceiling, spacedock, ...), one status change
at a time is made with `setSpaceStatus(INACTIVE)` on a space of its own:

- a quiet event: latency from sending the mutation to receipt at every subscriber
  (p50 / p99 / max; it includes the mutation's own write, so it bounds commit -> receipt
  from above), and the server's CPU for the whole event (mutation and fan-out);
- a busy event: the same change while one more client asks `{ viewer { role } }` over
  and over; the slowest of those answers is what an unrelated user waits during a fan-out.

Before the events, connecting and subscribing costs server CPU per subscription, and the
server's resident memory grows per idle subscription; both are printed. Each figure is the
median over the events with its range, next to the ceiling's and the ratio.

Bounded: at most 20,000 subscribers per size, a per-event wait (--event-timeout) after
which missing deliveries are counted, and an overall --time-limit after which it stops,
stops every process it started, and prints what it has.

Run: `.venv/bin/python bench/fanout.py` (about 5 minutes on an idle 2-core machine;
`--help`). `--postgres URL` (an admin URL) runs spacedock on a fresh Postgres database with
its LISTEN/NOTIFY bus instead of SQLite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import uvloop  # noqa: E402

from bench.common import (  # noqa: E402
    CLIENT_KEEPALIVE_S,
    Ceiling,
    load_average,
    process_cpu_s,
    process_rss_kib,
)
from bench.graphql_reads import FULL, QUERIES  # noqa: E402
from sim.ports import free_port  # noqa: E402
from tests.support import factories as make  # noqa: E402
from tests.support.server import Backend, Server, mint_token  # noqa: E402

MAX_SUBSCRIBERS = 20_000
SUBSCRIPTION = (
    "subscription { spaceStatusChanged "
    "{ spaceId previous status at reason space { name status } } }"
)
UNRELATED = "{ viewer { role } }"
# The operator hold both servers serve: it changes one space's status, so one event.
HOLD = (
    "mutation($input: SetSpaceStatusInput!) "
    "{ setSpaceStatus(input: $input) { space { id status } userErrors { field message } } }"
)
CONNECT_CONCURRENCY = 64  # handshakes in flight per client process
READ_LIMIT = 16 * 1024 * 1024  # a client's line holds a receipt time per subscriber


# -- client processes -------------------------------------------------------------------
class Subscribers:
    """One client process's WebSockets, each with one subscription."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.received: dict[str, list[float]] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.count = 0
        self.tasks: list[asyncio.Task[None]] = []

    async def open(self, session: aiohttp.ClientSession, count: int, per_connection: int) -> None:
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
        shares = [min(per_connection, count - start) for start in range(0, count, per_connection)]
        ready = [asyncio.get_running_loop().create_future() for _ in shares]
        self.tasks = [
            asyncio.create_task(self._one(session, gate, share, done))
            for share, done in zip(shares, ready, strict=True)
        ]
        await asyncio.gather(*ready)
        self.count = count

    async def _one(
        self,
        session: aiohttp.ClientSession,
        gate: asyncio.Semaphore,
        subscriptions: int,
        ready: asyncio.Future[None],
    ) -> None:
        async with gate:
            socket = await session.ws_connect(self.url, protocols=("graphql-transport-ws",))
            await socket.send_json(
                {"type": "connection_init", "payload": {"Authorization": f"Bearer {self.token}"}}
            )
            acknowledged = await socket.receive_json()
            assert acknowledged["type"] == "connection_ack", acknowledged
            for number in range(subscriptions):
                await socket.send_json(
                    {"type": "subscribe", "id": str(number), "payload": {"query": SUBSCRIPTION}}
                )
        ready.set_result(None)
        async for message in socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            at = time.time()
            frame = json.loads(message.data)
            if frame["type"] == "ping":
                await socket.send_json({"type": "pong"})
                continue
            assert frame["type"] == "next", frame
            marker = frame["payload"]["data"]["spaceStatusChanged"]["spaceId"]
            self.received.setdefault(marker, []).append(at)
            if len(self.received[marker]) == self.count:
                self.arrived.setdefault(marker, asyncio.Event()).set()

    async def collect(self, marker: str, timeout_s: float) -> list[float]:
        arrived = self.arrived.setdefault(marker, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await arrived.wait()
        return self.received.pop(marker, [])


async def client_main(
    url: str, token: str, count: int, per_connection: int, timeout_s: float
) -> None:
    """Child process: opens `count` subscriptions, says so, then answers `collect` lines
    on stdin with the receipt times of an event, until stdin closes."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        subscribers = Subscribers(url, token)
        await subscribers.open(session, count, per_connection)
        print(json.dumps({"ready": count}), flush=True)
        reader = asyncio.StreamReader()
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
        )
        while line := await reader.readline():
            marker = json.loads(line)["collect"]
            times = await subscribers.collect(marker, timeout_s)
            print(json.dumps({"marker": marker, "times": times}), flush=True)
        for task in subscribers.tasks:
            task.cancel()


# -- the orchestrator ---------------------------------------------------------------------
@dataclass
class Figures:
    """What was measured of one server at one size."""

    name: str
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    max_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    slowest_unrelated_ms: list[float] = field(default_factory=list)
    idle_unrelated_ms: list[float] = field(default_factory=list)
    missing: int = 0
    unrelated_refused: int = 0
    connect_cpu_ms: float = 0.0
    rss_kib: float = 0.0


class Clients:
    """The client processes subscribed to one server."""

    def __init__(self, processes: list[asyncio.subprocess.Process]) -> None:
        self.processes = processes

    @classmethod
    async def start(
        cls,
        url: str,
        token: str,
        subscribers: int,
        args: argparse.Namespace,
    ) -> Clients:
        processes = args.clients
        shares = [
            subscribers // processes + (i < subscribers % processes) for i in range(processes)
        ]
        started = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--client",
                url,
                "--token",
                token,
                "--count",
                str(share),
                "--per-connection",
                str(args.per_connection),
                "--event-timeout",
                str(args.event_timeout),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=REPO,
                limit=READ_LIMIT,
            )
            for share in shares
            if share
        ]
        clients = cls(started)
        for process in started:
            assert process.stdout is not None
            line = await process.stdout.readline()
            if not line:
                await clients.stop()
                raise RuntimeError("a client process exited before subscribing")
        return clients

    async def collect(self, marker: str) -> list[float]:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(json.dumps({"collect": marker}).encode() + b"\n")
            await process.stdin.drain()
        times: list[float] = []
        for process in self.processes:
            assert process.stdout is not None
            times.extend(json.loads(await process.stdout.readline())["times"])
        return times

    async def stop(self) -> None:
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    process.kill()
                await process.wait()


@dataclass
class Target:
    """One server with its subscribers: spacedock or the ceiling."""

    figures: Figures
    url: str
    pid: int
    subscribed: Any  # () -> int: subscriptions the server runs now
    session: aiohttp.ClientSession
    headers: dict[str, str]
    clients: Clients | None = None

    async def post(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"query": query, "variables": variables or {}}
        async with self.session.post(self.url, json=body, headers=self.headers) as response:
            answer: dict[str, Any] = await response.json()
        assert not answer.get("errors"), answer["errors"]
        return answer

    async def subscribe(self, args: argparse.Namespace, size: int, token: str) -> None:
        rss, cpu = process_rss_kib(self.pid), process_cpu_s(self.pid)
        ws_url = self.url.replace("http://", "ws://")
        self.clients = await Clients.start(ws_url, token, size, args)
        deadline = time.monotonic() + args.event_timeout
        while (running := await asyncio.to_thread(self.subscribed)) < size:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.figures.name}: {running} of {size} subscriptions run")
            await asyncio.sleep(0.1)
        self.figures.connect_cpu_ms = (process_cpu_s(self.pid) - cpu) / size * 1000
        self.figures.rss_kib = (process_rss_kib(self.pid) - rss) / size

    async def event(self, space_id: str, size: int, busy: bool) -> None:
        assert self.clients is not None
        hold = {"input": {"id": space_id, "status": "INACTIVE"}}
        cpu = process_cpu_s(self.pid)
        sent = time.time()
        collecting = asyncio.create_task(self.clients.collect(space_id))
        pacing = asyncio.create_task(self.unrelated(collecting)) if busy else None
        payload = (await self.post(HOLD, hold))["data"]["setSpaceStatus"]
        assert payload["userErrors"] == [], payload
        times = sorted((at - sent) * 1000 for at in await collecting)
        cpu_ms = (process_cpu_s(self.pid) - cpu) * 1000
        self.figures.missing += size - len(times)
        if pacing is not None:
            slowest = await pacing
            self.figures.slowest_unrelated_ms.append(slowest)
            return
        if times:
            self.figures.p50_ms.append(times[len(times) // 2])
            self.figures.p99_ms.append(times[min(len(times) - 1, int(len(times) * 0.99))])
            self.figures.max_ms.append(times[-1])
        self.figures.cpu_ms.append(cpu_ms)

    async def unrelated(self, until: asyncio.Task[list[float]]) -> float:
        """The slowest `{ viewer { role } }` while the fan-out runs; refusals (such as
        503 while the database pool is exhausted) are counted, and timed as well."""
        slowest = 0.0
        body = {"query": UNRELATED}
        while not until.done():
            started = time.perf_counter()
            async with self.session.post(self.url, json=body, headers=self.headers) as response:
                answer = await response.json()
            slowest = max(slowest, (time.perf_counter() - started) * 1000)
            if response.status != 200 or answer.get("errors"):
                self.figures.unrelated_refused += 1
        return slowest

    async def idle_unrelated(self) -> None:
        for _ in range(5):
            started = time.perf_counter()
            await self.post(UNRELATED)
            self.figures.idle_unrelated_ms.append((time.perf_counter() - started) * 1000)


def spacedock_subscribers(server: Server) -> int:
    return int(server.metric("spacedock_event_subscribers"))


def ceiling_subscribers(ceiling: Ceiling) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{ceiling.port}/subscribers") as answer:
        count: int = json.loads(answer.read())["subscribers"]
    return count


@contextlib.asynccontextmanager
async def servers(
    args: argparse.Namespace, size: int, directory: Path
) -> AsyncIterator[tuple[Target, Target, list[str], str]]:
    """A fresh spacedock and ceiling, with `2 x events` spaces to change, each."""
    backend = (
        await asyncio.to_thread(Backend.postgres, args.postgres)
        if args.postgres
        else Backend.sqlite(directory)
    )
    env = {
        "SPACEDOCK_PROBE_INTERVAL_S": "3600",
        "SPACEDOCK_MAX_SUBSCRIPTIONS_PER_TOKEN": str(MAX_SUBSCRIBERS),
    }
    server = Server(backend=backend, log_path=directory / "server.log", env=env)
    await asyncio.to_thread(server.start)
    ceiling: Ceiling | None = None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(keepalive_timeout=CLIENT_KEEPALIVE_S)
    )
    ours: Target | None = None
    them: Target | None = None
    try:
        token = await mint_token(backend.url, "bench", "admin")
        headers = {"Authorization": f"Bearer {token}"}
        assert server.process is not None
        ours = Target(
            Figures("spacedock"),
            server.url,
            server.process.pid,
            lambda: spacedock_subscribers(server),
            session,
            headers,
        )
        nowhere = free_port()
        space_ids = []
        for i in range(2 * args.events):
            config = make.generic_config(server=f"https://127.0.0.1:{nowhere}/c{i}")
            register = {"input": {"name": f"s{i}", "provider": "GENERIC", "config": config}}
            payload = (await ours.post(make.REGISTER_SPACE, register))["data"]["registerSpace"]
            space_ids.append(payload["space"]["id"])
        answer = await ours.post(QUERIES[FULL])
        ceiling = await asyncio.to_thread(Ceiling.start, free_port(), answer, token, directory)
        them = Target(
            Figures("ceiling"),
            ceiling.url,
            ceiling.process.pid,
            lambda: ceiling_subscribers(ceiling),
            session,
            headers,
        )
        yield ours, them, space_ids, token
    finally:
        for target in (ours, them):
            if target is not None and target.clients is not None:
                await target.clients.stop()
        await session.close()
        if ceiling is not None:
            ceiling.stop()
        await asyncio.to_thread(server.stop)
        if args.postgres:
            await asyncio.to_thread(backend.dispose, args.postgres)


async def run_size(args: argparse.Namespace, size: int) -> tuple[Figures, Figures]:
    with tempfile.TemporaryDirectory(prefix="spacedock-fanout-") as directory:
        async with servers(args, size, Path(directory)) as (ours, them, space_ids, token):
            for target in (them, ours):
                await target.idle_unrelated()
                await target.subscribe(args, size, token)
                print(
                    f"  {size:,} subscribed to {target.figures.name}: "
                    f"{target.figures.connect_cpu_ms:.2f} ms CPU and "
                    f"{target.figures.rss_kib:.0f} KiB per subscription",
                    flush=True,
                )
            for repetition in range(args.events):
                for busy in (False, True):
                    space = space_ids[2 * repetition + busy]
                    order = (ours, them) if repetition % 2 == 0 else (them, ours)
                    for target in order:
                        await target.event(space, size, busy)
                    await asyncio.sleep(0.5)  # the servers settle between events
                print(
                    f"  {size:,}: event {repetition + 1} of {args.events}: spacedock p99 "
                    f"{ours.figures.p99_ms[-1]:.0f} ms, ceiling {them.figures.p99_ms[-1]:.0f} ms",
                    flush=True,
                )
            return ours.figures, them.figures


def middle(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def report(size: int, ours: Figures, them: Figures, args: argparse.Namespace) -> None:
    database = "Postgres (LISTEN/NOTIFY)" if args.postgres else "SQLite (in-process bus)"
    print(
        f"\n{size:,} subscribers ({args.per_connection} per WebSocket) over {args.clients} "
        f"client processes, {database}, "
        f"{args.events} quiet + {args.events} busy events per server; median (range)"
    )
    print(f"  {'':44}{'spacedock':>24}{'ceiling':>24}{'ratio':>8}")
    rows = [
        ("send -> receipt p50, ms", ours.p50_ms, them.p50_ms),
        ("send -> receipt p99, ms", ours.p99_ms, them.p99_ms),
        ("send -> receipt max, ms", ours.max_ms, them.max_ms),
        ("server CPU per event, ms", ours.cpu_ms, them.cpu_ms),
        (
            "slowest viewer { role } during fan-out, ms",
            ours.slowest_unrelated_ms,
            them.slowest_unrelated_ms,
        ),
        ("viewer { role } while idle, ms", ours.idle_unrelated_ms, them.idle_unrelated_ms),
        (
            "connect + subscribe CPU per subscription, ms",
            [ours.connect_cpu_ms],
            [them.connect_cpu_ms],
        ),
        ("RSS per idle subscription, KiB", [ours.rss_kib], [them.rss_kib]),
    ]
    for label, mine, theirs in rows:
        ratio = (
            f"{statistics.median(mine) / statistics.median(theirs):.1f}x"
            if mine and theirs and statistics.median(theirs) > 0
            else "-"
        )
        print(f"  {label:44}{middle(mine):>24}{middle(theirs):>24}{ratio:>8}")
    if ours.unrelated_refused or them.unrelated_refused:
        print(
            f"  unrelated queries refused during fan-outs: spacedock {ours.unrelated_refused}, "
            f"ceiling {them.unrelated_refused}"
        )
    if ours.missing or them.missing:
        print(
            f"  deliveries missing after {args.event_timeout:g} s: spacedock {ours.missing}, "
            f"ceiling {them.missing}"
        )
    if size >= 5000:
        p99 = max(ours.p99_ms, default=float("inf"))
        slowest = max(ours.slowest_unrelated_ms, default=float("inf"))
        connect = ours.connect_cpu_ms <= 1.5 * them.connect_cpu_ms
        print(
            f"  issue 12 targets: p99 < 1 s: {'met' if p99 < 1000 else 'not met'} "
            f"(worst {p99:.0f} ms); unrelated query < 100 ms: "
            f"{'met' if slowest < 100 else 'not met'} (worst {slowest:.0f} ms); "
            f"connect CPU within 1.5x of the ceiling's: {'met' if connect else 'not met'}"
        )
    print(f"  machine: {load_average()}")


async def main(args: argparse.Namespace) -> None:
    sizes = [int(size) for size in args.sizes.split(",")]
    if any(not 1 <= size <= MAX_SUBSCRIBERS for size in sizes):
        raise SystemExit(f"--sizes: each 1..{MAX_SUBSCRIBERS:,}")
    if not 1 <= args.per_connection <= 100:
        raise SystemExit("--per-connection: 1..100 (the server's limit per connection)")
    print(f"spacedock fan-out benchmark; machine at start: {load_average()}", flush=True)
    try:
        async with asyncio.timeout(args.time_limit):
            for size in sizes:
                ours, them = await run_size(args, size)
                report(size, ours, them, args)
    except TimeoutError:
        print(f"\nstopped at the time limit of {args.time_limit:g} s", flush=True)
        raise SystemExit(1) from None


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,5000", help="subscriber counts, comma-separated")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument(
        "--per-connection",
        type=int,
        default=1,
        help="subscriptions per WebSocket (1..100): past ~19,000 sockets this machine's "
        "open-file limit (20,000) is reached, so 20,000 subscriptions need several per socket",
    )
    parser.add_argument("--events", type=int, default=3, help="quiet + busy events per server")
    parser.add_argument("--event-timeout", type=float, default=60.0, help="seconds per event")
    parser.add_argument("--time-limit", type=float, default=1200.0, help="seconds in all")
    parser.add_argument("--postgres", help="Postgres admin URL: run spacedock there instead")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.client:
        uvloop.run(
            client_main(
                arguments.client,
                arguments.token,
                arguments.count,
                arguments.per_connection,
                arguments.event_timeout,
            )
        )
    else:
        uvloop.run(main(arguments))
