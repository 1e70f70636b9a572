"""The cloud accounts' part of the Mutation root: accounts and their cluster grants."""

from __future__ import annotations

from typing import Annotated

import strawberry

from core.spaces.clouds import ClusterRef
from resolvers.cloud_accounts import mutations
from schema.cloud_accounts.inputs import (
    ClusterAccessInput,
    CreateCloudAccountInput,
    DeleteCloudAccountInput,
    RotateCloudAccountCredentialsInput,
)
from schema.cloud_accounts.payloads import CloudAccountPayload, ClusterAccessPayload
from schema.cloud_accounts.types import CloudAccount, ClusterAccess
from schema.common.info import GraphInfo
from schema.common.payloads import DeletePayload, payload
from schema.engine.arguments import INPUT


def _cluster_ref(input: ClusterAccessInput) -> ClusterRef:
    return ClusterRef(
        input.cloud_account_id, input.region, input.cluster_name, input.resource_group
    )


@strawberry.type
class CloudAccountsMutation:
    @strawberry.mutation(
        description="Stores a cloud account's credentials (encrypted; never returned) once the cloud has accepted them (PROVIDER_ERROR saying what it said otherwise). Needs cloudaccount:create."
    )
    async def create_cloud_account(
        self, info: GraphInfo, input: Annotated[CreateCloudAccountInput, INPUT]
    ) -> CloudAccountPayload:
        outcome = await mutations.create_cloud_account(
            info.context, input.name, input.provider.name, input.credentials
        )
        return payload(CloudAccountPayload, "cloud_account", outcome, CloudAccount.from_row)

    @strawberry.mutation(
        description=(
            "Replaces an account's credentials after the cloud has accepted the new ones; ids, "
            "grants, spaces and environments stay, cached cluster credentials are dropped. "
            "Needs cloudaccount:update."
        )
    )
    async def rotate_cloud_account_credentials(
        self, info: GraphInfo, input: Annotated[RotateCloudAccountCredentialsInput, INPUT]
    ) -> CloudAccountPayload:
        outcome = await mutations.rotate_cloud_account_credentials(
            info.context, input.id, input.credentials
        )
        return payload(CloudAccountPayload, "cloud_account", outcome, CloudAccount.from_row)

    @strawberry.mutation(
        description="Deletes a cloud account; PRECONDITION_FAILED while registered spaces use it. Needs cloudaccount:delete."
    )
    async def delete_cloud_account(
        self, info: GraphInfo, input: Annotated[DeleteCloudAccountInput, INPUT]
    ) -> DeletePayload:
        outcome = await mutations.delete_cloud_account(info.context, input.id)
        return payload(DeletePayload, "deleted_id", outcome, strawberry.ID)

    @strawberry.mutation(
        description="Lets a cloud account mint credentials for one cluster, once the cloud shows the cluster exists on the account (NOT_FOUND otherwise); granting twice is idempotent. Needs cloudaccount:update."
    )
    async def grant_cluster_access(
        self, info: GraphInfo, input: Annotated[ClusterAccessInput, INPUT]
    ) -> ClusterAccessPayload:
        outcome = await mutations.grant_cluster_access(info.context, _cluster_ref(input))
        return payload(ClusterAccessPayload, "cluster_access", outcome, ClusterAccess.from_row)

    @strawberry.mutation(
        description="Takes a cloud account's access to one cluster away; its spaces' probes then fail with \"cluster access revoked\". Needs cloudaccount:update."
    )
    async def revoke_cluster_access(
        self, info: GraphInfo, input: Annotated[ClusterAccessInput, INPUT]
    ) -> ClusterAccessPayload:
        outcome = await mutations.revoke_cluster_access(info.context, _cluster_ref(input))
        return payload(ClusterAccessPayload, "cluster_access", outcome, ClusterAccess.from_row)
