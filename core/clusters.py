"""From a space to a credential for its cluster.

A revoked grant is checked before any cached credential is used, so revoking
access takes effect on the very next call.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from core import clouds
from core.services import Services
from core.spaces import public_config
from db import cloud_accounts as account_repo
from db import owned
from db.tables import CloudAccount, Space
from providers.credentials import ClusterCredentials, ClusterTarget
from providers.errors import AccessRevoked

ACCESS_REVOKED = "cluster access revoked"


async def credentials_for(
    session: AsyncSession, services: Services, space: Space
) -> ClusterCredentials:
    """A valid credential for the space's cluster, or a ProviderError saying why not."""
    config = public_config(space)
    if clouds.provider(space.provider).cloud:
        if space.cloud_account_id is None:
            services.credentials.forget(space.id)
            raise AccessRevoked(f"{ACCESS_REVOKED}: the cloud account was deleted")
        key = clouds.provider(space.provider).grant_key_of(config)
        if await account_repo.grant(session, space.cloud_account_id, key) is None:
            services.credentials.forget(space.id)
            raise AccessRevoked(f"{ACCESS_REVOKED}: grantClusterAccess to restore it")

    async def target() -> ClusterTarget:
        account_credentials = None
        if space.cloud_account_id is not None:
            account = await owned.by_id(session, CloudAccount, space.org_id, space.cloud_account_id)
            if account is not None:
                account_credentials = services.secrets.open(account.credentials_ciphertext)
        return ClusterTarget(
            space_id=space.id,
            provider=space.provider,
            config=config,
            secret=services.secrets.open(space.secret_ciphertext)
            if space.secret_ciphertext
            else {},
            account_credentials=account_credentials,
        )

    return await services.credentials.get(space.id, target)
