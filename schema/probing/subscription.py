"""The probing part of the Subscription root: status changes and probe results as they happen."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated

import strawberry

from resolvers.common.subscription_mode import SubscriptionMode
from resolvers.probing import subscriptions
from schema.common.enums import (
    StatusReasonCode,
)
from schema.common.info import GraphInfo
from schema.spaces.events import ProbeEvent, ProbeResult, SpaceStatusEvent


@strawberry.type
class ProbingSubscription:
    @strawberry.subscription(
        description="Every status change of the spaces the subscriber may view; spaceId or "
        "spaceIds narrow it. After a reconnect, subscribe with after: the last event id seen "
        "to get every event since, then live ones, each once and none missed."
    )
    async def space_status_changed(
        self,
        info: GraphInfo,
        space_id: Annotated[
            strawberry.ID | None,
            strawberry.argument(
                description="Follow only this space; an unknown or foreign id is NOT_FOUND "
                "(a first message with that error, then complete)."
            ),
        ] = None,
        space_ids: Annotated[
            list[strawberry.ID] | None,
            strawberry.argument(
                description="Follow only these spaces, e.g. a table's page: at most 100 (more is "
                "BAD_USER_INPUT). Ids that name no space the caller may see (unknown and foreign "
                "alike) are reported once, in a first message with data null and a NOT_FOUND "
                "error listing them in extensions.spaceIds, and skipped; the others stream on."
            ),
        ] = None,
        after: Annotated[
            str | None,
            strawberry.argument(
                description="Resume after this event (its id or cursor): the history's events "
                "after it come first, oldest first (at most 10,000; more is BAD_USER_INPUT), "
                "then live ones."
            ),
        ] = None,
    ) -> AsyncGenerator[SpaceStatusEvent, None]:
        mode = SubscriptionMode.of(info.root_value)
        found = subscriptions.space_status_events(info.context, mode, space_id, space_ids, after)
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
                description="The spaces to follow: at most 100 (more is BAD_USER_INPUT). Ids that "
                "name no space the caller may see are reported once (NOT_FOUND, the ids in "
                "extensions.spaceIds) and skipped, as for spaceStatusChanged."
            ),
        ],
    ) -> AsyncGenerator[ProbeEvent, None]:
        mode = SubscriptionMode.of(info.root_value)
        async with aclosing(subscriptions.space_probes(info.context, mode, space_ids)) as probes:
            async for probed in probes:
                result = ProbeResult(
                    at=probed.at,
                    ok=probed.ok,
                    version=probed.version,
                    latency_ms=probed.latency_ms,
                    error=probed.error,
                    error_code=None
                    if probed.error_code is None
                    else StatusReasonCode[probed.error_code],
                )
                yield ProbeEvent.of(probed.space_id, result, probed.failures)
