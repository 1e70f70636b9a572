"""The Subscription root, served over graphql-transport-ws."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import strawberry

from resolvers import cloudspaces, subscriptions
from schema.types import CloudSpaceEvent, GraphInfo, SpaceStatusEvent


@strawberry.type(
    description="Live events over graphql-transport-ws; each follows the caller's org."
)
class Subscription:
    @strawberry.subscription(
        description="Every status change of the spaces the subscriber may view; spaceId narrows to one."
    )
    async def space_status_changed(
        self,
        info: GraphInfo,
        space_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(
                description="Follow only this space; an unknown or foreign id is NOT_FOUND."
            ),
        ] = None,
    ) -> AsyncGenerator[SpaceStatusEvent, None]:
        async with aclosing(subscriptions.space_status_events(info.context, space_id)) as events:
            async for row in events:
                yield SpaceStatusEvent.from_row(row)

    @strawberry.subscription(
        description="Every phase or message change of the CloudSpaces the subscriber may view."
    )
    async def cloud_space_phase_changed(
        self,
        info: GraphInfo,
        cloud_space_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(description="Only this CloudSpace's changes; null: all of them."),
        ] = None,
    ) -> AsyncGenerator[CloudSpaceEvent, None]:
        async with aclosing(cloudspaces.phase_events(info.context, cloud_space_id)) as events:
            async for row in events:
                yield CloudSpaceEvent.from_row(row)
