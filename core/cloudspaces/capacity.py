"""What a host space can give CloudSpaces: its allocatable, asked live, against what every
CloudSpace on it (of any org) has been promised, with each vCluster's overhead: its control
plane and the requests of Flux's controllers inside it (600m, 448Mi), whose pods run on
the host too, so a host is not oversold."""

from __future__ import annotations

from dataclasses import dataclass

from core.cloudspaces.host_access import connect
from core.cloudspaces.quantities import cores_of, mib_of
from core.common.errors import Problems, UserErrors
from core.common.services import Services, Unit
from core.spaces.clusters import credentials_for
from db import cloudspaces as cloudspace_rows
from db.tables import Space
from providers import host as host_api
from providers.errors import ProviderError


@dataclass(frozen=True)
class Capacity:
    """What a host can give in all: the sum of its schedulable nodes' allocatable."""

    cpu: float
    memory_mib: float


async def capacity_of(services: Services, host: Space) -> Capacity:
    """The host's allocatable, asked live; ProviderError when it cannot be asked."""
    credentials = await credentials_for(services, host)
    async with connect(services, credentials) as kube:
        nodes = await kube.items("/api/v1/nodes")
    cpu = memory = 0.0
    for allocatable in host_api.node_allocatable(nodes):
        try:
            cpu += cores_of(allocatable.get("cpu", "0"))
            memory += mib_of(allocatable.get("memory", "0"))
        except ValueError:
            continue  # a node that reports nonsense gives nothing
    return Capacity(cpu, memory)


async def capacity_for_request(services: Services, host: Space) -> Capacity:
    """capacity_of for a mutation: a host that cannot be asked is a PROVIDER_ERROR
    userError in the cloud's words."""
    try:
        return await capacity_of(services, host)
    except ProviderError as failed:
        raise UserErrors.one(None, failed.reason, "PROVIDER_ERROR") from failed


def number_text(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


async def check_capacity(
    unit: Unit,
    services: Services,
    problems: Problems,
    host_space_id: str,
    except_id: str | None,
    cpu: float,
    memory_mib: int,
    capacity: Capacity,
    org_id: str,
    adding_vcluster: bool = False,
) -> None:
    """QUOTA_EXCEEDED when the host cannot give `cpu`/`memory_mib` (plus each of its
    vClusters' overhead: one for a new CloudSpace, those of `except_id` for one that
    exists, one more when `adding_vcluster`) beside what every other CloudSpace on it was
    promised, with theirs.

    The refusal names the ask and what `org_id`'s own other CloudSpaces there hold, never
    the host's size or what is free: that figure moves with other orgs' CloudSpaces and
    would tell any org about them (issue 18)."""
    settings = services.cloudspaces
    others = await cloudspace_rows.promised_on_host(unit.session, host_space_id, except_id)
    planes = (
        1 if except_id is None else await cloudspace_rows.vcluster_count(unit.session, except_id)
    )
    planes += int(adding_vcluster)
    plane_cpu = planes * settings.vcluster_overhead_cpu
    plane_memory = planes * settings.vcluster_overhead_memory_mib
    left_cpu = capacity.cpu - others.cpu - others.vclusters * settings.vcluster_overhead_cpu
    left_memory = (
        capacity.memory_mib
        - others.memory_mib
        - others.vclusters * settings.vcluster_overhead_memory_mib
    )
    short_cpu = cpu + plane_cpu > left_cpu + 1e-9
    short_memory = memory_mib + plane_memory > left_memory + 1e-9
    if not (short_cpu or short_memory):
        return
    own = await cloudspace_rows.promised_on_host(unit.session, host_space_id, except_id, org_id)
    overhead = (
        "for the vCluster's control plane and Flux"
        if planes == 1
        else f"for its {planes} vClusters' control planes and Flux"
    )
    refusals = [
        (
            "cpu",
            short_cpu,
            f"cpu {number_text(cpu)} (+{number_text(plane_cpu)}",
            f"{number_text(own.cpu)} cores",
        ),
        (
            "memoryMiB",
            short_memory,
            f"memoryMiB {memory_mib} (+{plane_memory}",
            f"{own.memory_mib} MiB",
        ),
    ]
    for field, short, asked, held in refusals:
        if not short:
            continue
        if adding_vcluster:
            field = "cloudSpaceId"  # addVCluster's input names no quota: the CloudSpace's
        yours = (
            "your org has no other CloudSpace there"
            if own.cloud_spaces == 0
            else f"your org's other CloudSpaces there ({own.cloud_spaces}) hold {held}"
        )
        problems.add(
            [field],
            f"{asked} {overhead}) is more than this host can give now ({yours}); ask for "
            "less or free some of yours. What other orgs hold there is not shown.",
            "QUOTA_EXCEEDED",
        )
