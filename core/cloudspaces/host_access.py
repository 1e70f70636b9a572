"""Reaching a CloudSpace's vCluster: its address, spacedock's admin access (read from the
host's `vc-<name>` Secret when needed, never stored), and the tenant kubeconfigs.

The admin certificate and key stay in memory for one call scope. A tenant kubeconfig
carries a TokenRequest token of `spacedock-tenant` that expires after
SPACEDOCK_KUBECONFIG_TTL_S, and the vCluster's CA; never the certificate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from core.cloudspaces import kubeconfigs
from core.cloudspaces import settings as cloudspace_settings
from core.cloudspaces import vclusters as vc
from core.common.services import Services
from db.cloudspace_tables import CloudSpace
from db.vcluster_tables import VCluster
from providers import host as host_api
from providers.cluster_credentials import ClusterCredentials
from providers.errors import PermanentError, TemporaryError
from providers.kube import DEFAULT_TIMEOUT_S


def connect(
    services: Services,
    credentials: ClusterCredentials,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_call: Callable[[], None] | None = None,
) -> AbstractAsyncContextManager[host_api.Kube]:
    """Calls on a host or a vCluster, within the deny list and the answer-size bound."""
    return host_api.connect(
        credentials,
        deny=services.deny_networks,
        timeout_s=timeout_s,
        max_body_bytes=services.cluster_max_body_bytes,
        on_call=on_call,
    )


def target_of(row: CloudSpace, vcluster: VCluster | None = None, vclusters: int = 1) -> vc.Target:
    """The CloudSpace's `vcluster` (None: the one named like it) as its manifests need it,
    beside `vclusters` in all in its host namespace."""
    name = row.name if vcluster is None else vcluster.name
    return vc.Target(
        id=row.id,
        name=name,
        cpu=row.cpu,
        memory_mib=row.memory_mib,
        vclusters=vclusters,
        named_like_cloud_space=name == row.name,
    )


async def address(services: Services, kube: host_api.Kube, target: vc.Target) -> str | None:
    """The vCluster's address: from SPACEDOCK_VCLUSTER_URL_TEMPLATE, else its Service's
    LoadBalancer; None while the LoadBalancer has none."""
    templated = vc.address_of(services.cloudspaces, target)
    if templated is not None:
        return templated
    service = await kube.get(host_api.path_of("v1", "Service", target.namespace, target.name))
    return None if service is None else vc.load_balancer_address(service)


@dataclass(frozen=True)
class AdminReach:
    address: str
    access: kubeconfigs.AdminAccess

    @property
    def credentials(self) -> ClusterCredentials:
        return ClusterCredentials(
            server=self.address,
            ca_pem=self.access.ca_pem,
            client_certificate_pem=self.access.client_certificate_pem,
            client_key_pem=self.access.client_key_pem,
        )


async def admin_reach(services: Services, kube: host_api.Kube, target: vc.Target) -> AdminReach:
    """Address and admin access of a vCluster whose Secret exists; TemporaryError otherwise."""
    secret = await kube.get(
        host_api.path_of(
            "v1", "Secret", target.namespace, cloudspace_settings.admin_secret_name(target.name)
        )
    )
    if secret is None:
        raise TemporaryError(
            f"the vCluster's Secret {cloudspace_settings.admin_secret_name(target.name)} is not in "
            f"{target.namespace} yet"
        )
    try:
        access = kubeconfigs.admin_access(secret)
    except ValueError as bad:
        raise PermanentError(f"the vCluster's Secret is unusable: {bad}") from None
    reached = await address(services, kube, target)
    if reached is None:
        raise TemporaryError(
            f"the vCluster's LoadBalancer Service {target.name} has no address yet"
        )
    return AdminReach(reached, access)


@dataclass(frozen=True)
class MintedKubeconfig:
    """A tenant kubeconfig; `token` and `expires_at` are None in the exec plugin form,
    whose tokens kubectl fetches itself."""

    text: str
    token: str | None
    expires_at: datetime | None


def expiry_if_minted_now(services: Services) -> datetime:
    """When the token of a kubeconfig minted now would expire (whole seconds)."""
    ttl = timedelta(seconds=services.cloudspaces.kubeconfig_ttl_s)
    return (datetime.now(UTC) + ttl).replace(microsecond=0)


async def tenant_kubeconfig(
    services: Services,
    host: ClusterCredentials,
    row: CloudSpace,
    vcluster: VCluster,
    plugin: kubeconfigs.ExecPlugin | None = None,
) -> MintedKubeconfig:
    """A kubeconfig of `vcluster`'s tenant account: with a fresh token, or (given
    `plugin`) with the exec plugin that fetches its own. ProviderError when a cluster
    cannot give it."""
    target = target_of(row, vcluster)
    async with connect(services, host) as kube:
        reach = await admin_reach(services, kube, target)
    if plugin is not None:
        user = kubeconfigs.exec_user(row.id, target.name, plugin)
        text = kubeconfigs.tenant_kubeconfig(
            row.id, target.name, reach.address, reach.access.ca_pem, user
        )
        return MintedKubeconfig(text, None, None)
    ttl = services.cloudspaces.kubeconfig_ttl_s
    path = (
        host_api.path_of(
            "v1",
            "ServiceAccount",
            cloudspace_settings.TENANT_ACCOUNT_NAMESPACE,
            cloudspace_settings.TENANT_ACCOUNT,
        )
        + "/token"
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": ttl},
    }
    async with connect(services, reach.credentials) as inside:
        granted = await inside.create(path, request)
    status = granted.get("status") or {}
    token = status.get("token")
    if not isinstance(token, str) or not token:
        raise PermanentError("HTTP 200 from the vCluster: the TokenRequest gave no token")
    expires_at = expiry_if_minted_now(services)
    stated = status.get("expirationTimestamp")
    if isinstance(stated, str):
        with contextlib.suppress(ValueError):  # keep our own reckoning
            expires_at = datetime.fromisoformat(stated.replace("Z", "+00:00")).astimezone(UTC)
    text = kubeconfigs.tenant_kubeconfig(
        row.id, target.name, reach.address, reach.access.ca_pem, {"token": token}
    )
    return MintedKubeconfig(text, token, expires_at)
