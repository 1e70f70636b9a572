"""CloudSpace fields, mutations and the phase subscription: authorize, call the domain,
shape the answer.

createCloudSpace and updateCloudSpaceQuota check in one transaction, ask the host
for its allocatable outside any transaction, then write in a second one that reads
the other CloudSpaces' promises again.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing

from core.cloudspaces import capacity as host_capacity
from core.cloudspaces import lifecycle as cloudspaces
from core.common.errors import ApiError, UserErrors
from core.common.events import CLOUDSPACE_PHASE
from core.common.rbac import Viewer
from core.common.services import Unit
from core.spaces.statuses import CloudSpacePhase
from db import cloudspaces as cloudspace_rows
from db.cloudspace_tables import CloudSpace, CloudSpaceEvent
from db.pages import Order, Page
from db.records import CloudSpaceWhere
from db.tables import Space
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, T, run
from resolvers.common.pagination import keyset, with_cursors
from resolvers.common.subscription_mode import SubscriptionMode


async def of_space(context: Context, space_id: str) -> list[CloudSpace]:
    context.caller.require_to_read("cloudspace:view")
    return await context.loaders.cloud_spaces_of_space.load(space_id)


# The type of each CloudSpaceOrderField's sort key, as its cursors carry it.
KEY_TAGS = {"NAME": "text", "CREATED_AT": "time", "PHASE": "int"}
MAX_SEARCH = 100
MAX_HOSTS = 100


async def page(
    context: Context,
    where: CloudSpaceWhere,
    order: str | None,
    first: int | None,
    after: str | None,
    last: int | None = None,
    before: str | None = None,
) -> Page[CloudSpace]:
    """A page of the org's CloudSpaces: `order` is a field and direction ("PHASE:DESC"),
    None for id order (oldest first); forward with first/after, back with last/before."""
    context.caller.require_to_read("cloudspace:view")
    field, _, direction = (order or "").partition(":")
    keyset_ = keyset(first, after, last, before, "CloudSpace", order, KEY_TAGS.get(field))
    if where.search is not None and len(where.search) > MAX_SEARCH:
        raise ApiError("BAD_USER_INPUT", f"filter.search must be at most {MAX_SEARCH} characters")
    if where.host_space_ids is not None and len(where.host_space_ids) > MAX_HOSTS:
        raise ApiError("BAD_USER_INPUT", f"filter.hostSpaceIds may name at most {MAX_HOSTS} spaces")
    key = (
        None
        if not field
        else cloudspace_rows.order_key(field, [phase.value for phase in CloudSpacePhase])
    )
    async with context.services.read() as session:
        found = await cloudspace_rows.list_cloud_spaces(
            session,
            context.caller.org_id,
            where,
            keyset_,
            Order(key, descending=direction == "DESC"),
        )
    return with_cursors(found, "CloudSpace", order)


async def with_capacity(
    context: Context,
    check: Callable[[Unit, Viewer], Awaitable[Space]],
    write: Callable[[Unit, Viewer, host_capacity.Capacity], Awaitable[T]],
) -> Outcome[T]:
    """`check` gives the host; its capacity is read outside any transaction; `write`
    then decides with it in a transaction of its own. The check is no effect of the call:
    it is not audited, so the host (perhaps the platform's) is never one of its targets."""
    try:
        async with context.services.read() as session:
            host = await check(Unit(session), context.caller)
    except UserErrors as refused:
        return None, refused.errors
    try:
        capacity = await host_capacity.capacity_for_request(context.services, host)
    except UserErrors as refused:
        return None, refused.errors
    return await run(context, lambda unit, viewer: write(unit, viewer, capacity))


async def create(context: Context, request: cloudspaces.CreateRequest) -> Outcome[CloudSpace]:
    services = context.services
    return await with_capacity(
        context,
        lambda unit, viewer: cloudspaces.creation_host(unit, services, viewer, request),
        lambda unit, viewer, capacity: cloudspaces.create(
            unit, services, viewer, request, capacity
        ),
    )


async def update_quota(
    context: Context, cloud_space_id: str, cpu: float, memory_mib: int
) -> Outcome[CloudSpace]:
    services = context.services
    return await with_capacity(
        context,
        lambda unit, viewer: cloudspaces.resize_host(unit, viewer, cloud_space_id, cpu, memory_mib),
        lambda unit, viewer, capacity: cloudspaces.resize(
            unit, services, viewer, cloud_space_id, cpu, memory_mib, capacity
        ),
    )


async def delete(context: Context, cloud_space_id: str, confirm_name: str) -> Outcome[CloudSpace]:
    return await run(
        context,
        lambda unit, viewer: cloudspaces.delete(unit, viewer, cloud_space_id, confirm_name),
    )


async def phase_events(
    context: Context,
    mode: SubscriptionMode,
    cloud_space_id: str | None,
    include_vclusters: bool = False,
) -> AsyncGenerator[CloudSpaceEvent, None]:
    """Every phase or message change of the caller's org's CloudSpaces (of one, when
    `cloud_space_id` is given), and of their vClusters with `include_vclusters`, read
    fresh per event, until the subscriber goes away."""
    caller = context.caller
    caller.require_to_read("cloudspace:view")
    if cloud_space_id is not None:
        context.fresh_loaders()
        if await context.loaders.cloud_space.load(cloud_space_id) is None:
            raise ApiError("NOT_FOUND", f"No CloudSpace with id {cloud_space_id!r}.")
    if mode.admit_only:
        return
    bus = context.services.bus
    async with aclosing(bus.subscribe(CLOUDSPACE_PHASE, mode.on_listening)) as announcements:
        async for announced in announcements:
            if announced.get("org_id") != caller.org_id:
                continue
            if cloud_space_id is not None and announced.get("cloud_space_id") != cloud_space_id:
                continue
            context.fresh_loaders(f"{CLOUDSPACE_PHASE}:{announced['event_id']}")
            event = await context.loaders.cloud_space_event.load(announced["event_id"])
            if event is not None and (include_vclusters or event.vcluster_id is None):
                yield event
