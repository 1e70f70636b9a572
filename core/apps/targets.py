"""Where an app is delivered, whether it can be now, and the credential to get there.

A target is one of a CloudSpace's vClusters, by name (reached with that vCluster's admin
access, through core.cloudspaces.host_access as the reconciler reaches it), or an
environment's namespace on its space (reached with the space's own credential). Its state
decides what a revision does (seed 001):

* AVAILABLE: the CloudSpace and its vCluster are READY, or the space is ACTIVE: deliver.
* COMING_UP: a CloudSpace or vCluster still being made, or a space not probed yet: wait,
  no try spent.
* UNAVAILABLE: the space is INACTIVE (or held), the vCluster (or its CloudSpace) FAILED: a
  try is spent.
* GONE: the space is deregistered, the CloudSpace deleted or being deleted, the vCluster
  removed or being removed: dead-lettered at once, and the app is gated with the reason.

A vCluster's own phase decides once its CloudSpace has been READY: a second vCluster
failing (which shows on the CloudSpace) does not stop apps in the first.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from core.cloudspaces.host_access import AdminReach, admin_reach, connect, target_of
from core.cloudspaces.vcluster_rules import REMOVAL_STEPS
from core.common.services import Services
from core.spaces.clusters import credentials_for
from core.spaces.environments import SPACE_DEREGISTERED
from core.spaces.statuses import CloudSpacePhase, SpaceStatus
from db import owned
from db import vclusters as vcluster_rows
from db.app_tables import App
from db.cloudspace_tables import CloudSpace
from db.tables import Environment, Space
from db.vcluster_tables import VCluster
from providers.cluster_credentials import ClusterCredentials

# A vCluster's admin access is read from the host again after this long (rotations show).
REACH_KEPT_S = 60.0
CLOUDSPACE_DELETED = "CloudSpace deleted"
CLOUDSPACE_DELETING = "CloudSpace being deleted"
ENVIRONMENT_GONE = "Environment deleted"
VCLUSTER_REMOVED = "vCluster {name} removed"
VCLUSTER_REMOVING = "vCluster {name} being removed"


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
    vcluster: VCluster | None = None  # the CloudSpace's vCluster the app is delivered into

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
    vclusters: dict[tuple[str, str], VCluster] = field(default_factory=dict)  # (cs id, name)
    environments: dict[str, Environment] = field(default_factory=dict)
    spaces: dict[str, Space] = field(default_factory=dict)


async def read_world(session: AsyncSession, apps: Iterable[App]) -> World:
    """The CloudSpaces (and their vClusters), environments and spaces of these apps: four
    statements at most."""
    apps = list(apps)
    world = World()
    cloud_space_ids = {a.cloud_space_id for a in apps if a.cloud_space_id is not None}
    environment_ids = {a.environment_id for a in apps if a.environment_id is not None}
    if cloud_space_ids:
        rows = await owned.by_ids(session, CloudSpace, None, sorted(cloud_space_ids))
        world.cloud_spaces = {row.id: row for row in rows}
        found_vclusters = await vcluster_rows.of_cloud_spaces(session, sorted(cloud_space_ids))
        world.vclusters = {(v.cloud_space_id, v.name): v for v in found_vclusters}
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
        return _in_cloud_space(app, world, key)
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


def _in_cloud_space(app: App, world: World, key: str) -> Target:
    assert app.cloud_space_id is not None
    row = world.cloud_spaces.get(app.cloud_space_id)
    if row is None:
        return Target(TargetState.GONE, CLOUDSPACE_DELETED, key)
    host = world.spaces.get(row.host_space_id)
    if row.phase == CloudSpacePhase.DELETING or host is None:
        return Target(TargetState.GONE, CLOUDSPACE_DELETING, key)
    name = app.vcluster or row.name
    vcluster = world.vclusters.get((row.id, name))
    if vcluster is None:
        return Target(TargetState.GONE, VCLUSTER_REMOVED.format(name=name), key)
    if vcluster.step in REMOVAL_STEPS:
        return Target(TargetState.GONE, VCLUSTER_REMOVING.format(name=name), key)
    why = f"CloudSpace {row.name} is {row.phase}"
    if row.phase not in (CloudSpacePhase.READY, CloudSpacePhase.FAILED):
        return Target(TargetState.COMING_UP, why, key, host, row, vcluster)
    if vcluster.phase == CloudSpacePhase.READY:
        return Target(TargetState.AVAILABLE, None, key, host, row, vcluster)
    if vcluster.phase == CloudSpacePhase.FAILED:
        why = f"vCluster {name} of CloudSpace {row.name} is FAILED: {vcluster.message}"
        return Target(TargetState.UNAVAILABLE, why, key, host, row, vcluster)
    if row.phase == CloudSpacePhase.FAILED:
        return Target(TargetState.UNAVAILABLE, f"{why}: {row.message}", key, host, row, vcluster)
    why = f"vCluster {name} of CloudSpace {row.name} is {vcluster.phase}"
    return Target(TargetState.COMING_UP, why, key, host, row, vcluster)


class Reaches:
    """Credentials to a target's cluster: the space's own (cached by the credential cache),
    or a vCluster's admin access read from its host and kept REACH_KEPT_S per (CloudSpace,
    vCluster) (never stored)."""

    def __init__(self, services: Services, timeout_s: float) -> None:
        self.services = services
        self.timeout_s = timeout_s
        self._vclusters: dict[tuple[str, str], tuple[float, AdminReach]] = {}

    async def credentials(self, target: Target) -> ClusterCredentials:
        """ProviderError when the cluster cannot be reached or its access read."""
        assert target.space is not None, "only targets with a space are reached"
        host = await credentials_for(self.services, target.space)
        if target.cloud_space is None:
            return host
        assert target.vcluster is not None, "a CloudSpace's target names its vCluster"
        # By the vCluster's id: one removed and added again under its name is another.
        key = (target.cloud_space.id, target.vcluster.id)
        kept = self._vclusters.get(key)
        if kept is not None and time.monotonic() - kept[0] < REACH_KEPT_S:
            return kept[1].credentials
        async with connect(self.services, host, timeout_s=self.timeout_s) as kube:
            reach = await admin_reach(
                self.services, kube, target_of(target.cloud_space, target.vcluster)
            )
        self._vclusters[key] = (time.monotonic(), reach)
        return reach.credentials

    def forget(self, target: Target) -> None:
        """After a failed call: the vCluster's access is read again next time."""
        if target.cloud_space is not None and target.vcluster is not None:
            self._vclusters.pop((target.cloud_space.id, target.vcluster.id), None)
