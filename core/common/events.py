"""The event bus: publish after commit, subscribe per org.

Payloads carry ids, not rows, so a Postgres LISTEN/NOTIFY bus (8 kB, no
replay) can stand in for the in-process one without changing callers;
subscribers load fresh rows themselves. `InProcessBus` serves one process
(SQLite, the embedded default); `core.common.postgres_bus.PostgresBus` fans events out
across every replica on the same database, through a `Notifier` that db/ implements, and
reads back from the persisted history what it could not hear (issue 19).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from core.common.errors import ApiError

log = logging.getLogger(__name__)

SPACE_STATUS = "space_status"
# Every probe result, with the result itself (a few hundred bytes): spaceProbed streams them.
SPACE_PROBED = "space_probed"
CLOUDSPACE_PHASE = "cloudspace_phase"
# A batch of App Advisor finding changes of one CloudSpace (an `advice_events` row).
ADVICE_CHANGED = "advice_changed"
# An app's status or revision changed (core.apps.history).
APP_CHANGED = "app_changed"

Payload = dict[str, Any]
# How a notifier hands over what arrived: (channel, text).
Deliver = Callable[[str, str], None]


class EventBus(Protocol):
    async def publish(self, channel: str, payload: Payload) -> None: ...

    async def publish_all(self, events: Sequence[tuple[str, Payload]]) -> None:
        """Several events, in order, at the cost of one (a probe step has one per probe)."""
        ...

    def subscribe(
        self, channel: str, on_listening: Callable[[], None] | None = None
    ) -> AsyncGenerator[Payload, None]:
        """Events on `channel` from when `on_listening` is called (at the first `anext`)."""
        ...

    def listening(self, channel: str) -> AbstractAsyncContextManager[AsyncIterator[Payload]]:
        """Events on `channel` from when the context is entered: what is published once it
        is, the iterator it gives yields (a subscriber that reads the history first)."""
        ...

    @property
    def fell_behind(self) -> int:
        """Subscribers of this process closed so far for falling behind their queue."""
        ...

    def when_unreplayable(self, callback: Callable[[str], None]) -> None:
        """`callback(reason)` runs when events were missed and cannot be read back: the
        subscribers of this process must be told to catch up themselves."""
        ...

    def tap(self, channel: str, callback: Callable[[Payload], None]) -> None:
        """`callback(payload)` runs for every event on `channel` this process fans out to
        subscribers of its own, before they see it (core.common.event_reads reads a storm's
        events together, before any subscriber asks for one)."""
        ...


# Close code and reason for subscribers whose events cannot be replayed, or that fell too far
# behind to be handed them (the README says so).
CATCH_UP_CODE = 1013
CATCH_UP_REASON = "events were missed: reconnect and catch up with statusEvents(after:)"
# The error a subscription's stream ends with when its subscriber fell behind: the transport
# closes its members with CATCH_UP_CODE rather than passing the error on (api.shared_subscriptions).
FELL_BEHIND = "EVENTS_MISSED"


class FellBehind(ApiError):
    """A subscriber did not take its events before its queue filled: some are not in it."""

    def __init__(self) -> None:
        super().__init__(FELL_BEHIND, CATCH_UP_REASON)


class _Behind:
    """Queued in place of the events a subscriber could not hold."""


_BEHIND = _Behind()


class InProcessBus:
    """Fans events out to the subscribers of this process. A subscriber that falls
    `queue_size` events behind is not handed any more, and is not left streaming with a
    hole either: what it holds is dropped and its stream raises FellBehind, so its client
    is closed to catch up (api.shared_subscriptions), and the publisher never waits."""

    def __init__(self, queue_size: int = 1000) -> None:
        self.queue_size = queue_size
        self._subscribers: dict[str, set[asyncio.Queue[Payload | _Behind]]] = {}
        self._behind: set[asyncio.Queue[Payload | _Behind]] = set()  # told, not yet ended
        self.fell_behind = 0  # subscribers closed so far for falling behind
        self._taps: dict[str, list[Callable[[Payload], None]]] = {}

    async def publish(self, channel: str, payload: Payload) -> None:
        self.deliver(channel, payload)

    def when_unreplayable(self, callback: Callable[[str], None]) -> None:
        """One process hears every event it publishes: nothing is ever missed."""

    def tap(self, channel: str, callback: Callable[[Payload], None]) -> None:
        self._taps.setdefault(channel, []).append(callback)

    async def publish_all(self, events: Sequence[tuple[str, Payload]]) -> None:
        for channel, payload in events:
            self.deliver(channel, payload)

    def deliver(self, channel: str, payload: Payload) -> None:
        """Hands an event to this process's subscribers without waiting for any of them."""
        queues = self._subscribers.get(channel)
        if not queues:
            return
        for tapped in self._taps.get(channel, ()):
            tapped(payload)
        for queue in queues:
            if queue in self._behind:
                continue  # it ends at its next read
            if queue.full():
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(_BEHIND)
                self._behind.add(queue)
                self.fell_behind += 1
                log.warning(
                    "a subscriber on %s fell %d events behind; closing it", channel, queue.maxsize
                )
                continue
            queue.put_nowait(payload)

    async def subscribe(
        self, channel: str, on_listening: Callable[[], None] | None = None
    ) -> AsyncGenerator[Payload, None]:
        async with self.listening(channel) as events:
            if on_listening is not None:
                on_listening()
            async for event in events:
                yield event

    @asynccontextmanager
    async def listening(self, channel: str) -> AsyncIterator[AsyncIterator[Payload]]:
        queue: asyncio.Queue[Payload | _Behind] = asyncio.Queue(self.queue_size)
        self._subscribers.setdefault(channel, set()).add(queue)
        events = _queued(queue)
        try:
            yield events
        finally:
            await events.aclose()
            self._subscribers[channel].discard(queue)
            self._behind.discard(queue)


async def _queued(queue: asyncio.Queue[Payload | _Behind]) -> AsyncGenerator[Payload, None]:
    """A subscriber's queue as a stream; FellBehind where it could not hold its events."""
    while True:
        event = await queue.get()
        if isinstance(event, _Behind):
            raise FellBehind()
        yield event
