"""Benchmark of the nested list read a space picker makes, against a baseline measured in
the same run.

A real `spacedock serve` process on SQLite holds 100 spaces (every other one an AWS space
with its cloud account, the rest GENERIC), each with 2 environments, all made through the
GraphQL API. One keep-alive HTTP client then alternates two requests:

- the read: `spaces(first: 100) { nodes { ... cloudAccount { name } environments { ... } } }`
- the baseline: `{ viewer { role } }`, which costs the same auth lookup, parsing and HTTP
  round trip but reads nothing, so the difference is what the nested read itself costs.

It prints the median and p95 latency of each (wall clock at the client, loopback), the
difference, the response size and the SQL statements per request (from /metrics).

Run: `.venv/bin/python bench/graphql_reads.py` (about half a minute; `--help` for sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from tests.support import factories as make  # noqa: E402
from tests.support.clouds import Clouds  # noqa: E402
from tests.support.server import Backend, Server, free_port, mint_token  # noqa: E402

NESTED_READ = """
{
  spaces(first: 100) {
    totalCount
    nodes { id name status cloudAccount { name } environments { name namespace } }
  }
}
"""
BASELINE = "{ viewer { role } }"


class Client:
    """One keep-alive HTTP session, as a frontend's fetcher would hold."""

    def __init__(self, server: Server, token: str) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {token}"}
        self.session = aiohttp.ClientSession()

    async def post(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"query": query, "variables": variables or {}}
        async with self.session.post(self.server.url, json=body, headers=self.headers) as response:
            answer: dict[str, Any] = json.loads(await response.text())
        assert not answer.get("errors"), answer["errors"]
        return answer

    async def timed(self, query: str) -> tuple[float, int]:
        """Milliseconds for one request, and the size of its body."""
        started = time.perf_counter()
        async with self.session.post(
            self.server.url, json={"query": query}, headers=self.headers
        ) as response:
            body = await response.read()
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status == 200 and b'"errors"' not in body, body[:300]
        return elapsed, len(body)

    async def mutate(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        (payload,) = (await self.post(query, variables))["data"].values()
        assert payload["userErrors"] == [], payload["userErrors"]
        result: dict[str, Any] = payload
        return result

    async def close(self) -> None:
        await self.session.close()


async def populate(client: Client, clouds: Clouds, spaces: int, environments: int) -> None:
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
            clouds.add_cluster("AWS", f"c{i}", "us-east-1")
            access = {"cloudAccountId": account_id, "region": "us-east-1", "clusterName": f"c{i}"}
            await client.mutate(make.GRANT_CLUSTER_ACCESS, {"input": access})
            register = {
                "provider": "AWS",
                "cloudAccountId": account_id,
                "config": make.cloud_config("AWS", f"c{i}"),
            }
        else:
            config = make.generic_config(server=f"https://127.0.0.1:{nowhere}/c{i}")
            register = {"provider": "GENERIC", "config": config}
        space = await client.mutate(make.REGISTER_SPACE, {"input": {"name": f"s{i}", **register}})
        for e in range(environments):
            await client.mutate(
                make.CREATE_ENVIRONMENT,
                {
                    "input": {
                        "name": f"s{i}-e{e}",
                        "spaceId": space["space"]["id"],
                        "namespace": f"ns{e}",
                    }
                },
            )


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


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(server: Server, client: Client, runs: int) -> dict[str, dict[str, float]]:
    for _ in range(3):  # warm-up: connection, caches, first-use imports
        await client.timed(NESTED_READ)
        await client.timed(BASELINE)
    results: dict[str, dict[str, list[float]]] = {
        name: {"ms": [], "bytes": [], "sql": []} for name in ("read", "baseline")
    }
    for _ in range(runs):  # interleaved, so drift hits both alike
        for name, query in (("read", NESTED_READ), ("baseline", BASELINE)):
            before = server.metric("spacedock_sql_statements_total")
            elapsed, size = await client.timed(query)
            results[name]["ms"].append(elapsed)
            results[name]["bytes"].append(size)
            results[name]["sql"].append(server.metric("spacedock_sql_statements_total") - before)
    return {
        name: {
            "median_ms": statistics.median(r["ms"]),
            "p95_ms": percentile(r["ms"], 0.95),
            "bytes": statistics.median(r["bytes"]),
            "sql": min(r["sql"]),
        }
        for name, r in results.items()
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=100, help="spaces to register (max 100)")
    parser.add_argument("--environments", type=int, default=2, help="environments per space")
    parser.add_argument("--runs", type=int, default=20, help="measured requests of each kind")
    args = parser.parse_args()
    if not 1 <= args.spaces <= 100:
        parser.error("--spaces must be 1..100: the read is one page of first: 100")

    clouds = Clouds().start()
    with tempfile.TemporaryDirectory() as directory:
        server = Server(
            backend=Backend.sqlite(Path(directory)),
            log_path=Path(directory) / "server.log",
            env={**clouds.env, "SPACEDOCK_PROBE_INTERVAL_S": "3600"},
        ).start()
        client = Client(server, await mint_token(server.backend.url, "bench", "admin"))
        try:
            started = time.monotonic()
            await populate(client, clouds, args.spaces, args.environments)
            print(
                f"populated {args.spaces} spaces x {args.environments} environments "
                f"in {time.monotonic() - started:.1f} s (SQLite)"
            )
            wait_for_quiet(server)
            figures = await measure(server, client, args.runs)
        finally:
            await client.close()
            server.stop()
            clouds.stop()

    print(f"{args.runs} requests each, keep-alive HTTP on loopback, one server process")
    print(f"{'request':<10} {'median ms':>10} {'p95 ms':>8} {'bytes':>8} {'SQL':>5}")
    for name, f in figures.items():
        print(
            f"{name:<10} {f['median_ms']:>10.2f} {f['p95_ms']:>8.2f} "
            f"{f['bytes']:>8.0f} {f['sql']:>5.0f}"
        )
    extra = figures["read"]["median_ms"] - figures["baseline"]["median_ms"]
    print(f"nested read of {args.spaces} spaces costs {extra:.2f} ms over the baseline (median)")


if __name__ == "__main__":
    asyncio.run(main())
