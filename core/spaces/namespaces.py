"""Namespaces live on the cluster: listed and created through a freshly minted credential.

Nothing about them is stored. Ours carry the managed-by label, which is how a
listing tells them apart. A cluster that cannot be reached is a PROVIDER_ERROR
with the reason words of `providers.errors`: a top-level error on the listing
field, a userError on `createNamespace`.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from datetime import datetime

from core.common.errors import ApiError, Problems, UserErrors
from core.common.live_calls import LiveCallBudget
from core.common.names import dns_label_problem
from core.common.rbac import Viewer
from core.common.services import Services, Unit
from core.spaces.clusters import credentials_for
from core.spaces.statuses import SpaceStatus
from db import owned
from db.records import SpaceRow
from db.tables import Space
from providers import kube
from providers.errors import AccessRevoked, PermanentError, ProviderError

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGER = "spacedock"
DEREGISTERED = "cluster access revoked: the space is deregistered"


@dataclass(frozen=True)
class Namespace:
    name: str
    managed: bool
    created_at: datetime | None
    space: SpaceRow


def namespace_id(space_id: str, name: str) -> str:
    """Namespaces live on the cluster, not in our database: their id is derived from the
    space and the name, so it stays the same across reads (client caches key on it)."""
    return "ns_" + base64.urlsafe_b64encode(f"{space_id}/{name}".encode()).decode().rstrip("=")


def _ours(found: kube.ClusterNamespace, space: SpaceRow) -> Namespace:
    return Namespace(
        name=found.name,
        managed=found.labels.get(MANAGED_BY_LABEL) == MANAGER,
        created_at=found.created_at,
        space=space,
    )


async def list_namespaces(
    services: Services, viewer: Viewer, space: SpaceRow, budget: LiveCallBudget
) -> list[Namespace]:
    """Every namespace on the space's cluster, by name; ApiError PROVIDER_ERROR when the
    cluster cannot be asked (or the operation's live-call budget is spent)."""
    viewer.require_to_read("namespace:view")
    try:
        if space.deregistered_at is not None:
            raise PermanentError(DEREGISTERED)
        # In a list, each space's field waits on its own cluster only, concurrently: one
        # slow cluster nulls its own field and does not hold up the page. Waiting for a
        # live-call slot counts against that time too.
        async with asyncio.timeout(services.live_field_timeout_s), budget.call():
            credentials = await credentials_for(services, space)
            found = await kube.list_namespaces(
                credentials,
                deny=services.deny_networks,
                # A 429 whose wait would outlast the field is answered at once, with its wait.
                timeout_s=services.live_field_timeout_s,
                max_body_bytes=services.cluster_max_body_bytes,
                max_items=budget.items_left,  # no page read past what the budget refuses
            )
            budget.take_items(len(found), "namespaces")
    except AccessRevoked as revoked:
        raise ApiError("PRECONDITION_FAILED", revoked.reason) from revoked
    except ProviderError as failed:
        raise ApiError("PROVIDER_ERROR", failed.reason) from failed
    except TimeoutError:
        raise ApiError(
            "PROVIDER_ERROR",
            f"timeout: no answer from the cluster within {services.live_field_timeout_s:g}s "
            "(SPACEDOCK_LIVE_FIELD_TIMEOUT_S)",
        ) from None
    return sorted((_ours(namespace, space) for namespace in found), key=lambda n: n.name)


@dataclass(frozen=True)
class CreationTarget:
    """A space checked to take a new namespace of this name."""

    space: Space
    name: str


async def creation_target(
    unit: Unit, services: Services, viewer: Viewer, space_id: str, name: str
) -> CreationTarget:
    """Every check createNamespace makes before it calls the cluster, in the request's
    transaction; minting the credential and the cluster call come after it ends, so no
    connection waits on a cloud or a cluster."""
    viewer.require("namespace:create")
    problems = Problems("input")
    if (why := dns_label_problem(name)) is not None:
        problems.add(["name"], f"name {why}")
    space = await owned.by_id(unit.session, Space, viewer.org_id, space_id)
    if space is None:
        problems.add(["spaceId"], "no such space", "NOT_FOUND")
    problems.raise_if_any()
    assert space is not None
    if space.deregistered_at is not None:
        raise UserErrors.one(
            ["input", "spaceId"], "the space is deregistered", "PRECONDITION_FAILED"
        )
    status, why_status = services.health.status_of(space, unit.now)
    if status == SpaceStatus.INACTIVE:
        because = why_status or "its probes fail"
        raise UserErrors.one(
            ["input", "spaceId"],
            f"the space is INACTIVE ({because}); namespaces are created on reachable spaces only",
            "PRECONDITION_FAILED",
        )
    return CreationTarget(space, name)


async def create_on_cluster(
    services: Services, target: CreationTarget, budget: LiveCallBudget
) -> Namespace:
    """Creates the namespace with our label; CONFLICT or PROVIDER_ERROR as userErrors."""
    try:
        async with budget.call():
            credentials = await credentials_for(services, target.space)
            created = await kube.create_namespace(
                credentials,
                target.name,
                {MANAGED_BY_LABEL: MANAGER},
                deny=services.deny_networks,
                max_body_bytes=services.cluster_max_body_bytes,
            )
    except kube.AlreadyExists as exists:
        raise UserErrors.one(
            ["input", "name"],
            f"a namespace named {target.name!r} already exists on the cluster",
            "CONFLICT",
        ) from exists
    except AccessRevoked as revoked:
        raise UserErrors.one(
            ["input", "spaceId"], revoked.reason, "PRECONDITION_FAILED"
        ) from revoked
    except ProviderError as failed:
        raise UserErrors.one(None, failed.reason, "PROVIDER_ERROR") from failed
    return _ours(created, target.space)
