"""Live status events: what the bus announces, narrowed to the caller's org, and read
fresh from the database for every event.

The bus carries ids only ({event_id, space_id, org_id}), so that a Postgres
LISTEN/NOTIFY bus can carry them too; each event is read back once per process for all
its subscribers (`core.event_reads`), and handed to new loaders of this subscription's
own (`Context.fresh_loaders`), or it would be shown with the rows cached for the first
event.

A `spaceId` the caller cannot see is refused with NOT_FOUND before anything is
streamed: an unknown id and another org's id get the same answer, so the refusal
tells nothing about other orgs, while a typo does not wait silently forever.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from core.errors import ApiError
from core.events import SPACE_STATUS
from db.tables import SpaceStatusEvent
from resolvers.context import Context


async def space_status_events(
    context: Context, space_id: str | None
) -> AsyncGenerator[SpaceStatusEvent, None]:
    """Every status event of the caller's org (of one space when `space_id` is given),
    in the order they were published, until the subscriber goes away."""
    caller = context.caller
    caller.require_to_read("space:view")
    if space_id is not None and await context.loaders.space.load(space_id) is None:
        raise ApiError("NOT_FOUND", f"No space with id {space_id!r}.")
    # aclosing: when the subscriber leaves while we wait to deliver, the bus queue
    # must be released now, not whenever the generator is garbage collected.
    async with aclosing(context.services.bus.subscribe(SPACE_STATUS)) as announcements:
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if space_id is not None and announced.get("space_id") != space_id:
                continue
            # One read per event in this process, shared by all its subscribers; the
            # row data is shared, the org check and the selection set are each one's own.
            read = await context.services.event_reads.status_event(announced["event_id"])
            if read is None or read.event.org_id != caller.org_id:
                continue  # trimmed from the history before anyone read it
            loaders = context.fresh_loaders()
            if read.space is not None:  # `space { ... }` then costs this subscriber no read
                loaders.space.prime(read.space.id, read.space)
            yield read.event
