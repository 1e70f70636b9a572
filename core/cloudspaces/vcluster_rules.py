"""Several vClusters per CloudSpace (issue 22 item 4): addVCluster and removeVCluster, the
names a vCluster may take, when it is up, and its kubeconfigs.

Each vCluster is one Helm release of the vCluster chart in its CloudSpace's host
namespace, sharing the CloudSpace's quota (the admission webhook counts every vCluster's
pods). The CloudSpace's reconciler brings each one through the vCluster steps of
core.cloudspaces.lifecycle on its own (core.cloudspaces.vcluster_steps).

A CloudSpace keeps at least one vCluster: removing its last is refused (deleting the
CloudSpace is how everything goes), so a READY CloudSpace always has a cluster to reach
and apps a place to run.
"""

from __future__ import annotations

from enum import StrEnum

from core.cloudspaces import lifecycle as rules
from core.cloudspaces.capacity import Capacity, check_capacity
from core.cloudspaces.host_access import MintedKubeconfig, tenant_kubeconfig
from core.cloudspaces.kubeconfigs import ExecPlugin
from core.cloudspaces.settings import MAX_VCLUSTER_NAME
from core.common.errors import ApiError, Problems, UserErrorCode, UserErrors
from core.common.live_calls import LiveCallBudget
from core.common.names import dns_1035_label_problem
from core.common.rbac import Viewer
from core.common.services import Services, Unit
from core.spaces.clusters import credentials_for
from core.spaces.statuses import CloudSpacePhase
from db import cloudspaces as cloudspace_rows
from db import owned
from db import vclusters as vcluster_rows
from db.cloudspace_tables import CloudSpace
from db.tables import Space
from db.vcluster_tables import VCluster
from providers.errors import ProviderError


class Removal(StrEnum):
    """A vCluster's steps after removeVCluster, stored in `vclusters.step`."""

    DELETE = "remove-vcluster"  # its Flux objects, release and kubeconfig copy deleted
    GONE = "vcluster-gone"  # waits for Helm's uninstall, then the row goes


REMOVAL_STEPS = frozenset(Removal)

# The names the vCluster chart (0.36) derives from a release besides `vc-<release>`: two
# releases in one namespace must not derive one name, so a vCluster may not be named like
# another's derived name (`config-a` beside `a` would both own the Secret vc-config-a).
CHART_PREFIXES = ("config-", "workload-", "work-", "cp-", "kube-dns-", "snapshot-")
CHART_SUFFIXES = ("-headless",)


def clashes(name: str, other: str) -> bool:
    """Whether releases `name` and `other` in one namespace would own a name in common."""
    for first, second in ((name, other), (other, name)):
        if any(first == prefix + second for prefix in CHART_PREFIXES):
            return True
        if any(first == second + suffix for suffix in CHART_SUFFIXES):
            return True
    return False


def name_problem(name: str, taken: list[str]) -> tuple[str, UserErrorCode] | None:
    """(message, code) when `name` cannot name a new vCluster beside `taken`."""
    # The name becomes the vCluster's Helm release, Services and StatefulSet.
    if (why := dns_1035_label_problem(name, MAX_VCLUSTER_NAME)) is not None:
        return f"name {why}", "INVALID"
    if name in taken:
        return f"the CloudSpace already has a vCluster named {name!r}", "CONFLICT"
    for other in taken:
        if clashes(name, other):
            return (
                f"name {name!r} would share names of the vCluster chart's objects with "
                f"vCluster {other!r} in the same host namespace; choose another",
                "CONFLICT",
            )
    return None


def up(cloud_space: CloudSpace, vcluster: VCluster) -> bool:
    """Its API answers and its tenant account exists (whatever came after), and neither it
    nor its CloudSpace is being deleted: kubeconfigs can be minted."""
    return (
        cloud_space.phase != CloudSpacePhase.DELETING
        and vcluster.step in rules.ORDER
        and rules.ORDER[vcluster.step] > rules.ORDER[rules.Step.TENANT_ACCOUNT]
    )


def _wake(unit: Unit, cloud_space: CloudSpace) -> None:
    """Its reconciler runs now (a worker holding it sees the change on its next pass)."""
    cloud_space.next_attempt_at = unit.now
    unit.session.add(cloud_space)
    unit.reconcile_soon = True


async def _cloud_space_for_change(
    unit: Unit, viewer: Viewer, problems: Problems, cloud_space_id: str, field: str
) -> CloudSpace | None:
    row = await owned.by_id(unit.session, CloudSpace, viewer.org_id, cloud_space_id)
    if row is None:
        problems.add([field], "no such CloudSpace", "NOT_FOUND")
        return None
    locked = await cloudspace_rows.lock(unit.session, row.id)
    if locked is None:
        problems.add([field], "no such CloudSpace", "NOT_FOUND")
    elif locked.phase == CloudSpacePhase.DELETING:
        problems.add([field], "the CloudSpace is being deleted", "PRECONDITION_FAILED")
    return locked


async def addition_host(unit: Unit, viewer: Viewer, cloud_space_id: str) -> Space:
    """The host a vCluster would be added on, its capacity to be read live before the
    addition's own transaction; NOT_FOUND for a CloudSpace the caller cannot see."""
    viewer.require("cloudspace:create")
    row = await owned.by_id(unit.session, CloudSpace, viewer.org_id, cloud_space_id)
    host = (
        None if row is None else await cloudspace_rows.host_space(unit.session, row.host_space_id)
    )
    if host is None:
        raise UserErrors.one(["input", "cloudSpaceId"], "no such CloudSpace", "NOT_FOUND")
    return host


async def add(
    unit: Unit,
    services: Services,
    viewer: Viewer,
    cloud_space_id: str,
    name: str,
    capacity: Capacity,
) -> VCluster:
    """addVCluster: a new vCluster, PENDING, in the CloudSpace's host namespace, when the
    host has room for its control plane and Flux beside every other CloudSpace's."""
    viewer.require("cloudspace:create")
    problems = Problems("input")
    cloud_space = await _cloud_space_for_change(
        unit, viewer, problems, cloud_space_id, "cloudSpaceId"
    )
    problems.raise_if_any()
    assert cloud_space is not None
    taken = [v.name for v in await vcluster_rows.of_cloud_space(unit.session, cloud_space.id)]
    if (problem := name_problem(name, taken)) is not None:
        raise UserErrors.one(["input", "name"], problem[0], problem[1])
    await check_capacity(
        unit,
        services,
        problems,
        cloud_space.host_space_id,
        cloud_space.id,
        cloud_space.cpu,
        cloud_space.memory_mib,
        capacity,
        viewer.org_id,
        adding_vcluster=True,
    )
    problems.raise_if_any()
    row = rules.new_vcluster(unit, cloud_space, name)
    await vcluster_rows.add(unit.session, row)
    await rules.record_phase(unit, cloud_space, None, row.phase, None, vcluster_id=row.id)
    _wake(unit, cloud_space)
    return row


async def in_org(unit: Unit, viewer: Viewer, vcluster_id: str) -> VCluster:
    row = await owned.by_id(unit.session, VCluster, viewer.org_id, vcluster_id)
    if row is None:
        raise UserErrors.one(["input", "id"], "no such vCluster", "NOT_FOUND")
    return row


async def remove(unit: Unit, viewer: Viewer, vcluster_id: str, confirm_name: str) -> VCluster:
    """removeVCluster: DELETING; the reconciler removes its release and objects, then the
    row (DELETED is its last event). Refused for the CloudSpace's last vCluster."""
    viewer.require("cloudspace:delete")
    row = await in_org(unit, viewer, vcluster_id)
    if confirm_name != row.name:
        raise UserErrors.one(["input", "confirmName"], "confirmName must equal the vCluster's name")
    problems = Problems("input")
    cloud_space = await _cloud_space_for_change(unit, viewer, problems, row.cloud_space_id, "id")
    problems.raise_if_any()
    assert cloud_space is not None
    if row.step in REMOVAL_STEPS:
        return row  # already on its way out
    others = [
        v
        for v in await vcluster_rows.of_cloud_space(unit.session, cloud_space.id)
        if v.id != row.id and v.step not in REMOVAL_STEPS
    ]
    if not others:
        raise UserErrors.one(
            ["input", "id"],
            "a CloudSpace keeps at least one vCluster; delete the CloudSpace to remove its last",
            "PRECONDITION_FAILED",
        )
    previous = row.phase
    row.step, row.phase, row.message = Removal.DELETE, CloudSpacePhase.DELETING, None
    unit.session.add(row)
    await unit.session.flush()
    await rules.record_phase(
        unit, cloud_space, previous, CloudSpacePhase.DELETING, None, vcluster_id=row.id
    )
    _wake(unit, cloud_space)
    return row


async def kubeconfig(
    services: Services,
    viewer: Viewer,
    cloud_space: CloudSpace,
    vcluster: VCluster,
    budget: LiveCallBudget,
    plugin: ExecPlugin | None = None,
) -> MintedKubeconfig | None:
    """A tenant kubeconfig of the vCluster; needs cloudspace:kubeconfig (ApiError
    FORBIDDEN)."""
    viewer.require_to_read("cloudspace:kubeconfig")
    return await mint_kubeconfig(services, cloud_space, vcluster, budget, plugin)


async def mint_kubeconfig(
    services: Services,
    cloud_space: CloudSpace,
    vcluster: VCluster,
    budget: LiveCallBudget,
    plugin: ExecPlugin | None = None,
) -> MintedKubeconfig | None:
    """A fresh tenant kubeconfig (with `plugin`, in the exec plugin form: nothing minted);
    None while the vCluster is not up. Its cluster calls count as one live call of the
    operation (`core.common.live_calls`), so one query cannot mint for hundreds of
    vClusters. A cluster that cannot give one, or a spent budget, is an ApiError
    PROVIDER_ERROR."""
    if not up(cloud_space, vcluster):
        return None
    async with services.read() as session:
        host = await cloudspace_rows.host_space(session, cloud_space.host_space_id)
    if host is None:
        return None
    try:
        async with budget.call():
            credentials = await credentials_for(services, host)
            return await tenant_kubeconfig(services, credentials, cloud_space, vcluster, plugin)
    except ProviderError as failed:
        raise ApiError("PROVIDER_ERROR", failed.reason) from failed
