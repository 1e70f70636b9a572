"""Cloud account reads: the org's accounts, and live discovery on the cloud."""

from __future__ import annotations

from core.cloud_accounts import accounts
from db import owned
from db.pages import Page
from db.records import CloudAccountRow
from db.tables import CloudAccount
from resolvers.common.context import Context
from resolvers.common.pagination import (
    window,
)


async def cloud_accounts_page(
    context: Context, first: int | None, after: str | None
) -> Page[CloudAccount]:
    context.caller.require_to_read("cloudaccount:view")
    first, after = window(first, after, "CloudAccount")
    async with context.loaders.reading() as session:
        return await owned.org_page(session, CloudAccount, context.caller.org_id, first, after)


async def discovered_clusters(
    context: Context, account: CloudAccountRow, region: str | None
) -> list[accounts.Discovered]:
    """Live discovery on the cloud: the database is read first, then the cloud is asked."""
    context.caller.require_to_read("cloudaccount:view")
    async with context.services.unit() as unit:
        scope = await accounts.discovery_scope(unit, context.services.secrets, account, region)
    return await accounts.discover(scope, region, context.services.deny_networks)
