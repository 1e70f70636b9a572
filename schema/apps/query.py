"""The apps' part of the Query root."""

from __future__ import annotations

from typing import Annotated

import strawberry

from resolvers.apps import reads
from resolvers.common import nodes as node_reads
from schema.apps.types import App, AppConnection
from schema.common.info import GraphInfo
from schema.engine.arguments import After, First, ObjectId


@strawberry.type
class AppsQuery:
    @strawberry.field(
        description="The org's apps, oldest first; of one CloudSpace or environment when given."
    )
    async def apps(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        cloud_space_id: Annotated[
            strawberry.ID | None, strawberry.argument(description="Only this CloudSpace's apps.")
        ] = None,
        environment_id: Annotated[
            strawberry.ID | None, strawberry.argument(description="Only this environment's apps.")
        ] = None,
    ) -> AppConnection:
        page = await reads.apps_page(info.context, first, after, cloud_space_id, environment_id)
        return AppConnection.of(page, App)  # type: ignore[return-value]

    @strawberry.field(description="One of the org's apps; null for unknown or foreign ids.")
    async def app(self, info: GraphInfo, id: ObjectId) -> App | None:
        row = await node_reads.one(info.context, "App", id)
        return None if row is None else App.from_row(row)
