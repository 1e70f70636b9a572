"""The CloudSpaces' part of the Mutation root."""

from __future__ import annotations

from typing import Annotated

import strawberry

from core.cloudspaces.lifecycle import CreateRequest
from resolvers.cloudspaces import fields as cloudspaces
from resolvers.cloudspaces import vclusters
from schema.cloudspaces.inputs import (
    AddVClusterInput,
    CreateCloudSpaceInput,
    DeleteCloudSpaceInput,
    RemoveVClusterInput,
    UpdateCloudSpaceQuotaInput,
)
from schema.cloudspaces.payloads import CloudSpacePayload, VClusterPayload
from schema.cloudspaces.types import CloudSpace, VCluster
from schema.common.info import GraphInfo
from schema.common.payloads import payload
from schema.engine.arguments import INPUT


@strawberry.type
class CloudSpacesMutation:
    @strawberry.mutation(
        description=(
            "Creates a CloudSpace (PENDING). QUOTA_EXCEEDED, with the numbers, when the host "
            "cannot give the quota beside every other CloudSpace on it."
        )
    )
    async def create_cloud_space(
        self, info: GraphInfo, input: Annotated[CreateCloudSpaceInput, INPUT]
    ) -> CloudSpacePayload:
        request = CreateRequest(
            name=input.name,
            host_space_id=input.host_space_id,
            cpu=input.cpu,
            memory_mib=input.memory_mib,
        )
        outcome = await cloudspaces.create(info.context, request)
        return payload(CloudSpacePayload, "cloud_space", outcome, CloudSpace.from_row)

    @strawberry.mutation(
        description=(
            "Changes a CloudSpace's quota; the host and in-vCluster quotas follow at once. "
            "QUOTA_EXCEEDED below the current usage or beyond what the host can give."
        )
    )
    async def update_cloud_space_quota(
        self, info: GraphInfo, input: Annotated[UpdateCloudSpaceQuotaInput, INPUT]
    ) -> CloudSpacePayload:
        outcome = await cloudspaces.update_quota(
            info.context, input.id, input.cpu, input.memory_mib
        )
        return payload(CloudSpacePayload, "cloud_space", outcome, CloudSpace.from_row)

    @strawberry.mutation(
        description=(
            "Starts deleting a CloudSpace and everything in it (DELETING, then DELETED); "
            "confirmName must equal its name."
        )
    )
    async def delete_cloud_space(
        self, info: GraphInfo, input: Annotated[DeleteCloudSpaceInput, INPUT]
    ) -> CloudSpacePayload:
        outcome = await cloudspaces.delete(info.context, input.id, input.confirm_name)
        return payload(CloudSpacePayload, "cloud_space", outcome, CloudSpace.from_row)

    @strawberry.mutation(
        description=(
            "Requires cloudspace:create. Adds a vCluster to a CloudSpace (PENDING; READY like "
            "the CloudSpace's first), sharing its quota. Refused while the CloudSpace is "
            "DELETING, and for a name the CloudSpace already has."
        )
    )
    async def add_v_cluster(
        self, info: GraphInfo, input: Annotated[AddVClusterInput, INPUT]
    ) -> VClusterPayload:
        outcome = await vclusters.add(info.context, input.cloud_space_id, input.name)
        return payload(VClusterPayload, "vcluster", outcome, VCluster.from_row)

    @strawberry.mutation(
        description=(
            "Requires cloudspace:delete. Removes a vCluster and everything in it (DELETING, "
            "then gone; its CloudSpace's events say DELETED); confirmName must equal its name. "
            "A CloudSpace keeps at least one vCluster: removing the last is refused "
            "(deleteCloudSpace removes them all)."
        )
    )
    async def remove_v_cluster(
        self, info: GraphInfo, input: Annotated[RemoveVClusterInput, INPUT]
    ) -> VClusterPayload:
        outcome = await vclusters.remove(info.context, input.id, input.confirm_name)
        return payload(VClusterPayload, "vcluster", outcome, VCluster.from_row)
