"""The Mutation root: one input object in, one payload out."""

from __future__ import annotations

from typing import Annotated

import strawberry

from core.clouds import ClusterRef
from core.cloudspaces import CreateRequest
from core.spaces import RegisterSpaceRequest
from resolvers import access, cloudspaces, mutations, namespaces
from schema.access import (
    ApiTokenPayload,
    CreateApiTokenInput,
    CreateApiTokenPayload,
    CreateRoleInput,
    DeleteRoleInput,
    RevokeApiTokenInput,
    RolePayload,
    UpdateRoleInput,
)
from schema.cloudspace_inputs import (
    CreateCloudSpaceInput,
    DeleteCloudSpaceInput,
    UpdateCloudSpaceQuotaInput,
)
from schema.inputs import (
    BindEnvironmentInput,
    ClusterAccessInput,
    CreateCloudAccountInput,
    CreateEnvironmentInput,
    CreateNamespaceInput,
    DeleteCloudAccountInput,
    DeregisterSpaceInput,
    RegisterSpaceInput,
    RotateCloudAccountCredentialsInput,
    SetSpaceStatusInput,
)
from schema.payloads import (
    CloudAccountPayload,
    CloudSpacePayload,
    ClusterAccessPayload,
    DeletePayload,
    EnvironmentPayload,
    NamespacePayload,
    SpacePayload,
    payload,
    user_errors,
)
from schema.types import (
    ApiToken,
    CloudAccount,
    CloudSpace,
    ClusterAccess,
    Environment,
    GraphInfo,
    Namespace,
    RoleDefinition,
    Space,
)


def _cluster_ref(input: ClusterAccessInput) -> ClusterRef:
    return ClusterRef(
        input.cloud_account_id, input.region, input.cluster_name, input.resource_group
    )


INPUT = strawberry.argument(description="The call's input; userErrors paths start at it.")


@strawberry.type(description="Changes. Each takes one input and answers a payload with userErrors.")
class Mutation:
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

    @strawberry.mutation(
        description="Registers a cluster as a space; its first probe runs within seconds. Needs space:create."
    )
    async def register_space(
        self, info: GraphInfo, input: Annotated[RegisterSpaceInput, INPUT]
    ) -> SpacePayload:
        request = RegisterSpaceRequest(
            name=input.name,
            provider=input.provider.name,
            space_type=input.space_type.name if input.space_type else "KUBERNETES",
            cloud_account_id=input.cloud_account_id,
            config=input.config.given(),
            synthetic=bool(input.synthetic),
        )
        outcome = await mutations.register_space(info.context, request)
        return payload(SpacePayload, "space", outcome, Space.from_row)

    @strawberry.mutation(
        description="INACTIVE puts an operator hold on the space; ACTIVE lifts it and probes at once. Needs space:update."
    )
    async def set_space_status(
        self, info: GraphInfo, input: Annotated[SetSpaceStatusInput, INPUT]
    ) -> SpacePayload:
        outcome = await mutations.set_space_status(info.context, input.id, input.status.name)
        return payload(SpacePayload, "space", outcome, Space.from_row)

    @strawberry.mutation(
        description="Deregisters a space (soft delete): probing stops, its grant is removed, its environments are gated. Needs space:delete."
    )
    async def deregister_space(
        self, info: GraphInfo, input: Annotated[DeregisterSpaceInput, INPUT]
    ) -> SpacePayload:
        outcome = await mutations.deregister_space(info.context, input.id)
        return payload(SpacePayload, "space", outcome, Space.from_row)

    @strawberry.mutation(
        description="Creates a namespace on the space's cluster, labelled as managed by spacedock. Needs namespace:create."
    )
    async def create_namespace(
        self, info: GraphInfo, input: Annotated[CreateNamespaceInput, INPUT]
    ) -> NamespacePayload:
        outcome = await namespaces.create(info.context, input.space_id, input.name)
        return payload(NamespacePayload, "namespace", outcome, Namespace.from_domain)

    @strawberry.mutation(
        description="Creates an environment on a space and namespace. Needs environment:create."
    )
    async def create_environment(
        self, info: GraphInfo, input: Annotated[CreateEnvironmentInput, INPUT]
    ) -> EnvironmentPayload:
        outcome = await mutations.create_environment(
            info.context, input.name, input.space_id, input.namespace
        )
        return payload(EnvironmentPayload, "environment", outcome, Environment.from_row)

    @strawberry.mutation(
        description="Points an environment at another space and namespace. Needs environment:update."
    )
    async def bind_environment(
        self, info: GraphInfo, input: Annotated[BindEnvironmentInput, INPUT]
    ) -> EnvironmentPayload:
        outcome = await mutations.bind_environment(
            info.context, input.id, input.space_id, input.namespace
        )
        return payload(EnvironmentPayload, "environment", outcome, Environment.from_row)

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

    # -- Access: custom roles and API tokens (issue 11) --------------------------

    @strawberry.mutation(
        description="Creates a custom role: a named set of policies. Needs role:manage."
    )
    async def create_role(
        self, info: GraphInfo, input: Annotated[CreateRoleInput, INPUT]
    ) -> RolePayload:
        outcome = await access.create_role(info.context, input.name, input.policies)
        return payload(RolePayload, "role", outcome, RoleDefinition.from_domain)

    @strawberry.mutation(
        description="Replaces a custom role's policies; tokens holding it get them at once. "
        "Needs role:manage."
    )
    async def update_role(
        self, info: GraphInfo, input: Annotated[UpdateRoleInput, INPUT]
    ) -> RolePayload:
        outcome = await access.update_role(info.context, input.id, input.policies)
        return payload(RolePayload, "role", outcome, RoleDefinition.from_domain)

    @strawberry.mutation(
        description="Deletes a custom role; PRECONDITION_FAILED while a token that is not "
        "revoked holds it. Needs role:manage."
    )
    async def delete_role(
        self, info: GraphInfo, input: Annotated[DeleteRoleInput, INPUT]
    ) -> DeletePayload:
        outcome = await access.delete_role(info.context, input.id)
        return payload(DeletePayload, "deleted_id", outcome, strawberry.ID)

    @strawberry.mutation(
        description="Creates an API token of the caller's org; its secret is in this payload "
        "only. Needs token:manage."
    )
    async def create_api_token(
        self, info: GraphInfo, input: Annotated[CreateApiTokenInput, INPUT]
    ) -> CreateApiTokenPayload:
        minted, problems = await access.create_token(
            info.context, input.name, input.role, input.expires_in_days
        )
        if minted is None:
            return CreateApiTokenPayload(
                api_token=None, token=None, user_errors=user_errors(problems)
            )
        return CreateApiTokenPayload(
            api_token=ApiToken.from_row(minted.row), token=minted.secret, user_errors=[]
        )

    @strawberry.mutation(
        description="Revokes an API token: it is refused at once, and its open WebSockets "
        "close within seconds. Revoking twice is harmless. Needs token:manage."
    )
    async def revoke_api_token(
        self, info: GraphInfo, input: Annotated[RevokeApiTokenInput, INPUT]
    ) -> ApiTokenPayload:
        outcome = await access.revoke_token(info.context, input.id)
        return payload(ApiTokenPayload, "api_token", outcome, ApiToken.from_row)
