"""Benchmark of the strict-quota webhook's decisions (core.cloudspaces.admission), against a
baseline measured in the same run.

One CloudSpace with a large quota and its vCluster's webhook key are written to a fresh
database (SQLite; and a fresh Postgres database, made and dropped, with `--postgres
ADMIN_URL` or SPACEDOCK_TEST_DATABASE_URL); then AdmissionReviews go through
`admission.answer` as the route hands them over (authentication included, HTTP aside):

* baseline: reviews of a ConfigMap, which the webhook authenticates and lets through
  without counting anything (one read);
* pods, one at a time: each locks the CloudSpace's row, reads what is in use and holds a
  reservation;
* pods, N at once (`--concurrency`, default 20): the same, queued per CloudSpace.

Figures: median and p95 latency per review, reviews per second, and the headroom against
the webhook's timeout (10 s; spacedock refuses past 8 s).

Run: `.venv/bin/python bench/admission.py` (`--reviews 400`; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import load_average, percentile  # noqa: E402
from core.cloudspaces import admission  # noqa: E402
from core.cloudspaces.settings import CloudSpaceSettings  # noqa: E402
from core.common.events import InProcessBus  # noqa: E402
from core.common.secrets import SecretBox  # noqa: E402
from core.common.services import Services  # noqa: E402
from core.spaces.health import HealthRule  # noqa: E402
from db.cloudspace_tables import CloudSpace  # noqa: E402
from db.engine import Database  # noqa: E402
from db.tables import Org, Space  # noqa: E402
from tests.support.server import Backend  # noqa: E402

DEADLINE_S = 8.0
VCLUSTER = "bench"


def review(kind: str, name: str) -> dict[str, Any]:
    resource = "pods" if kind == "Pod" else "configmaps"
    spec = {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1m"}}}]}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "operation": "CREATE",
            "resource": {"group": "", "version": "v1", "resource": resource},
            "namespace": "default",
            "name": name,
            "object": {"kind": kind, "metadata": {"name": name}, "spec": spec},
            "dryRun": False,
        },
    }


async def seeded(services: Services) -> tuple[str, str]:
    """A CloudSpace of 10,000 cores and its vCluster's webhook secret."""
    now = datetime.now(UTC)
    async with services.unit() as unit:
        unit.session.add(Org(id="org_bench", name="bench", created_at=now))
        unit.session.add(
            Space(
                id="spc_bench",
                org_id="org_bench",
                name="host",
                provider="GENERIC",
                space_type="KUBERNETES",
                config_json="{}",
                identity_key="GENERIC/bench",
                next_probe_at=now,
                created_at=now,
            )
        )
        await unit.session.flush()
        unit.session.add(
            CloudSpace(
                id="cs_bench",
                org_id="org_bench",
                name="bench",
                host_space_id="spc_bench",
                cpu=10_000.0,
                memory_mib=2**24,
                step="refresh",
                next_attempt_at=now,
                created_at=now,
            )
        )
    configuration = await admission.webhook_configuration(services, "cs_bench", VCLUSTER)
    assert configuration is not None
    secret = configuration["webhooks"][0]["clientConfig"]["url"].rsplit("/", 1)[1]
    return "cs_bench", secret


async def timed(
    services: Services, admissions: admission.Admissions, secret: str, made: Callable[[int], Any]
) -> float:
    started = time.perf_counter()
    asked = admission.review(admissions, made(0))
    verdict = await admission.answer(
        services, admissions, "cs_bench", VCLUSTER, secret, asked, DEADLINE_S
    )
    assert verdict.allowed, verdict.message
    return time.perf_counter() - started


async def run(database_url: str, reviews: int, concurrency: int) -> None:
    services = Services(
        database=Database(database_url),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(60),
        cloudspaces=CloudSpaceSettings(admission_url="https://spacedock.bench"),
    )
    try:
        await services.database.migrate()
        _, secret = await seeded(services)
        admissions = admission.Admissions()
        counter = iter(range(10**9))

        def pod(_: int) -> Any:
            return review("Pod", f"p{next(counter)}")

        def config_map(_: int) -> Any:
            return review("ConfigMap", "c")

        print(f"{reviews} reviews each; {load_average()}")
        for label, made, at_once in (
            ("baseline: ConfigMaps, let through", config_map, 1),
            ("pods, one at a time", pod, 1),
            (f"pods, {concurrency} at once", pod, concurrency),
        ):
            latencies: list[float] = []
            started = time.perf_counter()
            for _ in range(reviews // at_once):
                latencies += await asyncio.gather(
                    *(timed(services, admissions, secret, made) for _ in range(at_once))
                )
            elapsed = time.perf_counter() - started
            print(
                f"{label:40} median {percentile(latencies, 0.5) * 1000:7.1f} ms   "
                f"p95 {percentile(latencies, 0.95) * 1000:7.1f} ms   "
                f"{len(latencies) / elapsed:7.0f} reviews/s   "
                f"p95 = {percentile(latencies, 0.95) / DEADLINE_S:.2%} of the deadline"
            )
    finally:
        await services.database.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument(
        "--postgres",
        default=os.environ.get("SPACEDOCK_TEST_DATABASE_URL"),
        help="Postgres admin URL (postgresql+asyncpg://...); a fresh database is made there",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        print("SQLite:")
        asyncio.run(run(Backend.sqlite(Path(directory)).url, args.reviews, args.concurrency))
    if args.postgres:
        backend = Backend.postgres(args.postgres)
        try:
            print("Postgres:")
            asyncio.run(run(backend.url, args.reviews, args.concurrency))
        finally:
            backend.dispose(args.postgres)


if __name__ == "__main__":
    main()
