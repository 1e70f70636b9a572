"""Issue 25: a replica told to stop (SIGTERM, as Kubernetes sends it) hands its work over.

Two replicas on one Postgres. The leaving one turns `/readyz` unready at once, claims
nothing more, hands back the probes it could not finish within its grace period (so the
other replica probes those spaces at once, not when their claim would have lapsed an
interval later), closes every WebSocket with 1012 so clients reconnect to the other
replica, where they resume with `after:` and miss nothing and get nothing twice, and
exits within SPACEDOCK_SHUTDOWN_GRACE_S. A CloudSpace it was provisioning goes on on the
other replica at once: the step in flight finishes and is persisted, the lease is handed
back rather than waited out, and no step is done twice. Postgres only: SQLite serves one
process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.typing import Subprotocol

from db.cloudspace_tables import CloudSpace
from db.engine import Database
from sim.host_standin import HostStandIn
from sim.kube_standin import KubeStandIn
from tests.conftest import POSTGRES_URL
from tests.support.cloudspaces import CREATE, ONE, Platform, eventually, key, serve_platform
from tests.support.factories import register_on_standin, set_space_status
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server, mint_token

pytestmark = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs SPACEDOCK_TEST_DATABASE_URL (replicas need Postgres)"
)

PROTOCOL = Subprotocol("graphql-transport-ws")
FOLLOW = """
subscription($after: String) { spaceStatusChanged(after: $after) { id spaceId status } }"""
HISTORY = """
query($after: String) {
  statusEvents(first: 100, after: $after) { pageInfo { hasNextPage endCursor } nodes { id } }
}"""
LAST_PROBES = """
query($ids: [ID!]!) { nodes(ids: $ids) { ... on Space { id lastProbe { at } } } }"""
WAIT_S = 30.0
GRACE_S = 3.0
SPACES = 6
ENV = {
    # Long enough that a space whose claim is not handed back waits visibly longer than
    # one that is; failures never reach the threshold, so every event is the test's.
    "SPACEDOCK_PROBE_INTERVAL_S": "120",
    "SPACEDOCK_PROBE_TIMEOUT_S": "60",
    "SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000",
    "SPACEDOCK_SHUTDOWN_GRACE_S": str(GRACE_S),
}


@pytest.fixture(scope="module")
def database() -> Iterator[Backend]:
    assert POSTGRES_URL is not None
    made = Backend.postgres(POSTGRES_URL)
    yield made
    made.dispose(POSTGRES_URL)


@pytest.fixture
def cluster() -> Iterator[KubeStandIn]:
    with KubeStandIn() as standin:
        yield standin


@pytest.fixture
def leaving(database: Backend, tmp_path: Path) -> Iterator[Server]:
    running = Server(backend=database, log_path=tmp_path / "leaving.log", env=dict(ENV)).start()
    yield running
    running.stop()


def start_staying(database: Backend, leaving: Server, tmp_path: Path) -> Server:
    env = {**ENV, "SPACEDOCK_SECRET_KEY": leaving.secret_key}
    return Server(backend=database, log_path=tmp_path / "staying.log", env=env).start()


def readiness(server: Server) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{server.base}/readyz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())
    except OSError:
        return 0, {}  # not listening any more


class Follower:
    """A graphql-transport-ws subscriber that follows the org's status events on the first
    server it can reach, and after a close resumes with `after:` on the next one."""

    def __init__(self, servers: list[Server], token: str) -> None:
        self.servers = servers
        self.token = token
        self.received: list[str] = []
        self.closes: list[int | None] = []
        self.listening = asyncio.Event()
        self.arrived = asyncio.Event()
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _follow(self) -> None:
        for server in self.servers:
            try:
                async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as socket:
                    await self._session(socket)
            except websockets.ConnectionClosed as closed:
                self.closes.append(None if closed.rcvd is None else closed.rcvd.code)

    async def _session(self, socket: Any) -> None:
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {self.token}"}}
        await socket.send(json.dumps(init))
        assert json.loads(await socket.recv())["type"] == "connection_ack"
        variables = {"after": self.received[-1] if self.received else None}
        payload = {"query": FOLLOW, "variables": variables}
        await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": payload}))
        self.listening.set()
        async for frame in socket:
            message = json.loads(frame)
            assert message["type"] == "next", message
            self.received.append(message["payload"]["data"]["spaceStatusChanged"]["id"])
            self.arrived.set()


async def history_after(client: GraphQL, after: str | None) -> list[str]:
    ids: list[str] = []
    while True:
        page = (await client.data(HISTORY, {"after": after}))["statusEvents"]
        ids += [node["id"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def until(check: Any, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_replica_told_to_stop_hands_its_probes_and_subscribers_over(
    database: Backend, leaving: Server, cluster: KubeStandIn, tmp_path: Path
) -> None:
    token = await mint_token(database.url, "handover", "admin")
    staying = start_staying(database, leaving, tmp_path)
    try:
        on_leaving = GraphQL(leaving.url, leaving.ws_url, token)
        on_staying = GraphQL(staying.url, staying.ws_url, token)
        cluster.hold()  # every probe stays in flight until released
        # Registered through the leaving replica, which is woken to claim them at once.
        spaces = [(await register_on_standin(on_leaving, cluster))["id"] for _ in range(SPACES)]
        in_flight = {server.url: 0.0 for server in (leaving, staying)}

        async def all_probes_in_flight() -> bool:
            for server in (leaving, staying):
                metric = "spacedock_probe_loop_in_flight"
                in_flight[server.url] = await asyncio.to_thread(server.metric, metric)
            return sum(in_flight.values()) == SPACES and in_flight[leaving.url] > 0

        await until(all_probes_in_flight, "the spaces' first probes never were all in flight")
        baseline = (await history_after(on_staying, None))[-1]
        followers = [Follower([leaving, staying], token) for _ in range(3)]
        for follower in followers:
            await follower.listening.wait()

        async def subscribed() -> bool:
            count = await asyncio.to_thread(leaving.metric, "spacedock_event_subscribers")
            return count == len(followers)

        await until(subscribed, "the subscriptions never started")
        await set_space_status(on_staying, spaces[0], "INACTIVE")
        for follower in followers:
            await follower.arrived.wait()

        # Status changes keep coming while the leaving replica stops.
        async def changes() -> None:
            for turn in range(12):
                status = "ACTIVE" if turn % 2 == 0 else "INACTIVE"
                await set_space_status(on_staying, spaces[turn % SPACES], status)

        changing = asyncio.create_task(changes())
        assert leaving.process is not None
        signalled_at = datetime.now().astimezone()
        leaving.process.send_signal(signal.SIGTERM)

        async def draining() -> bool:
            status, body = await asyncio.to_thread(readiness, leaving)
            return status == 0 or (status == 503 and body == {"status": "draining"})

        await until(draining, "/readyz never said draining")
        exit_code = await asyncio.to_thread(leaving.process.wait, GRACE_S + 10)
        assert exit_code in (0, -signal.SIGTERM), leaving.log()[-2000:]
        cluster.release()
        await changing
        await set_space_status(on_staying, spaces[1], "INACTIVE")  # after the hand-over

        # Every subscriber was told to reconnect (1012), resumed on the staying replica,
        # and has every event since it subscribed, once, in order.
        expected = await history_after(on_staying, baseline)
        for follower in followers:
            while len(follower.received) < len(expected):
                follower.arrived.clear()
                await asyncio.wait_for(follower.arrived.wait(), WAIT_S)
            assert follower.closes == [1012]
            assert follower.received == expected
            await follower.stop()

        # The probes the leaving replica could not finish were handed back: the staying
        # replica probed those spaces now, not when their claim lapsed (120 s on).
        async def all_probed_again() -> bool:
            nodes = (await on_staying.data(LAST_PROBES, {"ids": spaces}))["nodes"]
            return all(
                node["lastProbe"] is not None
                and datetime.fromisoformat(node["lastProbe"]["at"]) > signalled_at
                for node in nodes
            )

        await until(all_probed_again, "a space the leaving replica held was not probed again")
        log = leaving.log()
        assert "handing work over" in log
        assert f"handed back {in_flight[leaving.url]:g} unfinished probes" in log
    finally:
        staying.stop()


# Far longer than the test waits: a CloudSpace whose lease were waited out, not handed
# back, would not be READY within READY_S.
RECONCILE_LEASE_S = 300.0
READY_S = 90.0
CLOUD_SPACE_GRACE_S = 10.0  # the step in flight gets 6 s of it to finish and persist
HELM_RELEASES = "helmreleases.helm.toolkit.fluxcd.io"


def steps_done(server: Server, step: str) -> float:
    """How many times `server` did `step` (its reconcile-step histogram's count)."""
    try:
        return server.metric(
            "spacedock_reconcile_step_duration_seconds_count", step=step, outcome="done"
        )
    except KeyError:  # never observed
        return 0.0


@pytest.fixture
def platform(database: Backend, tmp_path: Path) -> Iterator[tuple[HostStandIn, Platform]]:
    """A server that provisions CloudSpaces on the host stand-in, with a 300 s lease."""
    env = {
        "SPACEDOCK_RECONCILE_LEASE_S": f"{RECONCILE_LEASE_S:g}",
        "SPACEDOCK_SHUTDOWN_GRACE_S": f"{CLOUD_SPACE_GRACE_S:g}",
    }
    with HostStandIn(nodes=[("16", "64Gi")]) as host:
        for platform in serve_platform(database, host, tmp_path / "first.log", env):
            yield host, platform


async def test_a_replica_told_to_stop_mid_provisioning_hands_its_cloudspace_over(
    database: Backend, platform: tuple[HostStandIn, Platform], tmp_path: Path
) -> None:
    host, serving = platform
    first = serving.server
    second = Server(backend=database, log_path=tmp_path / "second.log", env=dict(first.env))
    rows = Database(database.url)
    try:
        second.start()
        name = "handed"
        # The vCluster's HelmRelease is applied by a slow API server: its step is in
        # flight, after the namespace's, when the replica holding it is told to stop.
        host.api.hold_applies(kind="HelmRelease", name=name)
        payload = await serving.admin.mutate(
            CREATE,
            {
                "input": {
                    "name": name,
                    "hostSpaceId": serving.host_id,
                    "cpu": 1,
                    "memoryMiB": 1024,
                }
            },
        )
        assert payload["userErrors"] == [], payload["userErrors"]
        cloud_space_id = payload["cloudSpace"]["id"]

        async def held() -> bool:
            return host.api.applies_waiting(name) == 1

        await eventually(held, WAIT_S)
        async with rows.transaction(read_only=True) as session:
            row = await session.get(CloudSpace, cloud_space_id)
            assert row is not None and row.claimed_by is not None
            owner, step = row.claimed_by, row.step
        assert step == "vcluster-release"
        by_pid = {server.process.pid: server for server in (first, second) if server.process}
        leaving = by_pid[int(owner.split(":")[1])]
        staying = second if leaving is first else first
        on_staying = GraphQL(staying.url, staying.ws_url, serving.admin.token)
        assert leaving.process is not None
        leaving.process.send_signal(signal.SIGTERM)

        async def draining() -> bool:
            status, body = await asyncio.to_thread(readiness, leaving)
            return status == 0 or (status == 503 and body == {"status": "draining"})

        await until(draining, "/readyz never said draining")
        host.api.release_applies()  # the step in flight finishes within the grace
        exit_code = await asyncio.to_thread(leaving.process.wait, CLOUD_SPACE_GRACE_S + 10)
        assert exit_code in (0, -signal.SIGTERM), leaving.log()[-2000:]
        assert "handed back 1 CloudSpace leases" in leaving.log()

        # The leaving replica persisted the step it had in flight and holds nothing:
        # the CloudSpace is past that step and free, or already the staying one's.
        async with rows.transaction(read_only=True) as session:
            row = await session.get(CloudSpace, cloud_space_id)
            assert row is not None
            assert row.step != "vcluster-release", leaving.log()[-3000:]
            assert row.claimed_by != owner, leaving.log()[-3000:]

        async def ready() -> bool:
            found = (await on_staying.data(ONE, {"id": cloud_space_id}))["cloudSpace"]
            assert found["phase"] != "FAILED", found["message"]
            return bool(found["phase"] == "READY")

        await eventually(ready, READY_S)  # well within the 300 s lease
        # The staying replica took over from the next step and redid none before it.
        assert steps_done(staying, "vcluster-release") == 0
        assert steps_done(staying, "host-namespace") == 0
        assert steps_done(staying, "vcluster-ready") == 1
        namespace = f"cs-{key(cloud_space_id)}"
        assert host.api.count(verb="apply", resource="namespaces", name=namespace) == 1
        assert host.api.count(verb="apply", resource=HELM_RELEASES, name=name) == 1
        assert host.api.created_twice() == []
        # One Helm install; a release applied again unchanged would be no upgrade anyway.
        assert host.api.find("secrets", f"sh.helm.release.v1.{name}.v2", namespace) is None
    finally:
        host.api.release_applies()
        await rows.dispose()
        second.stop()
