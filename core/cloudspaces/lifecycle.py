"""CloudSpaces: creation with strict quotas, quota changes, deletion, and the lifecycle's
steps and events (README "CloudSpaces"); an org's default CloudSpace is
core.cloudspaces.defaults.

A quota is checked against what the host can really give: the sum of its nodes'
allocatable, less what every other CloudSpace on it (of any org) was promised,
each with its control-plane allowance. That needs a call to the host, which is
made between two transactions: checks, then the call, then the write with the
sums read again. Refusals give the numbers and never another org's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any

from core.cloudspaces.capacity import Capacity, check_capacity, number_text
from core.cloudspaces.settings import MAX_VCLUSTER_NAME
from core.common.errors import Problems, UserErrors
from core.common.events import CLOUDSPACE_PHASE
from core.common.ids import new_id
from core.common.names import dns_1035_label_problem
from core.common.rbac import Viewer
from core.common.services import Services, Unit
from core.spaces.statuses import CloudSpacePhase
from db import cloudspaces as cloudspace_rows
from db import owned
from db import vclusters as vcluster_rows
from db.cloudspace_tables import CloudSpace, CloudSpaceEvent
from db.tables import Space
from db.vcluster_tables import VCluster


class Step(StrEnum):
    """The reconciler's steps, stored as these values in `cloud_spaces.step`."""

    BEGIN = "begin"
    CAPACITY = "capacity"
    HOST_NAMESPACE = "host-namespace"
    VCLUSTER_RELEASE = "vcluster-release"
    VCLUSTER_READY = "vcluster-ready"
    KUBECONFIG_COPY = "kubeconfig-copy"
    TENANT_ACCOUNT = "tenant-account"
    HEADROOM = "headroom"
    FLUX = "flux"
    FLUX_READY = "flux-ready"
    REFRESH = "refresh"
    DELETE_VCLUSTER = "delete-vcluster"
    DELETE_NAMESPACE = "delete-namespace"
    NAMESPACE_GONE = "namespace-gone"
    DELETE_KUBECONFIG = "delete-kubeconfig"


# The reconciler's steps in order, with the phase each belongs to.
STEPS: tuple[tuple[Step, CloudSpacePhase], ...] = (
    (Step.BEGIN, CloudSpacePhase.PENDING),
    (Step.CAPACITY, CloudSpacePhase.PROVISIONING),
    (Step.HOST_NAMESPACE, CloudSpacePhase.PROVISIONING),
    (Step.VCLUSTER_RELEASE, CloudSpacePhase.PROVISIONING),
    (Step.VCLUSTER_READY, CloudSpacePhase.PROVISIONING),
    (Step.KUBECONFIG_COPY, CloudSpacePhase.PROVISIONING),
    (Step.TENANT_ACCOUNT, CloudSpacePhase.INSTALLING_FLUX),
    (Step.HEADROOM, CloudSpacePhase.INSTALLING_FLUX),
    (Step.FLUX, CloudSpacePhase.INSTALLING_FLUX),
    (Step.FLUX_READY, CloudSpacePhase.INSTALLING_FLUX),
    (Step.REFRESH, CloudSpacePhase.READY),
    (Step.DELETE_VCLUSTER, CloudSpacePhase.DELETING),
    (Step.DELETE_NAMESPACE, CloudSpacePhase.DELETING),
    (Step.NAMESPACE_GONE, CloudSpacePhase.DELETING),
    (Step.DELETE_KUBECONFIG, CloudSpacePhase.DELETING),
)


PHASE_OF: dict[str, CloudSpacePhase] = dict(STEPS)


ORDER: dict[str, int] = {step: index for index, (step, _) in enumerate(STEPS)}


FIRST_STEP = Step.BEGIN


FIRST_DELETE_STEP = Step.DELETE_VCLUSTER


DEFAULT_NAME = "default"


MAX_CPU = 10_000.0


MIN_MEMORY_MIB = 64


MAX_MEMORY_MIB = 2**24


# The steps each vCluster takes itself (stored in `vclusters.step`); the CloudSpace's own
# step in this range waits until all its vClusters are past it (core.cloudspaces.vcluster_steps).
VCLUSTER_STEPS: tuple[Step, ...] = tuple(
    step for step, _ in STEPS[ORDER[Step.VCLUSTER_RELEASE] : ORDER[Step.REFRESH] + 1]
)


def next_step(step: str) -> Step | None:
    """The step after `step`; None after the last of its lifecycle (READY's refresh repeats)."""
    if step in (Step.REFRESH, Step.DELETE_KUBECONFIG):
        return None
    return STEPS[ORDER[step] + 1][0]


def new_vcluster(unit: Unit, cloud_space: CloudSpace, name: str) -> VCluster:
    """A vCluster at its first step, PENDING; the CloudSpace's reconciler takes it on."""
    return VCluster(
        id=new_id("vc"),
        cloud_space_id=cloud_space.id,
        org_id=cloud_space.org_id,
        name=name,
        phase=CloudSpacePhase.PENDING,
        step=VCLUSTER_STEPS[0],
        created_at=unit.now,
    )


async def record_phase(
    unit: Unit,
    row: CloudSpace,
    previous: str | None,
    phase: str,
    message: str | None,
    vcluster_id: str | None = None,
) -> None:
    """Persists a phase or message change (of the CloudSpace, or of its vCluster
    `vcluster_id`) and publishes it after commit."""
    event = await cloudspace_rows.add_event(
        unit.session,
        CloudSpaceEvent(
            cloud_space_id=row.id,
            vcluster_id=vcluster_id,
            org_id=row.org_id,
            previous=previous,
            phase=phase,
            message=message,
            at=unit.now,
        ),
    )
    unit.publish(
        CLOUDSPACE_PHASE, {"event_id": event.id, "cloud_space_id": row.id, "org_id": row.org_id}
    )


def _check_quota(problems: Problems, cpu: float, memory_mib: int) -> None:
    if not cpu > 0 or cpu > MAX_CPU:
        problems.add(["cpu"], f"cpu must be more than 0 and at most {MAX_CPU:g} cores")
    elif Decimal(str(cpu)) % Decimal("0.001"):
        problems.add(["cpu"], "cpu must be a whole number of millicores (at most 3 decimals)")
    if not MIN_MEMORY_MIB <= memory_mib <= MAX_MEMORY_MIB:
        problems.add(
            ["memoryMiB"], f"memoryMiB must be between {MIN_MEMORY_MIB} and {MAX_MEMORY_MIB}"
        )


@dataclass(frozen=True)
class CreateRequest:
    name: str
    host_space_id: str | None
    cpu: float
    memory_mib: int


async def _host_for(
    unit: Unit, services: Services, viewer: Viewer, problems: Problems, host_space_id: str | None
) -> Space | None:
    if host_space_id is None:
        default = services.cloudspaces.default_host_space
        if default is None:
            problems.add(
                ["hostSpaceId"],
                "hostSpaceId is required: this installation has no default host space",
            )
            return None
        host = await cloudspace_rows.host_space(unit.session, default)
        if host is None or host.deregistered_at is not None:
            problems.add(
                ["hostSpaceId"],
                "the default host space is not available; give hostSpaceId",
                "PRECONDITION_FAILED",
            )
            return None
        return host
    host = await owned.by_id(unit.session, Space, viewer.org_id, host_space_id)
    if host is None:
        problems.add(["hostSpaceId"], "no such space", "NOT_FOUND")
        return None
    if host.deregistered_at is not None:
        problems.add(["hostSpaceId"], "the space is deregistered", "PRECONDITION_FAILED")
        return None
    return host


async def creation_host(
    unit: Unit, services: Services, viewer: Viewer, request: CreateRequest
) -> Space:
    """Every check of createCloudSpace that needs no cluster; the host it would live on."""
    viewer.require("cloudspace:create")
    problems = Problems("input")
    # The name becomes the vCluster's Helm release, Services and StatefulSet.
    if (why := dns_1035_label_problem(request.name, MAX_VCLUSTER_NAME)) is not None:
        problems.add(["name"], f"name {why}")
    elif await owned.by_name(unit.session, CloudSpace, viewer.org_id, request.name):
        problems.add(["name"], f"a CloudSpace named {request.name!r} already exists", "CONFLICT")
    _check_quota(problems, request.cpu, request.memory_mib)
    host = await _host_for(unit, services, viewer, problems, request.host_space_id)
    problems.raise_if_any()
    assert host is not None
    return host


async def create(
    unit: Unit,
    services: Services,
    viewer: Viewer,
    request: CreateRequest,
    capacity: Capacity,
) -> CloudSpace:
    host = await creation_host(unit, services, viewer, request)
    problems = Problems("input")
    await check_capacity(
        unit,
        services,
        problems,
        host.id,
        None,
        request.cpu,
        request.memory_mib,
        capacity,
        viewer.org_id,
    )
    problems.raise_if_any()
    return await insert(unit, viewer.org_id, request.name, host.id, request, is_default=False)


async def insert(
    unit: Unit, org_id: str, name: str, host_id: str, quota: Any, *, is_default: bool
) -> CloudSpace:
    """A new CloudSpace, PENDING at its first step and due now (its checks already made);
    its phase event goes out after commit."""
    row = CloudSpace(
        id=new_id("cs"),
        org_id=org_id,
        name=name,
        host_space_id=host_id,
        cpu=float(quota.cpu),
        memory_mib=int(quota.memory_mib),
        is_default=is_default,
        phase=CloudSpacePhase.PENDING,
        step=FIRST_STEP,
        next_attempt_at=unit.now,
        created_at=unit.now,
    )
    await owned.add(unit.session, row)
    await record_phase(unit, row, None, CloudSpacePhase.PENDING, None)
    # Its first vCluster, named like it (its kubeconfig route's name since the start).
    await vcluster_rows.add(unit.session, new_vcluster(unit, row, name))
    unit.reconcile_soon = True
    return row


async def in_org(unit: Unit, viewer: Viewer, cloud_space_id: str) -> CloudSpace:
    row = await owned.by_id(unit.session, CloudSpace, viewer.org_id, cloud_space_id)
    if row is None:
        raise UserErrors.one(["input", "id"], "no such CloudSpace", "NOT_FOUND")
    return row


async def resize_host(
    unit: Unit, viewer: Viewer, cloud_space_id: str, cpu: float, memory_mib: int
) -> Space:
    """Every check of updateCloudSpaceQuota that needs no cluster; the host to ask."""
    viewer.require("cloudspace:update")
    problems = Problems("input")
    _check_quota(problems, cpu, memory_mib)
    row = await owned.by_id(unit.session, CloudSpace, viewer.org_id, cloud_space_id)
    if row is None:
        problems.add(["id"], "no such CloudSpace", "NOT_FOUND")
    elif row.phase == CloudSpacePhase.DELETING:
        problems.add(["id"], "the CloudSpace is being deleted", "PRECONDITION_FAILED")
    problems.raise_if_any()
    assert row is not None
    usage = [
        ("cpu", cpu, row.usage_cpu, ""),
        ("memoryMiB", memory_mib, row.usage_memory_mib, " MiB"),
    ]
    for field, wanted, used, unit_text in usage:
        if used is not None and wanted < used:
            problems.add(
                [field],
                f"{field} {number_text(wanted)} is below the current usage {number_text(used)}{unit_text} "
                f"(by {number_text(used - wanted)}{unit_text}); free some first",
                "QUOTA_EXCEEDED",
            )
    problems.raise_if_any()
    host = await cloudspace_rows.host_space(unit.session, row.host_space_id)
    assert host is not None
    return host


async def resize(
    unit: Unit,
    services: Services,
    viewer: Viewer,
    cloud_space_id: str,
    cpu: float,
    memory_mib: int,
    capacity: Capacity,
) -> CloudSpace:
    await resize_host(unit, viewer, cloud_space_id, cpu, memory_mib)
    row = await cloudspace_rows.lock(unit.session, cloud_space_id)
    assert row is not None
    problems = Problems("input")
    await check_capacity(
        unit, services, problems, row.host_space_id, row.id, cpu, memory_mib, capacity, row.org_id
    )
    problems.raise_if_any()
    row.cpu, row.memory_mib = float(cpu), int(memory_mib)
    if (
        row.phase == CloudSpacePhase.READY
    ):  # the quotas on the host and in the vCluster follow at once
        row.next_attempt_at = unit.now
        unit.reconcile_soon = True
    unit.session.add(row)
    await unit.session.flush()
    return row


async def delete(unit: Unit, viewer: Viewer, cloud_space_id: str, confirm_name: str) -> CloudSpace:
    viewer.require("cloudspace:delete")
    row = await in_org(unit, viewer, cloud_space_id)
    if confirm_name != row.name:
        raise UserErrors.one(
            ["input", "confirmName"], "confirmName must equal the CloudSpace's name"
        )
    if row.phase == CloudSpacePhase.DELETING:
        return row  # already on its way out
    row = await cloudspace_rows.lock(unit.session, row.id) or row
    previous = row.phase
    row.phase, row.step, row.message, row.failures = (
        CloudSpacePhase.DELETING,
        FIRST_DELETE_STEP,
        None,
        0,
    )
    row.next_attempt_at = unit.now
    unit.session.add(row)
    await unit.session.flush()
    await vcluster_rows.set_phase_of_all(unit.session, row.id, CloudSpacePhase.DELETING)
    await record_phase(unit, row, previous, CloudSpacePhase.DELETING, None)
    unit.reconcile_soon = True
    return row
