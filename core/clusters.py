"""From a space to a credential for its cluster, with no database connection held while
a credential is minted.

The path has two parts. First, in a short read-only session (none at all for GENERIC
spaces, whose secrets are on the row already): the grant is checked and what minting
needs is read. That session is closed. Then the credential cache returns a fresh
cached credential or mints one, which for cloud providers is a network round trip.

A revoked grant is checked before any cached credential is used, so revoking access
takes effect on the very next call.
"""

from __future__ import annotations

from collections.abc import Callable

from core import clouds
from core.services import Services
from core.spaces import public_config
from db import cloud_accounts as account_rows
from db import owned
from db.tables import CloudAccount, Space
from providers.credentials import ClusterCredentials, ClusterTarget
from providers.errors import AccessRevoked

ACCESS_REVOKED = "cluster access revoked"


async def credentials_for(services: Services, space: Space) -> ClusterCredentials:
    """A valid credential for the space's cluster, or a ProviderError saying why not.
    Call it outside any transaction: a mint may take a cloud round trip."""
    target = await _mint_target(services, space)
    return await services.credentials.get(space.id, target)


async def _mint_target(services: Services, space: Space) -> Callable[[], ClusterTarget]:
    """Checks the grant and reads the cloud account in a short session; the answer builds
    the mint target (decrypting secrets) only when the cache has to mint."""
    config = public_config(space)
    account: CloudAccount | None = None
    provider = clouds.provider(space.provider)
    if provider.cloud:
        if space.cloud_account_id is None:
            services.credentials.forget(space.id)
            raise AccessRevoked(f"{ACCESS_REVOKED}: the cloud account was deleted")
        key = provider.grant_key_of(config)
        async with services.read() as session:
            granted = await account_rows.grant(session, space.cloud_account_id, key)
            if granted is not None:
                account = await owned.by_id(
                    session, CloudAccount, space.org_id, space.cloud_account_id
                )
        if granted is None:
            services.credentials.forget(space.id)
            raise AccessRevoked(f"{ACCESS_REVOKED}: grantClusterAccess to restore it")

    def target() -> ClusterTarget:
        return ClusterTarget(
            space_id=space.id,
            provider=space.provider,
            config=config,
            secret=services.secrets.open(space.secret_ciphertext)
            if space.secret_ciphertext
            else {},
            account_credentials=services.secrets.open(account.credentials_ciphertext)
            if account is not None
            else None,
        )

    return target
