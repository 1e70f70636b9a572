"""Benchmark of the reads a frontend makes, against the in-memory ceiling measured in the
same run.

A real `spacedock serve` process holds 100 spaces (every other one an AWS space with its
cloud account, the rest GENERIC), each with 2 environments and 2 status events (its
registration and an operator hold), all made through the GraphQL API. The ceiling is
bench/ceiling.py: a minimal Strawberry app with the same types, serving from memory
spacedock's own answer, under the same uvicorn options; the script checks that both
answer each query with byte-identical JSON. One keep-alive HTTP client per server then
sends, interleaved (each run asks every query of both servers in turn, so drift hits
both alike):

- `spaces(first: 100) { totalCount nodes { id name status cloudAccount { name }
  environments { name namespace } statusEvents(first: 5) { ... } } }`
- the same without `statusEvents`
- `{ viewer { role } }`

It prints, per query and database, the median latency at the client with its
interquartile range, the requests per second one client gets (1 / median), server CPU
per request (from /proc), SQL statements per request (from /metrics) and spacedock's
throughput as a share of the ceiling's. The target of issue 12 is a share of 80% or more.

Then, per database, the table reads of a dashboard over 10,000 spaces (a sorted, searched
page, the last page by probe time and spaceCounts) against the plain page in the same run:
bench/space_tables.py, which also runs alone (`--tables 0` skips it here).

Runs on SQLite, and on Postgres too when `--postgres URL` (an admin URL; a fresh
database is made and dropped) or SPACEDOCK_TEST_DATABASE_URL is given.

`--before DIR` (a `git worktree` of an earlier commit) serves the same data from a third
server running that code, on a database of its own, measured in the same interleaved runs:
a regression shows against it, whatever the machine's speed did meanwhile.

Run: `.venv/bin/python bench/graphql_reads.py` (about a minute per database; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from bench import space_tables  # noqa: E402
from bench.common import (  # noqa: E402
    CLIENT_KEEPALIVE_S,
    Ceiling,
    load_average,
    process_cpu_s,
    spread,
)
from sim.clouds import Clouds  # noqa: E402
from sim.ports import free_port  # noqa: E402
from tests.support import factories as make  # noqa: E402
from tests.support.server import Backend, Server, mint_token  # noqa: E402

SPACE_FIELDS = "id name status cloudAccount { name } environments { name namespace }"
EVENT_FIELDS = "statusEvents(first: 5) { spaceId previous status at reason }"
QUERIES = {
    "spaces + statusEvents": f"{{ spaces(first: 100) {{ totalCount nodes {{ {SPACE_FIELDS} {EVENT_FIELDS} }} }} }}",
    "spaces": f"{{ spaces(first: 100) {{ totalCount nodes {{ {SPACE_FIELDS} }} }} }}",
    "viewer { role }": "{ viewer { role } }",
}
FULL = "spaces + statusEvents"


class Client:
    """One keep-alive HTTP session, as a frontend's fetcher would hold."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.headers = {"Authorization": f"Bearer {token}"}
        connector = aiohttp.TCPConnector(keepalive_timeout=CLIENT_KEEPALIVE_S)
        self.session = aiohttp.ClientSession(connector=connector)

    async def post(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"query": query, "variables": variables or {}}
        async with self.session.post(self.url, json=body, headers=self.headers) as response:
            answer: dict[str, Any] = json.loads(await response.text())
        assert not answer.get("errors"), answer["errors"]
        return answer

    async def body(self, query: str) -> bytes:
        async with self.session.post(
            self.url, json={"query": query}, headers=self.headers
        ) as response:
            body = await response.read()
        assert response.status == 200 and b'"errors"' not in body, body[:300]
        return body

    async def timed(self, query: str) -> float:
        """Milliseconds for one request."""
        started = time.perf_counter()
        await self.body(query)
        return (time.perf_counter() - started) * 1000

    async def mutate(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        (payload,) = (await self.post(query, variables))["data"].values()
        assert payload["userErrors"] == [], payload["userErrors"]
        result: dict[str, Any] = payload
        return result

    async def close(self) -> None:
        await self.session.close()


async def populate(
    client: Client, clouds: Clouds, spaces: int, environments: int, clusters: str = "c"
) -> None:
    account = await client.mutate(
        make.CREATE_CLOUD_ACCOUNT,
        {
            "input": {
                "name": "bench-aws",
                "provider": "AWS",
                "credentials": clouds.credentials("AWS"),
            }
        },
    )
    account_id = account["cloudAccount"]["id"]
    nowhere = free_port()  # first probes fail at once: nothing listens there
    for i in range(spaces):
        if i % 2:
            cluster = f"{clusters}{i}"  # one stand-in cluster per space and server
            clouds.add_cluster("AWS", cluster, "us-east-1")
            access = {"cloudAccountId": account_id, "region": "us-east-1", "clusterName": cluster}
            await client.mutate(make.GRANT_CLUSTER_ACCESS, {"input": access})
            register = {
                "provider": "AWS",
                "cloudAccountId": account_id,
                "config": make.cloud_config("AWS", cluster),
            }
        else:
            config = make.generic_config(server=f"https://127.0.0.1:{nowhere}/c{i}")
            register = {"provider": "GENERIC", "config": config}
        space = await client.mutate(make.REGISTER_SPACE, {"input": {"name": f"s{i}", **register}})
        space_id = space["space"]["id"]
        for e in range(environments):
            environment = {"name": f"s{i}-e{e}", "spaceId": space_id, "namespace": f"ns{e}"}
            await client.mutate(make.CREATE_ENVIRONMENT, {"input": environment})
        # A hold: a second status event, and no more probes to disturb the measurement.
        hold = {"input": {"id": space_id, "status": "INACTIVE"}}
        await client.mutate(make.SET_SPACE_STATUS, hold)


def wait_for_quiet(server: Server, timeout_s: float = 15.0) -> None:
    """Until background work (the first probes) stops sending SQL."""
    deadline = time.monotonic() + timeout_s
    last = server.metric("spacedock_sql_statements_total")
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = server.metric("spacedock_sql_statements_total")
        if now == last:
            return
        last = now


class Target:
    """A server under measurement and what was measured of it, per query."""

    def __init__(self, name: str, client: Client, pid: int, server: Server | None) -> None:
        self.name = name
        self.client = client
        self.pid = pid
        self.server = server  # spacedock's, for its SQL statement count
        self.ms: dict[str, list[float]] = {query: [] for query in QUERIES}
        self.cpu_s: dict[str, float] = dict.fromkeys(QUERIES, 0.0)
        self.sql: dict[str, list[float]] = {query: [] for query in QUERIES}

    async def once(self, label: str) -> None:
        statements = self.server.metric("spacedock_sql_statements_total") if self.server else 0
        cpu = process_cpu_s(self.pid)
        self.ms[label].append(await self.client.timed(QUERIES[label]))
        self.cpu_s[label] += process_cpu_s(self.pid) - cpu
        if self.server:
            after = self.server.metric("spacedock_sql_statements_total")
            self.sql[label].append(after - statements)


async def measure(targets: list[Target], runs: int) -> None:
    for _ in range(5):  # warm-up: connections, caches, first-use imports
        for label in QUERIES:
            for target in targets:
                await target.client.body(QUERIES[label])
    for run in range(runs):  # interleaved; which server goes first rotates
        for label in QUERIES:
            first = run % len(targets)
            for target in targets[first:] + targets[:first]:
                await target.once(label)


async def compare_answers(ours: Client, ceiling: Client) -> None:
    for label, query in QUERIES.items():
        mine, theirs = await ours.body(query), await ceiling.body(query)
        if mine != theirs:
            raise SystemExit(f"the ceiling's answer to {label} differs from spacedock's")


async def spacedock(
    backend: Backend,
    clouds: Clouds,
    args: argparse.Namespace,
    directory: Path,
    repo: Path = REPO,
    clusters: str = "c",
) -> tuple[Server, Client]:
    """A spacedock server of the checkout `repo`, populated through its API."""
    server = Server(
        backend=backend,
        log_path=directory / f"server-{clusters}.log",
        env={**clouds.env, "SPACEDOCK_PROBE_INTERVAL_S": "3600"},
        repo=repo,
    ).start()
    token = await token_from(repo, server.backend.url)
    client = Client(server.url, token)
    try:
        started = time.monotonic()
        await populate(client, clouds, args.spaces, args.environments, clusters)
        print(
            f"{backend.name}{'' if repo == REPO else f' ({repo})'}: populated {args.spaces} "
            f"spaces x {args.environments} environments in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        wait_for_quiet(server)
    except BaseException:
        await client.close()
        server.stop()
        raise
    return server, client


async def token_from(repo: Path, database_url: str) -> str:
    """An admin token, written by the checkout's own code: an earlier commit's tables may
    differ from this one's."""
    if repo == REPO:
        return await mint_token(database_url, "bench", "admin")
    script = (
        "import asyncio, sys; sys.path.insert(0, '.');"
        "from tests.support.server import mint_token;"
        f"print(asyncio.run(mint_token({database_url!r}, 'bench', 'admin')))"
    )
    minted = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return minted.stdout.strip().splitlines()[-1]


async def run_database(
    backend: Backend,
    clouds: Clouds,
    args: argparse.Namespace,
    directory: Path,
    before_backend: Backend | None = None,
) -> None:
    server, client = await spacedock(backend, clouds, args, directory)
    ceiling: Ceiling | None = None
    clients = [client]
    servers = [server]
    try:
        answer = await client.post(QUERIES[FULL])
        ceiling = Ceiling.start(free_port(), answer, client.token, directory)
        ceiling_client = Client(ceiling.url, client.token)
        clients.append(ceiling_client)
        await compare_answers(client, ceiling_client)
        assert server.process is not None
        targets = [
            Target("spacedock", client, server.process.pid, server),
            Target("ceiling", ceiling_client, ceiling.process.pid, None),
        ]
        if before_backend is not None:
            earlier, earlier_client = await spacedock(
                before_backend, clouds, args, directory, Path(args.before), clusters="b"
            )
            servers.append(earlier)
            clients.append(earlier_client)
            assert earlier.process is not None
            targets.append(Target("before", earlier_client, earlier.process.pid, earlier))
        await measure(targets, args.runs)
    finally:
        for each in clients:
            await each.close()
        if ceiling is not None:
            ceiling.stop()
        for each_server in servers:
            each_server.stop()
    report(backend.name, targets, args.runs)


def report(database: str, targets: list[Target], runs: int) -> None:
    ours, ceiling, *before = targets
    print(f"\n{database}: {runs} interleaved requests per query and server, one keep-alive client")
    print("  median latency at the client (interquartile range); CPU = server process per request")
    header = f"  {'query':<22} {'server':<10} {'latency':>22} {'req/s':>7} {'CPU':>8} {'SQL':>4}"
    print(header)
    for label in QUERIES:
        for target in targets:
            median = statistics.median(target.ms[label])
            sql = f"{min(target.sql[label]):.0f}" if target.sql[label] else "-"
            print(
                f"  {label:<22} {target.name:<10} {spread(target.ms[label], digits=2):>22} "
                f"{1000 / median:>7.0f} {target.cpu_s[label] / runs * 1000:>5.1f} ms {sql:>4}"
            )
        for target in (ours, *before):
            share = statistics.median(ceiling.ms[label]) / statistics.median(target.ms[label])
            cpu_share = ceiling.cpu_s[label] / max(target.cpu_s[label], 1e-9)
            verdict = "met" if share >= 0.8 else "not met"
            print(
                f"  {label:<22} {target.name} at {share:.0%} of the ceiling's requests per "
                f"second ({cpu_share:.0%} by CPU); target 80%: {verdict}"
            )
        for earlier in before:
            cpu = ours.cpu_s[label] / max(earlier.cpu_s[label], 1e-9)
            latency = statistics.median(ours.ms[label]) / statistics.median(earlier.ms[label])
            print(f"  {label:<22} spacedock against before: CPU {cpu:.2f}x, latency {latency:.2f}x")
    print(f"  machine: {load_average()}")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spaces", type=int, default=100, help="spaces to register (max 100)")
    parser.add_argument("--environments", type=int, default=2, help="environments per space")
    parser.add_argument("--runs", type=int, default=40, help="measured requests of each kind")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("SPACEDOCK_TEST_DATABASE_URL"),
        help="Postgres admin URL (postgresql+asyncpg://...); also run there",
    )
    parser.add_argument("--sqlite-only", action="store_true", help="skip Postgres")
    parser.add_argument(
        "--before", metavar="DIR", help="a checkout of an earlier commit, measured beside"
    )
    parser.add_argument(
        "--tables",
        type=int,
        default=20,
        metavar="ROUNDS",
        help="rounds of the table reads over 10,000 spaces (bench/space_tables.py); 0: skip",
    )
    args = parser.parse_args()
    if not 1 <= args.spaces <= 100:
        parser.error("--spaces must be 1..100: the read is one page of first: 100")
    print(f"machine at start: {load_average()}", flush=True)
    clouds = Clouds().start()  # the AWS spaces' account and clusters
    try:
        with tempfile.TemporaryDirectory() as directory:
            earlier = None
            if args.before:
                (Path(directory) / "before").mkdir()
                earlier = Backend.sqlite(Path(directory) / "before")
            await run_database(
                Backend.sqlite(Path(directory)), clouds, args, Path(directory), earlier
            )
        if args.tables:
            with tempfile.TemporaryDirectory() as directory:
                await asyncio.to_thread(
                    space_tables.run, Backend.sqlite(Path(directory)), args.tables
                )
        if args.postgres and not args.sqlite_only:
            backend = await asyncio.to_thread(Backend.postgres, args.postgres)
            earlier = None
            try:
                if args.before:
                    earlier = await asyncio.to_thread(Backend.postgres, args.postgres)
                with tempfile.TemporaryDirectory() as directory:
                    await run_database(backend, clouds, args, Path(directory), earlier)
            finally:
                await asyncio.to_thread(backend.dispose, args.postgres)
                if earlier is not None:
                    await asyncio.to_thread(earlier.dispose, args.postgres)
            if args.tables:
                backend = await asyncio.to_thread(Backend.postgres, args.postgres)
                try:
                    await asyncio.to_thread(space_tables.run, backend, args.tables)
                finally:
                    await asyncio.to_thread(backend.dispose, args.postgres)
    finally:
        clouds.stop()


if __name__ == "__main__":
    asyncio.run(main())
