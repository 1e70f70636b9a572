"""Benchmark of the App Advisor (issue 24), against baselines measured in the same run.

A vCluster stand-in in another process (bench/advisor_cluster.py: 5,000 objects over 200
namespaces by default) is analysed by the real advisor (`core.advisor.loop.Advisor`: claims,
chunked reads through kubernetes-asyncio and TLS, the analysis in a worker thread, the
merge in one transaction) on a fresh database. The vCluster's admin access is handed to
the reader directly: reading it from the host is one call every 5 minutes, not the
advisor's cost.

Figures (CPU of this process, the database thread included; the stand-in is another process):

- per object read: a whole run (first, with every finding new, and steady, with none),
  the reading alone, the analysis alone, and the baseline: the same lists read the way
  the SDK's typed API reads them (kubernetes-asyncio `list_*_for_all_namespaces`, one
  unchunked list per kind, answers turned into model objects);
- SQL statements per run, first and steady;
- memory: this process's RSS before the first run and its peak during the runs;
- the time from a pod's status turning CrashLoopBackOff (the status write answered) to
  the finding reaching an adviceChanged subscriber (the subscription's resolver, in this
  process), against a poller that lists every pod every interval and looks for it itself:
  both wait for their next round, so the difference is what the advisor adds.

Run: `.venv/bin/python bench/advisor.py` (`--namespaces 200 --interval 5 --trials 5`,
`--database-url postgresql+asyncpg://…` with an empty database for Postgres; `--help`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes_asyncio import client as sdk  # noqa: E402

from bench.common import load_average, process_cpu_s, process_rss_kib  # noqa: E402
from core.advisor.analysis import analyze  # noqa: E402
from core.advisor.loop import Advisor  # noqa: E402
from core.advisor.ownership import AppIndex  # noqa: E402
from core.advisor.reading import Reader  # noqa: E402
from core.advisor.settings import AdvisorSettings  # noqa: E402
from core.advisor.snapshot import Snapshot  # noqa: E402
from core.cloudspaces.host_access import AdminReach  # noqa: E402
from core.cloudspaces.kubeconfigs import AdminAccess  # noqa: E402
from core.common.events import InProcessBus  # noqa: E402
from core.common.ids import new_id  # noqa: E402
from core.common.rbac import Role, Viewer  # noqa: E402
from core.common.secrets import SecretBox  # noqa: E402
from core.common.services import Services  # noqa: E402
from core.orgs.bootstrap import create_token  # noqa: E402
from core.spaces.health import HealthRule  # noqa: E402
from core.spaces.lifecycle import RegisterSpaceRequest, register  # noqa: E402
from db import advisor as advice_rows  # noqa: E402
from db.cloudspace_tables import CloudSpace  # noqa: E402
from db.engine import Database  # noqa: E402
from resolvers.advisor import fields as advice_fields  # noqa: E402
from resolvers.common.context import Context  # noqa: E402
from resolvers.common.subscription_mode import SubscriptionMode  # noqa: E402
from sim import workloads as w  # noqa: E402
from sim.pki import KeyPair  # noqa: E402
from tests.support.kube_clients import kube  # noqa: E402

STEADY_RUNS = 3
WAIT_S = 300.0  # a bound on every wait: a run that never comes is an error, not a hang


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def until(check: Any, what: str, advisor: Advisor) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what} did not happen in {WAIT_S:g} s; the advisor: {advisor.stats}"
            )
        await asyncio.sleep(0.01)


class GivenReach(Reader):
    """The real reader, with the vCluster's admin access given instead of read from a host;
    it notes when each run starts reading."""

    reach: AdminReach
    started: list[float]

    async def _admin_reach(self, row: CloudSpace) -> AdminReach:
        return self.reach

    async def snapshot(self, row: CloudSpace) -> Snapshot:
        self.started.append(time.monotonic())
        return await super().snapshot(row)


async def world(
    url: str, cluster: dict[str, Any], interval_s: float, page_size: int
) -> tuple[Services, Advisor, CloudSpace, Viewer]:
    services = Services(
        database=Database(url),
        bus=InProcessBus(),
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
    )
    await services.database.migrate()
    async with services.unit() as unit:
        org, _ = await create_token(unit, f"bench-{new_id('org')[-6:]}", "ADMIN")
    viewer = Viewer(org.id, org.name, Role.ADMIN)
    config = {
        "clusterName": "host",
        "server": "https://127.0.0.1:1",
        "serviceAccountToken": "x",
        "caCert": cluster["ca"],
    }
    request = RegisterSpaceRequest(
        f"host-{org.id[-6:]}", "GENERIC", "KUBERNETES", None, config, False
    )
    async with services.unit() as unit:
        host = await register(unit, viewer, services.secrets, request, ())
        row = CloudSpace(
            id=new_id("cs"),
            org_id=org.id,
            name="bench",
            host_space_id=host.id,
            cpu=1000,
            memory_mib=4_000_000,
            phase="READY",
            step="refresh",
            next_attempt_at=unit.now,
            created_at=unit.now,
        )
        unit.session.add(row)
    settings = AdvisorSettings(interval_s=interval_s, max_objects=50_000, page_size=page_size)
    advisor = Advisor(services, settings)
    reader = GivenReach(services, settings, on_call=advisor._count_call)
    access = AdminAccess(cluster["ca"], cluster["cert"], cluster["key"], "")
    reader.reach, reader.started = AdminReach(cluster["url"], access), []
    advisor.reader = reader
    return services, advisor, row, viewer


def cpu_s() -> float:
    return time.process_time()


async def measure_runs(
    services: Services, advisor: Advisor, row: CloudSpace, cluster_pid: int
) -> dict[str, Any]:
    """The first run and STEADY_RUNS more, each started at once through the schedule."""
    peak = {"rss": process_rss_kib(_self())}
    sampling = asyncio.create_task(_sample_rss(peak))
    figures: dict[str, Any] = {"rss_before_kib": peak["rss"], "runs": []}
    advisor.start()
    try:
        for index in range(1 + STEADY_RUNS):
            before = (
                advisor.stats.runs,
                cpu_s(),
                services.database.statement_count,
                advisor.stats.changes,
                process_cpu_s(cluster_pid),
            )
            async with services.unit() as unit:
                await advice_rows.enroll_ready(unit.session, unit.now)
                await advice_rows.run_soon(unit.session, row.id, unit.now)
            advisor.wanted.set()
            await until(
                lambda done=before[0]: advisor.stats.runs > done, f"run {index + 1}", advisor
            )
            progress(
                f"run {index + 1} of {1 + STEADY_RUNS} done ({advisor.stats.changes} changes so far)"
            )
            figures["runs"].append(
                {
                    "cpu_s": cpu_s() - before[1],
                    "statements": services.database.statement_count - before[2],
                    "changes": advisor.stats.changes - before[3],
                    "standin_cpu_s": process_cpu_s(cluster_pid) - before[4],
                }
            )
    finally:
        await advisor.stop()
        sampling.cancel()
    figures["rss_peak_kib"] = peak["rss"]
    return figures


def _self() -> int:
    return os.getpid()


async def _sample_rss(peak: dict[str, int]) -> None:
    while True:
        peak["rss"] = max(peak["rss"], process_rss_kib(_self()))
        await asyncio.sleep(0.05)


async def measure_parts(advisor: Advisor, row: CloudSpace, repeats: int = 3) -> dict[str, float]:
    """CPU of the reading alone, the analysis alone, and the typed-SDK baseline."""
    read, analysis, typed = [], [], []
    snapshot = None
    for _ in range(repeats):
        started = cpu_s()
        snapshot = await advisor.reader.snapshot(row)
        read.append(cpu_s() - started)
        started = cpu_s()
        analyze(snapshot, frozenset(), AppIndex())
        analysis.append(cpu_s() - started)
        typed.append(await typed_baseline(advisor))
    assert snapshot is not None
    return {
        "objects": snapshot.object_count,
        "read_s": statistics.median(read),
        "analysis_s": statistics.median(analysis),
        "typed_s": statistics.median(typed),
    }


async def typed_baseline(advisor: Advisor) -> float:
    reach = advisor.reader.reach  # type: ignore[attr-defined]
    cert = KeyPair(reach.access.client_certificate_pem, reach.access.client_key_pem)
    async with kube(reach.address, reach.access.ca_pem, cert=cert) as client:
        started = cpu_s()
        core, apps, batch = sdk.CoreV1Api(client), sdk.AppsV1Api(client), sdk.BatchV1Api(client)
        calls = [
            core.list_pod_for_all_namespaces(),
            apps.list_deployment_for_all_namespaces(),
            apps.list_replica_set_for_all_namespaces(),
            apps.list_stateful_set_for_all_namespaces(),
            apps.list_daemon_set_for_all_namespaces(),
            batch.list_job_for_all_namespaces(),
            batch.list_cron_job_for_all_namespaces(),
            core.list_service_for_all_namespaces(),
            sdk.DiscoveryV1Api(client).list_endpoint_slice_for_all_namespaces(),
            sdk.NetworkingV1Api(client).list_ingress_for_all_namespaces(),
            core.list_persistent_volume_claim_for_all_namespaces(),
            sdk.AutoscalingV2Api(client).list_horizontal_pod_autoscaler_for_all_namespaces(),
            sdk.PolicyV1Api(client).list_pod_disruption_budget_for_all_namespaces(),
            core.list_event_for_all_namespaces(field_selector="type=Warning"),
        ]
        await asyncio.gather(*calls)
        return cpu_s() - started


async def measure_latency(
    services: Services,
    advisor: Advisor,
    row: CloudSpace,
    viewer: Viewer,
    cluster: dict[str, Any],
    trials: int,
    interval_s: float,
) -> dict[str, list[float]]:
    received: dict[str, float] = {}
    polled: dict[str, float] = {}
    context = Context(services, viewer)
    listening = asyncio.Event()

    async def subscriber() -> None:
        mode = SubscriptionMode(on_listening=listening.set)
        async with aclosing(advice_fields.changes(context, mode, row.id)) as changes:
            async for changed in changes:
                if changed.change == "NEW" and changed.finding.rule_id == "crash-loop":
                    received.setdefault(changed.finding.name, time.monotonic())

    cert = KeyPair(cluster["cert"], cluster["key"])
    async with kube(cluster["url"], cluster["ca"], cert=cert) as client:
        core = sdk.CoreV1Api(client)

        async def poller() -> None:  # the baseline: every pod, every interval, looked at here
            while True:
                token = None
                while True:  # the pods in chunks of 500, as the advisor reads them
                    query = [("limit", "500")] + ([("continue", token)] if token else [])
                    response = await client.call_api(
                        "/api/v1/pods", "GET", query_params=query, _preload_content=False
                    )
                    listed = json.loads(await response.read())
                    for pod in listed["items"]:
                        for state in (pod.get("status") or {}).get("containerStatuses") or []:
                            waiting = (state.get("state") or {}).get("waiting") or {}
                            if waiting.get("reason") == "CrashLoopBackOff":
                                polled.setdefault(pod["metadata"]["namespace"], time.monotonic())
                    token = listed["metadata"].get("continue")
                    if not token:
                        break
                await asyncio.sleep(interval_s)

        tasks = [asyncio.create_task(subscriber()), asyncio.create_task(poller())]
        await listening.wait()
        advisor.start()
        advice, baseline, processing = [], [], []
        reader: GivenReach = advisor.reader  # type: ignore[assignment]
        try:
            for trial in range(trials):
                # At a random moment of the interval: neither loop's phase favours the other.
                await asyncio.sleep(random.uniform(0, interval_s))
                namespace = f"team-{trial * 7 % 200 + 1:03}"
                pods = await core.list_namespaced_pod(namespace, label_selector="app=app-1")
                pod = client.sanitize_for_serialization(pods.items[0])
                status = w.crash_looping(pod, "web")
                await core.patch_namespaced_pod_status(
                    pod["metadata"]["name"], namespace, {"status": status}
                )
                written = time.monotonic()
                await until(
                    lambda ns=namespace: "app-1" in received and ns in polled,
                    f"trial {trial + 1}",
                    advisor,
                )
                progress(f"trial {trial + 1} of {trials} done")
                arrived = received.pop("app-1")
                advice.append(arrived - written)
                baseline.append(polled[namespace] - written)
                began = max(t for t in reader.started if t <= arrived)
                processing.append(arrived - began)
                await core.patch_namespaced_pod_status(
                    pod["metadata"]["name"], namespace, {"status": w.running(pod)}
                )
        finally:
            await advisor.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return {"advisor": advice, "poller": baseline, "run start → subscriber": processing}


def report(
    parts: dict[str, float], runs: dict[str, Any], latency: dict[str, list[float]], args: Any
) -> None:
    objects = parts["objects"]
    first, steady = runs["runs"][0], runs["runs"][1:]

    def per(seconds: float) -> str:
        return f"{1e6 * seconds / objects:.1f} µs"

    steady_cpu = statistics.median(r["cpu_s"] for r in steady)
    print(f"\n{objects:,} objects over {args.namespaces} namespaces; {load_average()}\n")
    print("| | CPU per object | per run |")
    print("|---|---|---|")
    print(
        f"| whole run, first (every finding new: {first['changes']}) | {per(first['cpu_s'])} | {1000 * first['cpu_s']:.0f} ms |"
    )
    print(
        f"| whole run, steady (median of {len(steady)}) | {per(steady_cpu)} | {1000 * steady_cpu:.0f} ms |"
    )
    print(
        f"| reading alone (chunks of {args.page_size}, raw JSON) | {per(parts['read_s'])} | {1000 * parts['read_s']:.0f} ms |"
    )
    print(f"| analysis alone | {per(parts['analysis_s'])} | {1000 * parts['analysis_s']:.0f} ms |")
    print(
        f"| baseline: the SDK's typed lists, unchunked | {per(parts['typed_s'])} | {1000 * parts['typed_s']:.0f} ms |"
    )
    standin = statistics.median(r["standin_cpu_s"] for r in steady)
    print(f"\nthe stand-in's own CPU per steady run (serving the lists): {1000 * standin:.0f} ms")
    print(
        f"SQL statements per run: first {first['statements']}, steady {[r['statements'] for r in steady]}"
    )
    print(
        f"RSS: {runs['rss_before_kib'] / 1024:.0f} MiB before the first run, peak {runs['rss_peak_kib'] / 1024:.0f} MiB"
    )
    print(
        f"\nOver {args.trials} trials, each at a random moment of the {args.interval:g} s interval:"
    )
    print("| | median | max |")
    print("|---|---|---|")
    names = {
        "advisor": "CrashLoopBackOff → adviceChanged subscriber",
        "poller": "baseline: CrashLoopBackOff → a poller listing every pod each interval",
        "run start → subscriber": "the advisor's share: its run's start → subscriber",
    }
    for label, values in latency.items():
        print(f"| {names[label]} | {statistics.median(values):.2f} s | {max(values):.2f} s |")


async def main_async(args: Any, cluster: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        url = args.database_url or f"sqlite+aiosqlite:///{directory}/bench.db"
        services, advisor, row, viewer = await world(url, cluster, args.interval, args.page_size)
        try:
            progress(f"{cluster['objects']:,} objects in the vCluster; runs of the advisor")
            runs = await measure_runs(services, advisor, row, int(cluster["pid"]))
            progress("the reading, the analysis and the baseline alone")
            parts = await measure_parts(advisor, row)
            progress("CrashLoopBackOff to the subscriber, against the poller")
            again = Advisor(services, advisor.settings)  # a stopped loop does not start again
            again.reader = advisor.reader
            latency = await measure_latency(
                services, again, row, viewer, cluster, args.trials, args.interval
            )
        finally:
            await services.database.dispose()
    report(parts, runs, latency, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=200, help="25 objects each")
    parser.add_argument(
        "--interval", type=float, default=5.0, help="the advisor's and the poller's"
    )
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--page-size", type=int, default=AdvisorSettings.page_size)
    parser.add_argument("--database-url", help="an empty Postgres database; SQLite by default")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    progress(f"seeding {args.namespaces * 25:,} objects in a vCluster stand-in")
    cluster_process = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bench" / "advisor_cluster.py"),
            "--namespaces",
            str(args.namespaces),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert cluster_process.stdout is not None
        asyncio.run(main_async(args, json.loads(cluster_process.stdout.readline())))
    finally:
        if cluster_process.stdin is not None:
            cluster_process.stdin.close()
        cluster_process.wait(timeout=30)


if __name__ == "__main__":
    main()
