"""Issue 19: the replay rules of core.common.postgres_bus.PostgresBus, case by case.

tests/test_event_gaps.py drives the whole path (two replicas, a forwarder, Postgres); the
cases here are the ones a real outage cannot be made to produce on demand: a NOTIFY that
arrives during the replay of the same event, ids that commit out of order, and a history
that was trimmed meanwhile. The notifier is a stand-in that hands notifications to the bus
as db.notify does (the same callbacks), and the history is a list, as db.event_log reads
the tables: the bus's own code is what runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from core.common.events import CATCH_UP_REASON, SPACE_STATUS, Payload
from core.common.postgres_bus import Hearing, PostgresBus, Trimmed

TURNS = 10_000  # event-loop turns a test waits for what it expects


class Notifier:
    """Delivers what the test sends, as a LISTEN connection would."""

    def __init__(self, hearing: Hearing) -> None:
        self.hearing = hearing

    async def notify(self, channel: str, text: str) -> None:
        self.hearing.deliver(channel, text)

    async def notify_all(self, notifications: Sequence[tuple[str, str]]) -> None:
        for channel, text in notifications:
            self.hearing.deliver(channel, text)

    async def listen(self, channel: str) -> None:
        pass

    async def unlisten(self, channel: str) -> None:
        pass

    def heard(self, event_id: int) -> None:
        self.hearing.deliver(SPACE_STATUS, json.dumps(announcement(event_id)))


def announcement(event_id: int) -> Payload:
    return {"event_id": event_id, "space_id": "s", "org_id": "o"}


class History:
    """The persisted events, as db.event_log returns them; `trimmed` plays the per-space
    limit having dropped some."""

    channels = frozenset({SPACE_STATUS})

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.trimmed = False
        self.reads = asyncio.Event()
        self.may_read = asyncio.Event()
        self.may_read.set()

    async def latest(self, channel: str) -> int:
        return max(self.ids, default=0)

    async def after(self, channel: str, after: int, limit: int) -> Sequence[Payload]:
        self.reads.set()
        await self.may_read.wait()
        return [announcement(i) for i in sorted(self.ids) if i > after][:limit]

    async def check_kept(self, channel: str, after: int) -> None:
        if self.trimmed:
            raise Trimmed("trimmed")


class Setup:
    def __init__(self) -> None:
        self.history = History()
        self.notifier: Notifier | None = None
        self.bus = PostgresBus(self._notifier, self.history)
        self.closed: list[str] = []
        self.bus.when_unreplayable(self.closed.append)
        self.received: list[int] = []
        self.listening = asyncio.Event()

    def _notifier(self, hearing: Hearing) -> Notifier:
        self.notifier = Notifier(hearing)
        return self.notifier

    async def follow(self) -> None:
        async for payload in self.bus.subscribe(SPACE_STATUS, self.listening.set):
            self.received.append(payload["event_id"])

    def commit(self, event_id: int, notify: bool = True) -> None:
        self.history.ids.append(event_id)
        if notify:
            assert self.notifier is not None
            self.notifier.heard(event_id)

    async def settled(self, count: int) -> None:
        for _ in range(TURNS):
            if len(self.received) >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"received {self.received}, expected {count} events")


async def started() -> tuple[Setup, asyncio.Task[None]]:
    setup = Setup()
    setup.commit(1, notify=False)  # before anyone listened: not delivered
    task = asyncio.create_task(setup.follow())
    await setup.listening.wait()
    return setup, task


async def test_missed_events_come_in_order_before_what_arrives_after_and_each_once() -> None:
    setup, task = await started()
    assert setup.notifier is not None
    setup.commit(2)
    await setup.settled(1)
    setup.notifier.hearing.lost()
    setup.commit(3, notify=False)  # while not listening
    setup.commit(4, notify=False)
    setup.history.may_read.clear()
    setup.notifier.hearing.resumed()
    await setup.history.reads.wait()  # the replay is reading; meanwhile:
    setup.commit(5)  # a new event arrives: held until the replay is done
    setup.notifier.heard(4)  # and a NOTIFY of one the replay reads too
    setup.history.may_read.set()
    await setup.settled(4)
    setup.commit(6)
    await setup.settled(5)
    task.cancel()
    assert setup.received == [2, 3, 4, 5, 6]
    assert setup.closed == []


async def test_an_id_that_commits_after_a_later_one_is_replayed_too() -> None:
    setup, task = await started()
    assert setup.notifier is not None
    setup.commit(3)  # 2 was taken first but has not committed yet
    await setup.settled(1)
    setup.notifier.hearing.lost()
    setup.commit(2, notify=False)  # commits while the replica cannot hear
    setup.notifier.hearing.resumed()
    await setup.settled(2)
    task.cancel()
    assert setup.received == [3, 2]


async def test_a_trimmed_history_closes_subscribers_to_catch_up() -> None:
    setup, task = await started()
    assert setup.notifier is not None
    setup.commit(2)
    await setup.settled(1)
    setup.notifier.hearing.lost()
    setup.commit(3, notify=False)
    setup.history.trimmed = True
    setup.notifier.hearing.resumed()
    for _ in range(TURNS):
        if setup.closed:
            break
        await asyncio.sleep(0)
    assert setup.closed == [CATCH_UP_REASON]
    assert "statusEvents(after:)" in CATCH_UP_REASON
    setup.commit(4)  # hearing goes on for whoever stays
    await setup.settled(2)
    task.cancel()
    assert setup.received == [2, 4]


async def test_a_gap_that_ends_with_nobody_listening_holds_nothing_back_afterwards() -> None:
    setup, task = await started()
    assert setup.notifier is not None
    setup.notifier.hearing.lost()
    task.cancel()  # the last subscriber leaves during the outage
    await asyncio.sleep(0)
    setup.notifier.hearing.resumed()  # db.notify says so when nothing is wanted any more
    again = asyncio.create_task(setup.follow())
    setup.listening.clear()
    await setup.listening.wait()
    setup.commit(7)
    await setup.settled(1)
    again.cancel()
    assert setup.received == [7]
