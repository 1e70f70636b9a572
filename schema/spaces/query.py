"""The spaces' part of the Query root: spaces, their counts and status events, environments."""

from __future__ import annotations

from typing import Annotated

import strawberry

from resolvers.common import nodes as node_reads
from resolvers.spaces import reads
from schema.common.info import GraphInfo, type_named
from schema.common.relay import Connection
from schema.engine.arguments import After, Before, First, Last, ObjectId
from schema.spaces.events import SpaceStatusEvent
from schema.spaces.inputs import SpaceFilter, SpaceOrder
from schema.spaces.pages import prepare_spaces, space_links_wanted, space_where
from schema.spaces.types import Environment, Space, SpaceCounts


@strawberry.type
class SpacesQuery:
    @strawberry.field(
        description="The org's spaces (registered ones unless the filter says otherwise), "
        "in id order (oldest first) unless orderBy says otherwise. Page forward with "
        "first/after or back with last/before."
    )
    async def spaces(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        last: Last = None,
        before: Before = None,
        filter: Annotated[
            SpaceFilter | None,
            strawberry.argument(description="Which spaces; null: every registered space."),
        ] = None,
        order_by: Annotated[
            SpaceOrder | None,
            strawberry.argument(
                description="Sort order, ties broken by id; cursors are valid only under the "
                "order they came from. Null: id order."
            ),
        ] = None,
    ) -> Connection[Space]:
        order = None if order_by is None else order_by.label
        wanted, status = space_links_wanted(info)
        page = await reads.spaces_page(
            info.context,
            space_where(filter),
            order,
            first,
            after,
            last,
            before,
            with_accounts=wanted.cloud_account,
        )
        connection = Connection.of(page, Space)
        links = await reads.space_links(info.context, page.items, wanted)
        account_of = type_named(info, "CloudAccount").from_row
        prepare_spaces(info.context, connection.nodes, links, status, account_of)
        return connection

    @strawberry.field(description="How many spaces match the filter, in one request.")
    async def space_counts(
        self,
        info: GraphInfo,
        filter: Annotated[
            SpaceFilter | None,
            strawberry.argument(description="Which spaces; null: every registered space."),
        ] = None,
    ) -> SpaceCounts:
        return SpaceCounts(**await reads.space_counts(info.context, space_where(filter)))

    @strawberry.field(
        description="The org's status events, oldest first: a client that reconnects catches up "
        "from the last event id it saw (resubscribe with spaceStatusChanged(after:) does both). "
        "last: N gives the newest N (a recent-events log); before pages back from there."
    )
    async def status_events(
        self,
        info: GraphInfo,
        first: First = None,
        after: Annotated[
            str | None,
            strawberry.argument(
                description="Return the events after this cursor; an event's id is a cursor too."
            ),
        ] = None,
        space_ids: Annotated[
            list[strawberry.ID] | None,
            strawberry.argument(
                description="Only these spaces' events (at most 100); null: every space's."
            ),
        ] = None,
        last: Last = None,
        before: Annotated[
            str | None,
            strawberry.argument(
                description="Return the events before this cursor (pageInfo.startCursor); an "
                "event's id is a cursor too."
            ),
        ] = None,
    ) -> Connection[SpaceStatusEvent]:
        page = await reads.status_events_page(info.context, first, after, space_ids, last, before)
        return Connection.of(page, SpaceStatusEvent)

    @strawberry.field(
        description="One space, deregistered ones included; null when unknown or another org's."
    )
    async def space(self, info: GraphInfo, id: ObjectId) -> Space | None:
        row = await node_reads.one(info.context, "Space", id)
        return None if row is None else Space.from_row(row)

    @strawberry.field(description="The org's environments, oldest first.")
    async def environments(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[Environment]:
        return Connection.of(await reads.environments_page(info.context, first, after), Environment)
