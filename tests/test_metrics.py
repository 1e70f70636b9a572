"""/metrics as an operator's Prometheus reads it (issue 25): parsed by prometheus-client's
own parser, it holds the latency histograms, observed by real requests over HTTP and
WebSocket, real probes of a healthy and an unreachable cluster and a real subscription's
fan-out, beside the counters and gauges under their old names. Labels stay bounded: an
operation name that did not execute, or one past the cap, is never a label of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from gql import gql
from prometheus_client.metrics_core import Metric

from core.common.metrics import MAX_OPERATION_NAMES
from sim.kube_standin import KubeStandIn
from sim.ports import free_port
from tests.conftest import Org
from tests.support import factories as make
from tests.support.server import Server

WAIT_S = 20.0
REQUESTS = "spacedock_graphql_request_duration_seconds"
PROBES = "spacedock_probe_duration_seconds"
FANOUT = "spacedock_fanout_delivery_seconds"
HISTOGRAMS = {
    REQUESTS,
    PROBES,
    FANOUT,
    "spacedock_reconcile_step_duration_seconds",
    "spacedock_app_revision_duration_seconds",
}
STATUS = "subscription { spaceStatusChanged { spaceId status } }"


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    return {"SPACEDOCK_PROBE_INTERVAL_S": "0.3", "SPACEDOCK_PROBE_TIMEOUT_S": "1"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


def families(server: Server) -> dict[str, Metric]:
    return {family.name: family for family in server.metrics()}


def count(found: dict[str, Metric], histogram: str, **labels: str) -> float:
    """A histogram's observations with these labels (0 when it has none yet)."""
    for sample in found[histogram].samples:
        if sample.name == f"{histogram}_count" and sample.labels == labels:
            return float(sample.value)
    return 0.0


def label_values(found: dict[str, Metric], histogram: str, label: str) -> set[str]:
    return {sample.labels[label] for sample in found[histogram].samples if label in sample.labels}


async def until_counted(server: Server, histogram: str, at_least: float, **labels: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while (seen := count(await asyncio.to_thread(families, server), histogram, **labels)) < (
        at_least
    ):
        assert asyncio.get_running_loop().time() < deadline, (histogram, labels, seen)
        await asyncio.sleep(0.1)


async def post(server: Server, org: Org, body: dict[str, Any]) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url, json=body, headers=org.viewer.headers) as response,
    ):
        return response.status


async def space_ids(org: Org) -> set[str]:
    data = await org.viewer.data("{ spaces(first: 100) { nodes { id } } }")
    return {node["id"] for node in data["spaces"]["nodes"]}


def check_histogram(family: Metric) -> None:
    """Buckets cumulative, +Inf equal to the count, for every label set."""
    by_labels: dict[tuple[tuple[str, str], ...], list[Any]] = {}
    for sample in family.samples:
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        by_labels.setdefault(labels, []).append(sample)
    for labels, samples in by_labels.items():
        buckets = [s for s in samples if s.name.endswith("_bucket")]
        total = next(s.value for s in samples if s.name.endswith("_count"))
        values = [s.value for s in buckets]
        assert values == sorted(values), labels
        assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == total, labels


async def test_histograms_hold_real_requests_probes_and_fan_out(
    server: Server, org: Org, cluster: KubeStandIn
) -> None:
    before = families(server)
    assert set(before) >= HISTOGRAMS
    assert all(before[name].type == "histogram" for name in HISTOGRAMS)
    # The counters and gauges kept their names (the parser drops a counter's _total).
    assert before["spacedock_probes"].type == "counter"
    assert before["spacedock_sql_statements"].type == "counter"
    assert before["spacedock_event_subscribers"].type == "gauge"
    assert before["spacedock_reconcile_loop_in_flight"].type == "gauge"
    assert "process_cpu_seconds" in before and "process_resident_memory_bytes" in before

    ok = count(before, PROBES, outcome="PROBE_OK")
    refused = count(before, PROBES, outcome="CONNECTION_REFUSED")
    fanned = count(before, FANOUT)
    subscribers = server.metric("spacedock_event_subscribers")
    async with org.viewer.websocket() as session:
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def listen() -> None:
            async for event in session.subscribe(gql(STATUS)):
                events.put_nowait(event["spaceStatusChanged"])

        listening = asyncio.create_task(listen())
        try:
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while (
                await asyncio.to_thread(server.metric, "spacedock_event_subscribers") <= subscribers
            ):
                assert asyncio.get_running_loop().time() < deadline, "no subscriber listening"
                await asyncio.sleep(0.05)
            await make.register_on_standin(org.editor, cluster)
            await make.register_generic_space(
                org.editor, server=f"https://127.0.0.1:{free_port()}", ca=cluster.ca_pem
            )
            event = await asyncio.wait_for(events.get(), WAIT_S)
            assert event["spaceId"] in await space_ids(org)
            over_socket = await session.execute(gql("query OverSocket { viewer { role } }"))
            assert over_socket == {"viewer": {"role": "VIEWER"}}
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
    await until_counted(server, PROBES, ok + 1, outcome="PROBE_OK")
    await until_counted(server, PROBES, refused + 1, outcome="CONNECTION_REFUSED")
    await until_counted(server, FANOUT, fanned + 1)

    now = families(server)
    who = count(now, REQUESTS, operation="Who", type="query", transport="http")
    unnamed = count(now, REQUESTS, operation="unnamed", type="query", transport="http")
    assert await post(server, org, {"query": "query Who { viewer { role } }"}) == 200
    assert await post(server, org, {"query": "query Who { viewer { role } }"}) == 200
    assert await post(server, org, {"query": "{ viewer { role } }"}) == 200
    # Names that never ran are no labels: a document that fails validation or parsing.
    await post(server, org, {"query": "query NoSuchField { viewer { nope } }"})
    await post(server, org, {"query": "query Broken {", "operationName": "Broken"})

    after = families(server)
    assert count(after, REQUESTS, operation="Who", type="query", transport="http") == who + 2
    assert count(after, REQUESTS, operation="unnamed", type="query", transport="http") == (
        unnamed + 1
    )
    assert count(after, REQUESTS, operation="OverSocket", type="query", transport="websocket") >= 1
    assert count(after, REQUESTS, operation="unknown", type="none", transport="http") >= 2
    operations = label_values(after, REQUESTS, "operation")
    assert not {"NoSuchField", "Broken"} & operations
    # The subscription's own lifetime is no request latency.
    assert label_values(after, REQUESTS, "type") <= {"query", "mutation", "none"}
    assert {"PROBE_OK", "CONNECTION_REFUSED"} <= label_values(after, PROBES, "outcome")
    for name in HISTOGRAMS:
        check_histogram(after[name])
    sums = {s.name: s.value for s in after[PROBES].samples if s.name.endswith("_sum")}
    assert sums and all(value > 0 for value in sums.values())


async def test_operation_names_past_the_cap_are_other(server: Server, org: Org) -> None:
    assert await post(server, org, {"query": "query Kept { viewer { role } }"}) == 200
    async with aiohttp.ClientSession() as session:
        for number in range(MAX_OPERATION_NAMES + 5):
            body = {"query": f"query Name{number} {{ viewer {{ role }} }}"}
            async with session.post(server.url, json=body, headers=org.viewer.headers) as reply:
                assert reply.status == 200
    long_name = "L" * 65
    assert await post(server, org, {"query": f"query {long_name} {{ viewer {{ role }} }}"}) == 200
    assert await post(server, org, {"query": "query Kept { viewer { role } }"}) == 200

    found = families(server)
    named = label_values(found, REQUESTS, "operation") - {"unknown", "unnamed", "other"}
    assert len(named) == MAX_OPERATION_NAMES
    assert "Kept" in named and long_name not in named
    assert count(found, REQUESTS, operation="Kept", type="query", transport="http") == 2
    assert count(found, REQUESTS, operation="other", type="query", transport="http") >= 5


async def test_metrics_answer_openmetrics_to_a_scraper_that_asks(server: Server) -> None:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.base}/metrics", headers=headers) as reply,
    ):
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("application/openmetrics-text")
        text = await reply.text()
    assert text.rstrip().endswith("# EOF")
    assert "# TYPE spacedock_probe_duration_seconds histogram" in text
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.base}/metrics") as reply,
    ):
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
