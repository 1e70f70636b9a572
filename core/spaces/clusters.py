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
from typing import Protocol

from core.common.services import Services
from core.spaces import clouds
from core.spaces.lifecycle import public_config
from db import cloud_accounts as account_rows
from db import owned
from db.tables import CloudAccount
from providers.cluster_credentials import ClusterCredentials, ClusterTarget
from providers.errors import AccessRevoked

ACCESS_REVOKED = "cluster access revoked"


class ClusterSpace(Protocol):
    """What a credential is made of: a Space row, or the probe loop's claimed columns."""

    @property
    def id(self) -> str: ...

    @property
    def org_id(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def cloud_account_id(self) -> str | None: ...

    @property
    def config_json(self) -> str: ...

    @property
    def secret_ciphertext(self) -> str | None: ...


async def credentials_for(services: Services, space: ClusterSpace) -> ClusterCredentials:
    """A valid credential for the space's cluster, or a ProviderError saying why not.
    Call it outside any transaction: a mint may take a cloud round trip."""
    cached = services.credentials.cached(space.id)
    target = await _mint_target(services, space, read_account=cached is None)
    if cached is not None:  # the grant still stands (checked just now)
        return cached
    return await services.credentials.get(space.id, target)


async def _mint_target(
    services: Services, space: ClusterSpace, read_account: bool
) -> Callable[[], ClusterTarget]:
    """Checks the grant and, when a mint is likely (`read_account`), reads the cloud
    account, in a short session; the answer builds the mint target (decrypting secrets)
    only when the cache has to mint. GENERIC spaces need no session at all."""
    account: CloudAccount | None = None
    provider = clouds.provider(space.provider)
    if provider.cloud:
        if space.cloud_account_id is None:
            services.credentials.forget(space.id)
            raise AccessRevoked(f"{ACCESS_REVOKED}: the cloud account was deleted")
        key = provider.grant_key_of(public_config(space))
        async with services.read() as session:
            granted = await account_rows.grant(session, space.cloud_account_id, key)
            if granted is not None and read_account:
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
            config=public_config(space),
            secret=services.secrets.open(space.secret_ciphertext)
            if space.secret_ciphertext
            else {},
            account_credentials=services.secrets.open(account.credentials_ciphertext)
            if account is not None
            else None,
            deny=services.deny_networks,
        )

    return target
