"""Cloud account writes: accounts and their cluster grants, each one unit of work (resolvers.common.mutations.run)."""

from __future__ import annotations

from typing import Any

from core.cloud_accounts import accounts
from core.common.errors import UserErrors
from core.spaces.clouds import ClusterRef
from db.tables import CloudAccount, ClusterGrant
from resolvers.common.context import Context
from resolvers.common.mutations import Outcome, run


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
        await accounts.verify(checked, services.deny_networks)
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
        await accounts.verify(checked, services.deny_networks)
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
        await accounts.require_cluster(
            target, ["input", "clusterName"], context.services.deny_networks
        )
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
