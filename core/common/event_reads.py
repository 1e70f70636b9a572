"""Events read once per process, however many subscribers they reach (issue 12), and a
storm's status events read together (issue 19).

The bus carries ids only, so every subscriber used to read the event and its space back
for itself: a thousand subscribers made two thousand SQL statements per event, queued on
the pool ahead of everyone's queries. Here every subscriber of this process awaits the
same read of an event. And the reads do not wait for a subscriber to ask: the bus hands
each announcement here as it fans it out (`EventBus.tap`), and the events announced in one
turn of the event loop are read in one short transaction. When 125 clusters change at
once, that is one read for the storm rather than one per event, each taken only after a
subscriber had finished with the event before it.

What is shared is the row data only. Each subscriber still checks the event belongs to
its org before it sees anything, and resolves its own selection set from it. A probe
result's space is read the same way, when a subscriber selects it (issue 21: a client
cache merges the event's space, so its lastProbe is the one just written).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from db import owned
from db import spaces as space_rows
from db.outages import is_unavailable
from db.tables import Space, SpaceStatusEvent
from providers.kept import Kept

# Reads kept for subscribers still working through their queues (a queue holds at most
# 1,000 events); a read dropped before a subscriber asked is just read again.
READS_KEPT = 2048
# A read nobody has asked for in this long is dropped.
READS_IDLE_S = 60.0
# How long a read waits for an unreachable database before the event fails its subscribers.
READ_RETRY_S = 60.0
T = TypeVar("T")

Read = asyncio.Future["StatusEventRead | None"]


@dataclass(frozen=True)
class StatusEventRead:
    """An event and its space as they were read when the event was delivered."""

    event: SpaceStatusEvent
    space: Space | None


class SharedEventReads:
    """One read per event in this process, shared by its subscribers: a status event with
    its space (those announced together read together), or the space a probe result was
    written to."""

    def __init__(
        self,
        read: Callable[[], AbstractAsyncContextManager[AsyncSession]],
        kept: int = READS_KEPT,
    ) -> None:
        self._read = read
        self._reads: Kept[int, Read] = Kept(kept, READS_IDLE_S)
        self._wanted: dict[int, Read] = {}  # for the next batch, by id
        self._batches: set[asyncio.Task[None]] = set()
        self.batches = 0  # reads made (one transaction each), for tests
        self._probed: Kept[Hashable, asyncio.Task[Space | None]] = Kept(kept, READS_IDLE_S)

    def announced(self, payload: dict[str, Any]) -> None:
        """An event is being fanned out (the bus's tap): its read starts now, with the
        others announced in this turn of the event loop."""
        event_id = payload.get("event_id")
        if isinstance(event_id, int):
            self._wanted_read(event_id)

    async def status_event(self, event_id: int) -> StatusEventRead | None:
        """The event with its space, or None when it was trimmed from the history."""
        # shield: a subscriber leaving mid-read must not cancel the read the others await.
        return await asyncio.shield(self._wanted_read(event_id))

    async def probed_space(self, org_id: str, space_id: str, at: datetime) -> Space | None:
        """The space as it is once its probe result of `at` was written (published after
        commit, so the row holds that result or a newer one); None for another org's."""
        key = (org_id, space_id, at)
        task = self._probed.get(key)
        if task is None:
            task = asyncio.create_task(_patiently(lambda: self._probed_space(org_id, space_id)))
            task.add_done_callback(lambda done: self._forget_failed_probe(key, done))
            self._probed.put(key, task)
        # shield: a subscriber leaving mid-read must not cancel the read the others await.
        return await asyncio.shield(task)

    def _forget_failed_probe(self, key: Hashable, done: asyncio.Task[Space | None]) -> None:
        failed = done.cancelled() or done.exception() is not None
        if failed and self._probed.get(key) is done:
            self._probed.pop(key)

    async def _probed_space(self, org_id: str, space_id: str) -> Space | None:
        async with self._read() as session:
            return await owned.by_id(session, Space, org_id, space_id)

    def _wanted_read(self, event_id: int) -> Read:
        read = self._reads.get(event_id)
        if read is None:
            read = asyncio.get_running_loop().create_future()
            read.add_done_callback(lambda done: self._forget_failed(event_id, done))
            self._reads.put(event_id, read)
            self._wanted[event_id] = read
            if len(self._wanted) == 1:  # the first of a batch: it is read next turn
                batch = asyncio.create_task(self._read_batch(), name="event-reads")
                self._batches.add(batch)
                batch.add_done_callback(self._batches.discard)
        return read

    def _forget_failed(self, event_id: int, done: Read) -> None:
        """A failed read (the database away) is not kept: the next subscriber tries again.
        Its error is taken here, so one nobody asked for is not logged as lost."""
        failed = done.cancelled() or done.exception() is not None
        if failed and self._reads.get(event_id) is done:
            self._reads.pop(event_id)

    async def _read_batch(self) -> None:
        wanted, self._wanted = self._wanted, {}
        try:
            found = await self._read_retrying(sorted(wanted))
        except BaseException as error:
            for read in wanted.values():
                if not read.done():
                    if isinstance(error, Exception):
                        read.set_exception(error)
                    else:
                        read.cancel()
            if not isinstance(error, Exception):
                raise
            return
        for event_id, read in wanted.items():
            if not read.done():
                read.set_result(found.get(event_id))

    async def _read_retrying(self, ids: Sequence[int]) -> dict[int, StatusEventRead]:
        return await _patiently(lambda: self._read_once(ids))

    async def _read_once(self, ids: Sequence[int]) -> dict[int, StatusEventRead]:
        self.batches += 1
        async with self._read() as session:
            events = await space_rows.events_by_ids(session, ids)
            spaces = await owned.by_ids(
                session, Space, None, sorted({event.space_id for event in events})
            )
        by_id = {space.id: space for space in spaces}
        reads = {}
        for event in events:
            space = by_id.get(event.space_id)
            if space is not None and space.org_id != event.org_id:
                space = None  # never another org's row
            assert event.id is not None
            reads[event.id] = StatusEventRead(event, space)
        return reads


async def _patiently(read: Callable[[], Awaitable[T]]) -> T:
    """Waits out a database outage (READ_RETRY_S at most): the event has committed, so
    its subscribers get it late rather than an error in their place (issue 19)."""
    delay, waited = 0.05, 0.0
    while True:
        try:
            return await read()
        except Exception as error:
            if not is_unavailable(error) or waited >= READ_RETRY_S:
                raise
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, 2.0)
