"""Object types of spaces and what hangs off them: namespaces and environments (status
events and probe results are schema.spaces.events). Each wraps a stored row and resolves
its links through the request's DataLoaders, so nested lists never turn into N+1 queries."""

from __future__ import annotations

from collections.abc import Awaitable, Hashable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Optional

import strawberry
from strawberry import Private

from core.spaces import namespaces as namespace_rules
from db import tables
from db.records import EnvironmentRecord, SpaceRow
from resolvers.apps import reads as app_reads
from resolvers.cloudspaces import fields as cloudspace_reads
from resolvers.spaces import namespaces as namespace_reads
from resolvers.spaces import reads
from schema.common.enums import (
    Provider,
    SpaceStatus,
    SpaceType,
    StatusReasonCode,
)
from schema.common.info import GraphInfo, type_named
from schema.common.relay import Node
from schema.engine.arguments import After, First
from schema.engine.policies import needs
from schema.spaces.events import ProbeResult, SpaceStatusEvent

if TYPE_CHECKING:
    from schema.apps.types import AppConnection
    from schema.cloud_accounts.types import CloudAccount
    from schema.cloudspaces.types import CloudSpace

# Types of the domains above this one, named lazily (their modules import this one).
LazyCloudAccount = Annotated["CloudAccount", strawberry.lazy("schema.cloud_accounts.types")]
LazyCloudSpace = Annotated["CloudSpace", strawberry.lazy("schema.cloudspaces.types")]
LazyAppConnection = Annotated["AppConnection", strawberry.lazy("schema.apps.types")]


@strawberry.type(description="How many spaces match a filter, by status: a dashboard's header.")
class SpaceCounts:
    total: int = strawberry.field(description="Every matching space.")
    active: int = strawberry.field(description="Those that read ACTIVE.")
    inactive: int = strawberry.field(description="Those that read INACTIVE.")
    unknown: int = strawberry.field(description="Those that read UNKNOWN.")
    held: int = strawberry.field(description="Those under an operator hold (also INACTIVE).")


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
    # A page's answers read ahead, by field and arguments (schema.engine.field_plans.PREPARED).
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
        graphql_type=Optional[LazyCloudAccount],  # noqa: UP045 (a lazy type has no `|`)
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
        return None if row is None else type_named(info, "CloudAccount").from_row(row)

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
        return self._reason_words(info)

    @strawberry.field(description="statusReason for programs; null when statusReason is.")
    def status_reason_code(self, info: GraphInfo) -> StatusReasonCode | None:
        return self._reason_code(info)

    @strawberry.field(
        description="The same as statusReason, under SpaceStatusEvent's name: a space and its "
        "events read alike."
    )
    def reason(self, info: GraphInfo) -> str | None:
        return self._reason_words(info)

    @strawberry.field(
        description="The same as statusReasonCode, under SpaceStatusEvent's name: a space and "
        "its events read alike."
    )
    def reason_code(self, info: GraphInfo) -> StatusReasonCode | None:
        return self._reason_code(info)

    def _reason_words(self, info: GraphInfo) -> str | None:
        reason = reads.space_shown(info.context, self.row)[1]
        return None if reason is None else reason.words

    def _reason_code(self, info: GraphInfo) -> StatusReasonCode | None:
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
    async def cloud_spaces(self, info: GraphInfo) -> list[LazyCloudSpace]:
        rows = await cloudspace_reads.of_space(info.context, self.row.id)
        wrap = type_named(info, "CloudSpace")
        return [wrap.from_row(row) for row in rows]


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

    @strawberry.field(
        description="The apps that run in its namespace, oldest first. Needs app:view.",
        extensions=needs("app:view"),
        graphql_type=Optional[LazyAppConnection],  # noqa: UP045 (a lazy type has no `|`)
    )
    async def apps(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> AppConnection | None:
        page = await app_reads.of_environment(info.context, self.row.id, first, after)
        return type_named(info, "AppConnection").of(page, type_named(info, "App"))  # type: ignore[no-any-return]
