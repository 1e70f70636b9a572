"""vCluster fields and mutations (addVCluster, removeVCluster) and the kubeconfig download:
authorize, call the domain (core.cloudspaces.vcluster_rules), shape the answer."""

from __future__ import annotations

from datetime import datetime

from core.cloudspaces import vcluster_rules
from core.cloudspaces.host_access import MintedKubeconfig, expiry_if_minted_now
from core.cloudspaces.kubeconfigs import ExecPlugin
from core.common.errors import ApiError
from db.cloudspace_tables import CloudSpace
from db.vcluster_tables import VCluster
from resolvers.cloudspaces.fields import with_capacity
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run


def ready(cloud_space: CloudSpace, vcluster: VCluster) -> bool:
    return vcluster_rules.up(cloud_space, vcluster)


async def of_cloud_space(context: Context, cloud_space: CloudSpace) -> list[VCluster]:
    context.caller.require_to_read("cloudspace:view")
    # Each vCluster's `ready` reads its CloudSpace: this one, already at hand.
    context.loaders.cloud_space.prime(cloud_space.id, cloud_space)
    return await context.loaders.vclusters_of_cloud_space.load(cloud_space.id)


async def cloud_space_of(context: Context, vcluster: VCluster) -> CloudSpace | None:
    return await context.loaders.cloud_space.load(vcluster.cloud_space_id)


async def kubeconfig(context: Context, vcluster: VCluster) -> MintedKubeconfig | None:
    """One kubeconfig per vCluster and request, however many fields ask for it."""
    context.caller.require_to_read("cloudspace:kubeconfig")
    return await context.loaders.kubeconfig.load(vcluster.id)


async def kubeconfig_expiry(
    context: Context, vcluster: VCluster, with_kubeconfig: bool
) -> datetime | None:
    """When the token of a kubeconfig minted now would expire: of the one in this answer
    when `kubeconfig` is selected beside (and the caller may have it), else reckoned
    without minting anything. Needs only cloudspace:view; null while not ready."""
    context.caller.require_to_read("cloudspace:view")
    cloud_space = await cloud_space_of(context, vcluster)
    if cloud_space is None or not ready(cloud_space, vcluster):
        return None
    if with_kubeconfig and context.caller.can("cloudspace:kubeconfig"):
        try:
            minted = await context.loaders.kubeconfig.load(vcluster.id)
        except ApiError:  # the kubeconfig field reports it
            return None
        return None if minted is None else minted.expires_at
    return expiry_if_minted_now(context.services)


async def add(context: Context, cloud_space_id: str, name: str) -> Outcome[VCluster]:
    services = context.services
    return await with_capacity(
        context,
        lambda unit, viewer: vcluster_rules.addition_host(unit, viewer, cloud_space_id),
        lambda unit, viewer, capacity: vcluster_rules.add(
            unit, services, viewer, cloud_space_id, name, capacity
        ),
    )


async def remove(context: Context, vcluster_id: str, confirm_name: str) -> Outcome[VCluster]:
    return await run(
        context,
        lambda unit, viewer: vcluster_rules.remove(unit, viewer, vcluster_id, confirm_name),
    )


async def _named(context: Context, cloud_space: CloudSpace, vcluster: str) -> VCluster | None:
    for found in await context.loaders.vclusters_of_cloud_space.load(cloud_space.id):
        if found.name == vcluster:
            return found
    return None


async def kubeconfig_download(
    context: Context, cloud_space_id: str, vcluster_name: str, plugin: ExecPlugin | None = None
) -> MintedKubeconfig | None:
    """The REST download (with `plugin`, the exec plugin form): None for an unknown or
    foreign CloudSpace or vCluster name; ApiError FORBIDDEN without
    cloudspace:kubeconfig, PRECONDITION_FAILED while the vCluster is not up,
    PROVIDER_ERROR when a cluster cannot give one."""
    row = await context.loaders.cloud_space.load(cloud_space_id)
    vcluster = None if row is None else await _named(context, row, vcluster_name)
    if row is None or vcluster is None:
        return None
    minted = await vcluster_rules.kubeconfig(
        context.services, context.caller, row, vcluster, context.loaders.live_calls, plugin
    )
    if minted is None:
        raise ApiError(
            "PRECONDITION_FAILED",
            f"The vCluster is not ready yet (it is {vcluster.phase}; "
            f"the CloudSpace is {row.phase}).",
        )
    return minted
