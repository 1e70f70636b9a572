"""Benchmark of a dashboard's table over 10,000 spaces: a sorted, searched page and
spaceCounts, against the plain (id-ordered) page measured in the same run.

The spaces are written straight into a fresh database (registering 10,000 through the
API would take most of the run), with names, statuses, holds and probe times spread as
a real fleet's are, then a real `spacedock serve` process answers. One keep-alive HTTP
client sends, interleaved (each round asks every query once, so drift hits all alike):

- `spaces(first: 50)`: the plain page, the baseline
- `spaces(first: 50, orderBy: {field: NAME, direction: DESC}, filter: {search: "7"})`
- `spaces(last: 50, orderBy: {field: LAST_PROBE_AT, direction: ASC})`
- `spaceCounts(filter: {search: "7"})` and `spaceCounts`

It prints per query and database the median latency with its interquartile range, SQL
statements per request, and the ratio to the plain page. Runs on SQLite, and on
Postgres too when `--postgres URL` (an admin URL) or SPACEDOCK_TEST_DATABASE_URL is set.

Run: `.venv/bin/python bench/space_tables.py` (about a minute per database; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from bench.common import load_average, spread  # noqa: E402
from tests.support.server import Backend, Server, mint_token  # noqa: E402

SPACES = 10_000
PLAIN = "plain page"
QUERIES = {
    PLAIN: "{ spaces(first: 50) { totalCount nodes { id name status } } }",
    "sorted, searched page": (
        '{ spaces(first: 50, orderBy: {field: NAME, direction: DESC}, filter: {search: "7"}) '
        "{ totalCount nodes { id name status } } }"
    ),
    "last page by probe time": (
        "{ spaces(last: 50, orderBy: {field: LAST_PROBE_AT, direction: ASC}) "
        "{ totalCount nodes { id name status } } }"
    ),
    "spaceCounts, searched": '{ spaceCounts(filter: {search: "7"}) { total active inactive unknown held } }',
    "spaceCounts": "{ spaceCounts { total active inactive unknown held } }",
}


async def seed(database_url: str, org_name: str, count: int) -> None:
    """`count` GENERIC spaces of `org_name`, written in one transaction."""
    from sqlmodel import col

    from core.common.ids import new_id
    from db.engine import Database
    from db.tables import Org, Space

    database = Database(database_url)
    now = datetime.now(UTC)
    rng = random.Random(7)
    try:
        async with database.transaction() as session:
            org_id = await session.scalar(sa.select(col(Org.id)).where(col(Org.name) == org_name))
            rows = []
            for n in range(count):
                status = rng.choices(["ACTIVE", "INACTIVE", "UNKNOWN"], [85, 10, 5])[0]
                rows.append(
                    {
                        "id": new_id("spc"),
                        "org_id": org_id,
                        "name": f"{rng.choice(['web', 'db', 'batch', 'edge'])}-{n:05d}",
                        "provider": "GENERIC",
                        "space_type": "KUBERNETES",
                        "config_json": json.dumps(
                            {"clusterName": f"c{n}", "server": f"https://127.0.0.1:6443/c{n}"}
                        ),
                        "identity_key": f"GENERIC/https://127.0.0.1:6443/c{n}",
                        "synthetic": False,
                        "probe_status": status,
                        "held": rng.random() < 0.02,
                        "consecutive_failures": 0 if status == "ACTIVE" else 3,
                        "last_probe_at": now - timedelta(seconds=rng.uniform(0, 50)),
                        "last_probe_ok": status == "ACTIVE",
                        # Nothing is due: the probe loop stays out of the measurement.
                        "next_probe_at": now + timedelta(days=1),
                        "created_at": now - timedelta(seconds=count - n),
                    }
                )
            await session.execute(sa.insert(Space.__table__), rows)  # type: ignore[attr-defined]
    finally:
        await database.dispose()


async def measure(server: Server, token: str, rounds: int) -> dict[str, list[float]]:
    headers = {"Authorization": f"Bearer {token}"}
    timings: dict[str, list[float]] = {name: [] for name in QUERIES}
    async with aiohttp.ClientSession(headers=headers) as session:
        for round_ in range(rounds + 3):  # the first three warm up
            for name, query in QUERIES.items():
                started = time.perf_counter()
                async with session.post(server.url, json={"query": query}) as response:
                    body = await response.json()
                elapsed = (time.perf_counter() - started) * 1000
                assert "errors" not in body, body
                if round_ >= 3:
                    timings[name].append(elapsed)
    return timings


async def statements(server: Server, token: str) -> dict[str, int]:
    headers = {"Authorization": f"Bearer {token}"}
    counted = {}
    async with aiohttp.ClientSession(headers=headers) as session:
        for name, query in QUERIES.items():
            before = server.metric("spacedock_sql_statements_total")
            async with session.post(server.url, json={"query": query}) as response:
                await response.read()
            counted[name] = int(server.metric("spacedock_sql_statements_total") - before)
    return counted


def run(backend: Backend, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        server = Server(
            backend=backend,
            log_path=Path(scratch) / "server.log",
            env={"SPACEDOCK_PROBE_INTERVAL_S": "3600"},
        ).start()
        try:
            token = asyncio.run(mint_token(backend.url, "bench", "viewer"))
            started = time.perf_counter()
            asyncio.run(seed(backend.url, "bench", SPACES))
            print(
                f"\n{backend.name}: {SPACES} spaces seeded in {time.perf_counter() - started:.1f}s"
            )
            counted = asyncio.run(statements(server, token))
            timings = asyncio.run(measure(server, token, rounds))
        finally:
            server.stop()
    baseline = statistics.median(timings[PLAIN])
    print(f"{'query':28} {'latency (median, IQR)':26} {'SQL':>4} {'vs plain page':>14}")
    for name, samples in timings.items():
        ratio = statistics.median(samples) / baseline
        print(f"{name:28} {spread(samples):26} {counted[name]:>4} {ratio:>13.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--postgres", default=os.environ.get("SPACEDOCK_TEST_DATABASE_URL"), help="admin URL"
    )
    args = parser.parse_args()
    print(load_average())
    with tempfile.TemporaryDirectory() as directory:
        run(Backend.sqlite(Path(directory)), args.rounds)
    if args.postgres:
        backend = Backend.postgres(args.postgres)
        try:
            run(backend, args.rounds)
        finally:
            backend.dispose(args.postgres)


if __name__ == "__main__":
    main()
