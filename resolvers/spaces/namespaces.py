"""Namespaces: listed live on a space's cluster, and created there by a mutation.

createNamespace checks in one transaction and calls the cluster after it: the
cluster call may take up to its timeout, and no database connection waits on it.
"""

from __future__ import annotations

from core.common.errors import UserErrors
from core.spaces import namespaces
from db.records import SpaceRow
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run


async def of_space(context: Context, space: SpaceRow) -> list[namespaces.Namespace]:
    return await namespaces.list_namespaces(
        context.services, context.caller, space, context.loaders.live_calls
    )


async def create(context: Context, space_id: str, name: str) -> Outcome[namespaces.Namespace]:
    services = context.services
    target, refused = await run(
        context,
        lambda unit, viewer: namespaces.creation_target(unit, services, viewer, space_id, name),
    )
    if target is None:
        return None, refused
    try:
        return await namespaces.create_on_cluster(services, target, context.loaders.live_calls), []
    except UserErrors as failed:
        return None, failed.errors
