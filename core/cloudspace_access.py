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

from core import vclusters as vc
from core.services import Services
from db.tables import CloudSpace
from providers import host as host_api
from providers.credentials import ClusterCredentials
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


def target_of(row: CloudSpace) -> vc.Target:
    return vc.Target(id=row.id, name=row.name, cpu=row.cpu, memory_mib=row.memory_mib)


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
    access: vc.AdminAccess

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
        host_api.path_of("v1", "Secret", target.namespace, vc.admin_secret_name(target.name))
    )
    if secret is None:
        raise TemporaryError(
            f"the vCluster's Secret {vc.admin_secret_name(target.name)} is not in "
            f"{target.namespace} yet"
        )
    try:
        access = vc.admin_access(secret)
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
    text: str
    expires_at: datetime


async def tenant_kubeconfig(
    services: Services, host: ClusterCredentials, row: CloudSpace
) -> MintedKubeconfig:
    """A fresh kubeconfig of the tenant account; ProviderError when a cluster cannot give it."""
    target = target_of(row)
    ttl = services.cloudspaces.kubeconfig_ttl_s
    async with connect(services, host) as kube:
        reach = await admin_reach(services, kube, target)
    path = (
        host_api.path_of("v1", "ServiceAccount", vc.TENANT_ACCOUNT_NAMESPACE, vc.TENANT_ACCOUNT)
        + "/token"
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": ttl},
    }
    async with connect(services, reach.credentials) as vcluster:
        granted = await vcluster.create(path, request)
    status = granted.get("status") or {}
    token = status.get("token")
    if not isinstance(token, str) or not token:
        raise PermanentError("HTTP 200 from the vCluster: the TokenRequest gave no token")
    expires_at = datetime.now(UTC) + timedelta(seconds=ttl)
    stated = status.get("expirationTimestamp")
    if isinstance(stated, str):
        with contextlib.suppress(ValueError):  # keep our own reckoning
            expires_at = datetime.fromisoformat(stated.replace("Z", "+00:00")).astimezone(UTC)
    return MintedKubeconfig(
        vc.tenant_kubeconfig(target.name, reach.address, reach.access.ca_pem, token), expires_at
    )
