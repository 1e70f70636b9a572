"""Object types of cloud accounts: the account, its cluster grants, the clusters it discovers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry
from strawberry import Private

from db import tables
from db.records import CloudAccountRow
from resolvers.cloud_accounts import reads as account_reads
from resolvers.spaces import reads
from schema.common.enums import (
    Provider,
)
from schema.common.info import GraphInfo
from schema.common.relay import Connection, Node
from schema.engine.arguments import After, First
from schema.engine.policies import needs
from schema.spaces.types import Space


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
    resource_group: str | None = strawberry.field(
        description="AZURE: its resource group, which grantClusterAccess and registerSpace "
        "name; null on other clouds."
    )
    project_id: str | None = strawberry.field(
        description="GCP: its project (the account's); null on other clouds."
    )
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
        found = await account_reads.discovered_clusters(info.context, self.row, region)
        return [
            DiscoveredCluster(
                name=each.cluster.name,
                region=each.cluster.region,
                endpoint=each.cluster.endpoint,
                version=each.cluster.version,
                resource_group=each.cluster.resource_group,
                project_id=each.cluster.project_id,
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
