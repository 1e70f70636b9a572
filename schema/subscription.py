"""The Subscription root, served over graphql-transport-ws."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import strawberry

from resolvers import cloudspaces, subscriptions
from schema.enums import StatusReasonCode
from schema.types import CloudSpaceEvent, GraphInfo, ProbeEvent, ProbeResult, SpaceStatusEvent


@strawberry.type(
    description="Live events over graphql-transport-ws; each follows the caller's org."
)
class Subscription:
    @strawberry.subscription(
        description="Every status change of the spaces the subscriber may view; spaceId or "
        "spaceIds narrow it. After a reconnect, read statusEvents(after:) from the last event id "
        "seen to catch up."
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
        space_ids: Annotated[
            list[strawberry.ID] | None,
            strawberry.argument(
                description="Follow only these spaces, e.g. a table's page: at most 100 (more is "
                "BAD_USER_INPUT); an unknown or foreign id is NOT_FOUND."
            ),
        ] = None,
    ) -> AsyncGenerator[SpaceStatusEvent, None]:
        mode = subscriptions.SubscriptionMode.of(info.root_value)
        found = subscriptions.space_status_events(info.context, mode, space_id, space_ids)
        async with aclosing(found) as events:
            async for row in events:
                yield SpaceStatusEvent.from_row(row)

    @strawberry.subscription(
        description="Every probe result of the given spaces (at most 100), for live last-probe "
        "columns."
    )
    async def space_probed(
        self,
        info: GraphInfo,
        space_ids: Annotated[
            list[strawberry.ID],
            strawberry.argument(
                description="The spaces to follow: at most 100 (more is BAD_USER_INPUT); an "
                "unknown or foreign id is NOT_FOUND."
            ),
        ],
    ) -> AsyncGenerator[ProbeEvent, None]:
        mode = subscriptions.SubscriptionMode.of(info.root_value)
        async with aclosing(subscriptions.space_probes(info.context, mode, space_ids)) as probes:
            async for probed in probes:
                yield ProbeEvent(
                    space_id=strawberry.ID(probed.space_id),
                    consecutive_failures=probed.failures,
                    result=ProbeResult(
                        at=probed.at,
                        ok=probed.ok,
                        version=probed.version,
                        latency_ms=probed.latency_ms,
                        error=probed.error,
                        error_code=None
                        if probed.error_code is None
                        else StatusReasonCode[probed.error_code],
                    ),
                )

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
        mode = subscriptions.SubscriptionMode.of(info.root_value)
        found = cloudspaces.phase_events(info.context, mode, cloud_space_id)
        async with aclosing(found) as events:
            async for row in events:
                yield CloudSpaceEvent.from_row(row)
