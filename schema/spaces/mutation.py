"""The spaces' part of the Mutation root: spaces, namespaces, environments."""

from __future__ import annotations

from typing import Annotated

import strawberry

from core.spaces.lifecycle import RegisterSpaceRequest
from resolvers.spaces import mutations, namespaces
from schema.common.info import GraphInfo
from schema.common.payloads import payload
from schema.engine.arguments import INPUT
from schema.spaces.inputs import (
    BindEnvironmentInput,
    CreateEnvironmentInput,
    CreateNamespaceInput,
    DeregisterSpaceInput,
    RegisterSpaceInput,
    SetSpaceStatusInput,
)
from schema.spaces.payloads import EnvironmentPayload, NamespacePayload, SpacePayload
from schema.spaces.types import Environment, Namespace, Space


@strawberry.type
class SpacesMutation:
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
