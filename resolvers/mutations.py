"""Write paths: each mutation is one unit of work; userErrors roll it back whole. Every
unit that changes something records the audit event of its call in the same transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from core import accounts, environments, spaces
from core.errors import UserError, UserErrors
from core.rbac import Viewer
from core.services import Unit
from db.engine import UniqueViolation
from db.tables import CloudAccount, ClusterGrant, Environment, Space
from resolvers import audit
from resolvers.context import Context

T = TypeVar("T")
Outcome = tuple[T | None, list[UserError]]


RACE_LOST = UserError(None, "Another change to the same object won; try again.", "CONFLICT")


async def run(context: Context, action: Callable[[Unit, Viewer], Awaitable[T]]) -> Outcome[T]:
    # A unique violation means a concurrent write got there first; one retry lets the
    # domain see it and refuse (CONFLICT on the right field) or succeed idempotently.
    for _attempt in range(2):
        try:
            async with context.services.unit() as unit:
                result = await action(unit, context.caller)
                call = await audit.in_effect(unit, context, result)
            audit.committed(call)
            return result, []
        except UserErrors as refused:
            return None, refused.errors
        except UniqueViolation:
            continue
    return None, [RACE_LOST]


async def create_cloud_account(
    context: Context, name: str, provider: str, credentials: Any
) -> Outcome[CloudAccount]:
    secrets = context.services.secrets
    return await run(
        context,
        lambda unit, viewer: accounts.create_account(
            unit, viewer, secrets, name, provider, credentials
        ),
    )


async def delete_cloud_account(context: Context, account_id: str) -> Outcome[str]:
    return await run(
        context, lambda unit, viewer: accounts.delete_account(unit, viewer, account_id)
    )


async def grant_cluster_access(context: Context, ref: accounts.ClusterRef) -> Outcome[ClusterGrant]:
    return await run(context, lambda unit, viewer: accounts.grant_access(unit, viewer, ref))


async def revoke_cluster_access(
    context: Context, ref: accounts.ClusterRef
) -> Outcome[ClusterGrant]:
    return await run(context, lambda unit, viewer: accounts.revoke_access(unit, viewer, ref))


async def register_space(context: Context, request: spaces.RegisterSpaceRequest) -> Outcome[Space]:
    services = context.services
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
