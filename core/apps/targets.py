"""Where an app is delivered, whether it can be now, and the credential to get there.

A target is a CloudSpace's vCluster (reached with the vCluster's admin access, through
core.cloudspaces.host_access as the reconciler reaches it) or an environment's namespace on
its space (reached with the space's own credential). Its state decides what a revision
does (seed 001):

* AVAILABLE: the CloudSpace is READY, or the space is ACTIVE: deliver.
* COMING_UP: a CloudSpace still being made, or a space not probed yet: wait, no try spent.
* UNAVAILABLE: the space is INACTIVE (or held), the CloudSpace FAILED: a try is spent.
* GONE: the space is deregistered, the CloudSpace deleted or being deleted: dead-lettered
  at once, and the app is gated with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from core.cloudspaces.host_access import AdminReach, admin_reach, connect, target_of
from core.common.services import Services
from core.spaces.clusters import credentials_for
from core.spaces.environments import SPACE_DEREGISTERED
from core.spaces.statuses import CloudSpacePhase, SpaceStatus
from db import owned
from db.app_tables import App
from db.cloudspace_tables import CloudSpace
from db.tables import Environment, Space
from providers.cluster_credentials import ClusterCredentials

# A vCluster's admin access is read from the host again after this long (rotations show).
REACH_KEPT_S = 60.0
CLOUDSPACE_DELETED = "CloudSpace deleted"
CLOUDSPACE_DELETING = "CloudSpace being deleted"
ENVIRONMENT_GONE = "Environment deleted"


class TargetState(StrEnum):
    AVAILABLE = "AVAILABLE"
    COMING_UP = "COMING_UP"
    UNAVAILABLE = "UNAVAILABLE"
    GONE = "GONE"


@dataclass(frozen=True)
class Target:
    state: TargetState
    why: str | None  # for every state but AVAILABLE: what keeps the app from its target
    cluster_key: str  # apps with one key share one cluster (and its bounds)
    space: Space | None = None  # the space to reach (an environment's, or the host)
    cloud_space: CloudSpace | None = None

    @property
    def gate(self) -> str | None:
        return None if self.state is TargetState.AVAILABLE else self.why


def cluster_key(app: App) -> str:
    if app.cloud_space_id is not None:
        return f"cs:{app.cloud_space_id}/{app.vcluster}"
    return f"env:{app.environment_id}"


@dataclass
class World:
    """The rows an app's target is made of, read for a batch of apps at once."""

    cloud_spaces: dict[str, CloudSpace] = field(default_factory=dict)
    environments: dict[str, Environment] = field(default_factory=dict)
    spaces: dict[str, Space] = field(default_factory=dict)


async def read_world(session: AsyncSession, apps: Iterable[App]) -> World:
    """The CloudSpaces, environments and spaces of these apps: three statements at most."""
    apps = list(apps)
    world = World()
    cloud_space_ids = {a.cloud_space_id for a in apps if a.cloud_space_id is not None}
    environment_ids = {a.environment_id for a in apps if a.environment_id is not None}
    if cloud_space_ids:
        rows = await owned.by_ids(session, CloudSpace, None, sorted(cloud_space_ids))
        world.cloud_spaces = {row.id: row for row in rows}
    if environment_ids:
        found = await owned.by_ids(session, Environment, None, sorted(environment_ids))
        world.environments = {row.id: row for row in found}
    space_ids = {row.host_space_id for row in world.cloud_spaces.values()} | {
        row.space_id for row in world.environments.values()
    }
    if space_ids:
        spaces = await owned.by_ids(session, Space, None, sorted(space_ids))
        world.spaces = {row.id: row for row in spaces}
    return world


def target_of_app(services: Services, app: App, world: World, now: datetime) -> Target:
    key = cluster_key(app)
    if app.cloud_space_id is not None:
        row = world.cloud_spaces.get(app.cloud_space_id)
        if row is None:
            return Target(TargetState.GONE, CLOUDSPACE_DELETED, key)
        host = world.spaces.get(row.host_space_id)
        if row.phase == CloudSpacePhase.DELETING or host is None:
            return Target(TargetState.GONE, CLOUDSPACE_DELETING, key)
        if row.phase == CloudSpacePhase.READY:
            return Target(TargetState.AVAILABLE, None, key, host, row)
        why = f"CloudSpace {row.name} is {row.phase}"
        if row.phase == CloudSpacePhase.FAILED:
            return Target(TargetState.UNAVAILABLE, f"{why}: {row.message}", key, host, row)
        return Target(TargetState.COMING_UP, why, key, host, row)
    environment = world.environments.get(app.environment_id or "")
    if environment is None:
        return Target(TargetState.GONE, ENVIRONMENT_GONE, key)
    space = world.spaces.get(environment.space_id)
    if space is None or space.deregistered_at is not None:
        return Target(TargetState.GONE, SPACE_DEREGISTERED, f"spc:{environment.space_id}")
    key = f"spc:{space.id}"
    status, said = services.health.status_of(space, now)
    if status == SpaceStatus.ACTIVE:
        return Target(TargetState.AVAILABLE, None, key, space)
    because = f" ({said})" if said else ""
    if status == SpaceStatus.INACTIVE:
        return Target(
            TargetState.UNAVAILABLE, f"Space {space.name} is INACTIVE{because}", key, space
        )
    return Target(TargetState.COMING_UP, f"Space {space.name} is UNKNOWN{because}", key, space)


class Reaches:
    """Credentials to a target's cluster: the space's own (cached by the credential cache),
    or a vCluster's admin access read from its host and kept REACH_KEPT_S (never stored)."""

    def __init__(self, services: Services, timeout_s: float) -> None:
        self.services = services
        self.timeout_s = timeout_s
        self._vclusters: dict[str, tuple[float, AdminReach]] = {}

    async def credentials(self, target: Target) -> ClusterCredentials:
        """ProviderError when the cluster cannot be reached or its access read."""
        assert target.space is not None, "only targets with a space are reached"
        host = await credentials_for(self.services, target.space)
        if target.cloud_space is None:
            return host
        key = target.cloud_space.id
        kept = self._vclusters.get(key)
        if kept is not None and time.monotonic() - kept[0] < REACH_KEPT_S:
            return kept[1].credentials
        async with connect(self.services, host, timeout_s=self.timeout_s) as kube:
            reach = await admin_reach(self.services, kube, target_of(target.cloud_space))
        self._vclusters[key] = (time.monotonic(), reach)
        return reach.credentials

    def forget(self, target: Target) -> None:
        """After a failed call: the vCluster's access is read again next time."""
        if target.cloud_space is not None:
            self._vclusters.pop(target.cloud_space.id, None)


def vcluster_names(row: CloudSpace) -> Sequence[str]:
    """The vClusters of a CloudSpace apps can run in: its first, named like it (delivering
    into the others addVCluster adds is not built yet: Reaches reads the first's access)."""
    return (row.name,)
