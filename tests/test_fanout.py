"""Status fan-out costs O(events), not O(subscribers) (issue 12), and sharing an event's
read or its execution never lets it reach a subscriber who may not see it: through the
real server, with real graphql-transport-ws clients, counting SQL statements and
subscription groups on the server's /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from strawberry.types.execution import ExecutionResult

from api.shared_subscriptions import EVENT_UNITS, FAN_OUT_CHUNK, GroupKey, SharedSubscriptions
from core.common.rbac import Role, Viewer
from tests.conftest import Org
from tests.support.factories import register_generic_space, set_space_status
from tests.support.graphql import GraphQL
from tests.support.server import Server, mint_token
from tests.support.sql_counts import quiet, statements
from tests.test_subscriptions import Live, subscribers, subscribers_reach

GROUPS = "spacedock_subscription_groups"
WAIT_S = 15.0


@pytest.fixture(scope="module")
def server_env() -> dict[str, str]:
    # No probe may run (and send SQL) while a test counts statements.
    return {"SPACEDOCK_PROBE_FAILURE_THRESHOLD": "1000000", "SPACEDOCK_PROBE_INTERVAL_S": "3600"}


@contextlib.asynccontextmanager
async def subscribed(
    server: Server, clients: list[Any], per_connection: int
) -> AsyncIterator[list[Live]]:
    """`per_connection` whole-org subscriptions on one connection per client, listening."""
    before = await subscribers(server)
    async with contextlib.AsyncExitStack() as stack:
        lives: list[Live] = []
        for client in clients:
            session = await stack.enter_async_context(client.websocket())
            lives.extend(Live(session) for _ in range(per_connection))
        try:
            await subscribers_reach(server, before + len(lives))
            yield lives
        finally:
            for live in lives:
                await live.stop()


async def statements_for_one_event(server: Server, org: Org, lives: list[Live]) -> float:
    """SQL statements from a hold until every subscriber has its event."""
    space = await register_generic_space(org.editor)
    for live in lives:
        await live.next_of(space["id"])  # the registration
    await quiet(server)
    before = await statements(server)
    await set_space_status(org.editor, space["id"], "INACTIVE")
    for live in lives:
        event = await live.next_of(space["id"])
        assert (event["status"], event["space"]["held"]) == ("INACTIVE", True)
    return await statements(server) - before


async def test_sql_statements_per_event_do_not_grow_with_subscribers(
    server: Server, org: Org
) -> None:
    # The server's background loops (the per-second WebSocket credential check, the probe
    # and reconciler loops looking for due work) send a statement now and then, and on a
    # busy machine one may fall inside the measured window. So 1 subscriber is compared
    # with 24: a read per subscriber would add 23 or more statements, while such a stray
    # statement or two does not reach half of that.
    clients = [org.viewer, org.editor, org.admin]
    async with subscribed(server, clients[:1], 1) as one:
        alone = await statements_for_one_event(server, org, one)
    await subscribers_reach(server, 0)
    async with subscribed(server, clients, 8) as crowd_lives:
        crowd = await statements_for_one_event(server, org, crowd_lives)
    added = len(crowd_lives) - 1
    assert added == 23
    assert crowd - alone < added / 2, f"{alone:g} statements for 1 subscriber, {crowd:g} for 24"


async def test_an_event_reaches_each_org_only_with_what_it_may_see(
    server: Server, org: Org, other_org: Org
) -> None:
    ours_space = await register_generic_space(org.editor)
    theirs_space = await register_generic_space(other_org.editor)
    async with (
        subscribed(server, [org.viewer, org.admin], 2) as ours,
        subscribed(server, [other_org.viewer], 2) as theirs,
    ):
        await set_space_status(org.editor, ours_space["id"], "INACTIVE")
        await set_space_status(other_org.editor, theirs_space["id"], "INACTIVE")
        for live in ours:
            event = await live.next()
            assert event["spaceId"] == ours_space["id"]
            assert event["space"] == {
                "id": ours_space["id"],
                "name": ours_space["name"],
                "status": "INACTIVE",
                "held": True,
            }
        for live in theirs:
            event = await live.next()
            assert event["spaceId"] == theirs_space["id"]
            assert event["space"]["name"] == theirs_space["name"]
        for live in ours + theirs:
            await live.assert_quiet()  # nothing of the other org came after


async def groups(server: Server) -> int:
    return int(await asyncio.to_thread(server.metric, GROUPS))


async def test_subscribers_who_would_see_the_same_share_one_run_and_each_gets_its_own(
    server: Server, org: Org, other_org: Org
) -> None:
    # Two people of one org and role (two viewer tokens) share one run of the same
    # document; the org's admin runs apart, and so does another org's viewer.
    second_viewer = GraphQL(
        server.url, server.ws_url, await mint_token(server.backend.url, org.name, "viewer")
    )
    ours_space = await register_generic_space(org.editor)
    theirs_space = await register_generic_space(other_org.editor)
    async with subscribed(server, [org.viewer, second_viewer], 2) as viewers:
        assert await groups(server) == 1
        async with (
            subscribed(server, [org.admin], 1) as admins,
            subscribed(server, [other_org.viewer], 1) as theirs,
        ):
            assert await groups(server) == 3
            await set_space_status(org.editor, ours_space["id"], "INACTIVE")
            await set_space_status(other_org.editor, theirs_space["id"], "INACTIVE")
            for live in viewers + admins:
                event = await live.next_of(ours_space["id"])
                assert (event["status"], event["space"]["name"]) == ("INACTIVE", ours_space["name"])
            event = await theirs[0].next_of(theirs_space["id"])
            assert event["space"]["name"] == theirs_space["name"]
            for live in viewers + admins + theirs:
                await live.assert_quiet()  # nothing of the other org came after
    await subscribers_reach(server, 0)
    assert await groups(server) == 0  # the last one out stopped each run


def queued_stream(events: asyncio.Queue[ExecutionResult], listening: asyncio.Event) -> Any:
    """A group's run of a subscription whose results are what the test puts in `events`."""

    async def stream(on_listening: Any) -> Any:
        async def results() -> Any:
            on_listening()
            listening.set()
            while True:
                yield await events.get()

        return results()

    return stream


class Recorder:
    """A member that takes every frame."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.got = asyncio.Event()

    async def deliver(self, payload: str) -> None:
        self.payloads.append(payload)
        self.got.set()

    async def drop(self, code: int, reason: str) -> None:
        raise AssertionError("a member that takes its frames is never dropped")


class Stuck:
    """A member whose socket takes nothing (a client that stopped reading)."""

    def __init__(self) -> None:
        self.dropped: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()

    async def deliver(self, payload: str) -> None:
        await asyncio.Event().wait()

    async def drop(self, code: int, reason: str) -> None:
        self.dropped.set_result((code, reason))


async def test_a_member_that_takes_nothing_is_closed_and_never_holds_up_the_rest() -> None:
    # No server can stand in for a client whose socket buffers are full (it would take
    # megabytes of events to fill loopback's), so the group meets such a member directly.
    events: asyncio.Queue[ExecutionResult] = asyncio.Queue()
    listening = asyncio.Event()
    stream = queued_stream(events, listening)

    shared = SharedSubscriptions(send_timeout_s=0.2)
    viewer = Viewer(org_id="org_1", org_name="acme", role=Role.VIEWER)
    key = GroupKey.of("subscription { x }", None, None, viewer)
    stuck, recorder = Stuck(), Recorder()
    attending = [
        asyncio.create_task(shared.attend(key, member, stream)) for member in (stuck, recorder)
    ]
    await asyncio.wait_for(listening.wait(), WAIT_S)
    assert shared.listening_members == 2
    events.put_nowait(ExecutionResult(data={"x": 1}, errors=None))
    await asyncio.wait_for(recorder.got.wait(), WAIT_S)
    assert recorder.payloads == ['{"data": {"x": 1}}']
    code, reason = await asyncio.wait_for(stuck.dropped, WAIT_S)
    assert code == 1013 and "too slow" in reason
    assert shared.listening_members == 1
    for task in attending:
        task.cancel()
    await asyncio.gather(*attending, return_exceptions=True)
    assert shared.group_count == 0


async def test_a_large_fan_out_lets_other_work_run_between_chunks() -> None:
    # What keeps an unrelated query fast during a fan-out to thousands: the group yields
    # to the event loop after at most FAN_OUT_CHUNK members instead of sending to all at once.
    delivered: list[str] = []
    events: asyncio.Queue[ExecutionResult] = asyncio.Queue()
    listening, last_delivered = asyncio.Event(), asyncio.Event()
    stream = queued_stream(events, listening)
    total = 5 * FAN_OUT_CHUNK

    class Noting:
        def __init__(self, name: str) -> None:
            self.name = name

        async def deliver(self, payload: str) -> None:
            delivered.append(self.name)
            if self.name == f"member {total - 1}":
                last_delivered.set()

        async def drop(self, code: int, reason: str) -> None:
            raise AssertionError("never dropped")

    async def other_work() -> None:
        delivered.append("other work")

    shared = SharedSubscriptions()
    key = GroupKey.of("subscription { x }", None, None, Viewer("org_1", "acme", Role.VIEWER))
    members = [Noting(f"member {number}") for number in range(total)]
    attending = [asyncio.create_task(shared.attend(key, member, stream)) for member in members]
    await asyncio.wait_for(listening.wait(), WAIT_S)
    events.put_nowait(ExecutionResult(data={"x": 1}, errors=None))
    asyncio.get_running_loop().call_soon(lambda: asyncio.create_task(other_work()))
    await asyncio.wait_for(last_delivered.wait(), WAIT_S)
    assert "other work" in delivered
    assert delivered.index("other work") <= 2 * FAN_OUT_CHUNK  # not after all 320 members
    for task in attending:
        task.cancel()
    await asyncio.gather(*attending, return_exceptions=True)


async def test_a_storm_backlog_lets_other_work_run_between_events() -> None:
    """A group handed a storm's events at once (issue 19) goes through them in one pass,
    but yields every few events: the probe loop and other clients still get their turns
    while even a one-member group works through a backlog of 200."""
    delivered: list[str] = []
    events: asyncio.Queue[ExecutionResult] = asyncio.Queue()
    listening, last_delivered = asyncio.Event(), asyncio.Event()
    total = 200

    class Noting:
        async def deliver(self, payload: str) -> None:
            delivered.append(payload)
            if len(delivered) == total + 1:  # every event, and the other work
                last_delivered.set()

        async def drop(self, code: int, reason: str) -> None:
            raise AssertionError("never dropped")

    async def other_work() -> None:
        delivered.append("other work")
        if len(delivered) == total + 1:
            last_delivered.set()

    shared = SharedSubscriptions()
    key = GroupKey.of("subscription { x }", None, None, Viewer("org_1", "acme", Role.VIEWER))
    attending = asyncio.create_task(shared.attend(key, Noting(), queued_stream(events, listening)))
    await asyncio.wait_for(listening.wait(), WAIT_S)
    for number in range(total):
        events.put_nowait(ExecutionResult(data={"x": number}, errors=None))
    asyncio.get_running_loop().call_soon(lambda: asyncio.create_task(other_work()))
    await asyncio.wait_for(last_delivered.wait(), WAIT_S)
    per_turn = FAN_OUT_CHUNK // (EVENT_UNITS + 1) + 1
    assert delivered.index("other work") <= 2 * per_turn, "not after the whole backlog"
    assert [payload for payload in delivered if payload != "other work"] == [
        f'{{"data": {{"x": {number}}}}}' for number in range(total)
    ], "every event once, in order"
    attending.cancel()
    await asyncio.gather(attending, return_exceptions=True)


async def test_a_member_slower_than_others_but_within_the_limit_is_never_dropped() -> None:
    # The group's one send timer (api.shared_subscriptions.SendWatch) fires during a later
    # send than the one that armed it: it must wait for that send's own limit.
    events: asyncio.Queue[ExecutionResult] = asyncio.Queue()
    listening = asyncio.Event()
    taken: list[str] = []
    all_taken = asyncio.Event()
    total = 4

    class Slow:
        async def deliver(self, payload: str) -> None:
            await asyncio.sleep(0.12)  # each send within 0.2 s; together well past it
            taken.append(payload)
            if len(taken) == total:
                all_taken.set()

        async def drop(self, code: int, reason: str) -> None:
            raise AssertionError(f"dropped within its limit: {reason}")

    shared = SharedSubscriptions(send_timeout_s=0.2)
    key = GroupKey.of("subscription { x }", None, None, Viewer("org_1", "acme", Role.VIEWER))
    attending = asyncio.create_task(shared.attend(key, Slow(), queued_stream(events, listening)))
    await asyncio.wait_for(listening.wait(), WAIT_S)
    for number in range(total):
        events.put_nowait(ExecutionResult(data={"x": number}, errors=None))
    await asyncio.wait_for(all_taken.wait(), WAIT_S)
    assert taken == [f'{{"data": {{"x": {number}}}}}' for number in range(total)]
    assert shared.listening_members == 1
    attending.cancel()
    await asyncio.gather(attending, return_exceptions=True)
