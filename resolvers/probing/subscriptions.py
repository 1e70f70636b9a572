"""Live status events: what the bus announces, narrowed to the caller's org, and read
fresh from the database for every event.

The bus carries ids only ({event_id, space_id, org_id}), so that a Postgres
LISTEN/NOTIFY bus can carry them too; each event is read back once per process for all
its subscribers (`core.common.event_reads`), and handed to new loaders of this subscription's
own (`Context.fresh_loaders`), or it would be shown with the rows cached for the first
event.

Ids the caller cannot see (in `spaceId` or `spaceIds`) are reported to the subscriber
before anything is streamed, NOT_FOUND with the ids in `extensions.spaceIds`, and
skipped: the subscription follows the others, or ends when none are left. An unknown id
and another org's id get the same answer, so the report tells nothing about other orgs,
while a stale id (a space deregistered and purged, a typo) neither waits silently
forever nor ends a table's subscription of its other rows.

The transport runs each subscription twice over (`api.shared_subscriptions`): once per
subscriber with `SubscriptionMode(admit_only=True)`, which makes these checks and stops,
and once per group of subscribers who would all see the same, which streams.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime

from core.common.errors import ApiError, Skipped
from core.common.events import SPACE_PROBED, SPACE_STATUS
from core.common.ids import event_id
from db import spaces as space_rows
from db.tables import SpaceStatusEvent
from resolvers.common.context import Context
from resolvers.common.subscription_mode import SubscriptionMode
from resolvers.spaces.reads import event_position

MAX_SPACE_IDS = 100
# A resumed subscription reads the history in pages of this many, and at most this many.
RESUME_PAGE = 100
MAX_RESUMED_EVENTS = 10_000


async def followed_spaces(
    context: Context,
    space_id: str | None,
    space_ids: Sequence[str] | None,
    admitting: bool,
) -> set[str] | None:
    """The spaces a subscription follows (None: all of the org's), each checked visible.
    More than MAX_SPACE_IDS is BAD_USER_INPUT. Ids that name nothing the caller may see
    (unknown and foreign alike) are skipped; `admitting` (the subscriber's own checks),
    they are reported: `Skipped` when others remain to follow, NOT_FOUND when none do."""
    context.caller.require_to_read("space:view")
    if space_id is None and space_ids is None:
        return None
    wanted = list(dict.fromkeys([*([] if space_id is None else [space_id]), *(space_ids or [])]))
    if len(wanted) > MAX_SPACE_IDS:
        raise ApiError(
            "BAD_USER_INPUT",
            f"a subscription follows at most {MAX_SPACE_IDS} spaces, got {len(wanted)}",
        )
    found = await context.loaders.space.load_many(wanted)
    unknown = [wanted_id for wanted_id, row in zip(wanted, found, strict=True) if row is None]
    followed = {wanted_id for wanted_id, row in zip(wanted, found, strict=True) if row is not None}
    if unknown and admitting:
        raise _not_found(unknown, len(followed))
    return followed


def _not_found(unknown: list[str], following: int) -> ApiError:
    """The report of ids that name no space the caller may see, the same whether they are
    unknown or another org's: their message and `extensions.spaceIds`."""
    shown = ", ".join(repr(space_id[:80]) for space_id in unknown[:5])
    more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
    noun = "id" if len(unknown) == 1 else "ids"
    details: dict[str, object] = {"spaceIds": unknown}
    if not following:
        return ApiError("NOT_FOUND", f"No space with {noun} {shown}{more}.", details)
    return Skipped(
        "NOT_FOUND",
        f"No space with {noun} {shown}{more}: skipped; following the other {following}.",
        details,
    )


async def space_status_events(
    context: Context,
    mode: SubscriptionMode,
    space_id: str | None,
    space_ids: Sequence[str] | None = None,
    after: str | None = None,
) -> AsyncGenerator[SpaceStatusEvent, None]:
    """Every status event of the caller's org (of the given spaces, when any are), in the
    order they were published, until the subscriber goes away. With `after` (an event id
    or cursor), first every event of the history after it, oldest first: the stream listens
    before it reads the history, so nothing committed in between is missed, and an event
    both read and heard is sent once."""
    caller = context.caller
    followed = await followed_spaces(context, space_id, space_ids, mode.admit_only)
    start = None if after is None else event_position(after)
    if mode.admit_only:
        return
    bus = context.services.bus
    async with bus.listening(SPACE_STATUS) as announcements:
        if mode.on_listening is not None:
            mode.on_listening()
        replayed: set[int] = set()
        if start is not None:
            async for event in _history_after(context, start, followed):
                replayed.add(event.id or 0)
                context.fresh_loaders(f"{SPACE_STATUS}:{event.id}")
                yield event
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if followed is not None and announced.get("space_id") not in followed:
                continue
            if replayed and announced.get("event_id") in replayed:
                continue
            # One read per event in this process, shared by all its subscribers; the
            # row data is shared, the org check and the selection set are each one's own.
            read = await context.services.event_reads.status_event(announced["event_id"])
            if read is None or read.event.org_id != caller.org_id:
                continue  # trimmed from the history before anyone read it
            loaders = context.fresh_loaders(f"{SPACE_STATUS}:{read.event.id}")
            if read.space is not None:  # `space { ... }` then costs this subscriber no read
                loaders.space.prime(read.space.id, read.space)
            yield read.event


async def _history_after(
    context: Context, start: int, followed: set[str] | None
) -> AsyncGenerator[SpaceStatusEvent, None]:
    """The org's status events after `start`, oldest first, a page per read transaction;
    more than MAX_RESUMED_EVENTS is refused (page statusEvents first)."""
    space_ids = None if followed is None else sorted(followed)
    sent = 0
    while True:
        async with context.services.read() as session:
            page = await space_rows.events_page(
                session, context.caller.org_id, RESUME_PAGE, start, space_ids
            )
        sent += len(page.items)
        if sent > MAX_RESUMED_EVENTS:
            raise ApiError(
                "BAD_USER_INPUT",
                f"more than {MAX_RESUMED_EVENTS} events after {event_id(start)}: read them with "
                "statusEvents(after:), then subscribe with after: the last id read",
            )
        for event in page.items:
            yield event
            start = event.id or start
        if not page.has_next:
            return


@dataclass(frozen=True)
class Probed:
    """One probe result of a followed space, as the probe loop published it."""

    space_id: str
    at: datetime
    ok: bool
    version: str | None
    latency_ms: float | None
    error: str | None
    error_code: str | None
    failures: int


async def space_probes(
    context: Context, mode: SubscriptionMode, space_ids: Sequence[str]
) -> AsyncGenerator[Probed, None]:
    """Every probe result of the given spaces (at most 100), until the subscriber leaves."""
    caller = context.caller
    followed = await followed_spaces(context, None, space_ids, mode.admit_only) or set()
    if mode.admit_only:
        return
    bus = context.services.bus
    async with aclosing(bus.subscribe(SPACE_PROBED, mode.on_listening)) as announcements:
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if announced.get("space_id") not in followed:
                continue
            yield Probed(
                space_id=announced["space_id"],
                at=datetime.fromisoformat(announced["at"]),
                ok=bool(announced["ok"]),
                version=announced.get("version"),
                latency_ms=announced.get("latency_ms"),
                error=announced.get("error"),
                error_code=announced.get("error_code"),
                failures=int(announced.get("failures") or 0),
            )
