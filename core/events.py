"""The event bus: publish after commit, subscribe per org.

Payloads carry ids, not rows, so a Postgres LISTEN/NOTIFY bus (8 kB, no
replay) can stand in for the in-process one without changing callers;
subscribers load fresh rows themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

log = logging.getLogger(__name__)

SPACE_STATUS = "space_status"

Payload = dict[str, Any]


class EventBus(Protocol):
    @property
    def subscriber_count(self) -> int:
        """Subscriptions open in this process (the spacedock_event_subscribers gauge)."""
        ...

    async def publish(self, channel: str, payload: Payload) -> None: ...

    def subscribe(self, channel: str) -> AsyncGenerator[Payload, None]: ...


class InProcessBus:
    """Fans events out to the subscribers of this process. A subscriber that
    falls `queue_size` events behind loses the oldest ones rather than
    slowing the publisher."""

    def __init__(self, queue_size: int = 1000) -> None:
        self.queue_size = queue_size
        self._subscribers: dict[str, set[asyncio.Queue[Payload]]] = {}

    @property
    def subscriber_count(self) -> int:
        return sum(len(queues) for queues in self._subscribers.values())

    async def publish(self, channel: str, payload: Payload) -> None:
        for queue in self._subscribers.get(channel, ()):
            if queue.full():
                queue.get_nowait()
                log.warning("subscriber on %s fell behind; dropped its oldest event", channel)
            queue.put_nowait(payload)

    async def subscribe(self, channel: str) -> AsyncGenerator[Payload, None]:
        async with self._queue(channel) as queue:
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
