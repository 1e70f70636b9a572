"""The Query, Mutation and Subscription roots: each domain's part, merged (as pycon does),
and the fields no one domain owns (node, nodes)."""

from __future__ import annotations

from typing import Annotated, Any

import strawberry

from resolvers.common import nodes as node_reads
from schema.access.audit import AuditEvent
from schema.access.mutation import AccessMutation
from schema.access.query import AccessQuery
from schema.access.types import ApiToken, Org, RoleDefinition
from schema.advisor.mutation import AdvisorMutation
from schema.advisor.query import AdvisorQuery
from schema.advisor.subscription import AdvisorSubscription
from schema.advisor.types import AdvisorFinding
from schema.apps.mutation import AppsMutation
from schema.apps.query import AppsQuery
from schema.apps.subscription import AppsSubscription
from schema.apps.types import App, AppRevision
from schema.cloud_accounts.mutation import CloudAccountsMutation
from schema.cloud_accounts.query import CloudAccountsQuery
from schema.cloud_accounts.types import CloudAccount
from schema.cloudspaces.mutation import CloudSpacesMutation
from schema.cloudspaces.query import CloudSpacesQuery
from schema.cloudspaces.subscription import CloudSpacesSubscription
from schema.cloudspaces.types import CloudSpace, VCluster
from schema.common.info import GraphInfo
from schema.common.relay import Node
from schema.engine.arguments import ObjectId
from schema.probing.subscription import ProbingSubscription
from schema.spaces.events import ProbeEvent, SpaceStatusEvent
from schema.spaces.mutation import SpacesMutation
from schema.spaces.query import SpacesQuery
from schema.spaces.types import Environment, Space

NODE_TYPES: dict[str, type] = {
    "Org": Org,
    "CloudAccount": CloudAccount,
    "Space": Space,
    "Environment": Environment,
    "CloudSpace": CloudSpace,
    "VCluster": VCluster,
    "SpaceStatusEvent": SpaceStatusEvent,
    "ProbeEvent": ProbeEvent,
    "ApiToken": ApiToken,
    "RoleDefinition": RoleDefinition,
    "AuditEvent": AuditEvent,
    "AdvisorFinding": AdvisorFinding,
    "App": App,
    "AppRevision": AppRevision,
}


def as_node(kind: str, row: Any) -> Node:
    return NODE_TYPES[kind].from_row(row)  # type: ignore[attr-defined, no-any-return]


@strawberry.type
class NodeQuery:
    @strawberry.field(
        description="Any object by id; null when it is unknown or belongs to another org."
    )
    async def node(self, info: GraphInfo, id: ObjectId) -> Node | None:
        found = await node_reads.node(info.context, id)
        return None if found is None else as_node(*found)

    @strawberry.field(
        description="In the order asked; null for ids that are unknown or not visible. "
        "At most 100 ids."
    )
    async def nodes(
        self,
        info: GraphInfo,
        ids: Annotated[
            list[strawberry.ID],
            strawberry.argument(description="Up to 100 ids of any kind; more is BAD_USER_INPUT."),
        ],
    ) -> list[Node | None]:
        found = await node_reads.nodes(info.context, ids)
        return [None if hit is None else as_node(*hit) for hit in found]


@strawberry.type(
    description="Reads. Every list is a connection; every object is the caller's org's."
)
class Query(
    NodeQuery,
    AccessQuery,
    CloudAccountsQuery,
    SpacesQuery,
    CloudSpacesQuery,
    AppsQuery,
    AdvisorQuery,
):
    pass


@strawberry.type(description="Changes. Each takes one input and answers a payload with userErrors.")
class Mutation(
    CloudAccountsMutation,
    SpacesMutation,
    CloudSpacesMutation,
    AppsMutation,
    AccessMutation,
    AdvisorMutation,
):
    pass


@strawberry.type(
    description="Live events over graphql-transport-ws; each follows the caller's org."
)
class Subscription(
    ProbingSubscription, CloudSpacesSubscription, AppsSubscription, AdvisorSubscription
):
    pass
