"""Object types of the graph. Each wraps a stored row and resolves its links through
the request's DataLoaders, so nested lists never turn into N+1 queries."""

from __future__ import annotations

from collections.abc import Awaitable, Hashable, Sequence
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

import strawberry
from strawberry import Private
from strawberry.types import Info

from core import namespaces as namespace_rules
from core import roles as role_rules
from core.health import last_error
from core.ids import event_id
from core.services import utcnow
from db import tables
from db.cloud_accounts import CloudAccountRow
from db.environments import EnvironmentRecord
from db.pages import Page
from db.spaces import SpaceRow, StatusEventRecord
from resolvers import access as access_reads
from resolvers import cloudspaces as cloudspace_reads
from resolvers import namespaces as namespace_reads
from resolvers import reads
from resolvers.context import Context
from resolvers.pagination import cursors_of
from schema.arguments import After, First
from schema.enums import (
    CloudSpacePhase,
    CredentialKind,
    Provider,
    Role,
    SpaceStatus,
    SpaceType,
    StatusReasonCode,
)
from schema.policies import needs

GraphInfo = Info[Context, None]
T = TypeVar("T")


@strawberry.interface(
    description="An object with a globally unique id; node(id:) and nodes(ids:) resolve any of them."
)
class Node:
    id: strawberry.ID = strawberry.field(
        description="Opaque and globally unique; stable for the object's life."
    )


@strawberry.type(description="Where a page sits in its list.")
class PageInfo:
    has_next_page: bool = strawberry.field(description="True when more items follow this page.")
    has_previous_page: bool = strawberry.field(
        description="True when items come before this page (always true after an `after`)."
    )
    start_cursor: str | None = strawberry.field(
        description="The first item's cursor, to pass as `before`; null on an empty page."
    )
    end_cursor: str | None = strawberry.field(
        description="The last item's cursor, to pass as `after`; null on an empty page."
    )


@strawberry.type(description="One item of a page, with the cursor that marks its place.")
class Edge(Generic[T]):
    cursor: str = strawberry.field(
        description="Opaque; pass it as `after` to continue after this item."
    )
    node: T = strawberry.field(description="The item.")


@strawberry.type(
    description="One page of a list (Relay connection): edges with cursors, the items, "
    "paging info and the total."
)
class Connection(Generic[T]):
    page: Private[Page[Any]]

    # Cursors, edges and paging info only when asked: most pages are read through `nodes`.
    def _edges(self) -> list[Edge[T]]:
        cursors = cursors_of(self.page)
        return [Edge(cursor=c, node=n) for c, n in zip(cursors, self.nodes, strict=True)]

    def _page_info(self) -> PageInfo:
        cursors = cursors_of(self.page)
        return PageInfo(
            has_next_page=self.page.has_next,
            has_previous_page=self.page.has_previous,
            start_cursor=cursors[0] if cursors else None,
            end_cursor=cursors[-1] if cursors else None,
        )

    edges: list[Edge[T]] = strawberry.field(
        resolver=_edges, description="The page's items with their cursors."
    )
    nodes: list[T] = strawberry.field(description="The page's items, as in edges.")
    page_info: PageInfo = strawberry.field(
        resolver=_page_info, description="Where this page sits in the list."
    )
    total_count: int = strawberry.field(
        description="How many items the whole list has (every page, filters applied)."
    )

    @classmethod
    def of(cls, page: Page[Any], wrap: type[T]) -> Connection[T]:
        nodes = [wrap.from_row(row) for row in page.items]  # type: ignore[attr-defined]
        return cls(page=page, nodes=nodes, total_count=page.total)


@strawberry.type(description="How many spaces match a filter, by status: a dashboard's header.")
class SpaceCounts:
    total: int = strawberry.field(description="Every matching space.")
    active: int = strawberry.field(description="Those that read ACTIVE.")
    inactive: int = strawberry.field(description="Those that read INACTIVE.")
    unknown: int = strawberry.field(description="Those that read UNKNOWN.")
    held: int = strawberry.field(description="Those under an operator hold (also INACTIVE).")


@strawberry.type(description="An organisation: it owns every object its members see.")
class Org(Node):
    id: strawberry.ID = strawberry.field(description="The org's id.")
    name: str = strawberry.field(description="Unique across the installation.")

    @classmethod
    def from_row(cls, row: tables.Org) -> Org:
        return cls(id=strawberry.ID(row.id), name=row.name)


@strawberry.type(description="The authenticated caller.")
class Viewer:
    org: Org = strawberry.field(description="The org the caller belongs to.")
    role: Role = strawberry.field(description="The caller's role in that org.")
    custom_role: RoleDefinition | None = strawberry.field(description="Set when role is CUSTOM.")
    subject: str = strawberry.field(description="The API token's name or the OIDC subject.")
    credential_kind: CredentialKind = strawberry.field(description="How the caller authenticated.")
    permissions: list[str] = strawberry.field(
        description="Policies such as space:view, space:create, space:update, space:delete."
    )


@strawberry.type(description="A cloud account's permission to mint credentials for one cluster.")
class ClusterAccess:
    region: str = strawberry.field(description="The cluster's region (GCP, AZURE: location).")
    cluster_name: str = strawberry.field(description="The cluster's name at the provider.")
    resource_group: str | None = strawberry.field(description="AZURE only.")
    granted_at: datetime = strawberry.field(description="When access was granted.")

    @classmethod
    def from_row(cls, row: tables.ClusterGrant) -> ClusterAccess:
        return cls(
            region=row.region,
            cluster_name=row.cluster_name,
            resource_group=row.resource_group,
            granted_at=row.granted_at,
        )


@strawberry.type(description="A cluster as the cloud reports it, live.")
class DiscoveredCluster:
    name: str = strawberry.field(description="The cluster's name on the cloud.")
    region: str = strawberry.field(description="Its region (GCP and AZURE: its location).")
    endpoint: str | None = strawberry.field(
        description="Its API server URL, when the cloud reports one."
    )
    version: str | None = strawberry.field(description="Its Kubernetes version, as reported.")
    access_granted: bool = strawberry.field(
        description="Whether the account may mint credentials for it (grantClusterAccess)."
    )
    space_row: Private[tables.Space | None]

    @strawberry.field(
        description="The space registered for this cluster, if any.",
        extensions=needs("space:view"),
    )
    def space(self) -> Space | None:
        return None if self.space_row is None else Space.from_row(self.space_row)


@strawberry.type(
    description="Credentials for one AWS, GCP or Azure account, encrypted at rest and never "
    "returned; spaces on its clusters mint short-lived credentials through it."
)
class CloudAccount(Node):
    row: Private[CloudAccountRow]
    id: strawberry.ID = strawberry.field(description="The account's id.")
    name: str = strawberry.field(description="Unique in the org.")
    provider: Provider = strawberry.field(description="AWS, GCP or AZURE.")
    created_at: datetime = strawberry.field(description="When the account was created.")

    @classmethod
    def from_row(cls, row: CloudAccountRow) -> CloudAccount:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            name=row.name,
            provider=Provider[row.provider],
            created_at=row.created_at,
        )

    @strawberry.field(
        description=(
            "Clusters the provider reports for this account, live from the cloud API. region "
            "null: every region the account is configured for. Null (with a PROVIDER_ERROR) when "
            "the cloud cannot be reached."
        ),
        extensions=needs("cloudaccount:view"),
    )
    async def clusters(
        self,
        info: GraphInfo,
        region: Annotated[
            str | None,
            strawberry.argument(
                description="Only this region (AWS) or location (GCP, AZURE); null: all of them."
            ),
        ] = None,
    ) -> list[DiscoveredCluster] | None:
        found = await reads.discovered_clusters(info.context, self.row, region)
        return [
            DiscoveredCluster(
                name=each.cluster.name,
                region=each.cluster.region,
                endpoint=each.cluster.endpoint,
                version=each.cluster.version,
                access_granted=each.access_granted,
                space_row=each.space,
            )
            for each in found
        ]

    @strawberry.field(
        description="Clusters this account is authorised to mint credentials for.",
        extensions=needs("cloudaccount:view"),
    )
    async def cluster_access(self, info: GraphInfo) -> list[ClusterAccess]:
        grants = await info.context.loaders.grants_of_account.load(self.row.id)
        return [ClusterAccess.from_row(grant) for grant in grants]

    @strawberry.field(
        description="The registered spaces whose clusters this account reaches, oldest first.",
        extensions=needs("space:view"),
    )
    async def spaces(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[Space]:
        page = await reads.spaces_of_account(info.context, self.row.id, first, after)
        return Connection.of(page, Space)


@strawberry.type(description="Provider identity of a cluster. Immutable once registered.")
class SpaceConfig:
    cluster_name: str = strawberry.field(description="The cluster's name at the provider.")
    region: str | None = strawberry.field(
        default=None, description="AWS region, or GCP and AZURE location."
    )
    project_id: str | None = strawberry.field(default=None, description="GCP project.")
    resource_group: str | None = strawberry.field(default=None, description="AZURE resource group.")
    subscription_id: str | None = strawberry.field(default=None, description="AZURE subscription.")
    server: str | None = strawberry.field(
        default=None, description="API server URL (GENERIC spaces)."
    )


@strawberry.type(description="The outcome of one reachability probe (GET /version).")
class ProbeResult:
    at: datetime = strawberry.field(description="When the probe finished.")
    ok: bool = strawberry.field(description="True when the cluster answered with its version.")
    version: str | None = strawberry.field(description="gitVersion reported by GET /version.")
    latency_ms: float | None = strawberry.field(
        description="How long the probe took, in milliseconds."
    )
    error: str | None = strawberry.field(
        description="What failed, in the words statusReason uses; null when ok."
    )
    error_code: StatusReasonCode | None = strawberry.field(
        description="What failed, for programs; null when ok."
    )

    @classmethod
    def of_space(cls, row: SpaceRow) -> ProbeResult | None:
        if row.last_probe_at is None or row.last_probe_ok is None:
            return None
        error = last_error(row)
        return cls(
            at=row.last_probe_at,
            ok=row.last_probe_ok,
            version=row.last_probe_version,
            latency_ms=row.last_probe_latency_ms,
            error=None if error is None else error.words,
            error_code=None if error is None else StatusReasonCode[error.code],
        )


@strawberry.type(description="One probe result of a space, as spaceProbed streams it.")
class ProbeEvent:
    space_id: strawberry.ID = strawberry.field(description="The space probed.")
    result: ProbeResult = strawberry.field(description="What the probe found.")
    consecutive_failures: int = strawberry.field(
        description="Failed probes in a row, this one included; 0 after a success."
    )


@strawberry.type(
    description="One status transition of a space, kept in its history (the last 1,000 per space)."
)
class SpaceStatusEvent(Node):
    row: Private[tables.SpaceStatusEvent | StatusEventRecord]
    id: strawberry.ID = strawberry.field(
        description="Stable, and increasing in the order events happened: statusEvents(after:) "
        "catches up from the last id a client saw."
    )
    space_id: strawberry.ID = strawberry.field(description="The space that changed.")
    previous: SpaceStatus | None = strawberry.field(
        description="The status before; null for the first event of a registration."
    )
    status: SpaceStatus = strawberry.field(description="The status from this event on.")
    at: datetime = strawberry.field(description="When the transition happened.")
    reason: str | None = strawberry.field(
        description='Why, in the words statusReason and lastProbe.error use (e.g. "TLS: …").'
    )
    reason_code: StatusReasonCode = strawberry.field(description="Why, for programs.")

    @classmethod
    def from_row(cls, row: tables.SpaceStatusEvent | StatusEventRecord) -> SpaceStatusEvent:
        return cls(
            row=row,
            id=strawberry.ID(event_id(row.id or 0)),
            reason_code=StatusReasonCode[reads.event_reason_code(row)],
            space_id=strawberry.ID(row.space_id),
            previous=None if row.previous is None else SpaceStatus[row.previous],
            status=SpaceStatus[row.status],
            at=row.at,
            reason=row.reason,
        )

    @strawberry.field(
        description="The space that changed, deregistered or not.", extensions=needs("space:view")
    )
    async def space(self, info: GraphInfo) -> Space | None:
        row = await info.context.loaders.space.load(self.row.space_id)
        return None if row is None else Space.from_row(row)


@strawberry.type(
    description="A registered cluster: where things run. Its status comes from the probe."
)
class Space(Node):
    row: Private[SpaceRow]
    id: strawberry.ID = strawberry.field(description="The space's id.")
    name: str = strawberry.field(description="Unique among the org's registered spaces.")
    provider: Provider = strawberry.field(description="Where the cluster runs.")
    space_type: SpaceType = strawberry.field(description="What runs in the space.")
    synthetic: bool = strawberry.field(
        description="Synthetic spaces are placeholders, not real clusters; scaling-aware pickers exclude them."
    )
    consecutive_failures: int = strawberry.field(
        description="Failed probes since the last success; at the threshold (default 3) the "
        "space goes INACTIVE."
    )
    created_at: datetime = strawberry.field(description="When the space was registered.")
    deregistered_at: datetime | None = strawberry.field(
        description="When the space was deregistered; null while registered."
    )
    # A page's answers read ahead, by field and arguments (schema.execution.PREPARED).
    prepared: Private[dict[Hashable, Any] | None] = None

    @classmethod
    def from_row(cls, row: SpaceRow) -> Space:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            name=row.name,
            provider=Provider[row.provider],  # the stored values are the names
            space_type=SpaceType[row.space_type],
            synthetic=row.synthetic,
            consecutive_failures=row.consecutive_failures,
            created_at=row.created_at,
            deregistered_at=row.deregistered_at,
        )

    @strawberry.field(
        description="Null only for GENERIC spaces. Needs cloudaccount:view.",
        extensions=needs("cloudaccount:view"),
        graphql_type=CloudAccount | None,
    )
    def cloud_account(
        self, info: GraphInfo
    ) -> CloudAccount | Awaitable[CloudAccount | None] | None:
        if self.row.cloud_account_id is None:
            return None
        return self._load_cloud_account(info, self.row.cloud_account_id)

    @staticmethod
    async def _load_cloud_account(info: GraphInfo, account_id: str) -> CloudAccount | None:
        row = await info.context.loaders.cloud_account.load(account_id)
        return None if row is None else CloudAccount.from_row(row)

    @strawberry.field(description="The cluster's provider identity.")
    def config(self) -> SpaceConfig:
        return SpaceConfig(**reads.space_config(self.row))

    @strawberry.field(description="The health every view shows (probes, hold, staleness).")
    def status(self, info: GraphInfo) -> SpaceStatus:
        return SpaceStatus[reads.space_shown(info.context, self.row)[0]]

    @strawberry.field(
        description="Why the space has its status (the hold, a stale probe, the failure behind "
        "INACTIVE or the failures counting toward it, deregistration, a registration not yet "
        "probed); null for a healthy ACTIVE space."
    )
    def status_reason(self, info: GraphInfo) -> str | None:
        reason = reads.space_shown(info.context, self.row)[1]
        return None if reason is None else reason.words

    @strawberry.field(description="statusReason for programs; null when statusReason is.")
    def status_reason_code(self, info: GraphInfo) -> StatusReasonCode | None:
        reason = reads.space_shown(info.context, self.row)[1]
        return None if reason is None else StatusReasonCode[reason.code]

    @strawberry.field(
        description="True while an operator hold (setSpaceStatus INACTIVE) is in force."
    )
    def held(self) -> bool:
        return self.row.held

    @strawberry.field(
        description="The latest probe's outcome; null before the first probe. Kept as history "
        "after deregistration."
    )
    def last_probe(self) -> ProbeResult | None:
        return ProbeResult.of_space(self.row)

    @strawberry.field(
        description="Most recent first.",
        extensions=needs("space:view"),
    )
    async def status_events(
        self,
        info: GraphInfo,
        first: Annotated[
            int | None,
            strawberry.argument(
                description="How many of the newest events: 1 to 100 (default 20)."
            ),
        ] = None,
    ) -> list[SpaceStatusEvent]:
        rows = await reads.status_events(info.context, self.row.id, first)
        return [SpaceStatusEvent.from_row(row) for row in rows]

    @strawberry.field(
        description="Live from the cluster. Null (with a PROVIDER_ERROR) when the cluster cannot "
        "be reached. Needs namespace:view.",
        extensions=needs("namespace:view"),
    )
    async def namespaces(self, info: GraphInfo) -> list[Namespace] | None:
        found = await namespace_reads.of_space(info.context, self.row)
        return [Namespace.from_domain(namespace) for namespace in found]

    @strawberry.field(
        description="The environments bound to this space. Needs environment:view.",
        extensions=needs("environment:view"),
    )
    async def environments(self, info: GraphInfo) -> list[Environment]:
        rows = await info.context.loaders.environments_of_space.load(self.row.id)
        return [Environment.from_row(row) for row in rows]

    @strawberry.field(
        description="The caller's org's CloudSpaces hosted on this space; requires cloudspace:view.",
        extensions=needs("cloudspace:view"),
    )
    async def cloud_spaces(self, info: GraphInfo) -> list[CloudSpace]:
        rows = await cloudspace_reads.of_space(info.context, self.row.id)
        return [CloudSpace.from_row(row) for row in rows]


@strawberry.type(description="A namespace on a space's cluster, read live.")
class Namespace:
    space_row: Private[SpaceRow]
    name: str = strawberry.field(description="The namespace's name on the cluster.")
    managed: bool = strawberry.field(
        description="Created by spacedock (carries its managed-by label)."
    )
    created_at: datetime | None = strawberry.field(
        description="The cluster's creationTimestamp, if it reported one."
    )

    @classmethod
    def from_domain(cls, namespace: namespace_rules.Namespace) -> Namespace:
        return cls(
            space_row=namespace.space,
            name=namespace.name,
            managed=namespace.managed,
            created_at=namespace.created_at,
        )

    @strawberry.field(
        description="Stable for a space and a name, so client caches can normalise namespaces."
    )
    def id(self) -> strawberry.ID:
        return strawberry.ID(namespace_rules.namespace_id(self.space_row.id, self.name))

    @strawberry.field(
        description="The space whose cluster holds the namespace.", extensions=needs("space:view")
    )
    def space(self) -> Space:
        return Space.from_row(self.space_row)


@strawberry.type(description="A deployment target: a space and a namespace on it.")
class Environment(Node):
    row: Private[tables.Environment | EnvironmentRecord]
    id: strawberry.ID = strawberry.field(description="The environment's id.")
    name: str = strawberry.field(description="Unique in the org.")
    namespace: str = strawberry.field(description="The namespace on the space's cluster.")

    @classmethod
    def from_row(cls, row: tables.Environment | EnvironmentRecord) -> Environment:
        return cls(row=row, id=strawberry.ID(row.id), name=row.name, namespace=row.namespace)

    @strawberry.field(
        description="The bound space, deregistered or not. Needs space:view.",
        extensions=needs("space:view"),
    )
    async def space(self, info: GraphInfo) -> Space | None:
        row = await info.context.loaders.space.load(self.row.space_id)
        return None if row is None else Space.from_row(row)

    @strawberry.field(
        description='Why the environment cannot deploy now, e.g. "Space deregistered"; null when it can.'
    )
    async def gate(self, info: GraphInfo) -> str | None:
        return await reads.environment_gate(info.context, self.row)


# The Space fields whose answers one health reading gives.
STATUS_FIELDS = frozenset({"status", "statusReason", "statusReasonCode"})


def prepare_spaces(
    context: Context,
    spaces: Sequence[Space],
    links: dict[str, reads.SpaceLinks],
    status: bool,
) -> None:
    """Each space's answers read ahead for a page (schema.execution answers those fields
    from them without calling their resolvers); with `status`, its health as well."""
    accounts: dict[str, CloudAccount] = {}
    health = context.services.health
    stale_before = health.stale_before(utcnow())
    for space in spaces:
        link = links[space.row.id]
        answers: dict[Hashable, Any] = {}
        if link.cloud_account_loaded:
            row = link.cloud_account
            if row is not None and row.id not in accounts:
                accounts[row.id] = CloudAccount.from_row(row)
            answers["cloudAccount"] = None if row is None else accounts[row.id]
        if link.environments is not None:
            answers["environments"] = [Environment.from_row(e) for e in link.environments]
        for key, events in link.events.items():
            answers[key] = [SpaceStatusEvent.from_row(event) for event in events]
        if status:
            shown, reason = health.shown_if_stale_before(space.row, stale_before)
            answers["status"] = SpaceStatus[shown]
            answers["statusReason"] = None if reason is None else reason.words
            answers["statusReasonCode"] = None if reason is None else StatusReasonCode[reason.code]
        space.prepared = answers


# -- CloudSpaces (issue 9) ----------------------------------------------------


@strawberry.type(description="CPU and memory: a CloudSpace's quota, or what its workloads use.")
class Quota:
    cpu: float = strawberry.field(description="CPU cores (requests).")
    memory_mib: int = strawberry.field(name="memoryMiB", description="Memory in MiB (requests).")


@strawberry.type(description="A virtual cluster of a CloudSpace, with its own API server.")
class VCluster:
    row: Private[tables.CloudSpace]
    name: str = strawberry.field(description="The vCluster's name (the CloudSpace's).")
    ready: bool = strawberry.field(
        description=(
            "True once its API server answers and its tenant account exists (during "
            "INSTALLING_FLUX), until DELETING; kubeconfigs can be downloaded from then on."
        )
    )

    @strawberry.field(
        description=(
            "Requires cloudspace:kubeconfig. A kubeconfig for the vCluster whose credential is "
            "a short-lived token (SPACEDOCK_KUBECONFIG_TTL_S, default 3600 s), never the admin "
            "certificate. Null while the vCluster is not ready."
        )
    )
    async def kubeconfig(self, info: GraphInfo) -> str | None:
        minted = await cloudspace_reads.kubeconfig(info.context, self.row)
        return None if minted is None else minted.text

    @strawberry.field(description="When the credential inside kubeconfig expires.")
    async def kubeconfig_expires_at(self, info: GraphInfo) -> datetime | None:
        minted = await cloudspace_reads.kubeconfig(info.context, self.row)
        return None if minted is None else minted.expires_at


@strawberry.type(
    description=(
        "A tenant's own Kubernetes environment: a vCluster on a host space, with a CPU and "
        "memory quota, Flux, and kubeconfigs to download."
    )
)
class CloudSpace(Node):
    row: Private[tables.CloudSpace]
    id: strawberry.ID = strawberry.field(description="Opaque id (cs_…).")
    name: str = strawberry.field(description="A DNS-1123 label, unique in the org.")
    phase: CloudSpacePhase = strawberry.field(description="Where it stands in its lifecycle.")
    message: str | None = strawberry.field(
        description="Why the CloudSpace is FAILED, or what blocks DELETING."
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
    def from_row(cls, row: tables.CloudSpace) -> CloudSpace:
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

    @strawberry.field(description="Its vClusters; one, named like the CloudSpace.")
    def vclusters(self) -> list[VCluster]:
        return [VCluster(row=self.row, name=self.row.name, ready=cloudspace_reads.ready(self.row))]


@strawberry.type(description="A phase or message change of a CloudSpace.")
class CloudSpaceEvent:
    row: Private[tables.CloudSpaceEvent]
    cloud_space_id: strawberry.ID = strawberry.field(description="The CloudSpace it is about.")
    previous: CloudSpacePhase | None = strawberry.field(
        description="The phase before; null for the first event."
    )
    phase: CloudSpacePhase = strawberry.field(description="The phase now; DELETED is the last.")
    message: str | None = strawberry.field(
        description="Why it FAILED, what blocks DELETING, or null."
    )
    at: datetime = strawberry.field(description="When it happened.")

    @classmethod
    def from_row(cls, row: tables.CloudSpaceEvent) -> CloudSpaceEvent:
        return cls(
            row=row,
            cloud_space_id=strawberry.ID(row.cloud_space_id),
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


# -- Access: roles, API tokens, the audit log (issue 11) ----------------------


@strawberry.type(
    description="A named set of policies. The three system roles are listed too and cannot "
    "be changed."
)
class RoleDefinition(Node):
    id: strawberry.ID = strawberry.field(
        description="A system role's id is its name (ADMIN, EDITOR, VIEWER)."
    )
    name: str = strawberry.field(description="Unique in the org; system role names are reserved.")
    system: bool = strawberry.field(description="True for ADMIN, EDITOR and VIEWER.")
    policies: list[str] = strawberry.field(description="The policies the role grants.")

    @classmethod
    def from_row(cls, row: tables.RoleDefinition) -> RoleDefinition:
        return cls.from_domain(role_rules.view_of(row))

    @classmethod
    def from_domain(cls, role: role_rules.RoleView) -> RoleDefinition:
        return cls(
            id=strawberry.ID(role.id),
            name=role.name,
            system=role.system,
            policies=list(role.policies),
        )


@strawberry.type(
    description="An API token's metadata; the secret is shown once, by createApiToken."
)
class ApiToken(Node):
    row: Private[tables.ApiToken]
    id: strawberry.ID = strawberry.field(description="The token's id (revokeApiToken takes it).")
    name: str = strawberry.field(description="What the token is for, as its creator named it.")
    created_at: datetime = strawberry.field(description="When the token was created.")
    expires_at: datetime | None = strawberry.field(
        description="When the token stops working; null: never."
    )
    last_used_at: datetime | None = strawberry.field(
        description="When the token was last used, to the minute (written at most once a minute)."
    )
    revoked_at: datetime | None = strawberry.field(
        description="When the token was revoked; null while it is not."
    )

    @classmethod
    def from_row(cls, row: tables.ApiToken) -> ApiToken:
        return cls(
            row=row,
            id=strawberry.ID(row.id),
            name=row.name,
            created_at=row.created_at,
            expires_at=row.expires_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )

    @strawberry.field(description="The role the token grants.", extensions=needs("token:manage"))
    async def role(self, info: GraphInfo) -> RoleDefinition:
        return RoleDefinition.from_domain(await access_reads.role_of_token(info.context, self.row))
