"""The Query root."""

from __future__ import annotations

import strawberry

from resolvers import cloudspaces, reads
from schema.inputs import SpaceFilter
from schema.types import (
    CloudAccount,
    CloudSpace,
    Connection,
    Environment,
    GraphInfo,
    Node,
    Org,
    Space,
    Viewer,
)

NODE_TYPES: dict[str, type] = {
    "Org": Org,
    "CloudAccount": CloudAccount,
    "Space": Space,
    "Environment": Environment,
    "CloudSpace": CloudSpace,
}


@strawberry.type
class Query:
    @strawberry.field
    async def node(self, info: GraphInfo, id: strawberry.ID) -> Node | None:
        found = await reads.node(info.context, id)
        if found is None:
            return None
        kind, row = found
        return NODE_TYPES[kind].from_row(row)  # type: ignore[attr-defined, no-any-return]

    @strawberry.field
    def viewer(self, info: GraphInfo) -> Viewer:
        caller = info.context.caller
        return Viewer(
            org=Org(id=strawberry.ID(caller.org_id), name=caller.org_name),
            role=caller.role,
            permissions=list(caller.permissions),
        )

    @strawberry.field
    async def cloud_accounts(
        self, info: GraphInfo, first: int | None = None, after: str | None = None
    ) -> Connection[CloudAccount]:
        return Connection.of(
            await reads.cloud_accounts_page(info.context, first, after), CloudAccount
        )

    @strawberry.field
    async def cloud_account(self, info: GraphInfo, id: strawberry.ID) -> CloudAccount | None:
        row = await reads.one(info.context, "CloudAccount", id)
        return None if row is None else CloudAccount.from_row(row)

    @strawberry.field
    async def spaces(
        self,
        info: GraphInfo,
        first: int | None = None,
        after: str | None = None,
        filter: SpaceFilter | None = None,
    ) -> Connection[Space]:
        where = reads.SpaceFilter()
        if filter is not None:
            where = reads.SpaceFilter(
                statuses=None if filter.status is None else [s.value for s in filter.status],
                provider=None if filter.provider is None else filter.provider.value,
                scalable=filter.scalable,
                include_deregistered=bool(filter.include_deregistered),
            )
        return Connection.of(await reads.spaces_page(info.context, first, after, where), Space)

    @strawberry.field
    async def space(self, info: GraphInfo, id: strawberry.ID) -> Space | None:
        row = await reads.one(info.context, "Space", id)
        return None if row is None else Space.from_row(row)

    @strawberry.field
    async def environments(
        self, info: GraphInfo, first: int | None = None, after: str | None = None
    ) -> Connection[Environment]:
        return Connection.of(await reads.environments_page(info.context, first, after), Environment)

    @strawberry.field(description="The org's CloudSpaces, oldest first; first at most 100.")
    async def cloud_spaces(
        self, info: GraphInfo, first: int | None = None, after: str | None = None
    ) -> Connection[CloudSpace]:
        return Connection.of(await cloudspaces.page(info.context, first, after), CloudSpace)

    @strawberry.field(description="One of the org's CloudSpaces; null for unknown or foreign ids.")
    async def cloud_space(self, info: GraphInfo, id: strawberry.ID) -> CloudSpace | None:
        row = await reads.one(info.context, "CloudSpace", id)
        return None if row is None else CloudSpace.from_row(row)
