"""The Query root."""

from __future__ import annotations

from typing import Annotated

import strawberry

from resolvers import cloudspaces, reads
from schema.arguments import After, First, ObjectId
from schema.enums import Role
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


@strawberry.type(
    description="Reads. Every list is a connection; every object is the caller's org's."
)
class Query:
    @strawberry.field(
        description="Any object by id; null when it is unknown or belongs to another org."
    )
    async def node(self, info: GraphInfo, id: ObjectId) -> Node | None:
        found = await reads.node(info.context, id)
        if found is None:
            return None
        kind, row = found
        return NODE_TYPES[kind].from_row(row)  # type: ignore[attr-defined, no-any-return]

    @strawberry.field(description="Who is calling: org, role and policies.")
    def viewer(self, info: GraphInfo) -> Viewer:
        caller = info.context.caller
        return Viewer(
            org=Org(id=strawberry.ID(caller.org_id), name=caller.org_name),
            role=Role(caller.role.value),
            permissions=list(caller.permissions),
        )

    @strawberry.field(description="The org's cloud accounts, oldest first.")
    async def cloud_accounts(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[CloudAccount]:
        return Connection.of(
            await reads.cloud_accounts_page(info.context, first, after), CloudAccount
        )

    @strawberry.field(description="One cloud account; null when unknown or another org's.")
    async def cloud_account(self, info: GraphInfo, id: ObjectId) -> CloudAccount | None:
        row = await reads.one(info.context, "CloudAccount", id)
        return None if row is None else CloudAccount.from_row(row)

    @strawberry.field(
        description="The org's spaces, registered ones unless the filter says otherwise."
    )
    async def spaces(
        self,
        info: GraphInfo,
        first: First = None,
        after: After = None,
        filter: Annotated[
            SpaceFilter | None,
            strawberry.argument(description="Which spaces; null: every registered space."),
        ] = None,
    ) -> Connection[Space]:
        where = reads.SpaceFilter()
        if filter is not None:
            where = reads.SpaceFilter(
                statuses=None if filter.status is None else [s.name for s in filter.status],
                provider=None if filter.provider is None else filter.provider.name,
                scalable=filter.scalable,
                include_deregistered=bool(filter.include_deregistered),
            )
        return Connection.of(await reads.spaces_page(info.context, first, after, where), Space)

    @strawberry.field(
        description="One space, deregistered ones included; null when unknown or another org's."
    )
    async def space(self, info: GraphInfo, id: ObjectId) -> Space | None:
        row = await reads.one(info.context, "Space", id)
        return None if row is None else Space.from_row(row)

    @strawberry.field(description="The org's environments, oldest first.")
    async def environments(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[Environment]:
        return Connection.of(await reads.environments_page(info.context, first, after), Environment)

    @strawberry.field(description="The org's CloudSpaces, oldest first.")
    async def cloud_spaces(
        self, info: GraphInfo, first: First = None, after: After = None
    ) -> Connection[CloudSpace]:
        return Connection.of(await cloudspaces.page(info.context, first, after), CloudSpace)

    @strawberry.field(description="One of the org's CloudSpaces; null for unknown or foreign ids.")
    async def cloud_space(self, info: GraphInfo, id: ObjectId) -> CloudSpace | None:
        row = await reads.one(info.context, "CloudSpace", id)
        return None if row is None else CloudSpace.from_row(row)
