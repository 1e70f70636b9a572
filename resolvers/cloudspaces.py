"""CloudSpace fields, mutations and the phase subscription: authorize, call the domain,
shape the answer.

createCloudSpace and updateCloudSpaceQuota check in one transaction, ask the host
for its allocatable outside any transaction, then write in a second one that reads
the other CloudSpaces' promises again.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing

from core import cloudspaces
from core.cloudspace_access import MintedKubeconfig
from core.errors import ApiError, UserError
from core.events import CLOUDSPACE_PHASE
from core.rbac import Viewer
from core.services import Unit
from db import owned
from db.pages import Page
from db.tables import CloudSpace, CloudSpaceEvent, Space
from providers.errors import ProviderError
from resolvers.context import Context
from resolvers.mutations import Outcome, run
from resolvers.pagination import window
from resolvers.subscriptions import SubscriptionMode


def ready(row: CloudSpace) -> bool:
    return cloudspaces.vcluster_up(row)


async def of_space(context: Context, space_id: str) -> list[CloudSpace]:
    context.caller.require_to_read("cloudspace:view")
    return await context.loaders.cloud_spaces_of_space.load(space_id)


async def page(context: Context, first: int | None, after: str | None) -> Page[CloudSpace]:
    context.caller.require_to_read("cloudspace:view")
    first, after = window(first, after, "CloudSpace")
    async with context.services.read() as session:
        return await owned.org_page(session, CloudSpace, context.caller.org_id, first, after)


async def kubeconfig(context: Context, row: CloudSpace) -> MintedKubeconfig | None:
    """One kubeconfig per CloudSpace and request, however many fields ask for it."""
    context.caller.require_to_read("cloudspace:kubeconfig")
    return await context.loaders.kubeconfig.load(row.id)


def _provider_error(failed: ProviderError) -> list[UserError]:
    return [UserError(None, failed.reason, "PROVIDER_ERROR")]


async def _with_capacity(
    context: Context,
    check: Callable[[Unit, Viewer], Awaitable[Space]],
    write: Callable[[Unit, Viewer, cloudspaces.Capacity], Awaitable[CloudSpace]],
) -> Outcome[CloudSpace]:
    """`check` gives the host; its capacity is read outside any transaction; `write`
    then decides with it in a transaction of its own."""
    host, refused = await run(context, check)
    if host is None:
        return None, refused
    try:
        capacity = await cloudspaces.capacity_of(context.services, host)
    except ProviderError as failed:
        return None, _provider_error(failed)
    return await run(context, lambda unit, viewer: write(unit, viewer, capacity))


async def create(context: Context, request: cloudspaces.CreateRequest) -> Outcome[CloudSpace]:
    services = context.services
    return await _with_capacity(
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
    return await _with_capacity(
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
    context: Context, mode: SubscriptionMode, cloud_space_id: str | None
) -> AsyncGenerator[CloudSpaceEvent, None]:
    """Every phase or message change of the caller's org's CloudSpaces (of one, when
    `cloud_space_id` is given), read fresh per event, until the subscriber goes away."""
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
            context.fresh_loaders()
            event = await context.loaders.cloud_space_event.load(announced["event_id"])
            if event is not None:
                yield event


async def kubeconfig_download(
    context: Context, cloud_space_id: str, vcluster_name: str
) -> MintedKubeconfig | None:
    """The REST download: None for an unknown or foreign CloudSpace or vCluster name;
    ApiError FORBIDDEN without cloudspace:kubeconfig, PRECONDITION_FAILED while the
    vCluster is not up, PROVIDER_ERROR when a cluster cannot give one."""
    row = await context.loaders.cloud_space.load(cloud_space_id)
    if row is None or row.name != vcluster_name:
        return None
    minted = await cloudspaces.kubeconfig(
        context.services, context.caller, row, context.loaders.live_calls
    )
    if minted is None:
        raise ApiError(
            "PRECONDITION_FAILED",
            f"The vCluster is not ready yet (the CloudSpace is {row.phase}).",
        )
    return minted
