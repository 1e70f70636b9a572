"""The apps' part of the Mutation root."""

from __future__ import annotations

from typing import Annotated

import strawberry

from core.apps.requests import CreateRequest
from resolvers.apps import mutations as apps
from schema.apps.inputs import (
    AppIdInput,
    AppRevisionIdInput,
    CreateAppInput,
    DeleteAppInput,
    RollbackAppInput,
    UpdateAppInput,
)
from schema.apps.payloads import AppPayload
from schema.common.info import GraphInfo
from schema.engine.arguments import INPUT


@strawberry.type
class AppsMutation:
    @strawberry.mutation(
        description="Creates an app; its first revision is QUEUED and delivered when the "
        "target can take it. PRECONDITION_FAILED when an environment's space does not run Flux."
    )
    async def create_app(
        self, info: GraphInfo, input: Annotated[CreateAppInput, INPUT]
    ) -> AppPayload:
        request = CreateRequest(
            name=input.name,
            target=input.target.request(),
            source=input.source.request(),
            suspended=input.suspended,
        )
        return AppPayload.of(await apps.create(info.context, request))

    @strawberry.mutation(
        description="A new source for an app (a ref, path, chart version or values): a new "
        "revision. The same source again makes none."
    )
    async def update_app(
        self, info: GraphInfo, input: Annotated[UpdateAppInput, INPUT]
    ) -> AppPayload:
        request = input.source.request(input.remove_credential)
        return AppPayload.of(await apps.update(info.context, input.id, request))

    @strawberry.mutation(description="Flux stops applying the app (spec.suspend) until resumeApp.")
    async def suspend_app(self, info: GraphInfo, input: Annotated[AppIdInput, INPUT]) -> AppPayload:
        return AppPayload.of(await apps.set_suspended(info.context, input.id, True))

    @strawberry.mutation(description="Flux applies the app again.")
    async def resume_app(self, info: GraphInfo, input: Annotated[AppIdInput, INPUT]) -> AppPayload:
        return AppPayload.of(await apps.set_suspended(info.context, input.id, False))

    @strawberry.mutation(
        description="Asks Flux to fetch and apply the app now (reconcile.fluxcd.io/requestedAt)."
    )
    async def sync_app(self, info: GraphInfo, input: Annotated[AppIdInput, INPUT]) -> AppPayload:
        return AppPayload.of(await apps.sync(info.context, input.id))

    @strawberry.mutation(
        description="Deletes an app (DELETING, then an AppEvent DELETED): Flux prunes what it "
        "deployed, then its Flux objects go. confirmName must equal its name."
    )
    async def delete_app(
        self, info: GraphInfo, input: Annotated[DeleteAppInput, INPUT]
    ) -> AppPayload:
        return AppPayload.of(await apps.delete(info.context, input.id, input.confirm_name))

    @strawberry.mutation(
        description="Puts a DEAD_LETTERED revision back in the queue with fresh tries, once its "
        "target can take it."
    )
    async def requeue_app_revision(
        self, info: GraphInfo, input: Annotated[AppRevisionIdInput, INPUT]
    ) -> AppPayload:
        return AppPayload.of(await apps.requeue(info.context, input.id))

    @strawberry.mutation(description="A new revision asking for an earlier revision's source.")
    async def rollback_app(
        self, info: GraphInfo, input: Annotated[RollbackAppInput, INPUT]
    ) -> AppPayload:
        return AppPayload.of(await apps.rollback(info.context, input.revision_id))
