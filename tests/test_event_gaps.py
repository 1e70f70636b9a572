"""Issue 19: a subscriber on a replica that stopped hearing Postgres still gets every event.

Two replicas on one Postgres: `writer` reaches it directly, `listener` through a TCP
forwarder the test cuts. Subscribers on `listener` (org-wide ones and one following a
few spaces) record every `spaceStatusChanged` frame they receive. While the listener
cannot hear NOTIFY the writer changes statuses; when it hears again, each subscriber
must have received exactly the events the database holds for what it follows, each once
and in id order, without reconnecting. The same when every connection to the database
is dropped at once (as a Postgres restart drops them: pg_terminate_backend, never a
restart of the machine's Postgres), when the listener's LISTEN link stalls without closing
(its keepalive notices) and, following the README's catch-up, across a restart of the
listener. Postgres only: SQLite serves one process and has no LISTEN.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
import websockets
from websockets.typing import Subprotocol

from tests.conftest import POSTGRES_URL
from tests.support.factories import register_generic_space, set_space_status
from tests.support.graphql import GraphQL
from tests.support.server import Backend, Server, mint_token
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.skipif(
    POSTGRES_URL is None, reason="needs SPACEDOCK_TEST_DATABASE_URL (replicas need Postgres)"
)

PROTOCOL = Subprotocol("graphql-transport-ws")
FOLLOW = """
subscription($ids: [ID!], $after: String) {
  spaceStatusChanged(spaceIds: $ids, after: $after) { id spaceId status }
}"""
HISTORY = """
query($after: String, $ids: [ID!]) {
  statusEvents(first: 100, after: $after, spaceIds: $ids) {
    pageInfo { hasNextPage endCursor }
    nodes { id spaceId }
  }
}"""
WAIT_S = 30.0
SPACES = 4
# Probes of the test's unreachable servers must publish no transitions of their own.
QUIET_PROBES = {"SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000"}
# The listener checks its LISTEN connection this often (the default is 5 s); a check must
# answer within as long, so on a machine busy with the rest of the suite a shorter one
# would drop a healthy connection again and again.
KEEPALIVE_S = "2"


@pytest.fixture(scope="module")
def writer(
    postgres_database: Backend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log_path = Path(tmp_path_factory.mktemp("writer")) / "server.log"
    running = Server(backend=postgres_database, log_path=log_path, env=dict(QUIET_PROBES)).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def listener(
    postgres_database: Backend,
    postgres_proxy: TcpProxy,
    writer: Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    through_proxy = postgres_proxy.backend_of(postgres_database)
    log_path = Path(tmp_path_factory.mktemp("listener")) / "server.log"
    env = {
        **QUIET_PROBES,
        "SPACEDOCK_SECRET_KEY": writer.secret_key,
        "SPACEDOCK_EVENT_LISTEN_KEEPALIVE_S": KEEPALIVE_S,
    }
    running = Server(backend=through_proxy, log_path=log_path, env=env).start()
    yield running
    running.stop()


class Follower:
    """One graphql-transport-ws subscriber that records the id of every event it gets.

    With `catch_up`, it behaves as the README says a client should across a lost socket:
    it reconnects and resubscribes with `after:` the last id it saw; without, it records
    frames as they come (duplicates too)."""

    def __init__(
        self, server: Server, token: str, space_ids: list[str] | None, catch_up: bool = False
    ) -> None:
        self.server = server
        self.token = token
        self.space_ids = space_ids
        self.catch_up = catch_up
        self.received: list[str] = []
        self.closes: list[tuple[int | None, str | None]] = []
        self.failures: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _record(self, event_id: str) -> None:
        self.received.append(event_id)
        self.arrived.set()

    async def _follow(self) -> None:
        while True:
            try:
                async with websockets.connect(
                    self.server.ws_url, subprotocols=[PROTOCOL]
                ) as socket:
                    await self._session(socket)
            except (OSError, websockets.ConnectionClosed) as error:
                if isinstance(error, websockets.ConnectionClosed):
                    received = error.rcvd
                    self.closes.append(
                        (None, None) if received is None else (received.code, received.reason)
                    )
                if not self.catch_up:
                    return
                await asyncio.sleep(0.2)

    async def _session(self, socket: Any) -> None:
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {self.token}"}}
        await socket.send(json.dumps(init))
        assert json.loads(await socket.recv())["type"] == "connection_ack"
        variables: dict[str, Any] = {"ids": self.space_ids}
        if self.catch_up and self.received:  # resumes after the last event it saw
            variables["after"] = self.received[-1]
        subscribe = {"query": FOLLOW, "variables": variables}
        await socket.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
        async for frame in socket:
            message = json.loads(frame)
            data = (message.get("payload") or {}).get("data")
            if message["type"] != "next" or data is None:
                self.failures.append(message)  # an error or a completion, never expected
                continue
            self._record(data["spaceStatusChanged"]["id"])


async def history(client: GraphQL, after: str | None, space_ids: list[str] | None) -> list[str]:
    """Every event id the database holds after `after` (of these spaces), oldest first."""
    ids: list[str] = []
    while True:
        page = (await client.data(HISTORY, {"after": after, "ids": space_ids}))["statusEvents"]
        ids += [node["id"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def subscribers_reach(server: Server, expected: int) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while (count := await asyncio.to_thread(server.metric, "spacedock_event_subscribers")) != (
        expected
    ):
        assert asyncio.get_running_loop().time() < deadline, f"{count} subscribers, not {expected}"
        await asyncio.sleep(0.05)


async def listen_connections(database: Backend) -> dict[int, int]:
    """The LISTEN connections on the database: their backend pid, and the client port
    Postgres sees (the forwarder's upstream side, for the listener)."""
    admin = await asyncpg.connect(database.url.replace("postgresql+asyncpg", "postgresql"))
    try:
        rows = await admin.fetch(
            "SELECT pid, client_port FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'spacedock-events-%'"
        )
    finally:
        await admin.close()
    return {row["pid"]: row["client_port"] for row in rows}


async def listen_pids(database: Backend) -> list[int]:
    return list(await listen_connections(database))


async def drop_connections(database: Backend, client_ports: set[int]) -> int:
    """Drops at once every connection of one replica (those from these ports), as a
    Postgres restart drops them, without restarting the machine's Postgres."""
    admin = await asyncpg.connect(database.url.replace("postgresql+asyncpg", "postgresql"))
    try:
        dropped: int = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND client_port = ANY($1::int[])",
            sorted(client_ports),
        )
    finally:
        await admin.close()
    return dropped


class Scene:
    """An org with spaces made through the writer and followers on the listener."""

    def __init__(self, writer: Server, listener: Server, token: str) -> None:
        self.writer = GraphQL(writer.url, writer.ws_url, token)
        self.listener = listener
        self.token = token
        self.spaces: list[str] = []
        self.baseline: str | None = None
        self.followers: list[Follower] = []
        self.flips = 0
        self.flipped = asyncio.Event()

    async def change(self) -> None:
        """One status change of one space, through the writer (retried in an outage: an
        answer that is not a success committed nothing)."""
        space = self.spaces[self.flips % len(self.spaces)]
        status = "INACTIVE" if (self.flips // len(self.spaces)) % 2 == 0 else "ACTIVE"
        self.flips += 1
        self.flipped.set()
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            try:
                await set_space_status(self.writer, space, status)
                return
            except AssertionError:
                assert asyncio.get_running_loop().time() < deadline, "the writer never recovered"
                await asyncio.sleep(0.1)

    async def changes_for(self, count: int) -> None:
        for _ in range(count):
            await self.change()

    def follower_of(self, space_ids: list[str] | None) -> Follower:
        return next(f for f in self.followers if f.space_ids == space_ids)

    def listener_said(self) -> str:
        """The listener's log lines about its LISTEN link and replays, for a failure."""
        words = ("LISTEN", "replay", "keepalive", "catch up", "Error")
        lines = [line for line in self.listener.log().splitlines() if any(w in line for w in words)]
        return "\n".join(lines[-40:])

    async def everyone_has_everything(self, in_id_order: bool = True) -> None:
        """Waits until each follower has as many events as the database holds for it, then
        says they are exactly those, each once, and in id order unless changes were made
        concurrently (ids are taken at insert, NOTIFYs sent at commit)."""
        for follower in self.followers:
            expected = await history(self.writer, self.baseline, follower.space_ids)
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while len(follower.received) < len(expected):
                follower.arrived.clear()
                left = deadline - asyncio.get_running_loop().time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(follower.arrived.wait(), max(left, 0.01))
                if asyncio.get_running_loop().time() > deadline:
                    break
            assert not follower.failures, follower.failures
            missed = sorted(set(expected) - set(follower.received))
            assert not missed, (
                f"{len(missed)} of {len(expected)} events never arrived; the listener said:\n"
                + self.listener_said()
            )
            assert len(follower.received) == len(set(follower.received)), "an event came twice"
            assert set(follower.received) == set(expected), "an event came that is not theirs"
            if in_id_order:
                assert follower.received == expected, "events arrived out of order"


@contextlib.asynccontextmanager
async def scene(writer: Server, listener: Server, catch_up: bool = False) -> AsyncIterator[Scene]:
    token = await mint_token(writer.backend.url, f"gaps-{id(object()):x}", "admin")
    made = Scene(writer, listener, token)
    for _ in range(SPACES):
        made.spaces.append((await register_generic_space(made.writer))["id"])
    made.baseline = (await history(made.writer, None, None))[-1]
    watched = made.spaces[:2]
    before = int(await asyncio.to_thread(listener.metric, "spacedock_event_subscribers"))
    for space_ids in (None, None, watched):
        follower = Follower(listener, token, space_ids, catch_up)
        made.followers.append(follower)
        await follower.start()
    await subscribers_reach(listener, before + len(made.followers))
    try:
        yield made
    finally:
        for follower in made.followers:
            await follower.stop()


async def test_events_written_while_a_replica_is_cut_off_reach_its_subscribers_once(
    writer: Server, listener: Server, postgres_proxy: TcpProxy, postgres_database: Backend
) -> None:
    async with scene(writer, listener) as made:
        await made.change()
        await made.follower_of(None).arrived.wait()
        (heard_by,) = await listen_pids(postgres_database)
        await asyncio.to_thread(postgres_proxy.cut)
        try:
            # The listener's LISTEN connection is gone (its termination seen by Postgres).
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while heard_by in await listen_pids(postgres_database):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.05)
            for _ in range(12):
                await made.change()
        finally:
            await asyncio.to_thread(postgres_proxy.restore)
        await made.change()
        await made.everyone_has_everything()
        assert all(not follower.closes for follower in made.followers), "a socket was closed"
    assert "replayed" in listener.log()


async def test_events_reach_subscribers_when_every_database_connection_drops_at_once(
    writer: Server, listener: Server, postgres_proxy: TcpProxy, postgres_database: Backend
) -> None:
    async with scene(writer, listener) as made:
        await made.change()
        await made.follower_of(None).arrived.wait()
        # Changes keep coming from the writer while every connection of the listener
        # (its pool and its LISTEN) is dropped: some land before it listens again.
        changing = [asyncio.create_task(made.changes_for(15)) for _ in range(3)]
        while made.flips < 6:
            made.flipped.clear()
            await made.flipped.wait()
        ports = await asyncio.to_thread(postgres_proxy.upstream_ports)
        assert await drop_connections(postgres_database, ports) >= 1
        await asyncio.gather(*changing)
        await made.change()
        await made.everyone_has_everything(in_id_order=False)
        assert all(not follower.closes for follower in made.followers), "a socket was closed"
    assert "the event LISTEN connection to Postgres was lost" in listener.log()


async def test_events_reach_subscribers_when_the_listen_link_stalls_without_closing(
    writer: Server, listener: Server, postgres_proxy: TcpProxy, postgres_database: Backend
) -> None:
    async with scene(writer, listener) as made:
        await made.change()
        await made.follower_of(None).arrived.wait()
        ((heard_by, port),) = (await listen_connections(postgres_database)).items()
        # The link drops every byte but stays open: nothing tells asyncpg it is gone, and
        # the NOTIFYs of the writer's changes go nowhere until the keepalive notices.
        await asyncio.to_thread(postgres_proxy.stall, port)
        for _ in range(12):
            await made.change()
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while heard_by in (now := await listen_connections(postgres_database)) or not now:
            assert asyncio.get_running_loop().time() < deadline, "the stall was never noticed"
            await asyncio.sleep(0.05)
        await made.change()
        await made.everyone_has_everything()
        assert all(not follower.closes for follower in made.followers), "a socket was closed"
    assert "did not answer its keepalive" in listener.log()


async def test_subscribers_that_catch_up_as_the_readme_says_miss_nothing_across_a_restart(
    writer: Server, listener: Server
) -> None:
    async with scene(writer, listener, catch_up=True) as made:
        await made.change()
        await made.follower_of(None).arrived.wait()
        await asyncio.to_thread(listener.stop)
        try:
            for _ in range(10):
                await made.change()
        finally:
            await asyncio.to_thread(listener.start)
        await made.change()
        await made.everyone_has_everything()
        assert all(follower.closes for follower in made.followers), "no socket was closed"
