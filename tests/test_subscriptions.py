"""spaceStatusChanged over graphql-transport-ws, through the real server and real clients.

Each test waits on the server's `spacedock_event_subscribers` gauge until its
subscriptions are listening before it changes anything, so no event is published
into a subscription that does not exist yet; and after each test the gauge must
fall back to zero, so a subscription that outlives its client fails the suite.

On Postgres a second server process on the same database plays a second replica:
events cross between them through LISTEN/NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest
import websockets
from gql.graphql_request import GraphQLRequest
from gql.transport.exceptions import TransportQueryError
from websockets.typing import Subprotocol

from sim.kube_standin import KubeStandIn
from tests.conftest import Org
from tests.support.factories import register_generic_space, set_space_status
from tests.support.graphql import GraphQL
from tests.support.server import Server

EVENTS = """
subscription($spaceId: ID) {
  spaceStatusChanged(spaceId: $spaceId) {
    spaceId previous status at reason
    space { id name status held }
  }
}"""
SUBSCRIBERS = "spacedock_event_subscribers"
PROTOCOL = Subprotocol("graphql-transport-ws")
WAIT_S = 10.0
QUIET_S = 1.0


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # Probes of these unreachable test servers must never reach the failure threshold and
    # publish transitions of their own while a test counts events.
    return {"SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000"}


async def subscribers(server: Server) -> int:
    return int(await asyncio.to_thread(server.metric, SUBSCRIBERS))


async def subscribers_reach(server: Server, expected: int) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while (count := await subscribers(server)) != expected:
        assert asyncio.get_running_loop().time() < deadline, f"{count} subscribers, not {expected}"
        await asyncio.sleep(0.02)


@pytest.fixture(autouse=True)
async def no_subscriber_left_behind(server: Server) -> AsyncIterator[None]:
    await subscribers_reach(server, 0)
    yield
    await subscribers_reach(server, 0)


class Live:
    """One subscription read in the background; the test takes its events with deadlines."""

    def __init__(self, session: Any, space_id: str | None = None, query: str = EVENTS) -> None:
        self.session = session
        self.request = GraphQLRequest(query, variable_values={"spaceId": space_id})
        self.received: asyncio.Queue[dict[str, Any] | Exception] = asyncio.Queue()
        self.task = asyncio.create_task(self._read(session))

    async def _read(self, session: Any) -> None:
        try:
            async for result in session.subscribe(self.request):
                self.received.put_nowait(result["spaceStatusChanged"])
        except Exception as error:  # handed to the test, which asserts on it
            self.received.put_nowait(error)

    async def next(self) -> dict[str, Any]:
        item = await asyncio.wait_for(self.received.get(), WAIT_S)
        if isinstance(item, Exception):
            raise item
        return item

    async def next_of(self, space_id: str) -> dict[str, Any]:
        """The next event, which must be of `space_id`: any other (another org's above all)
        fails the test. For servers whose probes are off, so nothing else has events."""
        event = await self.next()
        assert event["spaceId"] == space_id, f"expected an event of {space_id}, got {event}"
        return event

    async def next_for(self, space_id: str) -> dict[str, Any]:
        """The next event of one space, passing over the others."""
        while (event := await self.next())["spaceId"] != space_id:
            pass
        return event

    async def error(self) -> Exception:
        item = await asyncio.wait_for(self.received.get(), WAIT_S)
        assert isinstance(item, Exception), f"expected an error, got the event {item}"
        return item

    async def assert_quiet(self) -> None:
        with contextlib.suppress(TimeoutError):
            item = await asyncio.wait_for(self.received.get(), QUIET_S)
            raise AssertionError(f"expected nothing, got {item}")

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@contextlib.asynccontextmanager
async def listening(
    server: Server, client: Any, *space_ids: str | None
) -> AsyncIterator[list[Live]]:
    """Subscriptions on one connection, one per space id (None: the whole org), listening."""
    before = await subscribers(server)
    async with client as session:
        lives = [Live(session, space_id) for space_id in space_ids]
        try:
            await subscribers_reach(server, before + len(lives))
            yield lives
        finally:
            for live in lives:
                await live.stop()


def codes(error: Exception) -> list[str]:
    assert isinstance(error, TransportQueryError), repr(error)
    return [e.get("extensions", {}).get("code") for e in error.errors or []]


async def test_registration_is_announced_with_the_space_resolved(server: Server, org: Org) -> None:
    async with listening(server, org.viewer.websocket(), None) as (live,):
        space = await register_generic_space(org.editor)
        event = await live.next_for(space["id"])
    assert event["previous"] is None
    assert event["status"] == "UNKNOWN"
    assert event["reason"] == "registered"
    assert event["at"]
    assert event["space"] == {
        "id": space["id"],
        "name": space["name"],
        "status": "UNKNOWN",
        "held": False,
    }


async def test_each_event_reads_the_space_fresh(server: Server, org: Org) -> None:
    """One connection sees the hold and then its lifting: a loader kept for the
    connection would show the space as it was at the first event (or at subscribe time)."""
    space = await register_generic_space(org.editor)
    async with listening(server, org.viewer.websocket(), space["id"]) as (live,):
        await set_space_status(org.editor, space["id"], "INACTIVE")
        held = await live.next()
        await set_space_status(org.editor, space["id"], "ACTIVE")
        lifted = await live.next()
    assert (held["previous"], held["status"], held["reason"]) == (
        "UNKNOWN",
        "INACTIVE",
        "operator hold",
    )
    assert held["space"]["held"] is True
    assert held["space"]["status"] == "INACTIVE"
    assert (lifted["previous"], lifted["status"], lifted["reason"]) == (
        "INACTIVE",
        "UNKNOWN",
        "hold lifted",
    )
    assert lifted["space"]["held"] is False
    assert lifted["space"]["status"] == "UNKNOWN"


async def test_a_probe_verdict_is_announced(server: Server, org: Org) -> None:
    """The probe loop publishes too: a reachable cluster turns ACTIVE, live."""
    with KubeStandIn() as cluster:
        async with listening(server, org.viewer.websocket(), None) as (live,):
            space = await register_generic_space(
                org.editor, server=cluster.url, ca=cluster.ca_pem, token=cluster.token
            )
            assert (await live.next_for(space["id"]))["reason"] == "registered"
            probed = await live.next_for(space["id"])
    assert (probed["previous"], probed["status"]) == ("UNKNOWN", "ACTIVE")
    assert probed["space"]["status"] == "ACTIVE"


async def test_space_id_narrows_to_one_space(server: Server, org: Org) -> None:
    watched = await register_generic_space(org.editor)
    other = await register_generic_space(org.editor)
    async with listening(server, org.viewer.websocket(), watched["id"], None) as (narrow, wide):
        await set_space_status(org.editor, other["id"], "INACTIVE")
        await set_space_status(org.editor, watched["id"], "INACTIVE")
        assert (await wide.next())["spaceId"] == other["id"]
        assert (await wide.next())["spaceId"] == watched["id"]
        assert (await narrow.next())["spaceId"] == watched["id"]
        await narrow.assert_quiet()


async def test_another_orgs_subscriber_receives_nothing(
    server: Server, org: Org, other_org: Org
) -> None:
    async with (
        listening(server, org.viewer.websocket(), None) as (ours,),
        listening(server, other_org.admin.websocket(), None) as (theirs,),
    ):
        space = await register_generic_space(org.editor)
        await set_space_status(org.editor, space["id"], "INACTIVE")
        assert (await ours.next_for(space["id"]))["reason"] == "registered"
        assert (await ours.next_for(space["id"]))["reason"] == "operator hold"
        await theirs.assert_quiet()


async def test_a_space_id_the_caller_cannot_see_is_not_found(
    server: Server, org: Org, other_org: Org
) -> None:
    """Another org's space and an id that never existed get the same answer."""
    foreign = await register_generic_space(org.editor)
    async with other_org.viewer.websocket() as session:
        for space_id in (foreign["id"], "spc_doesnotexist"):
            live = Live(session, space_id)
            assert codes(await live.error()) == ["NOT_FOUND"]
            await live.stop()
    assert await subscribers(server) == 0


async def test_a_subscription_deeper_than_10_is_refused(server: Server, org: Org) -> None:
    deep = "space { id }"
    for _ in range(5):
        deep = f"space {{ environments {{ {deep} }} }}"
    async with org.viewer.websocket() as session:
        too_deep = f"subscription {{ spaceStatusChanged {{ {deep} }} }}"
        error = await Live(session, query=too_deep).error()
    assert codes(error) == ["GRAPHQL_VALIDATION_FAILED"]
    assert "depth" in str(error)


@pytest.mark.parametrize(
    "init_payload",
    [{}, {"Authorization": "Bearer not-a-token"}, {"authorization": "Basic abc"}],
    ids=["missing", "unknown", "not-bearer"],
)
async def test_connection_init_without_a_valid_token_closes_with_4403(
    server: Server, init_payload: dict[str, str]
) -> None:
    async with websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": init_payload}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), WAIT_S)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4403


async def test_the_101st_subscription_on_a_connection_is_refused(server: Server, org: Org) -> None:
    async with listening(server, org.viewer.websocket(), *[None] * 100) as lives:
        session = lives[0].session
        refused = Live(session, None)
        assert "Subscription limit reached" in str(await refused.error())
        # Another connection has an allowance of its own.
        async with org.viewer.websocket() as second_connection:
            elsewhere = Live(second_connection, None)
            await subscribers_reach(server, 101)
            await elsewhere.stop()
        # The limit counts live subscriptions: ending one makes room for another.
        await lives.pop().stop()
        await subscribers_reach(server, 99)
        lives.append(Live(session, None))
        await subscribers_reach(server, 100)


async def open_raw_subscription(server: Server, token: str) -> Any:
    """A graphql-transport-ws client written by hand, so the test can drop its TCP
    connection without a close frame, as a client that crashes or loses its network."""
    ws = await websockets.connect(server.ws_url, subprotocols=[PROTOCOL])
    await ws.send(
        json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}})
    )
    assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"] == "connection_ack"
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": EVENTS}}))
    return ws


async def test_a_vanished_client_releases_its_subscription(server: Server, org: Org) -> None:
    async with listening(server, org.viewer.websocket(), None) as (staying,):
        before = await subscribers(server)
        ws = await open_raw_subscription(server, org.tokens["viewer"])
        await subscribers_reach(server, before + 1)
        ws.transport.abort()  # no close frame, no goodbye
        await subscribers_reach(server, before)
        # The server is unharmed: the remaining subscriber still gets events.
        space = await register_generic_space(org.editor)
        assert (await staying.next_for(space["id"]))["reason"] == "registered"


@pytest.fixture(scope="module")
def replica(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second server process on the first one's database and key: another replica."""
    if server.backend.name != "postgres":
        pytest.skip("replicas share events through Postgres; SQLite serves one process")
    log_path = Path(tmp_path_factory.mktemp("replica")) / "server.log"
    running = Server(backend=server.backend, log_path=log_path, env=dict(server.env)).start()
    yield running
    running.stop()


def on(replica: Server, client: GraphQL) -> GraphQL:
    """The same caller, talking to another replica."""
    return GraphQL(replica.url, replica.ws_url, client.token)


async def listen_connections(replica: Server) -> list[int]:
    """Backend pids of the replica's LISTEN connections, as Postgres reports them."""
    assert replica.process is not None
    dsn = replica.backend.url.replace("postgresql+asyncpg", "postgresql")
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            f"spacedock-events-{replica.process.pid}",
        )
    finally:
        await connection.close()
    return [row["pid"] for row in rows]


async def listen_connections_become(replica: Server, check: Any) -> list[int]:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not check(pids := await listen_connections(replica)):
        assert asyncio.get_running_loop().time() < deadline, f"LISTEN connections: {pids}"
        await asyncio.sleep(0.05)
    return pids


async def test_an_event_reaches_subscribers_on_every_replica(
    server: Server, replica: Server, org: Org
) -> None:
    async with (
        listening(server, org.viewer.websocket(), None) as (here,),
        listening(replica, on(replica, org.viewer).websocket(), None) as (there,),
    ):
        made_here = await register_generic_space(org.editor)
        made_there = await register_generic_space(on(replica, org.editor))
        for live in (here, there):
            for space in (made_here, made_there):
                event = await live.next_for(space["id"])
                assert event["reason"] == "registered"
                assert event["space"]["name"] == space["name"]
    await subscribers_reach(replica, 0)


async def test_a_replica_listens_only_while_someone_subscribes(
    server: Server, replica: Server, org: Org
) -> None:
    await listen_connections_become(replica, lambda pids: pids == [])
    async with listening(replica, on(replica, org.viewer).websocket(), None, None):
        # One connection serves every subscriber of the process.
        await listen_connections_become(replica, lambda pids: len(pids) == 1)
    await subscribers_reach(replica, 0)
    await listen_connections_become(replica, lambda pids: pids == [])


async def test_a_lost_listen_connection_is_reopened(
    server: Server, replica: Server, org: Org
) -> None:
    async with listening(replica, on(replica, org.viewer).websocket(), None) as (there,):
        (lost,) = await listen_connections_become(replica, lambda pids: len(pids) == 1)
        admin = await asyncpg.connect(
            replica.backend.url.replace("postgresql+asyncpg", "postgresql")
        )
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", lost)
        finally:
            await admin.close()
        await listen_connections_become(replica, lambda pids: len(pids) == 1 and lost not in pids)
        # The subscriber kept its WebSocket and hears events again.
        space = await register_generic_space(org.editor)
        assert (await there.next_for(space["id"]))["reason"] == "registered"
    await subscribers_reach(replica, 0)


async def test_a_subscription_sent_over_http_is_refused_with_a_clear_error(
    server: Server, org: Org
) -> None:
    async with aiohttp.ClientSession() as http:
        response = await http.post(
            server.url,
            json={"query": "subscription { spaceStatusChanged { spaceId } }"},
            headers=org.viewer.headers,
        )
        body = await response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "WebSocket" in error["message"]
    assert "Traceback" not in server.log()


SPACE_HELD = "query($id: ID!) { space(id: $id) { id held status } }"


async def held_over(session: Any, space_id: str) -> bool:
    result = await session.execute(GraphQLRequest(SPACE_HELD, variable_values={"id": space_id}))
    held: bool = result["space"]["held"]
    return held


async def test_a_query_over_a_socket_reads_what_changed_since_the_last_one(
    server: Server, org: Org
) -> None:
    space = await register_generic_space(org.editor)
    async with org.viewer.websocket() as session:
        assert await held_over(session, space["id"]) is False
        await set_space_status(org.editor, space["id"], "INACTIVE")  # over HTTP
        assert await held_over(session, space["id"]) is True  # same socket, fresh rows
        await set_space_status(org.editor, space["id"], "ACTIVE")
        assert await held_over(session, space["id"]) is False


async def test_two_subscriptions_and_queries_on_one_connection_each_read_fresh_rows(
    server: Server, org: Org
) -> None:
    space = await register_generic_space(org.editor)
    async with listening(server, org.viewer.websocket(), space["id"], None) as (narrow, wide):
        session = narrow.session
        assert await held_over(session, space["id"]) is False
        await set_space_status(org.editor, space["id"], "INACTIVE")
        held = [await narrow.next(), await wide.next_for(space["id"])]
        assert await held_over(session, space["id"]) is True
        await set_space_status(org.editor, space["id"], "ACTIVE")
        lifted = [await narrow.next(), await wide.next_for(space["id"])]
        assert await held_over(session, space["id"]) is False
    assert [(e["status"], e["space"]["held"]) for e in held] == [("INACTIVE", True)] * 2
    assert [e["space"]["held"] for e in lifted] == [False, False]
