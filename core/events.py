"""The event bus: publish after commit, subscribe per org.

Payloads carry ids, not rows, so a Postgres LISTEN/NOTIFY bus (8 kB, no
replay) can stand in for the in-process one without changing callers;
subscribers load fresh rows themselves. `InProcessBus` serves one process
(SQLite, the embedded default); `PostgresBus` fans events out across every
replica on the same database, through a `Notifier` that db/ implements.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any, Protocol

log = logging.getLogger(__name__)

SPACE_STATUS = "space_status"
# Every probe result, with the result itself (a few hundred bytes): spaceProbed streams them.
SPACE_PROBED = "space_probed"
CLOUDSPACE_PHASE = "cloudspace_phase"

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


class InProcessBus:
    """Fans events out to the subscribers of this process. A subscriber that
    falls `queue_size` events behind loses the oldest ones rather than
    slowing the publisher."""

    def __init__(self, queue_size: int = 1000) -> None:
        self.queue_size = queue_size
        self._subscribers: dict[str, set[asyncio.Queue[Payload]]] = {}

    async def publish(self, channel: str, payload: Payload) -> None:
        self.deliver(channel, payload)

    async def publish_all(self, events: Sequence[tuple[str, Payload]]) -> None:
        for channel, payload in events:
            self.deliver(channel, payload)

    def deliver(self, channel: str, payload: Payload) -> None:
        """Hands an event to this process's subscribers without waiting for any of them."""
        for queue in self._subscribers.get(channel, ()):
            if queue.full():
                queue.get_nowait()
                log.warning("subscriber on %s fell behind; dropped its oldest event", channel)
            queue.put_nowait(payload)

    async def subscribe(
        self, channel: str, on_listening: Callable[[], None] | None = None
    ) -> AsyncGenerator[Payload, None]:
        async with self._queue(channel) as queue:
            if on_listening is not None:
                on_listening()
            while True:
                yield await queue.get()

    @asynccontextmanager
    async def _queue(self, channel: str) -> AsyncIterator[asyncio.Queue[Payload]]:
        queue: asyncio.Queue[Payload] = asyncio.Queue(self.queue_size)
        self._subscribers.setdefault(channel, set()).add(queue)
        try:
            yield queue
        finally:
            self._subscribers[channel].discard(queue)


class Notifier(Protocol):
    """Cross-process delivery of short texts per channel (Postgres NOTIFY and LISTEN).

    `listen` returns once notifications on the channel are being received; each
    one then reaches the `deliver` callback the notifier was built with, in this
    process, whichever process sent it. Channels are listened to while anyone holds
    them, counted, so the notifier may hold a connection only while it is needed.
    """

    async def notify(self, channel: str, text: str) -> None: ...

    async def notify_all(self, notifications: Sequence[tuple[str, str]]) -> None:
        """Several (channel, text) notifications, in order, in one statement."""
        ...

    async def listen(self, channel: str) -> None: ...

    async def unlisten(self, channel: str) -> None: ...


class PostgresBus:
    """Every replica's subscribers get every replica's events: a publish goes out as a
    NOTIFY and comes back, to this process too, through LISTEN, then fans out locally.

    NOTIFY has no replay: events sent while a replica's LISTEN connection is down are
    not delivered to its subscribers (the history in the database still has them).
    """

    def __init__(self, notifier_for: Callable[[Deliver], Notifier]) -> None:
        self._local = InProcessBus()
        self._notifier = notifier_for(self._deliver)

    async def publish(self, channel: str, payload: Payload) -> None:
        await self._notifier.notify(channel, json.dumps(payload, separators=(",", ":")))

    async def publish_all(self, events: Sequence[tuple[str, Payload]]) -> None:
        await self._notifier.notify_all(
            [(channel, json.dumps(payload, separators=(",", ":"))) for channel, payload in events]
        )

    async def subscribe(
        self, channel: str, on_listening: Callable[[], None] | None = None
    ) -> AsyncGenerator[Payload, None]:
        await self._notifier.listen(channel)
        try:
            async with aclosing(self._local.subscribe(channel, on_listening)) as events:
                async for payload in events:
                    yield payload
        finally:
            await self._notifier.unlisten(channel)

    def _deliver(self, channel: str, text: str) -> None:
        try:
            payload = json.loads(text)
        except ValueError:
            log.warning("ignored a notification on %s that is not JSON", channel)
            return
        if isinstance(payload, dict):
            self._local.deliver(channel, payload)
