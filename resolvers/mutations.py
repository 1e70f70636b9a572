"""Write paths: each mutation is one unit of work; userErrors roll it back whole. Every
unit that changes something records the audit event of its call in the same transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from core import accounts, environments, spaces
from core.clouds import ClusterRef
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
    """Checks the input, asks the cloud whether it accepts the credentials, then stores them."""
    services = context.services
    checked, refused = await run(
        context,
        lambda unit, viewer: accounts.check_new_account(
            unit, viewer, name, provider, credentials, services.ambient_credential_orgs
        ),
    )
    if checked is None:
        return None, refused
    try:
        await accounts.verify(checked)
    except UserErrors as failed:
        return None, failed.errors
    return await run(
        context,
        lambda unit, viewer: accounts.create_account(unit, viewer, services.secrets, name, checked),
    )


async def rotate_cloud_account_credentials(
    context: Context, account_id: str, credentials: Any
) -> Outcome[CloudAccount]:
    """Verifies the new credentials first; then swaps them in and drops cached cluster
    credentials, so the next probes mint with the new ones."""
    services = context.services
    checked, refused = await run(
        context,
        lambda unit, viewer: accounts.check_rotation(
            unit,
            viewer,
            services.secrets,
            account_id,
            credentials,
            services.ambient_credential_orgs,
        ),
    )
    if checked is None:
        return None, refused
    try:
        await accounts.verify(checked)
    except UserErrors as failed:
        return None, failed.errors
    rotated, refused = await run(
        context,
        lambda unit, viewer: accounts.rotate_credentials(
            unit, viewer, services.secrets, account_id, checked
        ),
    )
    if rotated is None:
        return None, refused
    account, stale = rotated
    for space_id in stale:
        services.credentials.forget(space_id)
    return account, []


async def delete_cloud_account(context: Context, account_id: str) -> Outcome[str]:
    return await run(
        context, lambda unit, viewer: accounts.delete_account(unit, viewer, account_id)
    )


async def grant_cluster_access(context: Context, ref: ClusterRef) -> Outcome[ClusterGrant]:
    """Records the grant once the cloud shows the cluster exists on the account."""
    secrets = context.services.secrets
    target, refused = await run(
        context, lambda unit, viewer: accounts.grant_target(unit, viewer, secrets, ref)
    )
    if target is None:
        return None, refused
    try:
        await accounts.require_cluster(target, ["input", "clusterName"])
    except UserErrors as failed:
        return None, failed.errors
    return await run(context, lambda unit, viewer: accounts.grant_access(unit, viewer, ref))


async def revoke_cluster_access(context: Context, ref: ClusterRef) -> Outcome[ClusterGrant]:
    revoked, refused = await run(
        context, lambda unit, viewer: accounts.revoke_access(unit, viewer, ref)
    )
    if revoked is None:
        return None, refused
    grant, spaces_on_cluster = revoked
    for space_id in spaces_on_cluster:
        context.services.credentials.forget(space_id)
    return grant, []


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
            await accounts.require_cluster(target, ["input", "config", "clusterName"])
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
