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

The transport runs each subscription twice over (`api.shared_subscriptions`): once per
subscriber with `SubscriptionMode(admit_only=True)`, which makes these checks and stops,
and once per group of subscribers who would all see the same, which streams.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.errors import ApiError
from core.events import SPACE_PROBED, SPACE_STATUS
from db.tables import SpaceStatusEvent
from resolvers.context import Context

MAX_SPACE_IDS = 100


@dataclass(frozen=True)
class SubscriptionMode:
    """How the transport runs a subscription operation (its root value)."""

    # Make the subscription's checks (errors as usual), then end without streaming.
    admit_only: bool = False
    # Called once events published from then on will reach the stream.
    on_listening: Callable[[], None] | None = None

    @classmethod
    def of(cls, root_value: Any) -> SubscriptionMode:
        return root_value if isinstance(root_value, SubscriptionMode) else cls()


async def followed_spaces(
    context: Context, space_id: str | None, space_ids: Sequence[str] | None
) -> set[str] | None:
    """The spaces a subscription follows (None: all of the org's), each checked visible.
    More than MAX_SPACE_IDS is BAD_USER_INPUT; an unknown or foreign id is NOT_FOUND."""
    context.caller.require_to_read("space:view")
    if space_id is None and space_ids is None:
        return None
    wanted = {*([] if space_id is None else [space_id]), *(space_ids or [])}
    if len(wanted) > MAX_SPACE_IDS:
        raise ApiError(
            "BAD_USER_INPUT",
            f"a subscription follows at most {MAX_SPACE_IDS} spaces, got {len(wanted)}",
        )
    found = await context.loaders.space.load_many(sorted(wanted))
    for wanted_id, row in zip(sorted(wanted), found, strict=True):
        if row is None:
            raise ApiError("NOT_FOUND", f"No space with id {wanted_id!r}.")
    return wanted


async def space_status_events(
    context: Context,
    mode: SubscriptionMode,
    space_id: str | None,
    space_ids: Sequence[str] | None = None,
) -> AsyncGenerator[SpaceStatusEvent, None]:
    """Every status event of the caller's org (of the given spaces, when any are), in the
    order they were published, until the subscriber goes away."""
    caller = context.caller
    followed = await followed_spaces(context, space_id, space_ids)
    if mode.admit_only:
        return
    # aclosing: when the subscriber leaves while we wait to deliver, the bus queue
    # must be released now, not whenever the generator is garbage collected.
    bus = context.services.bus
    async with aclosing(bus.subscribe(SPACE_STATUS, mode.on_listening)) as announcements:
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if followed is not None and announced.get("space_id") not in followed:
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
    followed = await followed_spaces(context, None, space_ids) or set()
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
