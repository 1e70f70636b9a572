"""Where a replica reads back the events it may not have heard (issue 19).

A replica hears events through LISTEN; while that connection is down (a cut, a Postgres
restart, an administrator) NOTIFYs are lost for it. The status and CloudSpace histories
are persisted, so `core.common.postgres_bus.PostgresBus` reads from here the announcements after the
last event id it fanned out and hands them to its subscribers, in order, before new ones.
App events and advice batches are persisted too. Probe results (`space_probed`) are not, so that channel has no
replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from sqlalchemy.ext.asyncio import AsyncSession

from core.common.events import ADVICE_CHANGED, APP_CHANGED, CLOUDSPACE_PHASE, SPACE_STATUS, Payload
from core.common.postgres_bus import Trimmed
from db import event_log


class DatabaseEventLog:
    """The persisted histories, read in short read-only transactions."""

    channels = frozenset({SPACE_STATUS, CLOUDSPACE_PHASE, APP_CHANGED, ADVICE_CHANGED})

    def __init__(self, read: Callable[[], AbstractAsyncContextManager[AsyncSession]]) -> None:
        self._read = read

    async def latest(self, channel: str) -> int:
        """The newest event id on `channel` (0 for none)."""
        async with self._read() as session:
            if channel == SPACE_STATUS:
                return await event_log.latest_status_event_id(session)
            if channel == ADVICE_CHANGED:
                return await event_log.latest_advice_event_id(session)
            if channel == APP_CHANGED:
                return await event_log.latest_app_event_id(session)
            return await event_log.latest_cloud_space_event_id(session)

    async def after(self, channel: str, after: int, limit: int) -> Sequence[Payload]:
        """Announcements after `after`, oldest first, at most `limit`."""
        async with self._read() as session:
            if channel == SPACE_STATUS:
                return await event_log.status_events_after(session, after, limit)
            if channel == ADVICE_CHANGED:
                return await event_log.advice_events_after(session, after, limit)
            if channel == APP_CHANGED:
                return await event_log.app_events_after(session, after, limit)
            return await event_log.cloud_space_events_after(session, after, limit)

    async def check_kept(self, channel: str, after: int) -> None:
        """Status histories keep 1,000 events per space; CloudSpace and app ones are never
        trimmed, and advice batches are kept a day, far longer than a replay may reach back."""
        if channel != SPACE_STATUS:
            return
        async with self._read() as session:
            if await event_log.status_events_may_be_trimmed(session, after):
                raise Trimmed(f"status events after id {after} may have been trimmed")
