"""Read paths: authorize the view policy, then load through the request's loaders."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from strawberry.dataloader import DataLoader

from core import accounts
from core import environments as environment_rules
from core import spaces as space_rules
from core.errors import ApiError
from core.ids import event_id, event_number, kind_of
from core.reasons import failure_code
from core.services import utcnow
from core.status_rules import Reason
from db import environments as environment_rows
from db import owned
from db import spaces as space_rows
from db.cloud_accounts import CloudAccountRow
from db.environments import EnvironmentRecord
from db.pages import Page
from db.spaces import SpaceRecord, SpaceRow, StatusEventRecord
from db.tables import CloudAccount, Environment, Space, SpaceStatusEvent
from resolvers.context import Context
from resolvers.pagination import (
    checked_first,
    decode_cursor,
    encode_cursor,
    keyset,
    window,
    with_cursors,
)

DEFAULT_EVENTS = 20


async def cloud_accounts_page(
    context: Context, first: int | None, after: str | None
) -> Page[CloudAccount]:
    context.caller.require_to_read("cloudaccount:view")
    first, after = window(first, after, "CloudAccount")
    async with context.loaders.reading() as session:
        return await owned.org_page(session, CloudAccount, context.caller.org_id, first, after)


async def spaces_page(
    context: Context,
    where: space_rows.SpaceWhere,
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
    page = keyset(first, after, last, before, "Space", order)
    _check_search(where.search)
    field, _, direction = (order or "").partition(":")
    async with context.loaders.reading() as session:
        found = await space_rows.list_spaces(
            session,
            context.caller.org_id,
            where,
            page,
            stale_before=context.services.health.stale_before(utcnow()),
            order_by=field or None,
            descending=direction == "DESC",
            with_accounts=with_accounts and context.caller.can("cloudaccount:view"),
        )
    return with_cursors(found, "Space", order)


async def space_counts(context: Context, where: space_rows.SpaceWhere) -> dict[str, int]:
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


VIEW_POLICY = {
    "Org": "space:view",
    "CloudAccount": "cloudaccount:view",
    "Space": "space:view",
    "Environment": "environment:view",
    "CloudSpace": "cloudspace:view",
    "SpaceStatusEvent": "space:view",
    "ApiToken": "token:manage",
    "RoleDefinition": "role:manage",
    "AuditEvent": "audit:view",
}


async def node(context: Context, object_id: str) -> tuple[str, Any] | None:
    """(kind, row) for any id the caller's org owns; foreign and unknown ids are both None."""
    kind = kind_of(object_id)
    if kind not in VIEW_POLICY:
        return None
    context.caller.require_to_read(VIEW_POLICY[kind])
    loaders = context.loaders
    by_kind: dict[str, DataLoader[str, Any]] = {
        "Org": loaders.org,
        "CloudAccount": loaders.cloud_account,
        "Space": loaders.space,
        "Environment": loaders.environment,
        "CloudSpace": loaders.cloud_space,
        "ApiToken": loaders.api_token,
        "RoleDefinition": loaders.custom_role,
        "AuditEvent": loaders.audit_event,
    }
    if kind == "SpaceStatusEvent":
        number = event_number(object_id)
        row = None if number is None else await loaders.status_event.load(number)
    else:
        row = await by_kind[kind].load(object_id)
    if row is None or (kind == "Org" and object_id != context.caller.org_id):
        return None
    return kind, row


MAX_NODES = 100


async def nodes(context: Context, object_ids: Sequence[str]) -> list[tuple[str, Any] | None]:
    """Each id's (kind, row) in the order asked, None for unknown or foreign ids and for
    kinds the caller may not view; the loaders batch them into one query per kind."""
    if len(object_ids) > MAX_NODES:
        raise ApiError(
            "BAD_USER_INPUT", f"ids may name at most {MAX_NODES} objects, got {len(object_ids)}"
        )
    viewable = [
        object_id
        if (kind := kind_of(object_id)) in VIEW_POLICY and context.caller.can(VIEW_POLICY[kind])
        else None
        for object_id in object_ids
    ]
    return list(
        await asyncio.gather(
            *(node(context, object_id) if object_id else _nothing() for object_id in viewable)
        )
    )


async def _nothing() -> None:
    return None


async def one(context: Context, kind: str, object_id: str) -> Any:
    found = await node(context, object_id)
    return found[1] if found is not None and found[0] == kind else None


def space_config(space: SpaceRow) -> dict[str, Any]:
    """The public config under Python (snake_case) names, as SpaceConfig takes them."""
    return {
        re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(): value
        for name, value in space_rules.public_config(space).items()
    }


def space_shown(context: Context, space: SpaceRow) -> tuple[str, Reason | None]:
    """The status the space shows and why (words and code)."""
    return context.services.health.shown(space, utcnow())


def event_reason_code(event: SpaceStatusEvent | StatusEventRecord) -> str:
    """The stored code; events written before codes existed have theirs derived once by
    the migration, so the fallback is for a reason no code was stored with."""
    if event.reason_code:
        return event.reason_code
    return failure_code(event.reason or "")


MAX_SPACE_IDS = 100


async def status_events_page(
    context: Context, first: int | None, after: str | None, space_ids: Sequence[str] | None
) -> Page[SpaceStatusEvent]:
    """The org's status events, oldest first, after the event id `after`: a client that
    reconnects reads from the last id it saw, without gaps or repeats."""
    context.caller.require_to_read("space:view")
    size = checked_first(first)
    if space_ids is not None and len(space_ids) > MAX_SPACE_IDS:
        raise ApiError(
            "BAD_USER_INPUT",
            f"spaceIds may name at most {MAX_SPACE_IDS} spaces, got {len(space_ids)}",
        )
    start = None
    if after is not None:  # an event's id, or its edge's cursor
        start = event_number(after)
        if start is None:
            start = event_number(decode_cursor(after))
        if start is None:
            raise ApiError("BAD_USER_INPUT", "after is a cursor of another list")
    async with context.services.read() as session:
        found = await space_rows.events_page(session, context.caller.org_id, size, start, space_ids)
    return replace(found, cursors=[encode_cursor(event_id(e.id or 0)) for e in found.items])


async def status_events(
    context: Context, space_id: str, first: int | None
) -> list[StatusEventRecord]:
    return await context.loaders.recent_events.load(
        (space_id, checked_first(first, DEFAULT_EVENTS))
    )


@dataclass(frozen=True)
class SpaceLinksWanted:
    """What a list of spaces selects on each space, read ahead (schema.lookahead)."""

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
    statements the fields would make through their loaders one by one. Only what the
    caller may view; a `first` out of range is left to the field, which refuses it. The
    cloud accounts came with the page (`spaces_page(with_accounts=wanted.cloud_account)`)."""
    caller = context.caller
    ids = [space.id for space in spaces]
    links = {space_id: SpaceLinks() for space_id in ids}
    counts: dict[int, list[Hashable]] = {}  # statusEvents' `first` → the selections asking
    if caller.can("space:view"):
        for key, given in wanted.events:
            try:
                counts.setdefault(checked_first(given, DEFAULT_EVENTS), []).append(key)
            except ApiError:
                continue
    load_environments = wanted.environments and caller.can("environment:view")
    if wanted.cloud_account and caller.can("cloudaccount:view"):
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


async def discovered_clusters(
    context: Context, account: CloudAccountRow, region: str | None
) -> list[accounts.Discovered]:
    """Live discovery on the cloud: the database is read first, then the cloud is asked."""
    context.caller.require_to_read("cloudaccount:view")
    async with context.services.unit() as unit:
        scope = await accounts.discovery_scope(unit, context.services.secrets, account, region)
    return await accounts.discover(scope, region)
