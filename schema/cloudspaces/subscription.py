"""The CloudSpaces' part of the Subscription root."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import strawberry

from resolvers.cloudspaces import fields as cloudspaces
from resolvers.common.subscription_mode import SubscriptionMode
from schema.cloudspaces.types import CloudSpaceEvent
from schema.common.info import GraphInfo


@strawberry.type
class CloudSpacesSubscription:
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
        include_vclusters: Annotated[
            bool | None,
            strawberry.argument(
                name="includeVClusters",
                description=(
                    "Each vCluster's changes too (vclusterId set); false or null: the "
                    "CloudSpaces' own."
                ),
            ),
        ] = None,
    ) -> AsyncGenerator[CloudSpaceEvent, None]:
        mode = SubscriptionMode.of(info.root_value)
        found = cloudspaces.phase_events(
            info.context, mode, cloud_space_id, bool(include_vclusters)
        )
        async with aclosing(found) as events:
            async for row in events:
                yield CloudSpaceEvent.from_row(row)
