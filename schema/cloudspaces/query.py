"""The CloudSpaces' part of the Query root."""

from __future__ import annotations

from typing import Annotated

import strawberry

from db.records import CloudSpaceWhere
from resolvers.cloudspaces import fields as cloudspaces
from resolvers.common import nodes as node_reads
from schema.cloudspaces.inputs import CloudSpaceFilter, CloudSpaceOrder
from schema.cloudspaces.types import CloudSpace
from schema.common.info import GraphInfo
from schema.common.relay import Connection
from schema.engine.arguments import After, Before, First, Last, ObjectId


@strawberry.type
class CloudSpacesQuery:
    @strawberry.field(
        description="The org's CloudSpaces, in id order (oldest first) unless orderBy says "
        "otherwise. Page forward with first/after or back with last/before."
    )
    async def cloud_spaces(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        last: Last = None,
        before: Before = None,
        filter: Annotated[
            CloudSpaceFilter | None,
            strawberry.argument(description="Which CloudSpaces; null: all of them."),
        ] = None,
        order_by: Annotated[
            CloudSpaceOrder | None,
            strawberry.argument(
                description="Sort order, ties broken by id; cursors are valid only under the "
                "order they came from. Null: id order."
            ),
        ] = None,
    ) -> Connection[CloudSpace]:
        where = CloudSpaceWhere() if filter is None else filter.where()
        order = None if order_by is None else order_by.label
        page = await cloudspaces.page(info.context, where, order, first, after, last, before)
        return Connection.of(page, CloudSpace)

    @strawberry.field(description="One of the org's CloudSpaces; null for unknown or foreign ids.")
    async def cloud_space(self, info: GraphInfo, id: ObjectId) -> CloudSpace | None:
        row = await node_reads.one(info.context, "CloudSpace", id)
        return None if row is None else CloudSpace.from_row(row)
