"""Object types of CloudSpaces: the CloudSpace, its vClusters, quotas and phase events."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Optional

import strawberry
from strawberry import Private

from core.advisor.model import Severity
from db import cloudspace_tables, vcluster_tables
from resolvers.advisor import fields as advice_fields
from resolvers.apps import reads as app_reads
from resolvers.cloudspaces import vclusters as vcluster_reads
from schema.advisor.types import (
    AdviceCounts,
    AdvisorFindingConnection,
    CloudSpaceAdvisor,
)
from schema.common.enums import (
    CloudSpacePhase,
)
from schema.common.info import GraphInfo, type_named
from schema.common.relay import Node
from schema.engine.arguments import After, First
from schema.engine.lookahead import selected
from schema.engine.policies import needs
from schema.spaces.types import Space

if TYPE_CHECKING:
    from schema.apps.types import AppConnection

# The apps' domain sits above this one: its connection is named lazily.
LazyAppConnection = Annotated["AppConnection", strawberry.lazy("schema.apps.types")]


@strawberry.type(description="CPU and memory: a CloudSpace's quota, or what its workloads use.")
class Quota:
    cpu: float = strawberry.field(description="CPU cores (requests).")
    memory_mib: int = strawberry.field(name="memoryMiB", description="Memory in MiB (requests).")


@strawberry.type(
    description=(
        "A virtual cluster of a CloudSpace, with its own API server: one Helm release of the "
        "vCluster chart in the CloudSpace's host namespace. Every vCluster of a CloudSpace "
        "shares its quota."
    )
)
class VCluster(Node):
    row: Private[vcluster_tables.VCluster]
    # Whether this answer selects `kubeconfig` too: its expiry is then that one's.
    with_kubeconfig: Private[bool]
    id: strawberry.ID = strawberry.field(description="Opaque id (vc_…).")
    name: str = strawberry.field(
        description=(
            "A DNS-1035 label of at most 52 characters, unique in its CloudSpace; the first "
            "vCluster is named like the CloudSpace."
        )
    )
    phase: CloudSpacePhase = strawberry.field(
        description=(
            "Where it stands: PENDING, PROVISIONING, INSTALLING_FLUX, READY, FAILED, or "
            "DELETING (removeVCluster, or its CloudSpace being deleted)."
        )
    )
    message: str | None = strawberry.field(
        description="Why it is FAILED, what it waits for, or what its removal waits for."
    )
    created_at: datetime = strawberry.field(description="When it was added.")

    @classmethod
    def from_row(cls, row: vcluster_tables.VCluster, with_kubeconfig: bool = False) -> VCluster:
        return cls(
            row=row,
            with_kubeconfig=with_kubeconfig,
            id=strawberry.ID(row.id),
            name=row.name,
            phase=CloudSpacePhase(row.phase),
            message=row.message,
            created_at=row.created_at,
        )

    @strawberry.field(
        description=(
            "True once its API server answers and its tenant account exists (during "
            "INSTALLING_FLUX), until DELETING; kubeconfigs can be downloaded from then on."
        )
    )
    async def ready(self, info: GraphInfo) -> bool:
        cloud_space = await vcluster_reads.cloud_space_of(info.context, self.row)
        return cloud_space is not None and vcluster_reads.ready(cloud_space, self.row)

    @strawberry.field(
        description="The CloudSpace it belongs to.", extensions=needs("cloudspace:view")
    )
    async def cloud_space(self, info: GraphInfo) -> CloudSpace | None:
        row = await vcluster_reads.cloud_space_of(info.context, self.row)
        return None if row is None else CloudSpace.from_row(row)

    @strawberry.field(
        description=(
            "Requires cloudspace:kubeconfig. A kubeconfig for the vCluster whose credential is "
            "a short-lived token (SPACEDOCK_KUBECONFIG_TTL_S, default 3600 s), never the admin "
            "certificate; its cluster, user and context are named after the CloudSpace and the "
            "vCluster, so several files merge. Null while the vCluster is not ready."
        )
    )
    async def kubeconfig(self, info: GraphInfo) -> str | None:
        minted = await vcluster_reads.kubeconfig(info.context, self.row)
        return None if minted is None else minted.text

    @strawberry.field(
        description=(
            "When the credential inside kubeconfig expires: of the kubeconfig in this answer "
            "when it is selected too, else of one downloaded now. Needs only cloudspace:view "
            "and never mints a token. Null while the vCluster is not ready."
        )
    )
    async def kubeconfig_expires_at(self, info: GraphInfo) -> datetime | None:
        return await vcluster_reads.kubeconfig_expiry(info.context, self.row, self.with_kubeconfig)


@strawberry.type(
    description=(
        "A tenant's own Kubernetes environment: a vCluster on a host space, with a CPU and "
        "memory quota, Flux, and kubeconfigs to download."
    )
)
class CloudSpace(Node):
    row: Private[cloudspace_tables.CloudSpace]
    id: strawberry.ID = strawberry.field(description="Opaque id (cs_…).")
    name: str = strawberry.field(description="A DNS-1123 label, unique in the org.")
    phase: CloudSpacePhase = strawberry.field(
        description=(
            "Where it stands in its lifecycle: through PROVISIONING and INSTALLING_FLUX step "
            "by step, each step done once every vCluster is past it; READY once all are (and "
            "while one added later comes up); FAILED when it or any vCluster failed."
        )
    )
    message: str | None = strawberry.field(
        description=(
            "Why the CloudSpace is FAILED (naming the vCluster when it is one of several), "
            "what it waits for (a vCluster coming up or going), or what blocks DELETING."
        )
    )
    quota: Quota = strawberry.field(
        description="What its workloads may request in all, across its namespaces."
    )
    usage: Quota | None = strawberry.field(
        description="What its workloads request now, refreshed while READY; null before."
    )
    is_default: bool = strawberry.field(
        description="The org's default CloudSpace, made when the org was created."
    )
    created_at: datetime = strawberry.field(description="When it was created.")

    @classmethod
    def from_row(cls, row: cloudspace_tables.CloudSpace) -> CloudSpace:
        usage = None
        if row.usage_cpu is not None and row.usage_memory_mib is not None:
            usage = Quota(cpu=row.usage_cpu, memory_mib=row.usage_memory_mib)
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            name=row.name,
            phase=CloudSpacePhase(row.phase),
            message=row.message,
            quota=Quota(cpu=row.cpu, memory_mib=row.memory_mib),
            usage=usage,
            is_default=row.is_default,
            created_at=row.created_at,
        )

    @strawberry.field(
        description="The space it runs on; null when that space belongs to another org (the platform's).",
        extensions=needs("space:view"),
    )
    async def host_space(self, info: GraphInfo) -> Space | None:
        row = await info.context.loaders.space.load(self.row.host_space_id)
        return None if row is None else Space.from_row(row)

    @strawberry.field(
        description=(
            "Its vClusters, oldest first: the first is named like the CloudSpace; "
            "addVCluster adds more."
        )
    )
    async def vclusters(self, info: GraphInfo) -> list[VCluster]:
        with_kubeconfig = "kubeconfig" in selected(info._raw_info, [()], "VCluster")
        rows = await vcluster_reads.of_cloud_space(info.context, self.row)
        return [VCluster.from_row(row, with_kubeconfig) for row in rows]

    @strawberry.field(
        description="The apps that run in it, oldest first. Needs app:view.",
        extensions=needs("app:view"),
        graphql_type=Optional[LazyAppConnection],  # noqa: UP045 (a lazy type has no `|`)
    )
    async def apps(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> AppConnection | None:
        page = await app_reads.of_cloud_space(info.context, self.row.id, first, after)
        return type_named(info, "AppConnection").of(page, type_named(info, "App"))  # type: ignore[no-any-return]

    @strawberry.field(
        description="Requires advice:view. What the App Advisor found in the CloudSpace, most "
        "severe first: open findings that are not dismissed, unless asked otherwise.",
        extensions=needs("advice:view"),
    )
    async def advice(
        self,
        info: GraphInfo,
        severity: Annotated[
            Severity | None,
            strawberry.argument(description="Only findings of this severity."),
        ] = None,
        app_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="Only findings on objects of this app's inventory."),
        ] = None,
        include_resolved: Annotated[
            bool, strawberry.argument(description="Resolved findings too (kept 7 days).")
        ] = False,
        include_dismissed: Annotated[
            bool, strawberry.argument(description="Dismissed findings too.")
        ] = False,
        first: First = None,
        after: After = None,
    ) -> AdvisorFindingConnection | None:
        wanted = advice_fields.wanted(
            None if severity is None else severity.value,
            app_id,
            include_resolved,
            include_dismissed,
        )
        read = await advice_fields.page(info.context, self.row, wanted, first, after)
        return AdvisorFindingConnection.of_advice(read)

    @strawberry.field(
        description="Requires advice:view. Open findings by severity, for a CloudSpace card: "
        "a page of CloudSpaces reads them all in one statement.",
        extensions=needs("advice:view"),
    )
    async def advice_counts(self, info: GraphInfo) -> AdviceCounts | None:
        return AdviceCounts.of(await advice_fields.card_counts(info.context, self.row.id))

    @strawberry.field(
        description="Requires advice:view. How the App Advisor serves it: enabled once READY, "
        "its last run, its exemptions.",
        extensions=needs("advice:view"),
    )
    async def advisor(self, info: GraphInfo) -> CloudSpaceAdvisor | None:
        schedule = await advice_fields.schedule(info.context, self.row.id)
        return CloudSpaceAdvisor.of(self.row.id, schedule)


@strawberry.type(
    description=(
        "A phase or message change of a CloudSpace, or of one of its vClusters (then "
        "vclusterId is set, and phase, previous and message are the vCluster's)."
    )
)
class CloudSpaceEvent:
    row: Private[cloudspace_tables.CloudSpaceEvent]
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace it is about.")
    vcluster_id: strawberry.ID | None = strawberry.field(
        description="The vCluster it is about; null for a change of the CloudSpace itself."
    )
    previous: CloudSpacePhase | None = strawberry.field(
        description="The phase before; null for the first event."
    )
    phase: CloudSpacePhase = strawberry.field(description="The phase now; DELETED is the last.")
    message: str | None = strawberry.field(
        description="Why it FAILED, what blocks DELETING, or null."
    )
    at: datetime = strawberry.field(description="When it happened.")

    @classmethod
    def from_row(cls, row: cloudspace_tables.CloudSpaceEvent) -> CloudSpaceEvent:
        return cls(
            row=row,
            cloud_space_id=strawberry.ID(row.cloud_space_id),
            vcluster_id=None if row.vcluster_id is None else strawberry.ID(row.vcluster_id),
            previous=None if row.previous is None else CloudSpacePhase(row.previous),
            phase=CloudSpacePhase(row.phase),
            message=row.message,
            at=row.at,
        )

    @strawberry.field(
        description="The CloudSpace as it is now; null once it is deleted.",
        extensions=needs("cloudspace:view"),
    )
    async def cloud_space(self, info: GraphInfo) -> CloudSpace | None:
        row = await info.context.loaders.cloud_space.load(self.row.cloud_space_id)
        return None if row is None else CloudSpace.from_row(row)

    @strawberry.field(
        description=(
            "The vCluster as it is now, for a vCluster's change; null for the CloudSpace's "
            "own, and once the vCluster is removed."
        ),
        extensions=needs("cloudspace:view"),
    )
    async def vcluster(self, info: GraphInfo) -> VCluster | None:
        if self.row.vcluster_id is None:
            return None
        row = await info.context.loaders.vcluster.load(self.row.vcluster_id)
        return None if row is None else VCluster.from_row(row)
