"""The apps' part of the Subscription root."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import strawberry

from resolvers.apps import reads
from resolvers.common.subscription_mode import SubscriptionMode
from schema.apps.types import AppEvent
from schema.common.info import GraphInfo


@strawberry.type
class AppsSubscription:
    @strawberry.subscription(
        description="Every status and revision change of the apps the subscriber may view; "
        "narrowed to one app, CloudSpace or environment when given (unknown ids: NOT_FOUND)."
    )
    async def app_changed(
        self,
        info: GraphInfo,
        app_id: Annotated[
            strawberry.ID | None, strawberry.argument(description="Only this app.")
        ] = None,
        cloud_space_id: Annotated[
            strawberry.ID | None, strawberry.argument(description="Only this CloudSpace's apps.")
        ] = None,
        environment_id: Annotated[
            strawberry.ID | None, strawberry.argument(description="Only this environment's apps.")
        ] = None,
    ) -> AsyncGenerator[AppEvent, None]:
        mode = SubscriptionMode.of(info.root_value)
        found = reads.changes(info.context, mode, app_id, cloud_space_id, environment_id)
        async with aclosing(found) as events:
            async for row in events:
                yield AppEvent.from_row(row)
