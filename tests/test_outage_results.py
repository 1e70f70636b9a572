"""Issue 19: a probe result taken while the database is away is written when it is back.

The server reaches Postgres through a forwarder the test cuts. A probe is held in flight
by the cluster stand-in, the database is cut, the probe is answered (with a failure the
space's status will count), and the result cannot be written. It used to be dropped
(`spacedock_probe_loop_dropped_total`) and the probe was lost an interval's worth; now
it is kept and written once the database answers again: the space's failure count and
last probe say so, and nothing was dropped. Postgres only (SQLite has no network to lose).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.kube_standin import KubeStandIn
from tests.conftest import POSTGRES_URL
from tests.support.factories import register_on_standin
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server, mint_token
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs SPACEDOCK_TEST_DATABASE_URL (a database to lose)"
)

WAIT_S = 30.0
PROBE = "query($id: ID!) { space(id: $id) { consecutiveFailures lastProbe { at ok error } } }"
INTERVAL_S = 2


@pytest.fixture(scope="module")
def outage_server(
    postgres_database: Backend, postgres_proxy: TcpProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    through_proxy = postgres_proxy.backend_of(postgres_database)
    log_path = Path(tmp_path_factory.mktemp("outage")) / "server.log"
    env = {"SPACEDOCK_PROBE_INTERVAL_S": str(INTERVAL_S), "SPACEDOCK_PROBE_TIMEOUT_S": "10"}
    running = Server(backend=through_proxy, log_path=log_path, env=env).start()
    yield running
    running.stop()


async def until(check: object, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not await check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_probe_result_taken_during_an_outage_is_written_when_the_database_is_back(
    outage_server: Server, postgres_proxy: TcpProxy, postgres_database: Backend
) -> None:
    token = await mint_token(postgres_database.url, "outage-results", "admin")
    client = GraphQL(outage_server.url, outage_server.ws_url, token)
    with KubeStandIn() as cluster:
        space = await register_on_standin(client, cluster)

        async def probed() -> bool:
            found = (await client.data(PROBE, {"id": space["id"]}))["space"]["lastProbe"]
            return found is not None and found["ok"] is True

        await until(probed, "the first probe never landed")
        first = (await client.data(PROBE, {"id": space["id"]}))["space"]["lastProbe"]["at"]
        cluster.hold()  # the next probe waits for its answer

        async def in_flight() -> bool:
            return cluster.calls_in_flight["GET /version"] > 0

        await until(in_flight, "no probe reached the cluster")
        dropped_before = await asyncio.to_thread(
            outage_server.metric, "spacedock_probe_loop_dropped_total"
        )
        await asyncio.to_thread(postgres_proxy.cut)
        try:
            cluster.status_code = 503  # the held probe is answered, with a failure
            cluster.release()

            async def answered() -> bool:
                return cluster.calls_in_flight["GET /version"] == 0

            await until(answered, "the held probe was not answered")
            await asyncio.sleep(0.5)  # the result's write meets the cut database
        finally:
            await asyncio.to_thread(postgres_proxy.restore)

        async def written() -> bool:
            response = await client.call(PROBE, {"id": space["id"]})
            if response["errors"]:
                return False  # still SERVICE_UNAVAILABLE
            found = response["data"]["space"]
            return bool(found["consecutiveFailures"] >= 1)

        await until(written, "the result taken during the outage was never written")
        last = (await client.data(PROBE, {"id": space["id"]}))["space"]["lastProbe"]
        assert last["ok"] is False and "HTTP 503" in last["error"], last
        assert last["at"] > first
    dropped = await asyncio.to_thread(outage_server.metric, "spacedock_probe_loop_dropped_total")
    assert dropped == dropped_before
