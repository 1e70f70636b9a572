"""Issue 19: a subscriber that falls further behind than its queue holds is closed to catch
up (1013, the reason naming statusEvents(after:)), never left streaming with a hole.

A client whose socket stops taking frames holds its group's fan-out, and meanwhile the
bus queues the group's events; no server can stand in for a socket whose buffers are full
(megabytes of loopback buffers), so the group meets a member that takes its first frame
and then nothing, as tests/test_fanout.py does. Everything else is real: the schema's
spaceStatusChanged run as the transport runs it, the bus replicas use (on Postgres, NOTIFY
and LISTEN with the persisted history), status events written by registrations, and the
client's catch-up read through the schema's statusEvents.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from api.shared_subscriptions import GroupKey, SharedSubscriptions
from core.common.event_replay import DatabaseEventLog
from core.common.events import CATCH_UP_REASON, EventBus, InProcessBus
from core.common.postgres_bus import PostgresBus
from core.common.rbac import Role, Viewer
from core.common.secrets import SecretBox
from core.common.services import Services
from core.orgs.bootstrap import create_token
from core.spaces.health import HealthRule
from core.spaces.lifecycle import RegisterSpaceRequest, register
from db.engine import Database
from db.notify import PostgresNotifier
from resolvers.common.context import Context
from resolvers.common.subscription_mode import SubscriptionMode
from schema.build import schema
from sim.pki import CertificateAuthority
from tests.support.factories import unique
from tests.support.server import Backend

QUEUE = 4  # events the bus holds per subscriber
BURST = QUEUE + 3  # registrations in one commit: more than the queue holds
WAIT_S = 30.0
FOLLOW = "subscription { spaceStatusChanged { id spaceId status } }"
HISTORY = """
query($after: String) {
  statusEvents(first: 100, after: $after) { nodes { id spaceId } }
}"""


@pytest.fixture
async def services(empty_backend: Backend) -> AsyncIterator[Services]:
    database = Database(empty_backend.url)
    await database.migrate()
    bus: EventBus = (
        InProcessBus(QUEUE)
        if database.is_sqlite
        else PostgresBus(
            lambda hearing: PostgresNotifier(
                database, hearing.deliver, hearing.lost, hearing.resumed
            ),
            DatabaseEventLog(lambda: database.transaction(read_only=True)),
            queue_size=QUEUE,
        )
    )
    yield Services(
        database=database,
        bus=bus,
        secrets=SecretBox(SecretBox.generate_key()),
        health=HealthRule(3600),
    )
    await database.dispose()


class StopsReading:
    """A member that takes one frame, then takes nothing until `resume` is set (a client
    that stopped reading its socket)."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.first = asyncio.Event()
        self.resume = asyncio.Event()
        self.dropped: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()

    async def deliver(self, payload: str) -> None:
        self.payloads.append(payload)
        self.first.set()
        await self.resume.wait()

    async def drop(self, code: int, reason: str) -> None:
        self.dropped.set_result((code, reason))


async def register_spaces(services: Services, viewer: Viewer, count: int) -> list[str]:
    """`count` spaces registered in one commit: their status events are published together."""
    ca = CertificateAuthority("event-backlog").pem
    made = []
    async with services.unit() as unit:
        for _ in range(count):
            config = {
                "clusterName": unique("cluster"),
                "server": f"https://127.0.0.1:6443/{unique('c')}",
                "caCert": ca,
                "serviceAccountToken": "token",
            }
            request = RegisterSpaceRequest(
                unique("space"), "GENERIC", "KUBERNETES", None, config, False
            )
            made.append((await register(unit, viewer, services.secrets, request, ())).id)
    return made


async def until(condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_subscriber_that_falls_behind_its_queue_is_closed_and_catches_up_everything(
    services: Services,
) -> None:
    async with services.unit() as unit:
        org, _ = await create_token(unit, unique("org"), "ADMIN")
    viewer = Viewer(org.id, org.name, Role.ADMIN)
    listening = asyncio.Event()

    async def stream(on_listening: Callable[[], None]) -> AsyncIterator[Any]:
        def heard() -> None:
            on_listening()
            listening.set()

        context = Context(services=services, viewer=viewer, over_websocket=True)
        return await schema.subscribe(  # type: ignore[return-value]
            FOLLOW, context_value=context, root_value=SubscriptionMode(on_listening=heard)
        )

    shared = SharedSubscriptions(send_timeout_s=WAIT_S * 2)  # never "too slow" here
    member = StopsReading()
    attending = asyncio.create_task(
        shared.attend(GroupKey.of(FOLLOW, None, None, viewer), member, stream)  # type: ignore[arg-type]
    )
    await asyncio.wait_for(listening.wait(), WAIT_S)
    (first_space,) = await register_spaces(services, viewer, 1)
    await asyncio.wait_for(member.first.wait(), WAIT_S)  # and it reads nothing more
    burst = await register_spaces(services, viewer, BURST)
    await until(lambda: services.bus.fell_behind == 1)
    member.resume.set()

    code, reason = await asyncio.wait_for(member.dropped, WAIT_S)
    assert (code, reason) == (1013, CATCH_UP_REASON)
    assert "statusEvents(after:)" in reason
    await asyncio.wait_for(attending, WAIT_S)
    assert shared.group_count == 0
    (seen,) = member.payloads  # nothing after the hole was streamed
    assert json.loads(seen)["data"]["spaceStatusChanged"]["spaceId"] == first_space

    # The client's catch-up, from the last event it saw, has every event it missed.
    last_seen = json.loads(seen)["data"]["spaceStatusChanged"]["id"]
    answer = await schema.execute(
        HISTORY, {"after": last_seen}, context_value=Context(services=services, viewer=viewer)
    )
    assert answer.errors is None, answer.errors
    assert answer.data is not None
    nodes = answer.data["statusEvents"]["nodes"]
    assert [node["spaceId"] for node in nodes] == burst
