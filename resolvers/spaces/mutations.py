"""Space and environment writes, each one unit of work (resolvers.common.mutations.run)."""

from __future__ import annotations

from core.cloud_accounts import accounts
from core.common.errors import UserErrors
from core.spaces import environments
from core.spaces import lifecycle as spaces
from db.tables import Environment, Space
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run


async def register_space(context: Context, request: spaces.RegisterSpaceRequest) -> Outcome[Space]:
    """Cloud spaces: every stored fact is checked, then the cloud is asked whether the
    cluster exists, then the space is registered (checking again, in its own transaction)."""
    services = context.services
    target, refused = await run(
        context,
        lambda unit, viewer: spaces.registration_check(
            unit, viewer, services.secrets, request, services.deny_networks
        ),
    )
    if refused:
        return None, refused
    if target is not None:
        try:
            await accounts.require_cluster(
                target, ["input", "config", "clusterName"], services.deny_networks
            )
        except UserErrors as failed:
            return None, failed.errors
    return await run(
        context,
        lambda unit, viewer: spaces.register(
            unit, viewer, services.secrets, request, services.deny_networks
        ),
    )


async def set_space_status(context: Context, space_id: str, status: str) -> Outcome[Space]:
    return await run(
        context, lambda unit, viewer: spaces.set_status(unit, viewer, space_id, status)
    )


async def deregister_space(context: Context, space_id: str) -> Outcome[Space]:
    outcome = await run(context, lambda unit, viewer: spaces.deregister(unit, viewer, space_id))
    if outcome[0] is not None:  # its cluster credential is of no more use here
        context.services.credentials.forget(space_id)
    return outcome


async def create_environment(
    context: Context, name: str, space_id: str, namespace: str
) -> Outcome[Environment]:
    return await run(
        context, lambda unit, viewer: environments.create(unit, viewer, name, space_id, namespace)
    )


async def bind_environment(
    context: Context, environment_id: str, space_id: str, namespace: str
) -> Outcome[Environment]:
    return await run(
        context,
        lambda unit, viewer: environments.bind(unit, viewer, environment_id, space_id, namespace),
    )
