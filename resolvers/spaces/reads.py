"""Read paths: authorize the view policy, then load through the request's loaders."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from core.common.errors import ApiError
from core.common.ids import event_id, event_number
from core.common.services import utcnow
from core.spaces import environments as environment_rules
from core.spaces import lifecycle as space_rules
from core.spaces.reasons import failure_code
from core.spaces.status_rules import Reason
from db import environments as environment_rows
from db import owned
from db import spaces as space_rows
from db.pages import Page
from db.records import (
    CloudAccountRow,
    EnvironmentRecord,
    SpaceRecord,
    SpaceRow,
    SpaceWhere,
    StatusEventRecord,
)
from db.tables import Environment, Space, SpaceStatusEvent
from resolvers.common.context import Context
from resolvers.common.pagination import (
    checked_first,
    decode_cursor,
    direction,
    encode_cursor,
    keyset,
    window,
    with_cursors,
)

DEFAULT_EVENTS = 20


# The type of each SpaceOrderField's sort key, as its cursors carry it (STATUS: severity).
SPACE_KEY_TAGS = {"NAME": "text", "STATUS": "int", "CREATED_AT": "time", "LAST_PROBE_AT": "time"}


async def spaces_page(
    context: Context,
    where: SpaceWhere,
    order: str | None,
    first: int | None,
    after: str | None,
    last: int | None = None,
    before: str | None = None,
    with_accounts: bool = False,
) -> Page[SpaceRecord]:
    """`order` is a SpaceOrderField and direction, as in "NAME:DESC"; None: id order.
    `with_accounts`: each space with its cloud account, read in the same statement."""
    context.caller.require_to_read("space:view")
    field, _, direction = (order or "").partition(":")
    page = keyset(first, after, last, before, "Space", order, SPACE_KEY_TAGS.get(field))
    _check_search(where.search)
    async with context.loaders.reading() as session:
        found = await space_rows.list_spaces(
            session,
            context.caller.org_id,
            where,
            page,
            stale_before=context.services.health.stale_before(utcnow()),
            order_by=field or None,
            descending=direction == "DESC",
            with_accounts=with_accounts,
        )
    return with_cursors(found, "Space", order)


async def space_counts(context: Context, where: SpaceWhere) -> dict[str, int]:
    context.caller.require_to_read("space:view")
    _check_search(where.search)
    async with context.loaders.reading() as session:
        return await space_rows.count_spaces(
            session,
            context.caller.org_id,
            where,
            stale_before=context.services.health.stale_before(utcnow()),
        )


MAX_SEARCH = 100


def _check_search(search: str | None) -> None:
    if search is not None and len(search) > MAX_SEARCH:
        raise ApiError("BAD_USER_INPUT", f"filter.search must be at most {MAX_SEARCH} characters")


async def spaces_of_account(
    context: Context, account_id: str, first: int | None, after: str | None
) -> Page[Space]:
    context.caller.require_to_read("space:view")
    first, after = window(first, after, "Space")
    return await context.loaders.spaces_of_account.load((account_id, first, after))


async def environments_page(
    context: Context, first: int | None, after: str | None
) -> Page[Environment]:
    context.caller.require_to_read("environment:view")
    first, after = window(first, after, "Environment")
    async with context.loaders.reading() as session:
        return await owned.org_page(session, Environment, context.caller.org_id, first, after)


def space_config(space: SpaceRow) -> dict[str, Any]:
    """The public config under Python (snake_case) names, as SpaceConfig takes them."""
    return {
        re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(): value
        for name, value in space_rules.public_config(space).items()
    }


def space_shown(context: Context, space: SpaceRow) -> tuple[str, Reason | None]:
    """The status the space shows and why (words and code)."""
    return context.services.health.shown(space, utcnow())


async def probed_space(context: Context, space_id: str, at: datetime) -> Space | None:
    """The space a probe result of `at` was written to, as it is now (a spaceProbed
    event's `space`): read once per process for all the event's subscribers."""
    reads = context.services.event_reads
    return await reads.probed_space(context.caller.org_id, space_id, at)


def event_reason_code(event: SpaceStatusEvent | StatusEventRecord) -> str:
    """The stored code; events written before codes existed have theirs derived once by
    the migration, so the fallback is for a reason no code was stored with."""
    if event.reason_code:
        return event.reason_code
    return failure_code(event.reason or "")


MAX_SPACE_IDS = 100


def event_position(cursor: str, name: str = "after") -> int:
    """Where `cursor` (a status event's id, or its edge's cursor) stands in the history."""
    start = event_number(cursor)
    if start is None:
        start = event_number(decode_cursor(cursor, name))
    if start is None:
        raise ApiError("BAD_USER_INPUT", f"{name} is a cursor of another list")
    return start


async def status_events_page(
    context: Context,
    first: int | None,
    after: str | None,
    space_ids: Sequence[str] | None,
    last: int | None = None,
    before: str | None = None,
) -> Page[SpaceStatusEvent]:
    """The org's status events, oldest first: after the event id `after` (a client that
    reconnects reads from the last id it saw, without gaps or repeats), or with `last`,
    the newest ones (before `before`): a recent-events log, paged back in time."""
    context.caller.require_to_read("space:view")
    size, backward, cursor, name = direction(first, after, last, before)
    if space_ids is not None and len(space_ids) > MAX_SPACE_IDS:
        raise ApiError(
            "BAD_USER_INPUT",
            f"spaceIds may name at most {MAX_SPACE_IDS} spaces, got {len(space_ids)}",
        )
    start = None if cursor is None else event_position(cursor, name)
    async with context.services.read() as session:
        found = await space_rows.events_page(
            session, context.caller.org_id, size, start, space_ids, backward
        )
    return replace(found, cursors=[encode_cursor(event_id(e.id or 0)) for e in found.items])


async def status_events(
    context: Context, space_id: str, first: int | None
) -> list[StatusEventRecord]:
    return await context.loaders.recent_events.load(
        (space_id, checked_first(first, DEFAULT_EVENTS))
    )


@dataclass(frozen=True)
class SpaceLinksWanted:
    """What a list of spaces selects on each space, read ahead (schema.engine.lookahead)."""

    cloud_account: bool = False
    environments: bool = False
    # Each statusEvents selection: where its answer goes, and its `first` as given.
    events: tuple[tuple[Hashable, int | None], ...] = ()


@dataclass
class SpaceLinks:
    """One space's links, loaded with every other space of its page; None: not loaded
    (that field then loads alone)."""

    cloud_account: CloudAccountRow | None = None
    cloud_account_loaded: bool = False
    environments: list[EnvironmentRecord] | None = None
    events: dict[Hashable, list[StatusEventRecord]] = field(default_factory=dict)


async def space_links(
    context: Context, spaces: Sequence[SpaceRecord], wanted: SpaceLinksWanted
) -> dict[str, SpaceLinks]:
    """The links of a page of spaces, read at once in the operation's session: the same
    statements the fields would make through their loaders one by one. `wanted` holds
    only what the caller may view (the fields' own policies decide: schema.engine.policies.
    viewable); a `first` out of range is left to the field, which refuses it. The cloud
    accounts came with the page (`spaces_page(with_accounts=wanted.cloud_account)`)."""
    ids = [space.id for space in spaces]
    links = {space_id: SpaceLinks() for space_id in ids}
    counts: dict[int, list[Hashable]] = {}  # statusEvents' `first` → the selections asking
    for key, given in wanted.events:
        try:
            counts.setdefault(checked_first(given, DEFAULT_EVENTS), []).append(key)
        except ApiError:
            continue
    load_environments = wanted.environments
    if wanted.cloud_account:
        for space in spaces:  # read with the page (spaces_page with_accounts)
            link = links[space.id]
            link.cloud_account_loaded = True
            link.cloud_account = space.account
    if not (load_environments or counts):
        return links
    async with context.loaders.reading() as session:
        if load_environments:
            of_space: dict[str, list[EnvironmentRecord]] = {space_id: [] for space_id in ids}
            for environment in await environment_rows.environments_of_spaces(session, ids):
                of_space[environment.space_id].append(environment)
            for space_id, link in links.items():
                link.environments = of_space[space_id]
        for first, keys in counts.items():
            grouped = await space_rows.recent_events(session, ids, first)
            for space_id, link in links.items():
                events = grouped.get(space_id, [])
                for key in keys:
                    link.events[key] = events
    return links


async def environment_gate(
    context: Context, environment: Environment | EnvironmentRecord
) -> str | None:
    space = await context.loaders.space.load(environment.space_id)
    return environment_rules.gate(space, context.services.health, utcnow())
