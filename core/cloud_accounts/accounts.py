"""Cloud accounts: credentials checked for shape, verified with the cloud, sealed at rest;
per-cluster grants on clusters that exist; rotation; live cluster discovery.

Credentials go in through `create_account` or `rotate_credentials` and never
come back out: only `providers/` gets them, decrypted, to call the cloud. Every
cloud call happens between two short transactions, never inside one, so no
database connection waits on a cloud.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.common.errors import ApiError, Problems, UserErrors
from core.common.ids import new_id
from core.common.names import check_new_name, cloud_name_problem, name_key
from core.common.rbac import Viewer
from core.common.secrets import SecretBox
from core.common.services import Unit
from core.spaces import clouds
from core.spaces.clouds import ClusterRef
from core.spaces.lifecycle import public_config
from db import cloud_accounts as account_rows
from db import owned
from db.records import CloudAccountRow
from db.tables import CloudAccount, ClusterGrant, Space
from providers.clouds import CloudCluster, ClusterLocation
from providers.dispatch import adapter_for
from providers.errors import ProviderError
from providers.network import IPNetwork

AMBIENT_SETTING = "SPACEDOCK_AMBIENT_CREDENTIAL_ORGS"


@dataclass(frozen=True)
class CheckedCredentials:
    """Credentials of the right shape for a provider, not yet verified with the cloud."""

    provider: str
    values: dict[str, Any] = field(repr=False)


def _checked(
    viewer: Viewer,
    provider: str,
    credentials: Any,
    ambient_orgs: frozenset[str],
    problems: Problems,
) -> CheckedCredentials:
    values = clouds.check_credentials(provider, credentials, problems)
    if clouds.is_ambient(values) and viewer.org_name not in ambient_orgs:
        problems.add(
            ["credentials", clouds.AMBIENT],
            "ambient credentials are the server's own cloud identity; this org is not listed "
            f"in {AMBIENT_SETTING}",
            "FORBIDDEN",
        )
    return CheckedCredentials(provider, values)


async def check_new_account(
    unit: Unit,
    viewer: Viewer,
    name: str,
    provider: str,
    credentials: Any,
    ambient_orgs: frozenset[str],
) -> CheckedCredentials:
    """Every check createCloudAccount makes before it asks the cloud."""
    viewer.require("cloudaccount:create")
    problems = Problems("input")
    await check_new_name(
        problems,
        name,
        lambda key: owned.by_name_key(unit.session, CloudAccount, viewer.org_id, key),
        "a cloud account",
    )
    checked = _checked(viewer, provider, credentials, ambient_orgs, problems)
    problems.raise_if_any()
    return checked


async def verify(checked: CheckedCredentials, deny: tuple[IPNetwork, ...]) -> None:
    """Asks the cloud whether it accepts the credentials: PROVIDER_ERROR saying what it said."""
    try:
        await adapter_for(checked.provider, deny).verify(checked.values)
    except ProviderError as refused:
        raise UserErrors.one(
            ["input", "credentials"],
            f"{checked.provider} did not accept the credentials: {refused.reason}",
            "PROVIDER_ERROR",
        ) from refused


async def create_account(
    unit: Unit, viewer: Viewer, secrets: SecretBox, name: str, checked: CheckedCredentials
) -> CloudAccount:
    """Stores verified credentials (sealed) under a name still free."""
    viewer.require("cloudaccount:create")
    problems = Problems("input")
    name = await check_new_name(
        problems,
        name,
        lambda key: owned.by_name_key(unit.session, CloudAccount, viewer.org_id, key),
        "a cloud account",
    )
    problems.raise_if_any()
    account = CloudAccount(
        id=new_id("ca"),
        org_id=viewer.org_id,
        name=name,
        name_key=name_key(name),
        provider=checked.provider,
        credentials_ciphertext=secrets.seal(checked.values),
        created_at=unit.now,
    )
    await owned.add(unit.session, account)
    return account


async def account_in_org(
    unit: Unit, viewer: Viewer, account_id: str, field: list[str]
) -> CloudAccount:
    """The caller's account, or NOT_FOUND whether it is unknown or another org's."""
    account = await owned.by_id(unit.session, CloudAccount, viewer.org_id, account_id)
    if account is None:
        raise UserErrors.one(field, "no such cloud account", "NOT_FOUND")
    return account


async def check_rotation(
    unit: Unit,
    viewer: Viewer,
    secrets: SecretBox,
    account_id: str,
    credentials: Any,
    ambient_orgs: frozenset[str],
) -> CheckedCredentials:
    """Every check rotateCloudAccountCredentials makes before it asks the cloud."""
    viewer.require("cloudaccount:update")
    account = await account_in_org(unit, viewer, account_id, ["input", "id"])
    problems = Problems("input")
    checked = _checked(viewer, account.provider, credentials, ambient_orgs, problems)
    if not problems:
        # Spaces name the account's project or subscription; new keys may not move it.
        old = clouds.account_scope(account.provider, secrets.open(account.credentials_ciphertext))
        new = clouds.account_scope(account.provider, checked.values)
        for key, value in old.items():
            if new.get(key, "").lower() != value.lower():
                problems.add(
                    ["credentials", key],
                    f"{key} must stay the account's own ({value}); "
                    "create another account for another one",
                )
    problems.raise_if_any()
    return checked


async def rotate_credentials(
    unit: Unit, viewer: Viewer, secrets: SecretBox, account_id: str, checked: CheckedCredentials
) -> tuple[CloudAccount, list[str]]:
    """Swaps verified credentials in; the ids of the spaces whose cached credential is stale."""
    viewer.require("cloudaccount:update")
    account = await account_in_org(unit, viewer, account_id, ["input", "id"])
    account.credentials_ciphertext = secrets.seal(checked.values)
    unit.session.add(account)
    await unit.session.flush()
    return account, [
        s.id for s in await account_rows.live_spaces_of_account(unit.session, account.id)
    ]


async def delete_account(unit: Unit, viewer: Viewer, account_id: str) -> str:
    viewer.require("cloudaccount:delete")
    account = await account_in_org(unit, viewer, account_id, ["input", "id"])
    in_use = await account_rows.live_spaces_using(unit.session, account.id)
    if in_use:
        raise UserErrors.one(
            ["input", "id"],
            f"{in_use} registered space(s) use this account; deregister them first",
            "PRECONDITION_FAILED",
        )
    await owned.remove(unit.session, account)
    return account.id


def check_cluster_ref(
    problems: Problems, provider: clouds.Provider | None, ref: ClusterRef, at: tuple[str, ...] = ()
) -> None:
    """provider None: the account is unknown, so only the provider-neutral rules apply."""
    pattern = provider.region_pattern if provider else clouds.REGION
    if not pattern.fullmatch(ref.region):
        example = provider.region_example if provider else clouds.REGION_EXAMPLE
        problems.add([*at, "region"], f"region must be {example}")
    if (why := cloud_name_problem(ref.cluster_name)) is not None:
        problems.add([*at, "clusterName"], f"clusterName {why}")
    if provider is not None and provider.grant_by_resource_group:
        if not ref.resource_group:
            problems.add([*at, "resourceGroup"], f"resourceGroup is required for {provider.name}")
        elif (why := cloud_name_problem(ref.resource_group)) is not None:
            problems.add([*at, "resourceGroup"], f"resourceGroup {why}")
    elif provider is not None and ref.resource_group is not None:
        problems.add([*at, "resourceGroup"], "resourceGroup applies to AZURE only")


async def _grant_target(unit: Unit, viewer: Viewer, ref: ClusterRef) -> tuple[CloudAccount, str]:
    """The account and grant key a ClusterAccessInput names, with every fault at once."""
    account = await owned.by_id(unit.session, CloudAccount, viewer.org_id, ref.cloud_account_id)
    problems = Problems("input")
    if account is None:
        problems.add(["cloudAccountId"], "no such cloud account", "NOT_FOUND")
    descriptor = clouds.provider(account.provider) if account else None
    check_cluster_ref(problems, descriptor, ref)
    problems.raise_if_any()
    assert account is not None and descriptor is not None
    return account, descriptor.grant_key(ref.region, ref.cluster_name, ref.resource_group)


def _location(ref: ClusterRef) -> ClusterLocation:
    return ClusterLocation(ref.region, ref.cluster_name, ref.resource_group)


async def grant_target(
    unit: Unit, viewer: Viewer, secrets: SecretBox, ref: ClusterRef
) -> clouds.CloudTarget:
    """Every check grantClusterAccess makes before it asks the cloud for the cluster."""
    viewer.require("cloudaccount:update")
    account, _ = await _grant_target(unit, viewer, ref)
    return clouds.CloudTarget(
        account.provider, secrets.open(account.credentials_ciphertext), _location(ref)
    )


async def require_cluster(
    target: clouds.CloudTarget, field: list[str], deny: tuple[IPNetwork, ...]
) -> CloudCluster:
    """The cluster as the cloud describes it: NOT_FOUND when it has none, PROVIDER_ERROR
    when it cannot be asked."""
    assert target.location is not None
    adapter = adapter_for(target.provider, deny)
    try:
        found = await adapter.describe(target.credentials, target.location)
    except ProviderError as failed:
        raise UserErrors.one(field, failed.reason, "PROVIDER_ERROR") from failed
    if found is None:
        where = target.location.resource_group or target.location.region
        raise UserErrors.one(
            field,
            f"the account sees no cluster {target.location.name} in {where}",
            "NOT_FOUND",
        )
    return found


async def grant_access(unit: Unit, viewer: Viewer, ref: ClusterRef) -> ClusterGrant:
    viewer.require("cloudaccount:update")
    account, key = await _grant_target(unit, viewer, ref)
    existing = await account_rows.grant(unit.session, account.id, key)
    if existing is not None:
        return existing  # granting twice is idempotent
    grant = ClusterGrant(
        id=new_id("grant"),
        cloud_account_id=account.id,
        cluster_key=key,
        region=ref.region,
        cluster_name=ref.cluster_name,
        resource_group=ref.resource_group,
        granted_at=unit.now,
    )
    await owned.add(unit.session, grant)
    return grant


async def revoke_access(
    unit: Unit, viewer: Viewer, ref: ClusterRef
) -> tuple[ClusterGrant, list[str]]:
    """Removes the grant; the ids of the spaces on that cluster, whose credentials go stale."""
    viewer.require("cloudaccount:update")
    account, key = await _grant_target(unit, viewer, ref)
    grant = await account_rows.grant(unit.session, account.id, key)
    if grant is None:
        raise UserErrors.one(
            ["input", "clusterName"], "this account has no access to that cluster", "NOT_FOUND"
        )
    await owned.remove(unit.session, grant)
    descriptor = clouds.provider(account.provider)
    spaces = await account_rows.live_spaces_of_account(unit.session, account.id)
    return grant, [s.id for s in spaces if descriptor.grant_key_of(public_config(s)) == key]


@dataclass(frozen=True)
class Discovered:
    """A cluster the cloud reports, with what this org has made of it."""

    cluster: CloudCluster
    access_granted: bool
    space: Space | None


@dataclass(frozen=True)
class DiscoveryScope:
    """What discovery needs from the database, read before the cloud is asked."""

    target: clouds.CloudTarget
    grant_keys: frozenset[str]
    spaces_by_key: dict[str, Space]


async def discovery_scope(
    unit: Unit, secrets: SecretBox, account: CloudAccountRow, region: str | None
) -> DiscoveryScope:
    descriptor = clouds.provider(account.provider)
    if region is not None and not descriptor.region_pattern.fullmatch(region):
        raise ApiError("BAD_USER_INPUT", f"region must be {descriptor.region_example}")
    grants = await account_rows.grants_of_accounts(unit.session, [account.id])
    spaces = await account_rows.live_spaces_of_account(unit.session, account.id)
    return DiscoveryScope(
        target=clouds.CloudTarget(account.provider, secrets.open(account.credentials_ciphertext)),
        grant_keys=frozenset(grant.cluster_key for grant in grants),
        spaces_by_key={descriptor.grant_key_of(public_config(space)): space for space in spaces},
    )


async def discover(
    scope: DiscoveryScope, region: str | None, deny: tuple[IPNetwork, ...]
) -> list[Discovered]:
    """Live discovery: a PROVIDER_ERROR (ApiError) when the cloud cannot be asked."""
    descriptor = clouds.provider(scope.target.provider)
    adapter = adapter_for(scope.target.provider, deny)
    try:
        found = await adapter.clusters(scope.target.credentials, region)
    except ProviderError as failed:
        raise ApiError("PROVIDER_ERROR", failed.reason) from failed
    listed = []
    for cluster in found:
        key = descriptor.grant_key(cluster.region, cluster.name, cluster.resource_group)
        listed.append(Discovered(cluster, key in scope.grant_keys, scope.spaces_by_key.get(key)))
    return listed
