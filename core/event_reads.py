"""Status events read once per process, however many subscribers they reach (issue 12).

The bus carries ids only, so every subscriber used to read the event and its space back
for itself: a thousand subscribers made two thousand SQL statements per event, queued on
the pool ahead of everyone's queries. Here the first subscriber to ask reads the event
and its space in one short transaction, and every other subscriber of this process awaits
that same read: SQL per event stays constant however many subscribe.

What is shared is the row data only. Each subscriber still checks the event belongs to
its org before it sees anything, and resolves its own selection set from it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from db import owned
from db import spaces as space_rows
from db.tables import Space, SpaceStatusEvent

# Reads kept for late subscribers (a subscriber's queue holds at most 1,000 events, but
# bursts of more than a few hundred distinct events at once are rare; a miss just reads).
READS_KEPT = 512


@dataclass(frozen=True)
class StatusEventRead:
    """An event and its space as they were read when the event was delivered."""

    event: SpaceStatusEvent
    space: Space | None


class SharedEventReads:
    """One read per status event in this process, shared by its subscribers."""

    def __init__(
        self,
        read: Callable[[], AbstractAsyncContextManager[AsyncSession]],
        kept: int = READS_KEPT,
    ) -> None:
        self._read = read
        self._kept = kept
        self._reads: OrderedDict[int, asyncio.Task[StatusEventRead | None]] = OrderedDict()

    async def status_event(self, event_id: int) -> StatusEventRead | None:
        """The event with its space, or None when it was trimmed from the history."""
        task = self._reads.get(event_id)
        if task is None:
            task = asyncio.create_task(self._status_event(event_id))
            task.add_done_callback(lambda done: self._forget_failed(event_id, done))
            self._reads[event_id] = task
            if len(self._reads) > self._kept:
                self._reads.popitem(last=False)
        # shield: a subscriber leaving mid-read must not cancel the read the others await.
        return await asyncio.shield(task)

    def _forget_failed(self, event_id: int, done: asyncio.Task[StatusEventRead | None]) -> None:
        """A failed read (the database away) is not kept: the next subscriber tries again."""
        if (done.cancelled() or done.exception() is not None) and self._reads.get(event_id) is done:
            del self._reads[event_id]

    async def _status_event(self, event_id: int) -> StatusEventRead | None:
        async with self._read() as session:
            found = await space_rows.events_by_ids(session, [event_id])
            if not found:
                return None
            event = found[0]
            space = await owned.by_id(session, Space, event.org_id, event.space_id)
        return StatusEventRead(event, space)
