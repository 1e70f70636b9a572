"""The App Advisor's part of the Subscription root."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import strawberry

from resolvers.advisor import fields as advice
from resolvers.common.subscription_mode import SubscriptionMode
from schema.advisor.types import AdviceEvent
from schema.common.info import GraphInfo


@strawberry.type
class AdvisorSubscription:
    @strawberry.subscription(
        description="Requires advice:view. Every new, changed, resolved, dismissed, restored "
        "or explained finding of one CloudSpace, as it happens; a CloudSpace of another org "
        "is NOT_FOUND."
    )
    async def advice_changed(
        self,
        info: GraphInfo,
        cloud_space_id: Annotated[
            strawberry.ID, strawberry.argument(description="The CloudSpace.")
        ],
    ) -> AsyncGenerator[AdviceEvent, None]:
        mode = SubscriptionMode.of(info.root_value)
        found = advice.changes(info.context, mode, cloud_space_id)
        async with aclosing(found) as changes:
            async for changed in changes:
                yield AdviceEvent.of(changed)
